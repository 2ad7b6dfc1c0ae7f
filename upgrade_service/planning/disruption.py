"""What rotating each node would do to the applications on it: the planner's view of a cluster.

Called by the planner (``upgrade_service.planning.plan``) with a parsed snapshot and a policy; returns, for
every node that needs rotation, a ``NodeDisruption``: the budgets its pods would spend when drained,
their grace periods, the one-at-a-time workloads it carries, how long those want to settle, the
wait-for-completion pods it must wait for, and, when draining it must fail right now, why.

"Must fail" is decided pod by pod with ``eviction_decision``, the same statement of the eviction
API's rules the simulator answers evictions with: a pod under two budgets (500), a budget the
disruption controller has not processed, or one with ``disruptionsAllowed`` 0 (429), with the API's
exceptions for pending, finished, terminating and unready pods. DaemonSet and mirror pods are never
evicted by a drain and never block. Budgets are read as the snapshot holds them (the status the
disruption controller wrote); a budget with no status at all, as a hand-written snapshot may have,
gets the status the controller would compute from the snapshot's pods.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Container, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property

from platformctl.kernel.cluster.budget_status import budget_status, collected_pods, controller_scales
from platformctl.kernel.cluster.model import (
    ANNOTATION_MAX_WAIT,
    ANNOTATION_ROTATION,
    ANNOTATION_SETTLE,
    EVICT_UNDER_BUDGET,
    LABEL_ZONE,
    REFUSE_NO_ROOM,
    REFUSE_NOT_PROCESSED,
    REFUSE_TWO_BUDGETS,
    Node,
    PDBStatus,
    Pod,
    PodDisruptionBudget,
    Snapshot,
    eviction_decision,
)
from upgrade_service.planning.policy import DEFAULT_MAX_WAIT_SECONDS, MODES, Due, RotationPolicy
from upgrade_service.planning.recovery import Recovery, budget_recovery

BudgetKey = tuple[str, str]


RECOVERING = "pdb-recovering"  # the one cause that is a wait: a budget at its floor whose pods are on their way back
NO_ROOM = "pdb-no-room"


@dataclass(frozen=True, slots=True)
class Cause:
    """One reason a node cannot be rotated now, naming the pod, its workload and the rule or budget."""

    # pdb-no-room | pdb-recovering (a wait: its pods are on their way back) | pdb-not-processed | two-pdbs | skip |
    # bad-annotation | zone-capacity
    kind: str
    message: str
    pod: str | None = None
    workload: str | None = None
    budget: str | None = None
    rule: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"kind": self.kind, "message": self.message}
        for name in ("pod", "workload", "budget", "rule"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True, slots=True)
class Protocol:
    """How one pod asks to be rotated, and who said so."""

    mode: str
    workload: str  # the one-at-a-time group the pod belongs to
    source: str  # "workloadRules[0]" or "annotation platformctl.io/rotation"
    settle_seconds: int = 0
    max_wait_seconds: int = DEFAULT_MAX_WAIT_SECONDS
    per_owner: bool = False  # the group is the pod's controller (its pods are found by owner), not a rule's namespace
    # A rule's pods in the pod's namespace, as a run journalled before rules moved each controller on its own keyed
    # them: a drain resumed from such a journal still holds and recovers them by it.
    legacy: str | None = None

    def held_by(self, keys: Container[str]) -> bool:
        return self.workload in keys or (self.legacy is not None and self.legacy in keys)


@dataclass(frozen=True, slots=True)
class Moving:
    """A pod a drain of its node evicts and its controller makes again elsewhere: it needs somewhere to run."""

    pod: Pod
    budget: BudgetKey | None  # the budget its eviction spends (a Ready pod under exactly one), if any
    one_at_a_time: str | None  # the one-at-a-time workload it belongs to, if any


# Owners whose controllers make an evicted pod again; anything else owned (a custom controller's pod) is
# assumed to be made again too, except a DaemonSet's (it goes with its node) and a bare pod (it is gone).
def recreated(pod: Pod) -> bool:
    return pod.owner is not None and pod.owner.kind != "DaemonSet"


def made_after_gone(pod: Pod) -> bool:
    """Whether the pod's controller makes its successor only once the pod is gone (a StatefulSet keeps the name), rather
    than as soon as it starts terminating (a ReplicaSet, a Job)."""
    return pod.owner is not None and pod.owner.kind == "StatefulSet"


@dataclass
class NodeDisruption:
    node: Node
    pool: str
    zone: str
    current_image: str | None
    target_image: str
    boot_seconds: int
    max_grace: int = 0  # longest grace period of the pods a drain evicts
    spends: dict[BudgetKey, int] = field(default_factory=dict)  # budget -> Ready pods it covers here
    budget_grace: dict[BudgetKey, int] = field(default_factory=dict)  # budget -> longest grace of those pods
    # budget or one-at-a-time workload -> how long their successors take from scheduled to Ready, as their
    # controllers' pods show it (else the policy's podStartSeconds)
    start: dict[str | BudgetKey, int] = field(default_factory=dict)
    one_at_a_time: dict[str, int] = field(default_factory=dict)  # workload -> its settle seconds
    one_at_a_time_pods: dict[str, list[int]] = field(default_factory=dict)  # workload -> grace of each of its pods here
    # Budgets (and one-at-a-time workloads) some of whose pods here a StatefulSet makes again only once the old pod
    # is gone: each round of their evictions takes the grace period as well as the start.
    after_gone: set[str | BudgetKey] = field(default_factory=set)
    wait_until: float | None = None  # wait-for-completion pods run at most until then
    waits_for: list[str] = field(default_factory=list)  # those pods
    causes: list[Cause] = field(default_factory=list)  # why it cannot be rotated now
    moving: list[Moving] = field(default_factory=list)  # pods that must find another node when it drains
    sequence_seconds: int = 0  # its one-at-a-time workloads' pods leaving one after the other (packing.node_sequence_seconds)
    due: Due = Due.IMAGE  # why it is rotated: another image, or its age

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def settle_seconds(self) -> int:
        return max(self.one_at_a_time.values(), default=0)

    @property
    def blocked(self) -> bool:
        return bool(self.causes)

    @property
    def recovering(self) -> bool:
        """Blocked only by budgets whose pods are on their way back: a wait, not a block."""
        return bool(self.causes) and all(c.kind == RECOVERING for c in self.causes)


@dataclass(frozen=True)
class ClusterView:
    """Everything the packer needs: the nodes to rotate, the budgets, and the cluster around them."""

    nodes: list[NodeDisruption]  # nodes that need rotation, blocked or not
    budgets: dict[BudgetKey, PodDisruptionBudget]
    zone_sizes: dict[str, int]  # every node of the cluster, by zone
    pools_present: frozenset[str]
    now: float
    workloads: dict[str, str]  # one-at-a-time workload -> how it was declared (for reasons)
    all_nodes: frozenset[str]  # every node of the cluster

    @cached_property
    def by_name(self) -> dict[str, NodeDisruption]:
        return {n.name: n for n in self.nodes}


START_SANE_SECONDS = 3600.0  # a longer "start" is a pod whose readiness came back later, not a start


def observed_starts(pods: Iterable[Pod]) -> dict[str, int]:
    """Each controller's (owner uid) pods' start as the API shows it: the median, over its Ready pods, of the time from
    ``PodScheduled`` to ``Ready``. Pods that never showed both are left out; a controller with none is absent."""
    seen: dict[str, list[float]] = defaultdict(list)
    for pod in pods:
        if pod.owner is None or not pod.ready or pod.scheduled is None:
            continue
        ready = pod.ready_at
        if ready is not None and 0 <= ready - pod.scheduled <= START_SANE_SECONDS:
            seen[pod.owner.uid].append(ready - pod.scheduled)
    return {uid: int(math.ceil(statistics.median(values))) for uid, values in seen.items()}


def workload_of(pod: Pod) -> str:
    if pod.owner is not None:
        return f"{pod.owner.kind} {pod.namespace}/{pod.owner.name}"
    return f"pod {pod.namespace}/{pod.name}"


class _BudgetIndex:
    """Which budgets cover a pod: per namespace, indexed by a label pair every match must carry."""

    def __init__(self, pdbs: list[PodDisruptionBudget]) -> None:
        self.by_pair: dict[tuple[str, str, str], list[PodDisruptionBudget]] = defaultdict(list)
        self.unindexed: dict[str, list[PodDisruptionBudget]] = defaultdict(list)
        for pdb in pdbs:
            if pdb.selector is None:
                continue  # a budget without a selector covers no pod
            if pdb.selector.match_labels:
                key, value = pdb.selector.match_labels[0]
                self.by_pair[(pdb.namespace, key, value)].append(pdb)
            else:
                self.unindexed[pdb.namespace].append(pdb)

    def covering(self, pod: Pod) -> list[PodDisruptionBudget]:
        out = [b for b in self.unindexed.get(pod.namespace, ()) if b.selects(pod)]
        if self.by_pair:
            ns = pod.namespace
            for key, value in pod.labels.items():
                for b in self.by_pair.get((ns, key, value), ()):
                    if b.selects(pod):
                        out.append(b)
        return out


def _with_statuses(snapshot: Snapshot) -> list[PodDisruptionBudget]:
    """The snapshot's budgets; any without a status gets the one the disruption controller would write
    (``platformctl.kernel.cluster.budget_status``, as the simulator computes it) over the snapshot's pods, those bound to
    a node the snapshot does not hold replaced as their controllers replace them."""
    missing = [b for b in snapshot.pdbs if b.status == PDBStatus()]
    if not missing:
        return list(snapshot.pdbs)
    by_namespace: dict[str, list[Pod]] = defaultdict(list)
    for pod in collected_pods(snapshot.pods, {n.name for n in snapshot.nodes}):
        by_namespace[pod.namespace].append(pod)
    scales = controller_scales(snapshot.pods)
    computed = {b.key: budget_status(b, [p for p in by_namespace.get(b.namespace, ()) if b.selects(p)], scales)
                for b in missing}
    return [replace(b, status=computed[b.key]) if b.key in computed else b for b in snapshot.pdbs]


def _annotation_int(pod: Pod, key: str) -> int | None | str:
    raw = pod.annotations.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        return raw
    return value if value >= 0 else raw


def protocol_of(pod: Pod, policy: RotationPolicy) -> Protocol | Cause | None:
    """The pod's rotation protocol: an operator's rule first, then the pod's own annotations.

    A malformed annotation is a ``Cause``: the planner does not guess what the application meant.
    """
    matched = policy.rule_for(pod)
    if matched is not None:
        i, rule = matched
        source = f"workloadRules[{i}]"
        settle = rule.settle_seconds
        if settle is None and rule.mode == "one-at-a-time":
            own = _annotation_int(pod, ANNOTATION_SETTLE)
            settle = own if isinstance(own, int) else 0
        max_wait = rule.max_wait_seconds if rule.max_wait_seconds is not None else DEFAULT_MAX_WAIT_SECONDS
        legacy = f"{source} in namespace {pod.namespace}"
        if rule.scope == "namespace":
            return Protocol(rule.mode, legacy, source, settle or 0, max_wait)
        return Protocol(rule.mode, workload_of(pod), source, settle or 0, max_wait, per_owner=True, legacy=legacy)
    mode = pod.annotations.get(ANNOTATION_ROTATION)
    if mode is None:
        return None
    source = f"annotation {ANNOTATION_ROTATION}"
    workload = workload_of(pod)
    if mode not in MODES:
        return Cause("bad-annotation", f"pod {pod.namespace}/{pod.name} of {workload} has {ANNOTATION_ROTATION}={mode!r}, "
                     f"not one of {', '.join(MODES)}: not rotated until the application fixes it",
                     pod=f"{pod.namespace}/{pod.name}", workload=workload, rule=source)
    values = {}
    for key, default in ((ANNOTATION_SETTLE, 0), (ANNOTATION_MAX_WAIT, DEFAULT_MAX_WAIT_SECONDS)):
        value = _annotation_int(pod, key)
        if isinstance(value, str):
            return Cause("bad-annotation", f"pod {pod.namespace}/{pod.name} of {workload} has {key}={value!r}, "
                         "not a whole number of seconds: not rotated until the application fixes it",
                         pod=f"{pod.namespace}/{pod.name}", workload=workload, rule=f"annotation {key}")
        values[key] = default if value is None else value
    return Protocol(mode, workload, source, values[ANNOTATION_SETTLE], values[ANNOTATION_MAX_WAIT], per_owner=True)


def _refusal(decision: str, pod: Pod, budgets: list[PodDisruptionBudget], recovery: Recovery | None = None) -> Cause:
    who = f"{pod.namespace}/{pod.name}"
    workload = workload_of(pod)
    if decision == REFUSE_TWO_BUDGETS:
        names = ", ".join(sorted(f"{b.namespace}/{b.name}" for b in budgets))
        return Cause("two-pdbs", f"pod {who} of {workload} is covered by more than one PodDisruptionBudget ({names}): "
                     "the eviction API refuses it with 500", pod=who, workload=workload, budget=names)
    b = budgets[0]
    budget = f"{b.namespace}/{b.name}"
    if decision == REFUSE_NOT_PROCESSED:
        return Cause("pdb-not-processed", f"PodDisruptionBudget {budget} is not yet processed by the disruption controller "
                     f"(observedGeneration {b.status.observed_generation} < generation {b.generation}): the eviction API "
                     f"refuses pod {who} of {workload} with 429", pod=who, workload=workload, budget=budget)
    assert decision == REFUSE_NO_ROOM
    why = b.status.sync_failed or f"needs {b.status.desired_healthy} healthy pods and has {b.status.current_healthy}"
    if recovery is not None and recovery.recovering:
        return Cause(RECOVERING, f"PodDisruptionBudget {budget} allows no disruption now ({why}), but {recovery.detail}: "
                     f"pod {who} of {workload} waits for it", pod=who, workload=workload, budget=budget)
    cannot = f" and {recovery.detail}" if recovery is not None else ""
    return Cause(NO_ROOM, f"PodDisruptionBudget {budget} allows no disruption now ({why}){cannot}: the eviction API "
                 f"refuses pod {who} of {workload} with 429", pod=who, workload=workload, budget=budget)


def sequence_seconds(node: NodeDisruption, default_start: int) -> int:
    """A node holding several pods of one one-at-a-time workload lets them go one after the other, each once the last
    one's successor is Ready and has settled."""
    worst = 0
    for workload, graces in node.one_at_a_time_pods.items():
        if len(graces) > 1:
            grace = max(graces)
            start = node.start.get(workload, default_start)
            step = start + (grace if workload in node.after_gone else 0) + node.one_at_a_time[workload]
            worst = max(worst, (len(graces) - 1) * step + grace)
    return worst


