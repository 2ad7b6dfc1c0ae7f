"""Packing the nodes of one plan segment into waves, and what a wave is estimated to take.

A segment is the set of nodes that may share waves: pools of one generation of the pool-order DAG,
and with ``zoneAtATime`` one zone (``upgrade_service.planning.order`` decides the segments and their order).
This module only packs; it neither reads clusters nor orders segments.

The estimate of one wave (documented in the README) is the largest ``nodeBootSeconds`` of its
nodes' pools, plus the drain time, plus the largest ``settleSeconds`` of the one-at-a-time workloads
on its nodes. The drain time is the larger of the longest grace period of the pods it evicts and,
for every budget, ``ceil(pods of that budget in the wave / max(disruptionsAllowed, 1)) x (longest
grace period among those pods + podStartSeconds)``: evictions are paced by budgets, not forbidden.

``pack`` fills as few waves as the hard limits allow, greedily and cheapest-first: nodes are taken
in order of what they cost a wave (settle time, boot time, then how hard their budgets press), and
each joins the open wave it makes least expensive, a fresh wave when that is as cheap. So slow
stateful nodes share waves rather than each slowing a wave of their own, nodes with the same boot
time travel together, and each budget's pods spread across waves instead of queueing in one.
A last pass moves single nodes to
other waves while that shortens the plan. ``pack_in_name_order`` is the naive packer the benchmark compares against: largest waves the limits
allow, nodes in name order.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from upgrade_service.planning.disruption import BudgetKey, NodeDisruption


@dataclass(frozen=True)
class Limits:
    max_in_flight: int
    per_pool: Mapping[str, int]
    per_zone: Mapping[str, int] | None  # replace: nodes that may be out of service per zone; surge: None
    pod_start_seconds: int
    allowed: Mapping[BudgetKey, int]  # each budget's disruptionsAllowed


class WaveDraft:
    """A wave being filled: its nodes and what they add up to."""

    __slots__ = ("nodes", "pools", "zones", "workloads", "spends", "budget_grace", "after_gone", "start", "boot", "drain",
                 "settle")

    def __init__(self) -> None:
        self.nodes: list[NodeDisruption] = []
        self.pools: Counter[str] = Counter()
        self.zones: Counter[str] = Counter()
        self.workloads: set[str] = set()
        self.spends: dict[BudgetKey, int] = {}
        self.budget_grace: dict[BudgetKey, int] = {}
        self.after_gone: set[BudgetKey] = set()
        self.start: dict[BudgetKey, int] = {}  # budget -> how long its pods' successors take to start
        self.boot = 0
        self.drain = 0
        self.settle = 0

    def blocked_by(self, node: NodeDisruption, limits: Limits) -> str | None:
        """The limit that keeps ``node`` out of this wave, or None when it fits."""
        if len(self.nodes) >= limits.max_in_flight:
            return f"maxInFlight {limits.max_in_flight}"
        cap = limits.per_pool.get(node.pool)
        if cap is not None and self.pools[node.pool] >= cap:
            return f"maxInFlightPerPool {node.pool}={cap}"
        if limits.per_zone is not None and self.zones[node.zone] >= limits.per_zone.get(node.zone, 0):
            return f"minZoneCapacityPercent: zone {node.zone} may have {limits.per_zone.get(node.zone, 0)} nodes out of service"
        for workload in node.one_at_a_time:
            if workload in self.workloads:
                return f"one-at-a-time: {workload} already has a node in this wave"
        return None

    def drain_with(self, node: NodeDisruption, limits: Limits) -> int:
        """The wave's drain time with ``node`` in it (``budget_drain_seconds`` for every budget, inlined: the packer's
        innermost loop)."""
        drain = max(self.drain, node.max_grace, node.sequence_seconds)
        allowed, default = limits.allowed, limits.pod_start_seconds
        spends, graces, starts, after_gone = self.spends, self.budget_grace, self.start, self.after_gone
        for key, count in node.spends.items():
            grace = node.budget_grace[key]
            other = graces.get(key, 0)
            if other > grace:
                grace = other
            start = node.start.get(key, default)
            other = starts.get(key, 0)
            if other > start:
                start = other
            room = allowed.get(key, 1)
            rounds = -(-(spends.get(key, 0) + count) // (room if room > 1 else 1))
            step = start + grace if key in after_gone or key in node.after_gone else start
            term = (rounds - 1) * step + grace
            if term > drain:
                drain = term
        return drain

    def cost_with(self, node: NodeDisruption, limits: Limits) -> int:
        return max(self.boot, node.boot_seconds) + self.drain_with(node, limits) + max(self.settle, node.settle_seconds)

    @property
    def cost(self) -> int:
        return self.boot + self.drain + self.settle

    def add(self, node: NodeDisruption, limits: Limits) -> None:
        self.drain = self.drain_with(node, limits)
        self.boot = max(self.boot, node.boot_seconds)
        self.settle = max(self.settle, node.settle_seconds)
        self.nodes.append(node)
        self.pools[node.pool] += 1
        self.zones[node.zone] += 1
        self.workloads.update(node.one_at_a_time)
        spends, graces, starts, default = self.spends, self.budget_grace, self.start, limits.pod_start_seconds
        for key, count in node.spends.items():
            spends[key] = spends.get(key, 0) + count
            grace = node.budget_grace[key]
            if grace > graces.get(key, -1):  # set even when 0: every budget the wave spends has a grace
                graces[key] = grace
            start = node.start.get(key, default)
            if start > starts.get(key, 0):
                starts[key] = start
            if key in node.after_gone:
                self.after_gone.add(key)

    def sets_cost(self, node: NodeDisruption, limits: Limits) -> bool:
        """Whether ``node`` may set this wave's boot, drain or settle time (else the wave is no shorter without it)."""
        if node.max_grace >= self.drain or node.sequence_seconds >= self.drain:
            return True
        for mine, wave, of in ((node.boot_seconds, self.boot, "boot_seconds"), (node.settle_seconds, self.settle,
                                                                              "settle_seconds")):
            if mine >= wave and wave > 0 and sum(1 for n in self.nodes if getattr(n, of) >= wave) == 1:
                return True  # the only node that takes this long
        for key in node.spends:
            term = budget_drain_seconds(self.spends[key], limits.allowed.get(key, 1), self.budget_grace[key],
                                        key in self.after_gone, self.start.get(key, limits.pod_start_seconds))
            if term >= self.drain:
                return True
        return False

    def pacing_budget(self, limits: Limits) -> tuple[BudgetKey, int] | None:
        """The budget whose pacing sets this wave's drain time, with its rounds, when it takes more than one."""
        worst: tuple[int, BudgetKey, int] | None = None
        for key, count in self.spends.items():
            rounds = math.ceil(count / max(limits.allowed.get(key, 1), 1))
            term = budget_drain_seconds(count, limits.allowed.get(key, 1), self.budget_grace[key], key in self.after_gone,
                                        self.start.get(key, limits.pod_start_seconds))
            if rounds > 1 and (worst is None or term > worst[0]):
                worst = (term, key, rounds)
        return (worst[1], worst[2]) if worst else None


