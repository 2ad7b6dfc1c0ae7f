"""The rotation planner: from a cluster's state and a policy to ordered waves of nodes. It plans; it does not act.

``plan_cluster`` reads the cluster (``disruption.view_cluster``), sets aside the nodes that cannot
be rotated now, orders the rest into segments (``order``), packs each segment into waves
(``packing``), and sequences the waves: inside a segment, waves of stateless workloads first (a bad
image shows itself where a retry is cheap), stateful ones after, and waves that wait for
wait-for-completion pods last, so those pods have the longest to finish on their own. The estimate
of a wave is ``packing``'s, plus, for a wave that waits, whatever remains of its pods' ``maxWaitSeconds``
when the wave starts; the plan's estimate is when its last wave ends, waves overlapping as the executor overlaps
them (``schedule``). ``plan_region`` orders a stage's clusters (one zone at a time, the host
cluster as the policy says) and nests their plans.

Called by the ``platformctl rotate plan`` command and, in time, the executor; its output is the
plan JSON operators and automation read.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from platformctl.kernel.cluster.model import Snapshot, format_time
from platformctl.kernel.errors import NotFoundError
from platformctl.kernel.windows import Schedule as Windows
from upgrade_service.planning.disruption import RECOVERING, Cause, ClusterView, NodeDisruption, view_cluster
from upgrade_service.planning.fit import PoolCapacity, WaveFit, fit_waves, held_drain_seconds
from upgrade_service.planning.order import ClusterPlace, Segment, cluster_steps, ordered_segments, segment_graph, why_segment_waits
from upgrade_service.planning.packing import Limits, WaveDraft, move_gain, pack, pack_in_name_order, rebuild
from upgrade_service.planning.policy import Due, RotationPolicy
from upgrade_service.planning.schedule import Schedule, Span


@dataclass(frozen=True)
class Wave:
    index: int  # 1-based, in plan order
    nodes: tuple[str, ...]
    segment: Segment
    boot_seconds: int
    drain_seconds: int
    settle_seconds: int
    wait_seconds: int
    reasons: tuple[str, ...]
    start_seconds: int = 0  # pods that wait for the wave's replacements start after they boot
    surge: Mapping[str, int] = field(default_factory=dict)  # pool -> nodes added before the drain
    planned_surge: bool = False  # surge nodes the plan gives a replace wave, its pods having nowhere else to go
    pods_moving: int = 0
    waiting: tuple[str, ...] = ()  # pods expected to wait for the wave's replacement nodes
    stuck: str | None = None  # why its drain will wait on pods that cannot come back (planned alone all the same)

    @property
    def estimated_seconds(self) -> int:
        return self.boot_seconds + self.drain_seconds + self.settle_seconds + self.wait_seconds + self.start_seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "nodes": list(self.nodes),
            "pools": list(self.segment.pools),
            "zone": self.segment.zone or None,
            "estimated_seconds": self.estimated_seconds,
            "estimate": {"boot": self.boot_seconds, "drain": self.drain_seconds, "settle": self.settle_seconds,
                         "wait": self.wait_seconds, "start": self.start_seconds},
            "surge": dict(self.surge),
            "pods_moving": self.pods_moving,
            "pods_waiting_for_new_nodes": list(self.waiting[:20]),
            "stuck": self.stuck,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class BlockedNode:
    node: str
    pool: str
    zone: str
    causes: tuple[Cause, ...]

    @property
    def waiting(self) -> bool:
        """Held only by budgets whose pods are on their way back: the run waits for them (``upgrade_service.planning.recovery``)."""
        return all(c.kind == RECOVERING for c in self.causes)

    @property
    def reason(self) -> str:
        first = self.causes[0].message
        more = len(self.causes) - 1
        return first + (f" (and {more} more cause{'s' if more > 1 else ''})" if more else "")

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "reason": self.reason, "pool": self.pool, "zone": self.zone or None,
                "waiting": self.waiting, "causes": [c.to_dict() for c in self.causes]}


@dataclass
class RotationPlan:
    cluster: str
    source: str
    policy: RotationPolicy
    waves: list[Wave]
    blocked: list[BlockedNode]
    warnings: list[str]
    view: ClusterView = field(repr=False)
    segments: nx.DiGraph = field(repr=False)
    limits: Limits = field(repr=False)
    drafts: dict[int, WaveDraft] = field(repr=False, default_factory=dict)  # wave index -> its draft
    fits: dict[int, WaveFit] = field(repr=False, default_factory=dict)  # wave index -> where its pods go
    planned_nodes: dict[str, str] = field(repr=False, default_factory=dict)  # surge/replacement node -> what it is
    ends_seconds: int | None = None  # when the last wave ends, waves overlapping as the executor overlaps them
    spans: dict[int, Span] = field(repr=False, default_factory=dict)  # wave index -> when it starts and ends
    planned_at: float | None = None  # the cluster's time the plan was made at (what its windows count from)
    openings: int = 0  # under maintenance windows: how many the waves start in (their spans wait for them)

    @property
    def windows(self) -> tuple[int, float] | None:
        """Under the policy's maintenance windows: how many the rotation needs and when it ends (the estimate, which
        then counts the time between windows); None without windows."""
        if not self.policy.schedule or self.planned_at is None or not self.waves:
            return None
        return self.openings, self.planned_at + self.estimated_seconds

    @property
    def closed_now(self) -> str | None:
        """Why no wave may start when the plan was made (a window closed, an exclusion such as a freeze by hand holding),
        and when one may; None when one may."""
        if not self.policy.schedule or self.planned_at is None:
            return None
        return self.policy.schedule.closed(self.planned_at)

    @property
    def estimated_seconds(self) -> int:
        return self.ends_seconds if self.ends_seconds is not None else sum(w.estimated_seconds for w in self.waves)

    def _span(self, index: int) -> dict[str, int]:
        span = self.spans.get(index)
        return {} if span is None else {"starts_at_seconds": span.start, "ends_at_seconds": span.end}

    def wave_of(self, node: str) -> Wave | None:
        for wave in self.waves:
            if node in wave.nodes:
                return wave
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "source": self.source,
            "policy": self.policy.source,
            "strategy": self.policy.strategy,
            "nodes_to_rotate": sum(len(w.nodes) for w in self.waves) + len(self.blocked),
            "estimated_seconds": self.estimated_seconds,
            **({"maintenance_windows": {"needed": self.windows[0], "ends_at": format_time(self.windows[1])}}
               if self.windows is not None else {}),
            **({"closed_now": closed} if (closed := self.closed_now) is not None else {}),
            "waves": [{**w.to_dict(), **self._span(w.index)} for w in self.waves],
            "blocked": [b.to_dict() for b in self.blocked],
            "warnings": self.warnings,
        }

    def explain(self, node: str) -> list[str]:
        """Why ``node`` is where the plan puts it, one statement a line."""
        facts = self.view.by_name.get(node)
        if facts is None:
            if node in self.view.all_nodes:
                return [f"node {node} needs no rotation: its pool is not in targets or it already runs the target image"]
            raise NotFoundError(f"no node {node!r} in cluster {self.cluster}", file=self.source, field="--explain")
        why = {Due.IMAGE: f"image {facts.current_image or '(none)'} -> {facts.target_image}",
               Due.LAUNCH_TEMPLATE: f"launch template: {self.policy.launch_drift.get(node, '')}",
               Due.MAX_NODE_AGE: f"created {format_time(facts.node.created)}, older than maxNodeAge {self.policy.max_node_age} s",
               }[facts.due]
        lines = [f"node {node} (pool {facts.pool}, zone {facts.zone or '-'}) needs rotation: {why}"]
        blocked = next((b for b in self.blocked if b.node == node), None)
        if blocked is not None:
            lines.append("waiting: a budget it spends is at its floor while its pods come back; a run waits for it"
                         if blocked.waiting else "blocked: it cannot be rotated now")
            lines += [f"  {c.message}" for c in blocked.causes]
            return lines
        wave = self.wave_of(node)
        assert wave is not None
        lines.append(f"wave {wave.index} of {len(self.waves)}: {wave.segment.label}, {len(wave.nodes)} nodes, "
                     f"estimated {wave.estimated_seconds} s")
        lines += [f"  order: {r}" for r in why_segment_waits(self.segments, wave.segment)]
        lines += [f"  wave: {r}" for r in wave.reasons]
        same_segment = [w for w in self.waves if w.segment == wave.segment and w.index < wave.index]
        limits = self.limits
        here = self.drafts[wave.index]
        for earlier in same_segment:
            draft = self.drafts[earlier.index]
            limit = draft.blocked_by(facts, limits)
            if limit is not None:
                lines.append(f"  not in wave {earlier.index}: {limit}")
                continue
            growth, saving = move_gain(facts, here, draft, limits)
            if growth == saving == 0:
                lines.append(f"  not in wave {earlier.index}: it could go there at no cost either way; waves fill in turn")
            else:
                lines.append(f"  not in wave {earlier.index}: moving it there would make that wave {growth} s longer "
                             f"and this one {saving} s shorter")
        chain = self.chains()
        for workload in sorted(facts.one_at_a_time):
            steps = chain.get(workload, [])
            where = ", ".join(f"{n} (wave {w})" for n, w in steps)
            lines.append(f"  one-at-a-time {workload} ({self.view.workloads.get(workload, 'annotation')}): "
                         f"its nodes rotate in turn: {where}")
        for key, count in sorted(facts.spends.items()):
            draft = self.drafts[wave.index]
            allowed = self.limits.allowed.get(key, 0)
            lines.append(f"  budget {key[0]}/{key[1]}: {count} of its pods here, {draft.spends[key]} in this wave, "
                         f"{allowed} disruption{'s' if allowed != 1 else ''} allowed at a time")
        if facts.waits_for:
            lines.append(f"  waits for {len(facts.waits_for)} wait-for-completion pod(s): {', '.join(facts.waits_for[:5])}")
        lines += self._where_pods_go(wave, node)
        return lines

    def _where_pods_go(self, wave: Wave, node: str) -> list[str]:
        """Where each pod of ``node`` is expected to run once the drain evicts it, or why nowhere."""
        fit = self.fits.get(wave.index)
        if fit is None:
            return []
        lines = []
        if fit.surge:
            lines.append("  surge first: " + ", ".join(f"{n} node(s) of pool {p}" for p, n in sorted(fit.surge.items()))
                         + (" (the plan's, under replace: its group has room)" if fit.planned_surge else ""))
        placed = dict(fit.placed.get(node, ()))
        waiting = {pod: why for pod, _, why in fit.homeless}
        pods = [m.pod for m in self.view.by_name[node].moving]
        lines.append(f"  its pods when it drains: {len(pods)} to move" + (
            f", {sum(1 for p in pods if f'{p.namespace}/{p.name}' in waiting)} of them wait for the wave's new nodes"
            if waiting else ""))
        for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
            who = f"{pod.namespace}/{pod.name}"
            dest = placed.get(who)
            if dest is None:
                lines.append(f"    {who} -> nowhere: it stays Pending"
                             + (f" ({waiting[who]})" if waiting.get(who) else ""))
                continue
            where = self.planned_nodes.get(dest, dest)
            if who in waiting:
                lines.append(f"    {who} -> {where}: nowhere until then"
                             + (f" ({waiting[who]})" if waiting[who] else ""))
            else:
                lines.append(f"    {who} -> {where}")
        if fit.stuck:
            lines.append(f"  its drain will wait: {fit.stuck}")
        return lines

    def chains(self) -> dict[str, list[tuple[str, int]]]:
        """Each one-at-a-time workload's nodes in the order they rotate, with their waves."""
        placed: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for wave in self.waves:
            for name in wave.nodes:
                for workload in self.view.by_name[name].one_at_a_time:
                    placed[workload].append((wave.index, name))
        return {workload: [(n, w) for w, n in sorted(steps)] for workload, steps in placed.items()}


