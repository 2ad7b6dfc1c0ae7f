"""Where every wave's evicted pods will run: the plan's scheduling simulation, wave after wave. It plans; it does not act.

Karpenter's disruption controller simulates scheduling the pods a disruption displaces onto the
capacity that remains before it disrupts anything, and launches replacements first when they do
not fit; kOps drains one node at a time by default for the same reason. The packer
(``upgrade_service.planning.packing``) fills waves by budgets, limits and zone capacity; this module then
walks the waves in plan order over one ``Placement`` of the whole cluster
(``platformctl.kernel.cluster.scheduling``, kube-scheduler's filters) and, for each:

1. cordons its nodes and adds its surge nodes (``surge``: one per node its groups have room for;
   ``replace``: the ones this module gave it), as their launch template will make them (a
   ``NodeTemplate``: the pool's labels, taints, allocatable and DaemonSet pods, read from a node of
   the pool, with the instance type the launch template names);
2. takes every pod off its nodes and places each that a controller makes again, highest priority
   and largest first, on the nodes that stay schedulable, preferring nodes that are not outdated;
3. counts, per budget, the pods that found nowhere to go: each stays unavailable until the wave's
   replacements boot, so the budget spends one disruption on it for the whole wave. A budget that
   cannot afford that (more such pods than ``disruptionsAllowed``, or exactly as many while other
   pods of it must still be evicted one by one) would hold the drain forever; so would a
   one-at-a-time workload whose first evicted pod cannot come back before its next is evicted;
4. adds the wave's replacements and places the pods that waited for them.

A wave that does not fit is split: its nodes are taken in order while the wave still fits and the
rest form the next wave. A node that does not fit even alone gets (``replace``, when its group has
room) surge nodes first; else it waits for the end of its segment once (earlier waves free room on
new nodes); else it is planned alone, and the wave says why its drain will wait. Every change is
said in the wave's reasons, and where each pod is expected to go is kept for ``--explain``.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from platformctl.kernel.cluster.model import LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, Node, Pod, Resources, Snapshot, Taint, image_label_of
from platformctl.kernel.cluster.scheduling import Placement
from platformctl.kernel.instance_types import INSTANCE_TYPES
from platformctl.kernel.nodegroups import GroupState
from upgrade_service.planning.disruption import BudgetKey, ClusterView, Moving, NodeDisruption
from upgrade_service.planning.order import Segment
from upgrade_service.planning.packing import Limits, budget_drain_seconds
from upgrade_service.planning.policy import RotationPolicy

# Taints a node carries for a while, not from its launch template: a new node of the pool has none of them.
TRANSIENT_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/", "platformctl.io/",
                            "ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted")
WHY_CAP = 20  # pods per wave whose scheduler message is kept


@dataclass(frozen=True)
class NodeTemplate:
    """What a new node of a pool looks like to the scheduler, as its launch template makes it."""

    pool: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Resources
    max_pods: int
    daemon_pods: tuple[Pod, ...]  # the DaemonSet pods it runs from the start
    source: str  # where it was read: "node ip-… (instance type from the launch template)"

    def node(self, name: str) -> Node:
        return Node(name, name, {**self.labels, LABEL_HOSTNAME: name}, "", self.allocatable, self.max_pods,
                    taints=self.taints)


@dataclass(frozen=True)
class PoolCapacity:
    """What new nodes each pool gets: their template, and how many its groups may add above desired (None: not known)."""

    templates: Mapping[str, NodeTemplate]
    room: Mapping[str, int] | None = None


def templates_from(snapshot: Snapshot, policy: RotationPolicy, instance_types: Mapping[str, str | None] | None = None) -> dict[str, NodeTemplate]:
    """A template per target pool, read from a node of the pool (one already on the target image when there is
    one), with the launch template's instance type when it names another: what the API shows, nothing else."""
    targets = policy.targets or {}
    daemons: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.node_name and pod.is_daemonset and not pod.is_finished:
            daemons.setdefault(pod.node_name, []).append(pod)
    best: dict[str, tuple[tuple[bool, bool, str], Node]] = {}
    for node in snapshot.nodes:
        pool = node.labels.get(policy.pool_label)
        if pool not in targets:
            continue
        rank = (policy.image_of(node.labels) != targets[pool], not node.ready, node.name)
        if pool not in best or rank < best[pool][0]:
            best[pool] = (rank, node)
    out = {}
    for pool, (_, node) in best.items():
        labels = {k: v for k, v in node.labels.items() if k != LABEL_HOSTNAME}
        labels[image_label_of(labels, policy.image_labels) or policy.image_labels[0]] = targets[pool]
        allocatable, max_pods, source = node.allocatable, node.max_pods, f"node {node.name}"
        wanted = (instance_types or {}).get(pool)
        itype = INSTANCE_TYPES.get(wanted) if wanted else None
        if itype is not None and wanted != node.instance_type:
            labels[LABEL_INSTANCE_TYPE] = itype.name
            allocatable = Resources(itype.allocatable_cpu_millis, itype.allocatable_memory_bytes, itype.gpus)
            max_pods = itype.max_pods
            source += f", instance type {itype.name} from the launch template"
        taints = tuple(t for t in node.taints if not t.key.startswith(TRANSIENT_TAINT_PREFIXES))
        out[pool] = NodeTemplate(pool, labels, taints, allocatable, max_pods, tuple(daemons.get(node.name, ())), source)
    return out