def budget_drain_seconds(count: int, allowed: int, grace: int, after_gone: bool, start: int) -> int:
    """How long evicting ``count`` pods of one budget takes, ``allowed`` at a time: each round waits for the last
    round's successors to be Ready (their start; and first the old pods' grace period when a StatefulSet makes them
    again only once those are gone), and the node is drained when the last evicted pod's grace period has run."""
    rounds = math.ceil(count / max(allowed, 1))
    return (rounds - 1) * (start + (grace if after_gone else 0)) + grace


def min_waves(nodes: list[NodeDisruption], limits: Limits) -> int:
    """The fewest waves the hard limits allow for ``nodes``."""
    if not nodes:
        return 0
    need = math.ceil(len(nodes) / limits.max_in_flight)
    for pool, count in Counter(n.pool for n in nodes).items():
        cap = limits.per_pool.get(pool)
        if cap:
            need = max(need, math.ceil(count / cap))
    if limits.per_zone is not None:
        for zone, count in Counter(n.zone for n in nodes).items():
            need = max(need, math.ceil(count / max(limits.per_zone.get(zone, 1), 1)))
    workloads = Counter(w for n in nodes for w in n.one_at_a_time)
    return max(need, max(workloads.values(), default=0))


def _weight(node: NodeDisruption, limits: Limits) -> tuple[int, int, float, int, str]:
    pressure = max((c / max(limits.allowed.get(k, 1), 1) for k, c in node.spends.items()), default=0.0)
    return (-node.settle_seconds, -node.boot_seconds, -pressure, -len(node.one_at_a_time), node.name)


