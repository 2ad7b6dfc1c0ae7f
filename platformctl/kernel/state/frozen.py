"""What ``release freeze`` holds a stage with, where the stage's own jobs can read it: the stream ``frozen/<stage>`` of
the stage's state store (the table its scheduled rotation already reads ``promoted/<stage>`` from).

A freeze set by hand lives in the release ledger, which the stage's jobs cannot read. Each tick that acts in a stage
writes the freezes by hand that bind it now or later (one on the stage, or on every stage) here, when they differ from
the last record: an empty record says none is left. A rotation of the stage outside the pipeline (the
``platformctl-rotate`` CronJob, ``rotate run --stage``) takes each as an exclusion: no wave starts while one holds, and
a run stops at its next wave as ``outside-window``, as the pipeline file's freezes already bind it (``infra.settings``
``scheduled_policy``). The tick's own rotation is held by the ledger itself, not by this record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from platformctl.kernel.jsontypes import JSONObject, array, mapping, optional_float, to_float
from platformctl.kernel.state.base import StateStore


def stream_of(stage: str) -> str:
    return f"frozen/{stage}"


@dataclass(frozen=True)
class HandFreeze:
    """One freeze set by hand on the stage: from ``at`` until ``until`` (None: until someone unfreezes it), who, why."""

    reason: str
    at: float
    until: float | None = None
    by: str = ""

    def to_dict(self) -> JSONObject:
        return {"reason": self.reason, "at": self.at, "until": self.until, "by": self.by}


def record_frozen(store: StateStore, stage: str, freezes: Sequence[HandFreeze], at: float) -> bool:
    """Record ``freezes`` as those binding ``stage`` from now; nothing when the last record says the same (a tick a
    minute writes once a change). True when it wrote."""
    if list(freezes) == frozen_in(store, stage):
        return False
    store.append(stream_of(stage), {"stage": stage, "at": at, "freezes": [f.to_dict() for f in freezes]})
    return True


def frozen_in(store: StateStore, stage: str) -> list[HandFreeze]:
    """The freezes by hand the last record names for ``stage`` (none without a record)."""
    last = store.last(stream_of(stage))
    if last is None:
        return []
    out = []
    for item in array(last.data.get("freezes") or []):
        f = mapping(item)
        out.append(HandFreeze(str(f.get("reason", "")), to_float(f.get("at", 0.0)), optional_float(f.get("until")),
                              str(f.get("by", ""))))
    return out


__all__ = ["HandFreeze", "frozen_in", "record_frozen", "stream_of"]