def pool_capacity(snapshot: Snapshot, policy: RotationPolicy, group_of: Mapping[str, str],
                  groups: Mapping[str, GroupState]) -> PoolCapacity:
    """What new nodes each pool gets (read from its nodes, with its launch template's instance type) and how many its
    groups may add above their desired capacity now. ``group_of``: node -> its auto scaling group."""
    pool_groups: dict[str, set[str]] = {}
    for node in snapshot.nodes:
        pool = node.labels.get(policy.pool_label)
        if pool is not None and group_of.get(node.name) in groups:
            pool_groups.setdefault(pool, set()).add(group_of[node.name])
    room = {pool: sum(groups[g].room for g in found) for pool, found in pool_groups.items()}
    types = {pool: next((groups[g].instance_type for g in sorted(found) if groups[g].instance_type), None)
             for pool, found in pool_groups.items()}
    return PoolCapacity(templates_from(snapshot, policy, types), room)


@dataclass
class WaveFit:
    """One wave after the simulation: its nodes, what it adds first, and where its pods go."""

    segment: Segment
    nodes: list[NodeDisruption]
    surge: dict[str, int] = field(default_factory=dict)  # pool -> nodes added before the drain
    planned_surge: bool = False  # the surge is this module's doing (replace), not the strategy's
    moving: int = 0  # pods that move
    homeless: list[tuple[str, BudgetKey | None, str]] = field(default_factory=list)  # (pod, budget, why) until replacements boot
    held: dict[BudgetKey, tuple[int, int]] = field(default_factory=dict)  # budget -> (pods evicted, pods that wait)
    stuck: str | None = None  # why its drain will wait on pods that cannot come back, when even alone it does not fit
    notes: list[str] = field(default_factory=list)
    placed: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # node -> [(pod, where it goes)]


@dataclass
class _Trial:
    mark: int
    moving: int
    homeless: list[Moving]
    why: dict[tuple[str, str], str]
    after: list[tuple[Moving, str]]  # pods with nowhere to go even once the replacements are there
    problems: list[str]
    placed: dict[str, list[tuple[str, str]]]
    spend: Counter[BudgetKey]

    @property
    def ok(self) -> bool:
        return not self.problems