def _took(nd: NodeDisruption, key: str | BudgetKey, pod: Pod, starts: dict[str, int], default: int) -> None:
    """Note how long ``pod``'s successor will take to start: what its controller's pods show, else ``default`` (the
    policy's podStartSeconds). The longest of a budget's or a workload's pods on the node counts."""
    start = starts.get(pod.owner.uid, default) if pod.owner is not None else default
    nd.start[key] = max(nd.start.get(key, 0), start)


class _Recoveries:
    """Whether each budget at its floor recovers by itself (``upgrade_service.planning.recovery``), asked once per budget."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.known: dict[BudgetKey, Recovery] = {}
        self._scales: dict[str, int] | None = None
        self._by_namespace: dict[str, list[Pod]] | None = None

    def of(self, pdb: PodDisruptionBudget) -> Recovery:
        found = self.known.get(pdb.key)
        if found is None:
            if self._scales is None or self._by_namespace is None:  # once a view, and only when a budget is at its floor
                self._scales = controller_scales(self.snapshot.pods)
                self._by_namespace = defaultdict(list)
                for pod in self.snapshot.pods:
                    self._by_namespace[pod.namespace].append(pod)
            members = [p for p in self._by_namespace.get(pdb.namespace, ()) if pdb.selects(p)]
            computed = budget_status(pdb, members, self._scales)
            found = self.known[pdb.key] = budget_recovery(pdb, members, self.snapshot.nodes, computed)
        return found


def view_cluster(snapshot: Snapshot, policy: RotationPolicy, now: float) -> ClusterView:
    """Read ``snapshot`` for the plan: which nodes need rotation and what draining each would do."""
    budgets = _with_statuses(snapshot)
    index = _BudgetIndex(budgets)
    zone_sizes: dict[str, int] = defaultdict(int)
    pools_present: set[str] = set()
    outdated: dict[str, NodeDisruption] = {}
    for node in snapshot.nodes:
        zone = node.labels.get(LABEL_ZONE, "")
        zone_sizes[zone] += 1
        pool = node.labels.get(policy.pool_label)
        if pool is None:
            continue
        pools_present.add(pool)
        target = policy.target_for(pool)
        if target is None or (due := policy.due(node, target, now)) is None:
            continue
        outdated[node.name] = NodeDisruption(node, pool, zone, policy.image_of(node.labels), target,
                                             policy.boot_seconds(pool), due=due)

    workloads: dict[str, str] = {}
    starts = observed_starts(snapshot.pods)
    recovery = _Recoveries(snapshot)
    for pod in snapshot.pods:
        nd = outdated.get(pod.node_name) if pod.node_name else None
        if nd is None or pod.is_daemonset or pod.is_mirror or pod.is_finished:
            continue  # a drain never evicts these; they never block
        protocol = protocol_of(pod, policy)
        if isinstance(protocol, Cause):
            nd.causes.append(protocol)
            continue
        covering = index.covering(pod)
        decision = eviction_decision(pod, covering)
        if decision in (REFUSE_TWO_BUDGETS, REFUSE_NOT_PROCESSED, REFUSE_NO_ROOM):
            nd.causes.append(_refusal(decision, pod, covering, recovery.of(covering[0]) if decision == REFUSE_NO_ROOM else None))
            continue
        if pod.deletion_time is None:
            nd.max_grace = max(nd.max_grace, pod.grace_seconds)
        spent: BudgetKey | None = None
        if decision == EVICT_UNDER_BUDGET:
            spent = key = covering[0].key
            nd.spends[key] = nd.spends.get(key, 0) + 1
            nd.budget_grace[key] = max(nd.budget_grace.get(key, 0), pod.grace_seconds)
            if made_after_gone(pod):
                nd.after_gone.add(key)
            _took(nd, key, pod, starts, policy.durations.pod_start_seconds)
        waits = protocol is not None and protocol.mode == "wait-for-completion"
        if pod.deletion_time is None and recreated(pod) and not waits:
            nd.moving.append(Moving(pod, spent, protocol.workload if protocol is not None and protocol.mode == "one-at-a-time"
                                    else None))
        if protocol is None:
            continue
        who = f"{pod.namespace}/{pod.name}"
        if protocol.mode == "skip":
            nd.causes.append(Cause("skip", f"pod {who} of {workload_of(pod)} asks not to be disrupted (rotation: skip, from "
                                   f"{protocol.source})", pod=who, workload=workload_of(pod), rule=protocol.source))
        elif protocol.mode == "one-at-a-time":
            nd.one_at_a_time[protocol.workload] = max(nd.one_at_a_time.get(protocol.workload, 0), protocol.settle_seconds)
            nd.one_at_a_time_pods.setdefault(protocol.workload, []).append(pod.grace_seconds)
            if made_after_gone(pod):
                nd.after_gone.add(protocol.workload)
            _took(nd, protocol.workload, pod, starts, policy.durations.pod_start_seconds)
            workloads[protocol.workload] = protocol.source
        elif protocol.mode == "wait-for-completion" and pod.phase in ("Running", "Pending"):
            until = (pod.started if pod.started is not None else now) + protocol.max_wait_seconds
            nd.wait_until = until if nd.wait_until is None else max(nd.wait_until, until)
            nd.waits_for.append(who)
    for nd in outdated.values():
        if nd.one_at_a_time_pods:
            nd.sequence_seconds = sequence_seconds(nd, policy.durations.pod_start_seconds)
    return ClusterView(
        nodes=sorted(outdated.values(), key=lambda n: n.name),
        budgets={b.key: b for b in budgets},
        zone_sizes=dict(zone_sizes),
        pools_present=frozenset(pools_present),
        now=now,
        workloads=workloads,
        all_nodes=frozenset(n.name for n in snapshot.nodes),
    )
