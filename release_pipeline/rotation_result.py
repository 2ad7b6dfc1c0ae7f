"""What a stage's rotation answers the pipeline (``StageActions.rotate``): one typed value, whatever rotated it.

The application layer's adapter builds it from every cluster's run report; the reconciler's tests and benchmarks
build it as their fakes; the reconciler and the rotation's gate read it; the ledger keeps its JSON (``to_dict``,
with the instances it booted moved to their own stream), which ``release replay`` reads back (``from_dict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

# finished: every cluster rotated; halted: a cluster halted (the gate halts the candidate); blocked: nodes a budget
# holds, nothing failed (planned again next tick, for a while); busy: a rotation holds the stage's lease or an API
# would not answer (nothing done; the next tick tries again); frozen: a freeze began and the rotation paused.
Status = Literal["finished", "halted", "blocked", "busy", "frozen"]
STATUSES: tuple[Status, ...] = ("finished", "halted", "blocked", "busy", "frozen")


@dataclass(frozen=True)
class FirstLightSaid:
    """A cluster's first light as the ledger keeps it: the verdict, its evidence, how many nodes it lit."""

    verdict: str | None
    reason: str | None
    nodes: int = 0
    pools: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {"verdict": self.verdict, "reason": self.reason, "nodes": self.nodes, "pools": self.pools,
                "skipped": self.skipped, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FirstLightSaid:
        return cls(data.get("verdict"), data.get("reason"), int(data.get("nodes") or 0), list(data.get("pools") or []),
                   dict(data.get("skipped") or {}), data.get("seconds"))


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

    def to_dict(self) -> dict[str, object]:
        return {"cluster": self.cluster, "status": self.status, "reason": self.reason, "halted": self.halted,
                "waves": self.waves, "gate_seconds": self.gate_seconds,
                "first_light": self.first_light.to_dict() if self.first_light else None, "evictions": self.evictions,
                "planned_first_wave": self.planned_first_wave}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterRotation:
        lit = data.get("first_light")
        return cls(str(data.get("cluster") or ""), data.get("status"), data.get("reason"), data.get("halted"),
                   list(data.get("waves") or []), list(data.get("gate_seconds") or []),
                   FirstLightSaid.from_dict(lit) if isinstance(lit, Mapping) else None, int(data.get("evictions") or 0),
                   int(data.get("planned_first_wave") or 0))


@dataclass(frozen=True)
class StageRotation:
    """A stage's rotation onto a candidate's images (or back, on a rollback)."""

    status: Status
    reason: str = ""
    booted: dict[str, list[str]] = field(default_factory=dict)  # image -> the instances seen booting it
    first_light: dict[str, list[str]] = field(default_factory=dict)  # image -> the instances first light booted
    exit_code: int | None = None
    clusters: list[ClusterRotation] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """Its JSON as a ledger entry's ``result`` holds it, before the boots go to their own stream."""
        out: dict[str, object] = {"status": self.status, "reason": self.reason}
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
    def from_dict(cls, data: Mapping[str, Any]) -> StageRotation:
        """A result as a ledger entry keeps it (``release replay`` judges it again)."""
        status = data.get("status")
        return cls(cast(Status, status) if status in STATUSES else "halted", str(data.get("reason") or ""),
                   exit_code=data.get("exit_code"),
                   clusters=[ClusterRotation.from_dict(c) for c in data.get("clusters") or () if isinstance(c, Mapping)])