def limits_for(policy: RotationPolicy, view: ClusterView) -> Limits:
    per_zone = None
    if policy.strategy == "replace":
        keep = policy.min_zone_capacity_percent
        per_zone = {zone: size * (100 - keep) // 100 for zone, size in view.zone_sizes.items()}
    return Limits(
        max_in_flight=policy.max_in_flight,
        per_pool=policy.max_in_flight_per_pool,
        per_zone=per_zone,
        pod_start_seconds=policy.durations.pod_start_seconds,
        allowed={key: b.status.disruptions_allowed for key, b in view.budgets.items()},
    )


def pool_warnings(policy: RotationPolicy, pools_present: frozenset[str], where: str) -> list[str]:
    """Pools the policy names that ``where`` (a cluster, or a whole stage) does not have: likely typos."""
    out = []
    for pool in policy.targets or ():
        if pool not in pools_present:
            out.append(f"{policy.source}: targets.{pool}: no node of {where} is in pool {pool!r} (label {policy.pool_label})")
    named = {p for pool, before in policy.pool_order.items() for p in (pool, *before)}
    for pool in sorted(named - pools_present - set(policy.targets or ())):
        out.append(f"{policy.source}: poolOrder: pool {pool!r} is not in {where}; orders through it still hold")
    return out


def _wave_reasons(draft: WaveDraft, segment: Segment, limits: Limits, view: ClusterView, policy: RotationPolicy,
                  wait: int) -> tuple[str, ...]:
    reasons = [segment.label]
    if len(draft.nodes) >= limits.max_in_flight:
        reasons.append(f"full at maxInFlight {limits.max_in_flight}")
    for pool, count in sorted(draft.pools.items()):
        cap = limits.per_pool.get(pool)
        if cap is not None and count >= cap:
            reasons.append(f"full for pool {pool} at maxInFlightPerPool {cap}")
    if limits.per_zone is not None:
        for zone, count in sorted(draft.zones.items()):
            if count >= limits.per_zone.get(zone, 0):
                reasons.append(f"zone {zone or '-'} at its limit: {count} of {view.zone_sizes.get(zone, 0)} nodes out of "
                               f"service keeps {policy.min_zone_capacity_percent}% in service")
    slowest = max(draft.nodes, key=lambda n: n.boot_seconds)
    reasons.append(f"boot {draft.boot} s (pool {slowest.pool})")
    pacing = draft.pacing_budget(limits)
    if pacing is not None:
        (ns, name), rounds = pacing
        reasons.append(f"drain paced by PodDisruptionBudget {ns}/{name}: {draft.spends[(ns, name)]} of its pods, "
                       f"{max(limits.allowed.get((ns, name), 1), 1)} at a time, {rounds} rounds")
    if draft.settle:
        settlers = sorted({w for n in draft.nodes for w, s in n.one_at_a_time.items() if s == draft.settle})
        reasons.append(f"settles {draft.settle} s after the drain for one-at-a-time {', '.join(settlers[:3])}"
                       + (f" and {len(settlers) - 3} more" if len(settlers) > 3 else ""))
    waiting = [p for n in draft.nodes for p in n.waits_for]
    if waiting:
        pods = f"{len(waiting)} wait-for-completion pod(s) ({', '.join(waiting[:3])}{', …' if len(waiting) > 3 else ''})"
        when = f"waits up to {wait} s more for {pods}" if wait else f"{pods} reach their maxWaitSeconds before this wave starts"
        reasons.append(f"{when}; cordon its nodes at the start so they finish undisturbed")
    return tuple(reasons)


def _fit_reasons(fit: WaveFit, policy: RotationPolicy) -> list[str]:
    out = list(fit.notes)
    if fit.homeless:
        names = [p for p, _, _ in fit.homeless]
        out.append(f"{len(names)} pod(s) ({', '.join(names[:3])}{', …' if len(names) > 3 else ''}) have nowhere to run until "
                   "the wave's new nodes are Ready: unavailable that long"
                   + ("; its budgets can afford it" if not fit.stuck else ""))
    return out


def chain_steps(node: NodeDisruption, limits: Limits) -> dict[str, int]:
    """Each one-at-a-time workload on ``node`` -> how long after its pod leaves its next pod may: the successor's start,
    the grace first when the successor is made only once the pod is gone, and the settle time."""
    out = {}
    for workload, settle in node.one_at_a_time.items():
        grace = max(node.one_at_a_time_pods.get(workload) or [0])
        out[workload] = node.start.get(workload, limits.pod_start_seconds) + (grace if workload in node.after_gone else 0) + settle
    return out


def chain_tails(nodes: Iterable[NodeDisruption], limits: Limits, gone: bool = True) -> dict[str, int]:
    """Each one-at-a-time workload on ``nodes`` -> how long from its first pod's leaving a node until its last there is
    gone: one after the other, each a step after the last (``chain_steps``), the last its grace (``gone``; else until
    the last leaves)."""
    out: dict[str, int] = {}
    for node in nodes:
        steps = chain_steps(node, limits)
        for workload, graces in node.one_at_a_time_pods.items():
            out[workload] = max(out.get(workload, 0), (len(graces) - 1) * steps[workload] +
                                (max(graces, default=0) if gone else 0))
    return out


def _after_waiting_pools(movable: list[NodeDisruption], blocked: list[BlockedNode],
                         policy: RotationPolicy) -> list[NodeDisruption]:
    """``poolOrder`` holds through a wait: a pool whose earlier pools still have nodes waiting for their budgets' pods
    to come back waits with them (it would otherwise go first, as if those pools were done). Such nodes join the
    blocked ones as waiting, and ``movable`` loses them."""
    waiting = {b.pool for b in blocked if b.waiting}
    if not waiting or not policy.pool_order:
        return movable
    graph = nx.DiGraph((before, pool) for pool, befores in policy.pool_order.items() for before in befores)
    after: dict[str, set[str]] = {}
    for pool in waiting & set(graph.nodes):
        for later in nx.descendants(graph, pool):
            after.setdefault(later, set()).add(pool)
    keep = []
    for n in movable:
        if n.pool not in after:
            keep.append(n)
            continue
        firsts = ", ".join(sorted(after[n.pool]))
        blocked.append(BlockedNode(n.name, n.pool, n.zone, (Cause(
            RECOVERING, f"poolOrder: pool {n.pool} goes after {firsts}, whose nodes wait for budgets whose pods are on "
            "their way back", rule="poolOrder"),)))
    return keep


def plan_cluster(snapshot: Snapshot, policy: RotationPolicy, now: float, cluster: str | None = None,
                 naive: bool = False, in_stage: bool = False, capacity: PoolCapacity | None = None) -> RotationPlan:
    """The rotation plan of one cluster. ``naive`` packs in name order with no scheduling simulation (the
    benchmark's baseline); ``in_stage``: part of a stage plan, whose pools are checked against the policy for the
    whole stage; ``capacity``: what new nodes each pool gets and how many its groups may add (else read from
    the snapshot's nodes, room unknown)."""
    view = view_cluster(snapshot, policy, now)
    limits = limits_for(policy, view)
    blocked = [BlockedNode(n.name, n.pool, n.zone, tuple(n.causes)) for n in view.nodes if n.blocked]
    movable: list[NodeDisruption] = []
    for n in view.nodes:
        if n.blocked:
            continue
        if limits.per_zone is not None and limits.per_zone.get(n.zone, 0) == 0:
            size = view.zone_sizes.get(n.zone, 0)
            blocked.append(BlockedNode(n.name, n.pool, n.zone, (Cause(
                "zone-capacity", f"zone {n.zone or '-'} has {size} node{'s' if size != 1 else ''}: keeping "
                f"minZoneCapacityPercent {policy.min_zone_capacity_percent}% in service leaves none to rotate with strategy "
                "replace (lower minZoneCapacityPercent, or use strategy: surge)", rule="minZoneCapacityPercent"),)))
            continue
        movable.append(n)
    movable = _after_waiting_pools(movable, blocked, policy)
    blocked.sort(key=lambda b: b.node)

    counts: dict[tuple[str, str], int] = defaultdict(int)
    for n in movable:
        counts[(n.pool, n.zone if policy.zone_at_a_time else "")] += 1
    segments = segment_graph(policy, counts)
    ordered: list[tuple[Segment, list[NodeDisruption]]] = []
    for segment in ordered_segments(segments):
        members = [n for n in movable if n.pool in segment.pools and (not segment.zone or n.zone == segment.zone)]
        packed = (pack_in_name_order if naive else pack)(members, limits)
        if not naive:
            packed.sort(key=lambda d: (max((n.wait_until or 0) for n in d.nodes), d.settle, d.boot))
        ordered += [(segment, list(d.nodes)) for d in packed]
    planned_nodes: dict[str, str] = {}
    if naive:
        fits = [WaveFit(segment, nodes) for segment, nodes in ordered]
    else:
        fits, planned_nodes = fit_waves(ordered, snapshot, view, policy, limits, capacity)
    waves: list[Wave] = []
    drafts: dict[int, WaveDraft] = {}
    by_index: dict[int, WaveFit] = {}
    schedule = Schedule(policy.overlap_waves, policy.max_in_flight, policy.max_in_flight_per_pool, policy.strategy == "surge")
    spans: dict[int, Span] = {}
    openings: list[tuple[float, float | None]] = []  # the maintenance windows' openings the waves start in, and ends
    for fit in fits:
        draft = rebuild(fit.nodes, limits)
        until = max((n.wait_until for n in draft.nodes if n.wait_until is not None), default=None)
        in_pools = Counter(n.pool for n in draft.nodes)
        begins = schedule.start_of(fit.segment.pools, in_pools)
        if policy.schedule:
            begins = _in_a_window(schedule, policy.schedule, now, begins, fit.segment.pools, in_pools, openings)
        surge_first = policy.strategy == "surge" or fit.planned_surge  # its new nodes boot before the drain
        # Its wait-for-completion pods run on while its new nodes boot: the drain waits only for what is left then.
        drains = schedule.drains_from(fit.segment.pools, begins, draft.boot if surge_first else 0)
        wait = max(0, int(until - now) - drains) if until is not None else 0
        index = len(waves) + 1
        drain = max(draft.drain, held_drain_seconds(fit, limits, draft.budget_grace, draft.after_gone, draft.start))
        start = limits.pod_start_seconds if fit.homeless else 0
        reasons = _wave_reasons(draft, fit.segment, limits, view, policy, wait) + tuple(_fit_reasons(fit, policy))
        wave = Wave(index, tuple(n.name for n in draft.nodes), fit.segment, draft.boot, drain, draft.settle, wait, reasons,
                    start, dict(fit.surge), fit.planned_surge, fit.moving, tuple(p for p, _, _ in fit.homeless), fit.stuck)
        waves.append(wave)
        drafts[index] = draft
        by_index[index] = fit
        boot_after = 0 if surge_first else wave.boot_seconds
        spans[index] = schedule.add(fit.segment.pools, in_pools, 0 if boot_after else wave.boot_seconds,
                                    wave.wait_seconds + wave.drain_seconds, boot_after + wave.start_seconds + wave.settle_seconds,
                                    boot_after, {w: step for n in draft.nodes for w, step in chain_steps(n, limits).items()},
                                    wave.settle_seconds, chain_tails(draft.nodes, limits),
                                    chain_tails(draft.nodes, limits, gone=False))
    warnings = [] if in_stage else pool_warnings(policy, view.pools_present, "this cluster")
    stuck = [w for w in waves if w.stuck]
    if stuck:
        warnings.append(f"{len(stuck)} wave(s) cannot be drained without pods waiting for nodes that only the drain's end "
                        f"brings (first: wave {stuck[0].index}, node {stuck[0].nodes[0]}): {stuck[0].stuck}")
    return RotationPlan(cluster or policy.cluster or "cluster", snapshot.source or "live", policy, waves, blocked,
                        warnings, view, segments, limits, drafts, by_index, planned_nodes, schedule.ends, spans, now,
                        len(openings))


def _in_a_window(schedule: Schedule, windows: Windows, now: float, begins: int, pools: tuple[str, ...],
                 nodes: Counter[str], openings: list[tuple[float, float | None]]) -> int:
    """When a wave that may start ``begins`` seconds into the plan starts under the policy's maintenance windows (the
    executor's rule): then, if a window is open; else the run stops and the next starts the wave at the next opening,
    its open waves finished. Counts the openings the waves start in."""
    for _ in range(1000):
        at = now + begins
        if windows.open(at):
            if not openings or (openings[-1][1] is not None and at >= openings[-1][1]):
                openings.append((at, windows.closes(at)))  # a new opening (waiting for tails may reach one)
            return begins
        opens = windows.next_opening(at)
        if opens is None:
            return begins  # none opens within the horizon: the plan says so in its windows (and the run will)
        schedule.stopped_until(math.ceil(opens - now))  # at the opening, not a fraction of a second before it
        begins = schedule.start_of(pools, nodes)
    return begins


@dataclass
class RegionPlan:
    stage: str
    region: str
    steps: list[list[str]]
    plans: dict[str, RotationPlan]
    graph: nx.DiGraph = field(repr=False)
    warnings: list[str] = field(default_factory=list)

    def step_seconds(self, step: list[str]) -> int:
        return max((self.plans[c].estimated_seconds for c in step), default=0)

    @property
    def estimated_seconds(self) -> int:
        return sum(self.step_seconds(s) for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "region": self.region,
            "estimated_seconds": self.estimated_seconds,
            "steps": [
                {"index": i + 1, "clusters": step, "estimated_seconds": self.step_seconds(step),
                 "reasons": sorted({self.graph.edges[p, c]["reason"] for c in step for p in self.graph.predecessors(c)})}
                for i, step in enumerate(self.steps)
            ],
            "clusters": {name: self.plans[name].to_dict() for step in self.steps for name in step},
            "warnings": self.warnings,
        }


def plan_region(stage: str, region: str, places: list[ClusterPlace], snapshots: Mapping[str, Snapshot],
                policy: RotationPolicy, now: float) -> RegionPlan:
    """Plan every cluster of a stage and order them: member clusters zone by zone, the host as the policy says."""
    steps, graph = cluster_steps(places, policy.host_cluster)
    stage_pools = frozenset(n.labels[policy.pool_label] for s in snapshots.values() for n in s.nodes
                            if policy.pool_label in n.labels)
    plans = {c.name: plan_cluster(snapshots[c.name], policy, now, cluster=c.name, in_stage=True) for c in places}
    return RegionPlan(stage, region, steps, plans, graph, pool_warnings(policy, stage_pools, f"any cluster of stage {stage}"))
