"""What the fold keeps besides each stage's step, and what the gates weigh: typed, with the JSON the ledger keeps.

A freeze set by hand, an approval, a freeze override, the verdict's changes during a soak, a step's error, where a
candidate is, and a freeze in force at an instant. Each is written into ledger entries' inputs and checkpoints as the
same JSON as before they were typed (``to_dict``), and read back from any ledger (``from_dict``: a key an older version
did not write takes its default), so ``release replay`` and the dashboard read old ledgers unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True, slots=True)
class ManualFreeze:
    """``release freeze``: a stage (``*``: every stage) held until unfrozen by hand or ``until``."""

    stage: str
    reason: str
    at: float
    until: float | None = None
    by: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ManualFreeze:
        until = data.get("until")
        return cls(str(data["stage"]), str(data.get("reason", "")), float(data["at"]),
                   None if until is None else float(until), str(data.get("by", "")))


@dataclass(frozen=True, slots=True)
class Approval:
    by: str
    at: float
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Approval:
        return cls(str(data.get("by", "")), float(data.get("at", 0.0)), str(data.get("reason", "")))


@dataclass(frozen=True, slots=True)
class Override:
    """``release override``: a candidate (None: whichever enters next) may enter during the freeze windows it covers
    (``freezes``: their keys; None: written before overrides named them, covers any)."""

    candidate: str | None
    by: str
    reason: str
    at: float
    freezes: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Override:
        covers = data.get("freezes")
        return cls(data.get("candidate"), str(data.get("by", "")), str(data.get("reason", "")), float(data.get("at", 0.0)),
                   None if covers is None else [str(c) for c in covers])

    def for_candidate(self, cid: str) -> bool:
        return self.candidate in (None, cid)


@dataclass(frozen=True, slots=True)
class VerdictChange:
    """The stage's canary verdict when it changed during a soak."""

    at: float
    verdict: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VerdictChange:
        return cls(float(data["at"]), str(data["verdict"]), str(data.get("reason", "")))


@dataclass(frozen=True, slots=True)
class StepError:
    """The last step that raised in a stage and has not gone through since: the error (its type and message, as the
    tick recorded it), the step, the candidate, whether it was transient and since when it has recurred."""

    at: float
    error: Mapping[str, Any] | None
    step: str | None
    candidate: str | None
    transient: bool = False
    since: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "error": dict(self.error) if self.error is not None else None, "step": self.step,
                "candidate": self.candidate, "transient": self.transient, "since": self.since}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepError:
        since = data.get("since")
        return cls(float(data.get("at", 0.0)), data.get("error"), data.get("step"), data.get("candidate"),
                   bool(data.get("transient")), None if since is None else float(since))


@dataclass(slots=True)
class CandidateStatus:
    """Where a candidate is: its status (queued, in flight, passed, released, halted, superseded), the stage, since
    when, its start order, its last reason, and the candidate that superseded it."""

    status: str = "queued"
    stage: str | None = None
    at: float = 0.0
    order: int = -1
    reason: str = ""
    by_candidate: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CandidateStatus:
        return cls(**_known(cls, data))


@dataclass(frozen=True, slots=True)
class FreezeInForce:
    """A freeze holding a stage at an instant: a window of a freeze the pipeline file declares (``name``, its
    ``timezone``), or one set by hand (``name`` "manual", ``by``); ``end`` None: until unfrozen by hand."""

    name: str
    reason: str
    start: float
    end: float | None
    timezone: str | None = None
    by: str | None = None

    @property
    def key(self) -> str:
        """One window of one freeze: what an override covers (it ends with that window)."""
        return f"{self.name}@{self.start:.0f}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "reason": self.reason}
        if self.by is not None:
            out["by"] = self.by
        else:
            out["timezone"] = self.timezone
        return {**out, "start": self.start, "end": self.end}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FreezeInForce:
        end = data.get("end")
        return cls(str(data["name"]), str(data.get("reason", "")), float(data["start"]), None if end is None else float(end),
                   data.get("timezone"), data.get("by"))
