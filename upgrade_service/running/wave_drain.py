"""Draining one wave's nodes through the eviction API, the way the rotation policy asks. It acts; it plans nothing.

Every poll it lists what is left on the wave's (cordoned) nodes and evicts what may go now:

- a pod under one budget is evicted only while the budget's ``disruptionsAllowed`` (as the
  disruption controller wrote it) has room, at most that many per poll, so the drain spends the
  budget instead of hammering the API with evictions it knows will be refused; the API still has
  the last word, and a 429 puts the pod in backoff (the ``retryAfterSeconds`` it names, else
  doubling from the poll interval up to a minute);
- ``wait-for-completion`` pods are left to finish until ``maxWaitSeconds`` after they started;
- a ``one-at-a-time`` workload loses one pod at a time: the next goes only once the last one is
  gone, the workload has as many Ready pods as before, and its ``settleSeconds`` have passed since
  (two of its pods on one node are evicted one after the other, each settled);
- a pod is never deleted directly, and a node counts as drained only when its last pod is gone
  (each pod's grace period runs its course);
- every round of evictions is journalled before and after (``intent``/``done``), and every
  eviction waits its turn under the mutation pacer.

A node whose pods are still refused when the wave's ``drainTimeoutSeconds`` runs out is reported
as failed with what held it; it stays cordoned, and nothing forces it.

A drain can also wait on something that will not happen by itself: a budget (or a one-at-a-time
workload) whose evicted pod stays ``Pending`` because the scheduler finds no node for it
(``PodScheduled`` False, ``Unschedulable``), while none of its other pods is on its way to Ready.
Once that has held for ``stuckSeconds`` (30 s by default, of the cluster's time) the drain says which
pod and what the scheduler said, and asks its caller to recover (``on_stuck``: the executor waits for
replacements already booting or adds a surge node where a group has room); when the caller cannot, the
nodes still holding pods fail with that reason at once instead of after ``drainTimeoutSeconds``. Each node is
handed to ``on_drained`` as soon as its last pod is gone, so its replacement can boot while the others
drain.

Remediation drains broken nodes with the same loop. On a node whose kubelet is gone (Ready Unknown),
an evicted pod stays Terminating until the node object goes, since no kubelet confirms its containers
stopped: ``skip_wait_for_delete`` names such nodes, and their terminating pods then no longer hold the
drain (``kubectl drain --skip-wait-for-delete-timeout``, which Cluster API sets for unreachable nodes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from typing import Protocol as Interface

from platformctl.kernel import failpoints
from platformctl.kernel.clock import Clock, past
from platformctl.kernel.cluster.drain import drain_blocks_on
from platformctl.kernel.cluster.informer import Informer
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import Pod, PodDisruptionBudget
from platformctl.kernel.errors import NotFoundError
from upgrade_service.journal.records import Drained, Settling
from upgrade_service.planning.disruption import Protocol, protocol_of, workload_of
from upgrade_service.planning.policy import RotationPolicy
from upgrade_service.running.pacing import MutationPacer

MAX_BACKOFF_SECONDS = 60.0


@dataclass
class DrainStatus:
    """What a drain is waiting for now, for the live display."""

    pods_left: int = 0
    evictions: int = 0
    refused: int = 0
    waiting_on_budget: Counter[str] = field(default_factory=Counter)  # budget -> pods waiting for room
    waiting_other: Counter[str] = field(default_factory=Counter)  # why -> pods
    lowest_headroom: tuple[int, str] | None = None  # (currentHealthy - desiredHealthy, budget)


@dataclass
class DrainOutcome:
    drained: list[str]
    failed: dict[str, str]  # node -> what held it
    status: DrainStatus
    settle_seconds: int  # the longest settle time of the one-at-a-time workloads it left on their way back
    stuck: str | None = None  # why it stopped early: it waits on a pod that has nowhere to run


@dataclass(frozen=True)
class Stuck:
    """A drain that waits on a pod the scheduler cannot place: what it waits on, and what the scheduler says."""

    pod: Pod  # the Pending pod
    holding: str  # "PodDisruptionBudget ns/name allows no disruption" or "one-at-a-time <workload>"
    since: float  # when the drain first saw it so

    @property
    def message(self) -> str:
        return (f"the drain waits on {self.holding}, and pod {self.pod.namespace}/{self.pod.name} it evicted stays Pending: "
                f"{self.pod.unschedulable or 'Unschedulable'}")


@dataclass
class _InFlight:
    """A one-at-a-time workload's pod that was evicted and whose workload has not recovered yet."""

    namespace: str
    name: str
    uid: str
    ready_before: int
    settle_seconds: int = 0
    owner_uid: str | None = None  # a workload its pods' own annotations declare is its controller's pods


