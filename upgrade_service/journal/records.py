"""The rotation journal's records, one dataclass per kind (a side effect's are ``intents.Intent`` and
``intents.Done``).

A record becomes a dict only where it enters the store (``to_record``: its fields; the journal stamps ``kind``,
``at`` and the run) and is read back into its dataclass where the journal folds it (``from_record``), so every
reader of the journal sees typed fields and one writer's shape is every reader's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

# Record kinds.
RUN_STARTED = "run-started"
RUN_CONTINUED = "run-continued"
WAVE_STARTED = "wave-started"
PHASE = "phase"
DRAINED = "drained"
SETTLING = "settling"  # a one-at-a-time workload is whole again: its next pod waits until ``until``
NODE_FAILED = "node-failed"
WAVE_FINISHED = "wave-finished"
PLAN = "plan"
HALTED = "halted"
PAUSED = "paused"
FINISHED = "finished"
ABORTED = "aborted"
CONTROL = "control"
GATE = "gate"  # the health gate's answer before a wave (written when it changes)
WAITING = "waiting"  # nodes held by budgets whose pods are on their way back (written when what they wait for changes)
FIRST_LIGHT = "first-light"  # before wave 1: one node per pool on the new image, for the canaries only
FIRST_LIGHT_JUDGED = "first-light-judged"  # what the gate said of it, and what became of its nodes

R = TypeVar("R", bound="JournalRecord")


@dataclass(frozen=True)
class JournalRecord:
    """What every record has: its time (the cluster's, stamped by the journal) and the run it belongs to."""

    KIND: ClassVar[str] = ""
    at: float = field(default=0.0, kw_only=True)
    run: str | None = field(default=None, kw_only=True)

    def to_record(self) -> dict[str, Any]:
        """The record's own fields, as the store keeps them."""
        return {name: getattr(self, name) for name in _names(type(self)) if name not in ("at", "run")}

    @classmethod
    def from_record(cls: type[R], d: Mapping[str, Any]) -> R:
        """The record as read back: fields it does not know are left out, fields an older writer did not write take
        their defaults."""
        known = _names(cls)
        return cls(**{k: v for k, v in d.items() if k in known})


_NAMES: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    """A record class's field names (asked of ``dataclasses.fields`` once per class)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


@dataclass(frozen=True)
class RunStarted(JournalRecord):
    KIND: ClassVar[str] = RUN_STARTED
    holder: str | None = None
    inherited: Mapping[str, int] = field(default_factory=dict)  # capacity earlier runs added and never gave back
    policy: str | None = None
    strategy: str | None = None
    targets: Mapping[str, str] | None = None
    follows_launch_templates: bool = False
    stage: str | None = None


@dataclass(frozen=True)
class RunContinued(JournalRecord):
    KIND: ClassVar[str] = RUN_CONTINUED
    holder: str | None = None
    after: str | None = None  # the run's status when it was taken up again


@dataclass(frozen=True)
class PlanRecord(JournalRecord):
    """The plan a turn of the run made (the first one's estimate is the report's)."""

    KIND: ClassVar[str] = PLAN
    waves: int = 0
    nodes: int = 0
    estimated_seconds: float | None = None
    targets: Mapping[str, str] = field(default_factory=dict)
    first_wave: list[str] = field(default_factory=list)
    blocked: list[dict[str, Any]] = field(default_factory=list)
    unmanaged: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class GroupShare:
    """One auto scaling group's part in a wave, as the wave's start recorded it."""

    desired: int  # the group's desired capacity when the wave started
    max: int
    members: tuple[str, ...]  # its instances then: a node not among them is new
    nodes: tuple[str, ...]  # the wave's nodes in this group
    surge: int  # new nodes raised for the wave before it drains
    absorb: int  # capacity added earlier that stands in for some of its nodes
    image: str | None  # what its new nodes must boot
    ahead: int = 0  # new nodes raised with the surge for the next wave, which absorbs them: they boot while this drains

    def to_record(self) -> dict[str, Any]:
        return {"desired": self.desired, "max": self.max, "members": list(self.members), "nodes": list(self.nodes),
                "surge": self.surge, "absorb": self.absorb, "image": self.image, "ahead": self.ahead}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> GroupShare:
        return cls(int(d["desired"]), int(d["max"]), tuple(d["members"]), tuple(d["nodes"]), int(d["surge"]),
                   int(d.get("absorb", 0)), d.get("image"), int(d.get("ahead", 0)))


@dataclass(frozen=True)
class OwnerWait:
    """A workload whose pods the wave evicts: it must be as Ready after the wave as before it."""

    namespace: str
    owner: str  # "ReplicaSet ns/name"
    ready: int  # its Ready pods before the wave

    def to_record(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "owner": self.owner, "ready": self.ready}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> OwnerWait:
        return cls(str(d["namespace"]), str(d["owner"]), int(d["ready"]))


@dataclass(frozen=True)
class WaveStarted:
    """The wave-started record: everything a resumed run needs to finish the wave."""

    wave: int
    nodes: tuple[str, ...]
    instances: Mapping[str, str]  # node -> instance
    groups: Mapping[str, GroupShare]
    decrement: Mapping[str, bool]  # node -> whether its termination lowers its group's capacity
    owners: Mapping[str, OwnerWait]  # workload uid -> what it must come back to
    at: float = 0.0  # the journal stamps it when it writes the record
    estimated_seconds: float | None = None
    estimate: Mapping[str, Any] = field(default_factory=dict)
    zone: str | None = None
    pools: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    stuck: Any = None

    def group_of(self, node: str) -> str:
        return next(g for g, share in self.groups.items() if node in share.nodes)

    def to_record(self) -> dict[str, Any]:
        """The record's fields (its kind and time are the journal's)."""
        return {"wave": self.wave, "nodes": list(self.nodes), "instances": dict(self.instances),
                "groups": {g: share.to_record() for g, share in self.groups.items()}, "decrement": dict(self.decrement),
                "owners": {uid: o.to_record() for uid, o in self.owners.items()},
                "estimated_seconds": self.estimated_seconds, "estimate": dict(self.estimate), "zone": self.zone,
                "pools": list(self.pools), "reasons": list(self.reasons), "waiting": list(self.waiting), "stuck": self.stuck}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> WaveStarted:
        return cls(wave=int(d["wave"]), nodes=tuple(d["nodes"]), instances=dict(d.get("instances") or {}),
                   groups={g: GroupShare.from_record(share) for g, share in (d.get("groups") or {}).items()},
                   decrement=dict(d.get("decrement") or {}),
                   owners={uid: OwnerWait.from_record(o) for uid, o in (d.get("owners") or {}).items()},
                   at=float(d["at"]), estimated_seconds=d.get("estimated_seconds"), estimate=d.get("estimate") or {},
                   zone=d.get("zone"), pools=tuple(d.get("pools") or ()), reasons=tuple(d.get("reasons") or ()),
                   waiting=tuple(d.get("waiting") or ()), stuck=d.get("stuck"))


@dataclass(frozen=True)
class Phase(JournalRecord):
    KIND: ClassVar[str] = PHASE
    wave: int = 0
    phase: str = ""
    settle: float | None = None  # drain-done: how long its one-at-a-time workloads settle
    lowest_headroom: list[Any] | None = None  # drain-done: (headroom, budget) at its lowest


@dataclass(frozen=True)
class Drained(JournalRecord):
    KIND: ClassVar[str] = DRAINED
    wave: int | str = 0  # a wave's number, or the remediation the drain belongs to
    node: str = ""
    forced: int | None = None  # pods force-deleted on a node whose kubelet was gone


@dataclass(frozen=True)
class Settling(JournalRecord):
    KIND: ClassVar[str] = SETTLING
    wave: int | str = 0
    workload: str = ""
    until: float = 0.0


@dataclass(frozen=True)
class NodeFailed(JournalRecord):
    KIND: ClassVar[str] = NODE_FAILED
    wave: int = 0
    node: str = ""
    reason: str = ""


@dataclass(frozen=True)
class WaveFinished(JournalRecord):
    KIND: ClassVar[str] = WAVE_FINISHED
    wave: int = 0
    seconds: float = 0.0
    estimated_seconds: float | None = None
    evictions: int = 0
    refused: int = 0
    failed: Mapping[str, str] = field(default_factory=dict)
    lowest_headroom: list[Any] | None = None
    lingering: list[str] = field(default_factory=list)  # terminated nodes still registered when it ended


@dataclass(frozen=True)
class Halted(JournalRecord):
    KIND: ClassVar[str] = HALTED
    reason: str = ""  # max-waves | interrupted | api-error | a Halt's reason
    detail: str = ""


@dataclass(frozen=True)
class Paused(JournalRecord):
    KIND: ClassVar[str] = PAUSED
    by: str | None = None


@dataclass(frozen=True)
class Finished(JournalRecord):
    KIND: ClassVar[str] = FINISHED
    status: str = "done"  # done | incomplete
    reason: str = ""


@dataclass(frozen=True)
class AbortedRecord(JournalRecord):
    KIND: ClassVar[str] = ABORTED
    by: str | None = None
    reason: str = ""
    still_held: list[str] = field(default_factory=list)


class ControlAction(StrEnum):
    """What another process may ask of a cluster's rotation."""

    PAUSE = "pause"
    RESUME = "resume"
    ABORT = "abort"