class Fitter:
    """The cluster as the plan's waves leave it, one wave after another."""

    def __init__(self, snapshot: Snapshot, view: ClusterView, policy: RotationPolicy, limits: Limits,
                 capacity: PoolCapacity) -> None:
        self.policy = policy
        self.limits = limits
        self.capacity = capacity
        self.facts: dict[tuple[str, str], Moving] = {m.pod.key: m for n in view.nodes for m in n.moving}
        outdated = set(view.by_name)
        self.place = Placement(snapshot.nodes, (p for p in snapshot.pods if p.node_name),
                               avoid=lambda node: node.name in outdated)
        for pod in snapshot.pods:  # pods already waiting for a node take room first, as the scheduler gives it them
            if not pod.node_name and not pod.is_finished and pod.deletion_time is None:
                self.place.place(pod)
        self.place.commit()
        self.virtual: dict[str, str] = {}  # planned node -> what it is, for --explain
        self._made = 0

    # ------------------------------------------------------------------ one wave

    def _new_node(self, pool: str, kind: str) -> str | None:
        template = self.capacity.templates.get(pool)
        if template is None:
            return None
        self._made += 1
        name = f"{kind}-{pool}-{self._made}"
        node = template.node(name)
        self.place.add_node(node, [replace(p, name=f"{p.name}@{name}", uid=f"{p.uid}@{name}", node_name=name)
                                   for p in template.daemon_pods])
        self.virtual[name] = f"a {'surge' if kind == 'surge' else 'replacement'} node of pool {pool}" + \
            (" (Ready before the drain)" if kind == "surge" else " (once it boots)")
        return name

    def _surge_for(self, nodes: Sequence[NodeDisruption], extra: Mapping[str, int]) -> dict[str, int]:
        """Surge nodes per pool: the strategy's (one per node, within the room), plus ``extra``."""
        out: dict[str, int] = {}
        if self.policy.strategy == "surge":
            room = self.capacity.room
            for pool, count in Counter(n.pool for n in nodes).items():
                out[pool] = count if room is None else min(count, room.get(pool, 0))
        for pool, count in extra.items():
            out[pool] = out.get(pool, 0) + count
        return {p: c for p, c in out.items() if c > 0}

    def trial(self, nodes: Sequence[NodeDisruption], surge: Mapping[str, int]) -> _Trial:
        """Simulate one wave over the current state (undone by ``rollback(trial.mark)``, kept by ``commit``)."""
        place = self.place
        mark = place.checkpoint()
        for nd in nodes:
            place.set_schedulable(nd.name, False)
        for pool, count in surge.items():
            for _ in range(count):
                self._new_node(pool, "surge")
        pods: list[Pod] = []
        origin: dict[tuple[str, str], str] = {}
        for nd in nodes:
            slot = place.slots.get(nd.name)
            if slot is None:
                continue
            for pod in list(slot.pods.values()):
                place.unbind(pod)
                if pod.key in self.facts:
                    pods.append(pod)
                    origin[pod.key] = nd.name
        pods.sort(key=lambda p: (-p.priority, -p.requests.cpu_millis, -p.requests.memory_bytes, p.namespace, p.name))
        placed: dict[str, list[tuple[str, str]]] = {nd.name: [] for nd in nodes}
        homeless: list[Moving] = []
        why: dict[tuple[str, str], str] = {}
        for pod in pods:
            dest = place.place(pod)
            if dest is None:
                homeless.append(self.facts[pod.key])
                if len(why) < WHY_CAP:
                    why[pod.key] = place.why_not(pod)
            else:
                placed[origin[pod.key]].append((f"{pod.namespace}/{pod.name}", dest))
        spend: Counter[BudgetKey] = Counter(b for p in pods if (b := self.facts[p.key].budget) is not None)
        problems = self._problems(pods, homeless, spend)
        # The wave ends: its nodes go, replacements come for those no surge node stands in for.
        for nd in nodes:
            if nd.name in place.slots:
                place.remove_node(nd.name)
        owed = Counter(nd.pool for nd in nodes)
        for pool, count in owed.items():
            for _ in range(max(count - surge.get(pool, 0), 0)):
                self._new_node(pool, "new")
        after: list[tuple[Moving, str]] = []
        for m in homeless:
            dest = place.place(m.pod)
            if dest is None:
                after.append((m, place.why_not(m.pod) if len(after) < WHY_CAP else ""))
            else:
                placed[origin[m.pod.key]].append((f"{m.pod.namespace}/{m.pod.name}", dest))
        for m, said in after[:3]:
            problems.append(f"pod {m.pod.namespace}/{m.pod.name} has nowhere to run even once the wave's replacement "
                            f"nodes are Ready: {said}")
        return _Trial(mark, len(pods), homeless, why, after, problems, placed, spend)

    def _problems(self, pods: list[Pod], homeless: list[Moving], spend: Counter[BudgetKey]) -> list[str]:
        out = []
        held = Counter(m.budget for m in homeless if m.budget is not None)
        for key, waiting in sorted(held.items()):
            allowed = self.limits.allowed.get(key, 0)
            evicted = spend[key]
            if waiting > allowed or (waiting == allowed and evicted > waiting):
                out.append(f"PodDisruptionBudget {key[0]}/{key[1]} allows {allowed} disruption"
                           f"{'s' if allowed != 1 else ''} at a time, and {waiting} of the {evicted} of its pods this wave "
                           "evicts would have nowhere to run until the wave's replacement nodes boot: the drain would wait "
                           "on pods that cannot come back before it ends")
        groups = Counter(self.facts[p.key].one_at_a_time for p in pods if self.facts[p.key].one_at_a_time)
        for workload in sorted({m.one_at_a_time for m in homeless if m.one_at_a_time}):
            if groups[workload] > 1:
                out.append(f"one-at-a-time {workload}: its first evicted pod would have nowhere to run until the wave's "
                           f"replacements boot, and {groups[workload] - 1} more of its pods wait for it in this wave")
        return out

    # ------------------------------------------------------------------ the plan's waves

    def fit(self, ordered: Sequence[tuple[Segment, list[NodeDisruption]]]) -> list[WaveFit]:
        queue: deque[tuple[Segment, list[NodeDisruption], list[str]]] = deque((s, list(n), []) for s, n in ordered)
        deferred: set[str] = set()
        out: list[WaveFit] = []
        while queue:
            segment, nodes, notes = queue.popleft()
            trial = self.trial(nodes, self._surge_for(nodes, {}))
            if trial.ok:
                out.append(self._keep(segment, nodes, {}, trial, notes))
                continue
            self.place.rollback(trial.mark)
            if len(nodes) > 1:
                accepted = self._largest_part(nodes)
                if accepted:
                    rest = [n for n in nodes if n not in accepted]
                    note = (f"split: with {', '.join(n.name for n in rest[:3])}{' …' if len(rest) > 3 else ''} as well, "
                            f"{trial.problems[0]}")
                    queue.appendleft((segment, rest, [f"split from the wave before: {trial.problems[0]}"]))
                    trial = self.trial(accepted, self._surge_for(accepted, {}))
                    out.append(self._keep(segment, accepted, {}, trial, [*notes, note]))
                    continue
                first, rest = nodes[0], nodes[1:]
                queue.appendleft((segment, rest, [f"split from the wave before: {trial.problems[0]}"]))
                nodes = [first]
                trial = self.trial(nodes, self._surge_for(nodes, {}))
                if trial.ok:
                    out.append(self._keep(segment, nodes, {}, trial, notes))
                    continue
                self.place.rollback(trial.mark)
            node = nodes[0]
            problem = trial.problems[0]
            surged = self._with_surge(node, trial)
            if surged is not None:
                extra, trial = surged
                out.append(self._keep(segment, nodes, extra, trial, [*notes, (
                    f"{sum(extra.values())} surge node(s) of pool {node.pool} first, since its group has room: "
                    f"without, {problem}")]))
                continue
            later = [i for i, item in enumerate(queue) if item[0] == segment]
            if node.name not in deferred and later:
                deferred.add(node.name)
                at = later[-1] + 1
                queue.insert(at, (segment, nodes, [*notes, f"moved to the end of its segment: {trial.problems[0]} "
                                                           "(earlier waves leave room on new nodes)"]))
                continue
            trial = self.trial(nodes, self._surge_for(nodes, {}))
            kept = self._keep(segment, nodes, {}, trial, [*notes, f"planned alone: {trial.problems[0]}"])
            kept.stuck = "; ".join(trial.problems)
            out.append(kept)
        return out

    def _largest_part(self, nodes: list[NodeDisruption]) -> list[NodeDisruption]:
        """The nodes of ``nodes``, taken in order, that fit together (nothing is kept: every trial is undone)."""
        accepted: list[NodeDisruption] = []
        for nd in nodes:
            trial = self.trial([*accepted, nd], self._surge_for([*accepted, nd], {}))
            self.place.rollback(trial.mark)
            if trial.ok:
                accepted.append(nd)
        return accepted

    def _with_surge(self, node: NodeDisruption, failed: _Trial) -> tuple[dict[str, int], _Trial] | None:
        """``replace``: the fewest surge nodes of the node's pool (within its groups' room) that let it fit alone."""
        room = (self.capacity.room or {}).get(node.pool, 0)
        if self.policy.strategy != "replace" or room <= 0 or node.pool not in self.capacity.templates:
            return None
        for count in range(1, min(room, max(failed.moving, 1)) + 1):
            extra = {node.pool: count}
            trial = self.trial([node], self._surge_for([node], extra))
            if trial.ok:
                return extra, trial
            self.place.rollback(trial.mark)
        return None

    def _keep(self, segment: Segment, nodes: list[NodeDisruption], extra: dict[str, int], trial: _Trial,
              notes: list[str]) -> WaveFit:
        self.place.commit()
        surge = self._surge_for(nodes, extra)
        held: dict[BudgetKey, tuple[int, int]] = {}
        waiting = Counter(m.budget for m in trial.homeless if m.budget is not None)
        for key, count in waiting.items():
            held[key] = (trial.spend[key], count)
        homeless = [(f"{m.pod.namespace}/{m.pod.name}", m.budget, trial.why.get(m.pod.key, "")) for m in trial.homeless]
        return WaveFit(segment, nodes, surge, bool(extra), trial.moving, homeless, held, None, notes, trial.placed)


def fit_waves(ordered: Sequence[tuple[Segment, list[NodeDisruption]]], snapshot: Snapshot, view: ClusterView,
              policy: RotationPolicy, limits: Limits, capacity: PoolCapacity | None) -> tuple[list[WaveFit], dict[str, str]]:
    """The waves as they fit, in plan order, and what each planned (surge or replacement) node is."""
    if capacity is None:
        capacity = PoolCapacity(templates_from(snapshot, policy))
    fitter = Fitter(snapshot, view, policy, limits, capacity)
    return fitter.fit(ordered), fitter.virtual


def held_drain_seconds(fit: WaveFit, limits: Limits, grace: Mapping[BudgetKey, int], after_gone: set[BudgetKey],
                       start: Mapping[BudgetKey, int]) -> int:
    """The drain time of a wave whose budgets spend room on pods that wait for the replacements: the rest of each such
    budget's pods go with what room is left."""
    worst = 0
    for key, (evicted, waiting) in fit.held.items():
        room = max(limits.allowed.get(key, 1) - waiting, 1)
        worst = max(worst, budget_drain_seconds(max(evicted - waiting, 0), room, grace.get(key, 0), key in after_gone,
                                                start.get(key, limits.pod_start_seconds)))
    return worst