class Journalled(Interface):
    """Where a drain records what it does: the rotation's journal, or remediation's."""

    def intent(self, op: str, **args: Any) -> str: ...

    def done(self, key: str, ok: bool = True, **result: Any) -> None: ...

    def write(self, kind: str, **data: Any) -> Any: ...


class WaveDrain:
    def __init__(self, cluster: Cluster, policy: RotationPolicy, journal: Journalled, pacer: MutationPacer, *,
                 wave: int | str, poll_seconds: float, check: Callable[[], None],
                 progress: Callable[[DrainStatus], None] | None = None,
                 skip_wait_for_delete: Callable[[str], bool] | None = None,
                 on_drained: Callable[[str], None] | None = None,
                 on_stuck: Callable[[Stuck], bool] | None = None,
                 pods: Informer | None = None, budgets: Informer | None = None,
                 resume: Any = None, protocols: bool = True) -> None:
        self.cluster = cluster
        self.protocols = protocols  # False: every pod is evicted as budgets allow (its node's kubelet is gone)
        self.policy = policy
        self.journal = journal
        self.pacer = pacer
        self.clock: Clock = cluster.clock
        self.wave = wave
        self.poll = poll_seconds
        self.check = check
        self.progress = progress
        self.status = DrainStatus()
        self.backoff: dict[str, tuple[float, float]] = {}  # pod uid -> (retry at, last delay)
        self.in_flight: dict[str, _InFlight] = {}  # one-at-a-time workload -> its pod on the way out
        self.settling: dict[str, float] = {}  # one-at-a-time workload -> when its last moved pod has settled
        self._away_at: dict[str, float] = {}  # one-at-a-time workload -> when this drain last saw it incomplete
        self.skip_wait_for_delete = skip_wait_for_delete
        self.on_drained = on_drained
        self.on_stuck = on_stuck
        self.pods = pods  # the cluster's pods as its watch tells them: rounds run when they move (else every poll)
        self.budgets = budgets  # its PodDisruptionBudgets, likewise (else listed every round)
        self._next_due = float("inf")  # the earliest backoff, settle or maxWaitSeconds end the last round saw
        self.stuck_after = float(policy.stuck_seconds)
        self._budgets_seen: dict[tuple[str, str], PodDisruptionBudget] = {}
        self._stuck_since: dict[str, float] = {}  # what it waits on -> since when it looked stuck
        self._protocols: dict[str, Protocol | None] = {}  # pod uid -> its protocol (labels and annotations never change)
        if resume is not None:  # what a killed run's drain left: pods on their way out, workloads settling
            for workload, e in resume.in_flight.items():
                self.in_flight[workload] = _InFlight(e["namespace"], e["name"], e["uid"], int(e["ready_before"]),
                                                     int(e.get("settle") or 0), e.get("owner_uid"))
            self.settling.update(resume.settling)
        self._covering: dict[str, tuple[frozenset[tuple[str, str]], tuple[tuple[str, str], ...]]] = {}  # pod uid -> budgets

    # ---------------------------------------------------------------- one-at-a-time workloads

    def _pods_in(self, namespace: str) -> list[Pod]:
        return self.pods.pods_in(namespace) if self.pods is not None else self.cluster.list_pods(namespace=namespace)

    def _pods_on(self, node: str) -> list[Pod]:
        return self.pods.pods_on(node) if self.pods is not None else self.cluster.list_pods(node_name=node)

    def _protocol(self, pod: Pod) -> Protocol | None:
        """The pod's rotation protocol; a malformed annotation is none (the planner blocked such nodes)."""
        if not self.protocols:
            return None
        if pod.uid not in self._protocols:
            found = protocol_of(pod, self.policy)
            self._protocols[pod.uid] = found if isinstance(found, Protocol) else None
        return self._protocols[pod.uid]

    def _workload_pods(self, namespace: str, workload: str, owner_uid: str | None = None) -> list[Pod]:
        pods = self.pods.pods_of(owner_uid) if owner_uid is not None and self.pods is not None else self._pods_in(namespace)
        out = []
        for pod in pods:
            protocol = self._protocol(pod)
            if protocol is not None and protocol.held_by((workload,)) and not pod.is_finished:
                out.append(pod)
        return out

    def _settle_left(self) -> int:
        """The settle time of the workloads still on their way back as the drain ends: the wave's tail counts it from
        then (one that came back during the drain has its own end, journalled, in the wave's settling)."""
        return max((f.settle_seconds for f in self.in_flight.values()), default=0)

    def _recovered(self, workload: str) -> bool:
        flight = self.in_flight[workload]
        now = self.clock.now()
        if self.pods is not None:
            found = self.pods.get((flight.namespace, flight.name))
            if found is not None and found.uid == flight.uid:
                self._away_at[workload] = now
                return False  # still terminating
        else:
            try:
                if self.cluster.get_pod(flight.namespace, flight.name).uid == flight.uid:
                    self._away_at[workload] = now
                    return False
            except NotFoundError:
                pass
        pods = self._workload_pods(flight.namespace, workload, flight.owner_uid)
        ready = sum(1 for p in pods if p.ready and not p.terminating)
        if ready >= flight.ready_before and all(p.ready for p in pods if not p.terminating):
            del self.in_flight[workload]
            # Its settle time runs from when it was whole again (its pods' latest Ready transition, whole seconds as
            # the API writes it: one more), not from when this drain looked: a drain that starts after a boot finds
            # it back long since. Never from before this drain last saw it incomplete (a kubelet's clock may lag).
            back = max((p.ready_at for p in pods if p.ready_at is not None and not p.terminating), default=now)
            until = max(min(back + 1.0, now), self._away_at.pop(workload, 0.0)) + flight.settle_seconds
            self.settling[workload] = until
            # Journalled: a run killed now and started again still waits out the settle time.
            self.journal.write(Settling.KIND, **Settling(self.wave, workload, until).to_record())
            return True
        self._away_at[workload] = now
        return False

    # ---------------------------------------------------------------- the loop

    def run(self, nodes: Sequence[str], timeout_seconds: float) -> DrainOutcome:
        """Drain ``nodes``; a node still holding pods when the drain has made no progress (no eviction taken, no pod
        gone, no one-at-a-time workload whole again) for ``timeout_seconds`` fails. A drain that keeps moving, such as
        a one-at-a-time workload's pods leaving one after the other, each settled, is never cut short."""
        deadline = self.clock.now() + timeout_seconds
        left = list(dict.fromkeys(nodes))
        drained: list[str] = []
        last_left: tuple[int, ...] = ()
        while True:
            self.check()
            if self.pods is not None:
                self.pods.sync()
            now = self.clock.now()
            pods_of: dict[str, list[Pod]] = {}
            for node in left:
                try:
                    pods = [p for p in self._pods_on(node) if drain_blocks_on(p)]
                except NotFoundError:
                    pods = []
                if pods and self.skip_wait_for_delete is not None and self.skip_wait_for_delete(node):
                    pods = [p for p in pods if not p.terminating]
                if pods:
                    pods_of[node] = pods
                else:
                    drained.append(node)
                    self.journal.write(Drained.KIND, **Drained(self.wave, node).to_record())
                    if self.on_drained is not None:
                        self.on_drained(node)
            left = list(pods_of)
            self.status.pods_left = sum(len(p) for p in pods_of.values())
            moved = (self.status.pods_left, self.status.evictions, len(self.in_flight), len(self.settling))
            if moved != last_left:
                last_left, deadline = moved, now + timeout_seconds  # progress: the timeout counts from here
            if not left:
                return DrainOutcome(drained, {}, self.status, self._settle_left())
            if now >= deadline and past(self.clock, deadline):
                failed = {node: self._why_stuck(node, pods, timeout_seconds) for node, pods in pods_of.items()}
                return DrainOutcome(drained, failed, self.status, self._settle_left())
            self._round(now, [p for pods in pods_of.values() for p in pods])
            stuck = self._stuck(now)
            if stuck is not None:
                # Nothing will make room: the nodes still holding pods fail now, with what the scheduler said, rather
                # than after drainTimeoutSeconds. They stay cordoned; maxFailedNodes decides whether the run goes on.
                return DrainOutcome(drained, {node: stuck for node in pods_of}, self.status, self._settle_left(), stuck)
            failpoints.hit("wait:drain")
            if self.progress is not None:
                self.progress(self.status)
            self._until_something_moves(pods_of, deadline)

    def _until_something_moves(self, pods_of: dict[str, list[Pod]], deadline: float) -> None:
        """Wait for the next round: until a pod in the namespaces of what is left changes (one goes, one turns Ready
        and gives its budget room back), a backoff or settle time ends, or ``poll_seconds`` pass."""
        now = self.clock.now()
        timeout = max(min(self.poll, self._next_due - now, deadline - now), 0.0)
        if self.pods is None:
            self.clock.sleep(self.poll)
            return
        namespaces = {p.namespace for pods in pods_of.values() for p in pods}
        namespaces |= {flight.namespace for flight in self.in_flight.values()}
        seen = self.pods.moves_in(namespaces)
        self.pods.wait(lambda: self.pods is not None and self.pods.moves_in(namespaces) != seen, timeout)

    def _budgets(self, pods: list[Pod]) -> tuple[dict[tuple[str, str], list[PodDisruptionBudget]], dict[tuple[str, str], PodDisruptionBudget]]:
        namespaces = {p.namespace for p in pods}
        by_ns: dict[str, list[PodDisruptionBudget]] = {ns: [] for ns in namespaces}
        if self.budgets is not None:
            self.budgets.sync()
            for ns in namespaces:
                by_ns[ns] = self.budgets.pods_in(ns)
            budgets = {b.key: b for found in by_ns.values() for b in found}
            keys = {ns: frozenset(b.key for b in found) for ns, found in by_ns.items()}
            covering: dict[tuple[str, str], list[PodDisruptionBudget]] = {}
            for p in pods:  # which budgets select a pod changes only when budgets come or go (its labels never change)
                known = self._covering.get(p.uid)
                if known is None or known[0] != keys[p.namespace]:
                    known = (keys[p.namespace], tuple(b.key for b in by_ns[p.namespace] if b.selects(p)))
                    self._covering[p.uid] = known
                covering[p.key] = [budgets[k] for k in known[1]]
            self._budgets_seen = budgets
            return covering, budgets
        if len(namespaces) <= 8:
            for ns in namespaces:
                by_ns[ns] = self.cluster.list_pdbs(namespace=ns)
        else:
            for b in self.cluster.list_pdbs():  # one call for all, rather than one per namespace
                if b.namespace in by_ns:
                    by_ns[b.namespace].append(b)
        covering = {p.key: [b for b in by_ns[p.namespace] if b.selects(p)] for p in pods}
        budgets = {b.key: b for found in by_ns.values() for b in found}
        self._budgets_seen = budgets
        return covering, budgets

    # ---------------------------------------------------------------- waiting on a pod that has nowhere to go

    def _stuck(self, now: float) -> str | None:
        """Whether what the drain waits on will not come by itself; asks ``on_stuck`` to recover, and returns why the
        drain must stop when it cannot."""
        if self.pods is not None and not self.pods.unschedulable():
            self._stuck_since.clear()  # no pod anywhere waits for a node the scheduler cannot find
            return None
        waits: list[tuple[str, list[Pod]]] = []
        for name in self.status.waiting_on_budget:
            ns, _, pdb = name.partition("/")
            budget = self._budgets_seen.get((ns, pdb))
            if budget is not None and budget.status.disruptions_allowed <= 0:
                pods = [p for p in self._pods_in(ns) if budget.selects(p)]
                waits.append((f"PodDisruptionBudget {name} (it allows no disruption now)", pods))
        for workload, flight in self.in_flight.items():
            waits.append((f"one-at-a-time {workload}", self._workload_pods(flight.namespace, workload, flight.owner_uid)))
        found: dict[str, Stuck] = {}
        for holding, pods in waits:
            if any(p.node_name and not p.ready and not p.terminating and not p.is_finished for p in pods):
                continue  # one of its pods is on its way to Ready: room comes back by itself
            blocked = [p for p in pods if p.node_name is None and p.unschedulable and not p.terminating]
            if blocked:
                found[holding] = Stuck(blocked[0], holding, self._stuck_since.setdefault(holding, now))
        for holding in list(self._stuck_since):
            if holding not in found:
                del self._stuck_since[holding]
        for holding, stuck in sorted(found.items()):
            if now - stuck.since < self.stuck_after:
                continue
            self.status.waiting_other[f"stuck: {stuck.pod.namespace}/{stuck.pod.name} Unschedulable"] += 1
            if self.on_stuck is not None and self.on_stuck(stuck):
                self._stuck_since[holding] = now  # recovering: look again once it has had time to work
                continue
            return (f"{stuck.message} (for {now - stuck.since:.0f} s; nothing makes room for it: no new node that would "
                    "take it is on its way, and no group whose nodes would has room for one more)")
        return None

    def _round(self, now: float, pods: list[Pod]) -> None:
        status = self.status
        status.waiting_on_budget.clear()
        status.waiting_other.clear()
        covering, budgets = self._budgets(pods)
        room = {key: b.status.disruptions_allowed for key, b in budgets.items()}
        for key in {b.key for found in covering.values() for b in found}:
            b = budgets[key]
            headroom = (b.status.current_healthy - b.status.desired_healthy, f"{b.namespace}/{b.name}")
            if status.lowest_headroom is None or headroom[0] < status.lowest_headroom[0]:
                status.lowest_headroom = headroom
        for workload in list(self.in_flight):
            self._recovered(workload)
        self._next_due = min([*self.settling.values(), *(at for at, _ in self.backoff.values())], default=float("inf"))
        self._next_due = self._next_due if self._next_due > now else float("inf")
        chosen: list[Pod] = []
        taken: set[str] = set()  # one-at-a-time workloads with a pod chosen this round
        for pod in pods:
            if pod.terminating:
                status.waiting_other["terminating (grace period)"] += 1
                continue
            retry_at = self.backoff.get(pod.uid, (0.0, 0.0))[0]
            if retry_at > now:
                status.waiting_other["backing off after 429"] += 1
                continue
            protocol = self._protocol(pod)  # a malformed annotation is none: the planner blocked such nodes
            if protocol is not None and protocol.mode == "skip":
                status.waiting_other[f"rotation: skip ({protocol.source})"] += 1
                continue
            if protocol is not None and protocol.mode == "wait-for-completion" and pod.phase in ("Running", "Pending"):
                started = pod.started if pod.started is not None else pod.created
                if now < started + protocol.max_wait_seconds:
                    status.waiting_other["wait-for-completion"] += 1
                    self._next_due = min(self._next_due, started + protocol.max_wait_seconds)
                    continue
            if protocol is not None and protocol.mode == "one-at-a-time":
                if protocol.held_by(self.in_flight) or protocol.workload in taken:
                    status.waiting_other[f"one-at-a-time {protocol.workload}"] += 1
                    continue
                if protocol.held_by({w for w, until in self.settling.items() if until > now}):
                    status.waiting_other[f"one-at-a-time {protocol.workload} settling"] += 1
                    continue
            found = covering[pod.key]
            if len(found) > 1:
                status.waiting_other["under two PodDisruptionBudgets (the API refuses with 500)"] += 1
                continue
            if found and pod.ready:
                key = found[0].key
                if room.get(key, 0) <= 0:
                    status.waiting_on_budget[f"{key[0]}/{key[1]}"] += 1
                    continue
                room[key] -= 1
            if protocol is not None and protocol.mode == "one-at-a-time":
                taken.add(protocol.workload)
            chosen.append(pod)
        if chosen:
            self._evict(now, chosen)

    def _evict(self, now: float, pods: list[Pod]) -> None:
        # What a resumed run needs to hold a one-at-a-time workload's next pod back, written before any call: a run
        # killed between the eviction and its record finds the pod gone and still knows whose it was.
        sequence: dict[str, dict[str, Any]] = {}
        for pod in pods:
            protocol = self._protocol(pod)
            if protocol is not None and protocol.mode == "one-at-a-time":
                owner_uid = pod.owner.uid if protocol.per_owner and pod.owner else None
                ready_before = sum(1 for p in self._workload_pods(pod.namespace, protocol.workload, owner_uid)
                                   if p.ready and not p.terminating)
                sequence[f"{pod.namespace}/{pod.name}"] = {
                    "workload": protocol.workload, "namespace": pod.namespace, "name": pod.name, "uid": pod.uid,
                    "ready_before": ready_before, "settle": protocol.settle_seconds, "owner_uid": owner_uid}
        key = self.journal.intent("evict", wave=self.wave, pods=[f"{p.namespace}/{p.name}" for p in pods],
                                  uids={f"{p.namespace}/{p.name}": p.uid for p in pods}, one_at_a_time=sequence)
        failpoints.hit("intent:evict")
        evicted: list[dict[str, object]] = []
        refused: Counter[str] = Counter()
        for pod in pods:
            self.check()
            who = f"{pod.namespace}/{pod.name}"
            self.pacer.take()
            result = self.cluster.evict(pod.namespace, pod.name)
            failpoints.hit("call:evict")
            if result.allowed:
                self.status.evictions += 1
                self.backoff.pop(pod.uid, None)
                evicted.append({"pod": who, "uid": pod.uid, "created": pod.created, "owner": workload_of(pod),
                                **sequence.get(who, {})})
                if who in sequence:
                    e = sequence[who]
                    self.in_flight[e["workload"]] = _InFlight(pod.namespace, pod.name, pod.uid, e["ready_before"],
                                                              e["settle"], e["owner_uid"])
            elif result.code == 404:
                continue  # gone already
            else:
                self.status.refused += 1
                why = result.causes[0][1] if result.causes else result.message
                refused[f"{result.code} {why}"[:200]] += 1
                delay = float(result.retry_after_seconds) if result.retry_after_seconds else \
                    min(max(self.backoff.get(pod.uid, (0.0, self.poll / 2))[1] * 2, self.poll), MAX_BACKOFF_SECONDS)
                self.backoff[pod.uid] = (now + delay, delay)
        self.journal.done(key, evicted=evicted, refused=dict(refused))

    def _why_stuck(self, node: str, pods: list[Pod], timeout: float) -> str:
        waits = self.status.waiting_on_budget + self.status.waiting_other
        holding = ", ".join(f"{reason} ({n})" for reason, n in waits.most_common(3)) or "pods still terminating"
        names = ", ".join(f"{p.namespace}/{p.name}" for p in pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
        return f"drain made no progress for drainTimeoutSeconds {timeout:.0f}: {len(pods)} pods left ({names}); waiting on {holding}"