def pack(nodes: Iterable[NodeDisruption], limits: Limits) -> list[WaveDraft]:
    """Pack ``nodes`` (all of one segment) into waves; see the module docstring."""
    todo = sorted(nodes, key=lambda n: _weight(n, limits))
    target = min_waves(todo, limits)
    base_boot = min((n.boot_seconds for n in todo), default=0)
    waves: list[WaveDraft] = []
    open_waves: list[WaveDraft] = []  # waves with room left
    for node in todo:
        best: WaveDraft | None = None
        best_delta = 0
        for wave in open_waves:
            if wave.blocked_by(node, limits) is not None:
                continue
            delta = wave.cost_with(node, limits) - wave.cost
            if best is None or delta < best_delta or (delta == best_delta and len(wave.nodes) < len(best.nodes)):
                best, best_delta = wave, delta
                if delta == 0:
                    break
        # A fresh wave: while fewer than the minimum are open its boot time is paid anyway.
        fresh = WaveDraft().cost_with(node, limits) - (base_boot if len(waves) < target else 0)
        if best is None or fresh < best_delta or (fresh == best_delta and len(waves) < target):
            best = WaveDraft()
            waves.append(best)
            open_waves.append(best)
        best.add(node, limits)
        if len(best.nodes) >= limits.max_in_flight:
            open_waves.remove(best)
    return improve(waves, limits)


def rebuild(nodes: Iterable[NodeDisruption], limits: Limits) -> WaveDraft:
    wave = WaveDraft()
    for node in nodes:
        wave.add(node, limits)
    return wave


def move_gain(node: NodeDisruption, source: WaveDraft, target: WaveDraft, limits: Limits,
              saving: int | None = None) -> tuple[int, int]:
    """(seconds ``target`` would grow, seconds ``source`` would shrink) if ``node`` moved between them."""
    if saving is None:
        saving = source.cost - rebuild((n for n in source.nodes if n is not node), limits).cost
    return target.cost_with(node, limits) - target.cost, saving


def improve(waves: list[WaveDraft], limits: Limits, passes: int = 3) -> list[WaveDraft]:
    """Move single nodes to other waves of the segment while that shortens the plan.

    Only a node that sets its wave's boot, drain or settle time can shorten its wave by leaving, so
    the others are passed over; a wave left empty is dropped.
    """
    for _ in range(passes):
        moved = False
        for source in list(waves):
            for node in list(source.nodes):
                if not source.sets_cost(node, limits):
                    continue  # the wave's times are set by other nodes: it would be no shorter without this one
                rest = rebuild((n for n in source.nodes if n is not node), limits)
                saving = source.cost - (rest.cost if rest.nodes else 0)
                if saving <= 0:
                    continue
                best, best_growth = None, saving
                for target in waves:
                    if target is source or target.blocked_by(node, limits) is not None:
                        continue
                    growth = target.cost_with(node, limits) - target.cost
                    if growth < best_growth:
                        best, best_growth = target, growth
                if best is None:
                    continue
                best.add(node, limits)
                index = waves.index(source)
                if rest.nodes:
                    waves[index] = source = rest
                else:
                    waves.pop(index)
                moved = True
                if not rest.nodes:
                    break
        if not moved:
            break
    return waves


def pack_in_name_order(nodes: Iterable[NodeDisruption], limits: Limits) -> list[WaveDraft]:
    """The naive plan: each wave takes, in name order, every node the hard limits still let in."""
    waves: list[WaveDraft] = []
    left = sorted(nodes, key=lambda n: n.name)
    while left:
        wave = WaveDraft()
        rest = []
        for node in left:
            if len(wave.nodes) < limits.max_in_flight and wave.blocked_by(node, limits) is None:
                wave.add(node, limits)
            else:
                rest.append(node)
        waves.append(wave)
        left = rest
    return waves
