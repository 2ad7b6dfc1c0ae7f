"""The rotation journal: what a run of ``rotate run`` did to one cluster, in the state store.

One stream per cluster, ``rotation/<cluster>``. The executor writes a record before and after every
side effect (``intent`` / ``done``, paired by ``id``: ``upgrade_service.intents``, the records remediation writes
too), a record when a wave starts (everything a
resumed run needs to finish it: its nodes, their instances and groups, each group's capacity before
the wave, how many nodes it surges, which terminations lower capacity), one per phase a wave
completes, and one when the run halts, pauses, finishes or is aborted. Other processes append
``control`` records (pause, resume, abort) that the running executor reads between steps.

``fold`` reads the stream back into a ``RunState``: the open run and its waves, what is cordoned
and tainted because of it, which instances were terminated, which side effects were started but
never confirmed (the ones a run killed mid-call left behind), and whether rotations of the cluster
are paused. The executor resumes from it and ``rotate status`` reports it; nothing else is kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from platformctl import failpoints
from platformctl.clock import Clock
from platformctl.state import Lease, Record, StateStore
from upgrade_service.intents import DONE, INTENT, Done, Intent, IntentLog

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

# Wave phases, in order.
SURGED = "surged"
NEW_NODES_READY = "new-nodes-ready"
DRAIN_DONE = "drain-done"
TERMINATED = "terminated"
REPLACEMENTS_READY = "replacements-ready"
PODS_READY = "pods-ready"
SETTLED = "settled"


def stream_of(cluster: str) -> str:
    return f"rotation/{cluster}"


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

    def to_record(self) -> dict[str, Any]:
        return {"desired": self.desired, "max": self.max, "members": list(self.members), "nodes": list(self.nodes),
                "surge": self.surge, "absorb": self.absorb, "image": self.image}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> GroupShare:
        return cls(int(d["desired"]), int(d["max"]), tuple(d["members"]), tuple(d["nodes"]), int(d["surge"]),
                   int(d.get("absorb", 0)), d.get("image"))


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


@dataclass
class WaveState:
    """One wave as the journal tells it."""

    number: int
    started: WaveStarted
    phases: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # phase -> its record
    cordoned: set[str] = field(default_factory=set)
    drained: set[str] = field(default_factory=set)
    terminated: set[str] = field(default_factory=set)  # instance ids
    failed: dict[str, str] = field(default_factory=dict)  # node -> why
    evictions: int = 0
    refused: int = 0
    finished: Mapping[str, Any] | None = None
    extra_surge: dict[str, str] = field(default_factory=dict)  # node whose termination gives back a later surge -> group
    # One-at-a-time workloads whose evicted pod is not back yet (workload -> the eviction as journalled), and those
    # settling (workload -> until when): what a resumed drain must honour before it evicts their next pod.
    in_flight: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    settling: dict[str, float] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        return list(self.started.nodes)

    def decrements(self, node: str) -> bool:
        """Whether terminating ``node`` lowers its group's capacity (a surge node stands in for it)."""
        return bool(self.started.decrement.get(node)) or node in self.extra_surge


