"""The rotation journal: what a run of ``rotate run`` did to one cluster, in the state store.

One stream per cluster, ``rotation/<cluster>``. The executor writes a record before and after every
side effect (``intent`` / ``done``, paired by ``id``: ``upgrade_service.journal.intents``, the records remediation writes
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

from platformctl.kernel import failpoints
from platformctl.kernel.clock import Clock
from platformctl.kernel.state import Lease, Record, StateStore
from upgrade_service.journal.intents import DONE, INTENT, Done, Intent, IntentLog

# Record kinds and their dataclasses (``upgrade_service.journal.records``).
from upgrade_service.journal.records import (
    CONTROL,
    DRAINED,
    PHASE,
    RUN_STARTED,
    WAVE_FINISHED,
    WAVE_STARTED,
    AbortedRecord,
    Control,
    ControlAction,
    Drained,
    Finished,
    FirstLightJudged,
    FirstLightStarted,
    Gate,
    Halted,
    JournalRecord,
    NodeFailed,
    Paused,
    PlanRecord,
    RunContinued,
    RunStarted,
    Settling,
    Waiting,
    WaveFinished,
    WaveStarted,
)
from upgrade_service.journal.records import Phase as PhaseRecord

OUTSIDE_WINDOW = "outside-window"  # a run stopped at its maintenance window's end: the halt's reason, and the run's status

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


@dataclass
class WaveState:
    """One wave as the journal tells it."""

    number: int
    started: WaveStarted
    phases: dict[str, PhaseRecord] = field(default_factory=dict)  # phase -> its record
    cordoned: set[str] = field(default_factory=set)
    drained: set[str] = field(default_factory=set)
    terminated: set[str] = field(default_factory=set)  # instance ids
    failed: dict[str, str] = field(default_factory=dict)  # node -> why
    evictions: int = 0
    refused: int = 0
    finished: WaveFinished | None = None
    extra_surge: dict[str, str] = field(default_factory=dict)  # node whose termination gives back a later surge -> group
    # One-at-a-time workloads whose evicted pod is not back yet (workload -> the eviction as journalled), and those
    # settling (workload -> until when): what a resumed drain must honour before it evicts their next pod.
    in_flight: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    settling: dict[str, float] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        return list(self.started.nodes)

    @property
    def back(self) -> bool:
        """Its new nodes are Ready and its evicted pods are back: only its settle time, if any, is left."""
        return self.finished is not None or PODS_READY in self.phases

    def decrements(self, node: str) -> bool:
        """Whether terminating ``node`` lowers its group's capacity (a surge node stands in for it)."""
        return bool(self.started.decrement.get(node)) or node in self.extra_surge


FIRST_LIGHT_KEY = "platformctl.io/first-light"  # the taint that keeps every pod but the canaries' off a first-light node
# The halts a judged first light ends with (``Halted.reason``): a run continued after one of them lights again.
FIRST_LIGHT_HALTS = frozenset({"first-light-fail", "first-light-inconclusive", "first-light-not-ready",
                               "first-light-launch-failed"})


@dataclass
class FirstLightState:
    """The open run's first-light step as the journal tells it."""

    started: FirstLightStarted
    surged: set[str] = field(default_factory=set)  # groups made to launch its node: raised, or a node replaced (confirmed)
    nodes: dict[str, str] = field(default_factory=dict)  # pool -> its first-light node, once tainted
    instances: dict[str, str] = field(default_factory=dict)  # pool -> its first-light node's instance
    terminated: set[str] = field(default_factory=set)  # first-light instances terminated
    asked_at: float | None = None  # when the gate was first asked about it
    cleared: int = 0  # pods evicted off its nodes before they were put out (the canaries', or a crash's strays)
    judged: FirstLightJudged | None = None
    halted: bool = False  # the run halted on its judgement (a run continued after that lights again)

    @property
    def passed(self) -> bool:
        return self.judged is not None and self.judged.verdict == "pass"


@dataclass
class RunState:
    """The cluster's rotation history folded into what matters now."""

    cluster: str
    last_seq: int = 0
    run: str | None = None  # the open (or last) run's id
    started: RunStarted | None = None
    ended: Finished | AbortedRecord | None = None  # how the last run ended
    halted: Halted | None = None  # the open run's latest halt, until it continues
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
    first_plan: PlanRecord | None = None  # the plan the run started with: its estimate is the report's
    last_plan: PlanRecord | None = None
    paused: Control | None = None  # the pause control record in force
    abort: Control | None = None  # an abort requested for the open run
    holder: str | None = None
    gate_asked: dict[int, float] = field(default_factory=dict)  # wave -> when the health gate was first asked for it
    waiting: Waiting | None = None  # nodes the run waits for (budgets whose pods come back), until a wave starts
    first_light: FirstLightState | None = None  # the open run's first-light step, the latest if it ran again

    @property
    def open(self) -> bool:
        return self.run is not None and self.ended is None

    @property
    def open_waves(self) -> list[WaveState]:
        """The open run's waves not finished, oldest first: with overlapping waves, earlier ones may still wait for
        their replacements, their pods or their settle time while the newest drains."""
        if not self.open:
            return []
        return [w for _, w in sorted(self.waves.items()) if w.finished is None]

    def proven(self, pools: frozenset[str]) -> bool:
        """Whether a wave of exactly these pools has come through in this run (its new nodes Ready, its pods back; its
        one-at-a-time workloads may still be settling, which holds only their own next pods): what lets the next
        waves of those pools overlap."""
        return any(w.back and frozenset(w.started.pools) == pools for w in self.waves.values())

    @property
    def status(self) -> str:
        if self.run is None:
            return "never-run"
        if self.ended is not None:
            return self.ended.KIND
        if self.halted is not None:  # a run that stopped where --max-waves asked, or at a window's end, is not a fault
            return {"max-waves": "partial", OUTSIDE_WINDOW: OUTSIDE_WINDOW}.get(self.halted.reason, "halted")
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
        try:
            control = Control.from_record(d)
        except (TypeError, ValueError):  # no action, or one this version does not know: nothing to act on
            return
        if control.action is ControlAction.PAUSE:
            state.paused = control
        elif control.action is ControlAction.RESUME:
            state.paused = None
        elif control.action is ControlAction.ABORT and state.open:
            state.abort = control
        return
    if kind == RUN_STARTED:
        # A new run: forget the previous one's details, keep the stream-level pause.
        started = RunStarted.from_record(d)
        new = RunState(state.cluster, last_seq=record.seq, run=started.run, started=started, paused=state.paused,
                       holder=started.holder, capacity=Counter(started.inherited or {}))
        state.__dict__.update(new.__dict__)
        return
    if d.get("run") != state.run:
        return  # a record of an older run
    if kind == INTENT:
        state.pending[Intent.from_record(d).id] = d
    elif kind == DONE:
        done = Done.from_record(d)
        intent = state.pending.pop(done.id, None)
        if intent is not None and done.ok:
            _confirmed(state, intent, d)
    elif kind == WAVE_STARTED:
        started_wave = WaveStarted.from_record(d)
        state.waves[started_wave.wave] = WaveState(started_wave.wave, started_wave)
        state.waiting = None
    elif kind in _KINDS:
        _applied(state, _KINDS[kind].from_record(d))