@dataclass(frozen=True)
class Control(JournalRecord):
    """A pause, resume or abort another process asked for."""

    KIND: ClassVar[str] = CONTROL
    action: ControlAction
    by: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        # As read back from the store: its word, which must be one of the three (``ValueError`` otherwise).
        object.__setattr__(self, "action", ControlAction(self.action))


@dataclass(frozen=True)
class Gate(JournalRecord):
    KIND: ClassVar[str] = GATE
    wave: int = 0
    verdict: str = ""
    reason: str = ""


@dataclass(frozen=True)
class Waiting(JournalRecord):
    """Nodes the run waits for because the budgets they spend are at their floor while their pods come back; it gives
    up (they are reported blocked) if nothing about those pods changes until ``gives_up_at``. With no nodes: an API
    that does not answer, which the run waits for until ``gives_up_at`` (then it stops as ``api-error``)."""

    KIND: ClassVar[str] = WAITING
    nodes: tuple[str, ...] = ()
    reason: str = ""
    gives_up_at: float = 0.0


@dataclass(frozen=True)
class FirstLightStarted(JournalRecord):
    """The first-light step began: the pools it lights, each one's group and new image, and each group's instances
    before it (an instance not among them is the first-light node). A pool in ``skipped`` gets none, and says why."""


    KIND: ClassVar[str] = FIRST_LIGHT
    pools: Mapping[str, str] = field(default_factory=dict)  # pool -> the group its first-light node boots in
    images: Mapping[str, str] = field(default_factory=dict)  # pool -> the new image (the skipped pools' too)
    before: Mapping[str, list[str]] = field(default_factory=dict)  # group -> its instances before
    skipped: Mapping[str, str] = field(default_factory=dict)  # pool -> why it gets no first-light node
    # A pool whose groups are all at their maximum size: the node drained and terminated to make room (its group
    # launches the first-light node in its place), and its instance.
    replaces: Mapping[str, str] = field(default_factory=dict)  # pool -> node
    replaces_instance: Mapping[str, str] = field(default_factory=dict)  # pool -> instance


@dataclass(frozen=True)
class FirstLightJudged(JournalRecord):
    """The gate's judgement of the first-light nodes: ``pass`` (they joined their pools) or ``fail`` (the run halts and
    they are terminated), with the gate's reason, the nodes (pool -> node) and the instances that booted the images."""

    KIND: ClassVar[str] = FIRST_LIGHT_JUDGED
    verdict: str = ""
    reason: str = ""
    nodes: Mapping[str, str] = field(default_factory=dict)
    instances: Mapping[str, str] = field(default_factory=dict)  # pool -> instance
    seconds: float = 0.0  # from the first-light nodes Ready to the judgement
