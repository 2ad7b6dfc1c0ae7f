"""What the fold keeps besides each stage's step, and what the gates weigh: typed, with the JSON the ledger keeps.

A freeze set by hand, an approval, a freeze override, the verdict's changes during a soak, a step's error, where a
candidate is, and a freeze in force at an instant. Each is written into ledger entries' inputs and checkpoints as the
same JSON as before they were typed (``to_dict``), and read back from any ledger (``from_dict``: a key an older version
did not write takes its default), so ``release replay`` and the dashboard read old ledgers unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from platformctl.kernel.jsontypes import (
    JSONMapping,
    JSONObject,
    number,
    optional_float,
    optional_str,
    strings,
    to_float,
    to_int,
)


@dataclass(frozen=True, slots=True)
class Drift:
    """A pool whose launch template boots another image than the pipeline says its stage runs, or boots it with other
    settings than the pipeline's last deploy there left (``settings``: another user data, instance type...): found in
    AWS by a tick (a template version made by hand in EC2, a ``pulumi up`` from an older checkout)."""

    cluster: str
    pool: str
    family: str
    found: str | None  # what the pool's auto scaling group launches now (None: it launches nothing it could tell)
    expected: str  # the image of the candidate the stage runs (or ran before the pipeline)
    settings: tuple[str, ...] = ()  # the launch template's settings beyond the image that no deploy of the pipeline made

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"cluster": self.cluster, "pool": self.pool, "family": self.family, "found": self.found,
                           "expected": self.expected}
        if self.settings:
            out["settings"] = list(self.settings)
        return out

    @classmethod
    def from_dict(cls, data: JSONMapping) -> Drift:
        return cls(str(data.get("cluster", "")), str(data.get("pool", "")), str(data.get("family", "")),
                   optional_str(data.get("found")), str(data.get("expected", "")),
                   tuple(strings(data.get("settings"))))

    def said(self) -> str:
        where = f"{self.cluster}/{self.pool}"
        other = f"other {', '.join(self.settings)} than the pipeline deployed ({self.family})"
        if self.found == self.expected:
            return f"{where} launches {self.found} with {other}"
        image = f"{where} launches {self.found or 'nothing'}, not {self.expected} ({self.family})"
        return f"{image}, with {other}" if self.settings else image


@dataclass(frozen=True, slots=True)
class ManualFreeze:
    """``release freeze``: a stage (``*``: every stage) held until unfrozen by hand or ``until``."""

    stage: str
    reason: str
    at: float
    until: float | None = None
    by: str = ""

    def to_dict(self) -> JSONObject:
        return {"stage": self.stage, "reason": self.reason, "at": self.at, "until": self.until, "by": self.by}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> ManualFreeze:
        return cls(str(data["stage"]), str(data.get("reason", "")), to_float(data["at"]), optional_float(data.get("until")),
                   str(data.get("by", "")))


@dataclass(frozen=True, slots=True)
class Approval:
    by: str
    at: float
    reason: str = ""

    def to_dict(self) -> JSONObject:
        return {"by": self.by, "at": self.at, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> Approval:
        return cls(str(data.get("by", "")), to_float(data.get("at", 0.0)), str(data.get("reason", "")))


@dataclass(frozen=True, slots=True)
class Override:
    """``release override``: a candidate (None: whichever enters next) may enter during the freeze windows it covers
    (``freezes``: their keys; None: written before overrides named them, covers any)."""

    candidate: str | None
    by: str
    reason: str
    at: float
    freezes: list[str] | None = None

    def to_dict(self) -> JSONObject:
        return {"candidate": self.candidate, "by": self.by, "reason": self.reason, "at": self.at, "freezes": self.freezes}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> Override:
        covers = data.get("freezes")
        return cls(optional_str(data.get("candidate")), str(data.get("by", "")), str(data.get("reason", "")),
                   to_float(data.get("at", 0.0)), None if covers is None else strings(covers))

    def for_candidate(self, cid: str) -> bool:
        return self.candidate in (None, cid)


@dataclass(frozen=True, slots=True)
class VerdictChange:
    """The stage's canary verdict when it changed during a soak."""

    at: float
    verdict: str
    reason: str

    def to_dict(self) -> JSONObject:
        return {"at": self.at, "verdict": self.verdict, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> VerdictChange:
        return cls(to_float(data["at"]), str(data["verdict"]), str(data.get("reason", "")))


@dataclass(frozen=True, slots=True)
class StepError:
    """The last step that raised in a stage and has not gone through since: the error (its type and message, as the
    tick recorded it), the step, the candidate, whether it was transient and since when it has recurred."""

    at: float
    error: JSONMapping | None  # {"type", "message"}, as the tick recorded it
    step: str | None
    candidate: str | None
    transient: bool = False
    since: float | None = None

    def to_dict(self) -> JSONObject:
        return {"at": self.at, "error": dict(self.error) if self.error is not None else None, "step": self.step,
                "candidate": self.candidate, "transient": self.transient, "since": self.since}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> StepError:
        error = data.get("error")
        return cls(to_float(data.get("at", 0.0)), error if isinstance(error, Mapping) else None,
                   optional_str(data.get("step")), optional_str(data.get("candidate")), bool(data.get("transient")),
                   optional_float(data.get("since")))


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

    def to_dict(self) -> JSONObject:
        return {"status": self.status, "stage": self.stage, "at": self.at, "order": self.order, "reason": self.reason,
                "by_candidate": self.by_candidate}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> CandidateStatus:
        """As a checkpoint keeps it, read as it was written (a key an older checkpoint did not hold: its default)."""
        return cls(str(data.get("status", "queued")), optional_str(data.get("stage")), number(data.get("at", 0.0)),
                   to_int(data.get("order", -1)), str(data.get("reason", "")), optional_str(data.get("by_candidate")))


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

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"name": self.name, "reason": self.reason}
        if self.by is not None:
            out["by"] = self.by
        else:
            out["timezone"] = self.timezone
        return {**out, "start": self.start, "end": self.end}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> FreezeInForce:
        return cls(str(data["name"]), str(data.get("reason", "")), to_float(data["start"]), optional_float(data.get("end")),
                   optional_str(data.get("timezone")), optional_str(data.get("by")))