_KINDS: dict[str, type[JournalRecord]] = {c.KIND: c for c in (
    RunContinued, PlanRecord, PhaseRecord, Drained, Settling, NodeFailed, WaveFinished, Gate, Halted, Paused, Finished,
    AbortedRecord, Waiting, FirstLightStarted, FirstLightJudged)}


def _applied(state: RunState, r: JournalRecord) -> None:
    """What a record of the open run other than a side effect changes."""
    wave = state.waves.get(r.wave) if isinstance(r, PhaseRecord | Drained | Settling | NodeFailed | WaveFinished) \
        and isinstance(r.wave, int) else None
    if isinstance(r, RunContinued):
        state.halted = None
        state.holder = r.holder
    elif isinstance(r, PlanRecord):
        state.first_plan = state.first_plan or r
        state.last_plan = r
    elif isinstance(r, PhaseRecord) and wave is not None:
        wave.phases[r.phase] = r
    elif isinstance(r, Drained) and wave is not None:
        wave.drained.add(r.node)
    elif isinstance(r, Settling) and wave is not None:
        wave.in_flight.pop(r.workload, None)
        wave.settling[r.workload] = float(r.until)
    elif isinstance(r, NodeFailed):
        state.failed[r.node] = r.reason
        if wave is not None:
            wave.failed[r.node] = r.reason
    elif isinstance(r, WaveFinished) and wave is not None:
        wave.finished = r
    elif isinstance(r, Gate):
        state.gate_asked.setdefault(int(r.wave), float(r.at))
        if int(r.wave) == 0 and state.first_light is not None and state.first_light.asked_at is None:
            state.first_light.asked_at = float(r.at)
    elif isinstance(r, Waiting):
        state.waiting = r
    elif isinstance(r, FirstLightStarted):
        state.first_light = FirstLightState(r)
    elif isinstance(r, FirstLightJudged) and state.first_light is not None:
        state.first_light.judged = r
    elif isinstance(r, Halted):
        state.halted = r
        if state.first_light is not None and state.first_light.judged is not None and r.reason in FIRST_LIGHT_HALTS:
            state.first_light.halted = True
    elif isinstance(r, Finished | AbortedRecord):
        state.ended = r
        state.abort = None
        state.waiting = None


def _confirmed(state: RunState, intent: Mapping[str, Any], d: Mapping[str, Any]) -> None:
    """What a confirmed intent changed: the nodes held, the groups' capacity, the instances terminated, the evictions."""
    op, wave = intent["op"], state.waves.get(intent.get("wave", -1))
    node = str(intent.get("node"))  # every cordon, taint and their undoing names its node
    lit = state.first_light if intent.get("first_light") else None
    if lit is not None:  # the first-light step's own: its taint is not the outdated nodes' (put back by its judgement)
        if op == "taint":
            lit.nodes[str(intent["first_light"])] = node
            if intent.get("instance"):
                lit.instances[str(intent["first_light"])] = str(intent["instance"])
            return
        if op == "untaint":
            return
        if op == "evict":  # pods cleared off a first-light node before it is put out: not the rotation's evictions
            lit.cleared += len(d.get("evicted", ()))
            return
        if op == "set-desired" or (op == "terminate" and not intent.get("decrement")):
            lit.surged.add(intent["group"])  # raised by one, or a node replaced: the group launches the first-light node
        elif op == "terminate":
            lit.terminated.add(intent["instance"])  # put out
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
        born = state.started.at if state.started else 0.0
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
    """What fences a journal's writes: the lease its writer holds (``platformctl.kernel.state.lease.LeaseKeeper``)."""

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



def control(store: StateStore, cluster: str, action: ControlAction, by: str, reason: str, at: float) -> Record:
    """A pause, resume or abort request, written by another process."""
    return store.append(stream_of(cluster), {"kind": CONTROL, "at": at, **Control(action, by, reason).to_record()})


def read_state(store: StateStore, cluster: str) -> RunState:
    return fold(cluster, store.read(stream_of(cluster)))
