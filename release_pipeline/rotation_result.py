"""What a stage's rotation answers the pipeline (``StageOperations.rotate``): one typed value, whatever rotated it.

The application layer's adapter builds it from every cluster's run report; the reconciler's tests and benchmarks
build it as their fakes; the reconciler and the rotation's gate read it; the ledger keeps its JSON (``to_dict``,
with the instances it booted moved to their own stream), which ``release replay`` reads back (``from_dict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from platformctl.kernel.jsontypes import (
    JSONMapping,
    JSONObject,
    array,
    mapping,
    number,
    optional_number,
    optional_str,
    strings,
    to_int,
)


# finished: every cluster rotated; halted: a cluster halted (the gate halts the candidate); blocked: nodes a budget
# holds, nothing failed (planned again next tick, for a while); busy: a rotation holds the stage's lease or an API
# would not answer (nothing done; the next tick tries again); frozen: a freeze began and the rotation paused.
class Status(StrEnum):
    FINISHED = "finished"
    HALTED = "halted"
    BLOCKED = "blocked"
    BUSY = "busy"
    FROZEN = "frozen"


STATUSES: tuple[Status, ...] = tuple(Status)


@dataclass(frozen=True)
class FirstLightSaid:
    """A cluster's first light as the ledger keeps it: the verdict, its evidence, how many nodes it lit."""

    verdict: str | None
    reason: str | None
    nodes: int = 0
    pools: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None

    def to_dict(self) -> JSONObject:
        return {"verdict": self.verdict, "reason": self.reason, "nodes": self.nodes, "pools": self.pools,
                "skipped": self.skipped, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> FirstLightSaid:
        return cls(optional_str(data.get("verdict")), optional_str(data.get("reason")), to_int(data.get("nodes") or 0),
                   strings(data.get("pools")), {str(k): str(v) for k, v in mapping(data.get("skipped")).items()},
                   optional_number(data.get("seconds")))


@dataclass(frozen=True)
class ClusterRotation:
    """One cluster's rotation: how it ended, how far it went, and first light's word on the images."""

    cluster: str
    status: str | None
    reason: str | None = None
    halted: str | None = None  # the halt's code (``first-light-fail``, ``circuit-breaker``, ...), never its words
    waves: list[int] = field(default_factory=list)  # each wave's nodes
    gate_seconds: list[float] = field(default_factory=list)  # how long the health gate held each wave
    first_light: FirstLightSaid | None = None
    evictions: int = 0
    planned_first_wave: int = 0

    def to_dict(self) -> JSONObject:
        return {"cluster": self.cluster, "status": self.status, "reason": self.reason, "halted": self.halted,
                "waves": self.waves, "gate_seconds": self.gate_seconds,
                "first_light": self.first_light.to_dict() if self.first_light else None, "evictions": self.evictions,
                "planned_first_wave": self.planned_first_wave}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> ClusterRotation:
        lit = data.get("first_light")
        return cls(str(data.get("cluster") or ""), optional_str(data.get("status")), optional_str(data.get("reason")),
                   optional_str(data.get("halted")), [to_int(n) for n in array(data.get("waves"))],
                   [number(s) for s in array(data.get("gate_seconds"))],
                   FirstLightSaid.from_dict(lit) if isinstance(lit, Mapping) else None, to_int(data.get("evictions") or 0),
                   to_int(data.get("planned_first_wave") or 0))


@dataclass(frozen=True)
class StageRotation:
    """A stage's rotation onto a candidate's images (or back, on a rollback)."""

    status: Status
    reason: str = ""
    booted: dict[str, list[str]] = field(default_factory=dict)  # image -> the instances seen booting it
    first_light: dict[str, list[str]] = field(default_factory=dict)  # image -> the instances first light booted
    exit_code: int | None = None
    clusters: list[ClusterRotation] = field(default_factory=list)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))  # a fake's "finished" is the enum's too

    def to_dict(self) -> JSONObject:
        """Its JSON as a ledger entry's ``result`` holds it, before the boots go to their own stream."""
        out: JSONObject = {"status": self.status.value, "reason": self.reason}
        if self.booted:
            out["booted"] = self.booted
        if self.first_light:
            out["first_light"] = self.first_light
        if self.exit_code is not None:
            out["exit_code"] = self.exit_code
        if self.clusters:
            out["clusters"] = [c.to_dict() for c in self.clusters]
        return out

    @classmethod
    def from_dict(cls, data: JSONMapping) -> StageRotation:
        """A result as a ledger entry keeps it (``release replay`` judges it again)."""
        status = next((s for s in STATUSES if s == data.get("status")), Status.HALTED)
        exit_code = data.get("exit_code")
        return cls(status, str(data.get("reason") or ""),
                   exit_code=exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None,
                   clusters=[ClusterRotation.from_dict(c) for c in array(data.get("clusters")) if isinstance(c, Mapping)])