@dataclass
class RunState:
    """The cluster's rotation history folded into what matters now."""

    cluster: str
    last_seq: int = 0
    run: str | None = None  # the open (or last) run's id
    started: Mapping[str, Any] | None = None
    ended: Mapping[str, Any] | None = None  # finished or aborted record of the last run
    halted: Mapping[str, Any] | None = None  # the open run's latest halt, until it continues
    waves: dict[int, WaveState] = field(default_factory=dict)
    cordoned: set[str] = field(default_factory=set)
    tainted: set[str] = field(default_factory=set)
    terminated: set[str] = field(default_factory=set)  # instance ids this run terminated
    pending: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # intent id -> intent without a done
    failed: dict[str, str] = field(default_factory=dict)
    # group -> instances the run (and the runs it inherited from) added that no decrement has given back:
    # raised by capacity changes, lowered by terminations with a decrement.
    capacity: Counter[str] = field(default_factory=Counter)
    evicted: Counter[str] = field(default_factory=Counter)  # namespace/name -> times this run evicted it
    evicted_again: int = 0  # evicted pods this run had already moved once (created after the run began)
    refused: int = 0
    first_plan: Mapping[str, Any] | None = None  # the plan the run started with: its estimate is the report's
    last_plan: Mapping[str, Any] | None = None
    paused: Mapping[str, Any] | None = None  # the pause control record in force
    abort: Mapping[str, Any] | None = None  # an abort requested for the open run
    holder: str | None = None
    gate_asked: dict[int, float] = field(default_factory=dict)  # wave -> when the health gate was first asked for it

    @property
    def open(self) -> bool:
        return self.run is not None and self.ended is None

    @property
    def current_wave(self) -> WaveState | None:
        if not self.open or not self.waves:
            return None
        last = self.waves[max(self.waves)]
        return last if last.finished is None else None

    @property
    def status(self) -> str:
        if self.run is None:
            return "never-run"
        if self.ended is not None:
            return str(self.ended["kind"])
        if self.halted is not None:  # a run that stopped where --max-waves asked is not a fault
            return "partial" if self.halted.get("reason") == "max-waves" else "halted"
        return "running"


def fold(cluster: str, records: Iterable[Record]) -> RunState:
    state = RunState(cluster)
    for record in records:
        apply(state, record)
    return state


def apply(state: RunState, record: Record) -> None:
    d = record.data
    kind = d.get("kind")
    state.last_seq = record.seq
    if kind == CONTROL:
        action = d.get("action")
        if action == "pause":
            state.paused = d
        elif action == "resume":
            state.paused = None
        elif action == "abort" and state.open:
            state.abort = d
        return
    if kind == RUN_STARTED:
        # A new run: forget the previous one's details, keep the stream-level pause.
        paused = state.paused
        new = RunState(state.cluster, last_seq=record.seq, run=d["run"], started=d, paused=paused, holder=d.get("holder"),
                       capacity=Counter(d.get("inherited") or {}))
        state.__dict__.update(new.__dict__)
        return
    if d.get("run") != state.run:
        return  # a record of an older run
    if kind == RUN_CONTINUED:
        state.halted = None
        state.holder = d.get("holder")
    elif kind == PLAN:
        state.first_plan = state.first_plan or d
        state.last_plan = d
    elif kind == WAVE_STARTED:
        state.waves[d["wave"]] = WaveState(d["wave"], WaveStarted.from_record(d))
    elif kind == INTENT:
        state.pending[Intent.from_record(d).id] = d
    elif kind == DONE:
        done = Done.from_record(d)
        intent = state.pending.pop(done.id, None)
        if intent is not None and done.ok:
            _confirmed(state, intent, d)
    elif kind == PHASE:
        wave = state.waves.get(d["wave"])
        if wave is not None:
            wave.phases[d["phase"]] = d
    elif kind == DRAINED:
        wave = state.waves.get(d["wave"])
        if wave is not None:
            wave.drained.add(d["node"])
    elif kind == SETTLING:
        wave = state.waves.get(d["wave"])
        if wave is not None:
            wave.in_flight.pop(d["workload"], None)
            wave.settling[d["workload"]] = float(d["until"])

    elif kind == NODE_FAILED:
        state.failed[d["node"]] = d["reason"]
        wave = state.waves.get(d["wave"])
        if wave is not None:
            wave.failed[d["node"]] = d["reason"]
    elif kind == WAVE_FINISHED:
        wave = state.waves.get(d["wave"])
        if wave is not None:
            wave.finished = d
    elif kind == GATE:
        state.gate_asked.setdefault(int(d["wave"]), float(d["at"]))
    elif kind == HALTED:
        state.halted = d
    elif kind in (FINISHED, ABORTED):
        state.ended = d
        state.abort = None


