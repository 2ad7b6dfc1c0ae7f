"""Remediation's records, one dataclass per kind, in the stream ``remediation/<cluster>`` (its side effects are
``intents.Intent`` and ``intents.Done``, a drain's ``journal_records.Drained`` and ``Settling``, as a rotation's).

As the rotation journal's, a record is a dict only where it enters the store (``to_record``) and where
``remediate status`` prints it; ``fold`` reads a stream back into a ``RemediationState``. ``rotation_holds`` and
``remediation_holds`` say which nodes the other one is busy with: each reads the other's journal, never its code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from platformctl.kernel.state import Record, StateStore
from upgrade_service.journal import rotation as rotation_journal
from upgrade_service.journal.intents import DONE, INTENT, Done, Intent
from upgrade_service.journal.records import Drained, JournalRecord

STARTED = "remediation-started"
FINISHED = "remediation-finished"
SKIPPED = "skipped"
INCIDENT = "breaker-open"
CLEARED = "breaker-closed"


@dataclass(frozen=True)
class RemediationStarted(JournalRecord):
    """A broken node (or an instance that never joined) being replaced: what a resumed run needs to finish it."""

    KIND: ClassVar[str] = STARTED
    id: str = ""
    subject: str = ""  # the node's name, or the instance's when it never joined
    node: str | None = None
    instance: str | None = None
    group: str | None = None
    pool: str | None = None
    zone: str | None = None
    reason: str = ""
    since: float | None = None
    members: list[str] = field(default_factory=list)  # the group's instances when it started: a new one is the replacement
    kubelet_gone_since: float | None = None
    surged: bool = False  # an earlier surge already stands in for it
    max_per_hour: int | None = None  # the policy's limit this one counted against (what the dashboard shows it of)


@dataclass(frozen=True)
class RemediationFinished(JournalRecord):
    KIND: ClassVar[str] = FINISHED
    id: str = ""
    subject: str = ""
    result: str = ""  # replaced | recovered | gone | stopped | drain-failed | replacement-not-ready
    detail: str = ""
    replacement: str | None = None


@dataclass(frozen=True)
class Skipped(JournalRecord):
    KIND: ClassVar[str] = SKIPPED
    subject: str = ""
    code: str = ""  # breaker-open | rate-limit | under-rotation | unmanaged | in-progress | …
    why: str = ""
    problem: str = ""


@dataclass(frozen=True)
class BreakerOpen(JournalRecord):
    """An incident: too many nodes unhealthy at once, in the cluster, a zone or a pool; nothing is replaced."""

    KIND: ClassVar[str] = INCIDENT
    scopes: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    total: int = 0
    unhealthy: list[dict[str, Any]] = field(default_factory=list)  # subject, reason, zone, pool, since of each

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "at": self.at, **self.to_record()}


@dataclass(frozen=True)
class BreakerClosed(JournalRecord):
    KIND: ClassVar[str] = CLEARED
    unhealthy: int = 0
    total: int = 0


# Record kinds of the remediation stream.
DRAINED = Drained.KIND  # a drain journals here as it does in a rotation

def stream_of(cluster: str) -> str:
    return f"remediation/{cluster}"


@dataclass
class Open:
    """A remediation started and not finished."""

    started: RemediationStarted
    cordoned: bool = False  # this remediation cordoned the node (and must give it back if it stops short)
    surged: bool = False  # it raised its group's desired capacity by one: the termination lowers it again
    drained: bool = False
    terminated: bool = False


@dataclass
class RemediationState:
    cluster: str
    last_seq: int = 0
    open: dict[str, Open] = field(default_factory=dict)  # remediation id -> what it did so far
    started_at: list[float] = field(default_factory=list)  # cluster time of every remediation started
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # intent id -> intent without a done
    incident: BreakerOpen | None = None  # the incident in force
    last_skip: dict[str, str] = field(default_factory=dict)  # subject -> the last reason it was skipped for
    recent: list[dict[str, Any]] = field(default_factory=list)  # the newest decisions, for `remediate status`
    terminated: set[str] = field(default_factory=set)  # instance ids remediation terminated
    # node left cordoned -> the remediation whose surge stands in for it (its started record)
    standing_in: dict[str, RemediationStarted] = field(default_factory=dict)
    max_per_hour: int | None = None  # the limit the newest remediation counted against


def fold(cluster: str, records: Iterable[Record]) -> RemediationState:
    state = RemediationState(cluster)
    for record in records:
        apply(state, record)
    return state


def apply(state: RemediationState, record: Record) -> None:
    d = dict(record.data)
    kind = d.get("kind")
    state.last_seq = record.seq
    if kind == STARTED:
        started = RemediationStarted.from_record(d)
        state.open[started.id] = Open(started, surged=started.surged)
        state.standing_in.pop(started.subject, None)
        state.started_at.append(started.at)
        state.max_per_hour = started.max_per_hour if started.max_per_hour is not None else state.max_per_hour
        state.last_skip.pop(started.subject, None)
    elif kind == FINISHED:
        finished = RemediationFinished.from_record(d)
        ended = state.open.pop(finished.id, None)
        if ended is not None and ended.surged and not ended.terminated and finished.result == "drain-failed":
            state.standing_in[finished.subject] = ended.started
    elif kind == INTENT:
        state.pending[Intent.from_record(d).id] = d
    elif kind == DONE:
        done = Done.from_record(d)
        intent = state.pending.pop(done.id, None)
        if intent is None or not done.ok:
            return
        current = state.open.get(intent.get("remediation", ""))
        if intent["op"] == "cordon" and current is not None:
            current.cordoned = True
        elif intent["op"] == "uncordon" and current is not None:
            current.cordoned = False
        elif intent["op"] == "set-desired" and current is not None:
            current.surged = True
        elif intent["op"] == "terminate":
            state.terminated.add(intent["instance"])
            if current is not None:
                current.terminated = True
    elif kind == DRAINED:
        current = state.open.get(str(d.get("wave", "")))
        if current is not None:
            current.drained = True
    elif kind == SKIPPED:
        skipped = Skipped.from_record(d)
        state.last_skip[skipped.subject] = skipped.code
    elif kind == INCIDENT:
        state.incident = BreakerOpen.from_record(d)
    elif kind == CLEARED:
        state.incident = None
    if kind in (STARTED, FINISHED, SKIPPED, INCIDENT, CLEARED):
        state.recent = [*state.recent[-49:], d]


def read_state(store: StateStore, cluster: str) -> RemediationState:
    return fold(cluster, store.read(stream_of(cluster)))


def rotation_holds(store: StateStore, cluster: str) -> dict[str, str]:
    """Node -> what the cluster's rotation is doing with it: its open wave's nodes, what it cordoned, its first-light
    nodes until they are judged passed or put out, any step it started and never confirmed. Such nodes are the rotation's, whatever
    their health: a first-light node that never becomes Ready is first light's own verdict on the image
    (``first-light-not-ready``), and replacing it would take away the evidence its judgement waits for."""
    state = rotation_journal.read_state(store, cluster)
    out: dict[str, str] = {}
    if not state.open:
        return out
    for wave in state.open_waves:
        for node in wave.nodes:
            if wave.started.instances.get(node) not in wave.terminated:
                out[node] = f"wave {wave.number} of rotation {state.run}"
    for node in state.cordoned:
        out.setdefault(node, f"cordoned by rotation {state.run}")
    lit = state.first_light
    if lit is not None and not lit.passed:  # once passed, its nodes are their pools' like any other
        for pool, node in lit.nodes.items():
            if lit.instances.get(pool) not in lit.terminated:
                out.setdefault(node, f"first light of rotation {state.run}, pool {pool}")
    for intent in state.pending.values():
        if intent.get("node"):
            out.setdefault(intent["node"], f"rotation {state.run} has an unconfirmed {intent['op']} on it")
    return out


def remediation_holds(store: StateStore, cluster: str) -> dict[str, str]:
    """Node -> what remediation is doing with it: the node of every remediation started and not finished, and
    every node left cordoned whose surge stands in for it. The rotation leaves them to remediation."""
    state = read_state(store, cluster)
    out: dict[str, str] = {}
    for rid, current in state.open.items():
        node = current.started.node
        if node:
            out[node] = f"remediation {rid} is replacing it ({current.started.reason})"
    for node, started in state.standing_in.items():
        out.setdefault(node, f"left cordoned by remediation {started.id}, whose surge stands in for it")
    return out