def _confirmed(state: RunState, intent: Mapping[str, Any], d: Mapping[str, Any]) -> None:
    """What a confirmed intent changed: the nodes held, the groups' capacity, the instances terminated, the evictions."""
    op, wave = intent["op"], state.waves.get(intent.get("wave", -1))
    node = str(intent.get("node"))  # every cordon, taint and their undoing names its node
    if op == "cordon":
        state.cordoned.add(node)
        if wave is not None:
            wave.cordoned.add(node)
    elif op == "uncordon":
        state.cordoned.discard(node)
        if wave is not None:
            wave.cordoned.discard(node)
    elif op == "taint":
        state.tainted.add(node)
    elif op == "untaint":
        state.tainted.discard(node)
    elif op == "set-desired":
        state.capacity[intent["group"]] += int(intent["desired"]) - int(intent["before"])
        if wave is not None and intent.get("stands_in_for"):
            # A surge node added for a stuck drain: the node it stands in for gives the capacity back.
            wave.extra_surge[intent["stands_in_for"]] = intent["group"]
    elif op == "terminate":
        if intent.get("decrement") and not d.get("not_called"):
            state.capacity[intent["group"]] -= 1
        state.terminated.add(intent["instance"])
        state.cordoned.discard(node)
        state.tainted.discard(node)
        if wave is not None:
            wave.terminated.add(intent["instance"])
    elif op == "evict":
        born = state.started.get("at", 0.0) if state.started else 0.0
        for pod in d.get("evicted", ()):
            state.evicted[pod["pod"]] += 1
            if pod.get("created", 0.0) > born:
                state.evicted_again += 1
        refused = sum(d.get("refused", {}).values())
        state.refused += refused
        if wave is not None:
            wave.evictions += len(d.get("evicted", ()))
            wave.refused += refused
            for pod in d.get("evicted", ()):
                if pod.get("workload"):
                    wave.in_flight[pod["workload"]] = pod


class Fence(Protocol):
    """What fences a journal's writes: the lease its writer holds (``platformctl.state.lease.LeaseKeeper``)."""

    @property
    def fence(self) -> Lease | None: ...


class Journal(IntentLog):
    """Appends this cluster's records, stamped with the cluster's time, and keeps the folded state current.

    With ``keeper`` every record is written only while the keeper's lease is still its own (the store checks
    the lease in the write's transaction): a run that lost its lease cannot add a word to the journal the run
    that took over now owns."""

    def __init__(self, store: StateStore, cluster: str, clock: Clock, keeper: Fence | None = None) -> None:
        self.store = store
        self.cluster = cluster
        self.stream = stream_of(cluster)
        self.clock = clock
        self.keeper = keeper
        self.state = fold(cluster, store.read(self.stream))

    def refresh(self) -> RunState:
        """Read what other processes appended (control records) since the last look."""
        for record in self.store.read(self.stream, after=self.state.last_seq):
            apply(self.state, record)
        return self.state

    def write(self, kind: str, **data: Any) -> Record:
        body = {"kind": kind, "at": self.clock.now(), **data}
        if self.state.run is not None and "run" not in body and kind not in (CONTROL,):
            body["run"] = self.state.run
        record = self.store.append(self.stream, body, fence=self.keeper.fence if self.keeper is not None else None)
        # Records of other writers may have come in between: fold everything up to ours.
        if record.seq != self.state.last_seq + 1:
            self.refresh()
        else:
            apply(self.state, record)
        if kind == PHASE:
            failpoints.hit(f"phase:{data.get('phase')}")
        elif kind in (WAVE_STARTED, DRAINED, WAVE_FINISHED):
            failpoints.hit(kind)
        return record



def control(store: StateStore, cluster: str, action: str, by: str, reason: str, at: float) -> Record:
    """A pause, resume or abort request, written by another process."""
    return store.append(stream_of(cluster), {"kind": CONTROL, "action": action, "by": by, "reason": reason, "at": at})


def read_state(store: StateStore, cluster: str) -> RunState:
    return fold(cluster, store.read(stream_of(cluster)))
