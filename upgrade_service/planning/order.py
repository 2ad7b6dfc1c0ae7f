"""The order constraints of a rotation, as networkx DAGs: which nodes may share waves, and what must come first.

Inside a cluster the constraints are the pool order (``poolOrder``: every wave of a pool before the
first wave of the pools that wait for it) and, with ``zoneAtATime``, zones one after another. The
planner turns them into a DAG of *segments* (the pools of one topological generation of the pool
DAG, in one zone or in all), whose topological order is the order of the plan; the packer fills
each segment's waves independently. Inside a region, member clusters go one zone at a time and the
host cluster first or last, as the policy says: another DAG, whose topological generations are the
steps of a region plan. The edges carry their reason, so ``--explain`` can say why a thing waits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import networkx as nx

from upgrade_service.planning.policy import RotationPolicy


@dataclass(frozen=True, order=True)
class Segment:
    generation: int
    zone: str  # "" when zones may share waves
    pools: tuple[str, ...]

    @property
    def label(self) -> str:
        where = f" in zone {self.zone}" if self.zone else ""
        return f"pool{'s' if len(self.pools) > 1 else ''} {', '.join(self.pools)}{where}"


def rotating_pool_graph(policy: RotationPolicy, pools: Iterable[str]) -> nx.DiGraph:
    """The pool DAG among the pools that rotate, keeping orders that run through pools that do not."""
    closure = nx.transitive_closure_dag(policy.pool_graph())
    closure.add_nodes_from(pools)
    return closure.subgraph(set(pools)).copy()


def segment_graph(policy: RotationPolicy, nodes_by_pool_zone: dict[tuple[str, str], int]) -> nx.DiGraph:
    """Segments as a DAG whose edges say why one must finish before the next starts.

    ``nodes_by_pool_zone`` counts the nodes to rotate per (pool, zone).
    """
    pools = {p for p, _ in nodes_by_pool_zone}
    pool_graph = rotating_pool_graph(policy, pools)
    zones = sorted({z for _, z in nodes_by_pool_zone}) if policy.zone_at_a_time else [""]
    graph = nx.DiGraph()
    previous: Segment | None = None
    for g, generation in enumerate(nx.topological_generations(pool_graph)):
        for zone in zones:
            present = tuple(sorted(p for p in generation if not zone or (p, zone) in nodes_by_pool_zone))
            if not present:
                continue
            segment = Segment(g, zone, present)
            graph.add_node(segment)
            if previous is not None:
                if previous.generation == g:
                    reason = f"zoneAtATime: zone {zone} follows zone {previous.zone}"
                else:
                    waits = sorted({d for p in present for d in pool_graph.predecessors(p)})
                    reason = f"poolOrder: {', '.join(present)} after {', '.join(waits)}"
                    if zone and previous.zone != zone:
                        reason += f"; zoneAtATime: zone {zone} follows zone {previous.zone}"
                graph.add_edge(previous, segment, reason=reason)
            previous = segment
    return graph


def ordered_segments(graph: nx.DiGraph) -> list[Segment]:
    return list(nx.lexicographical_topological_sort(graph, key=lambda s: (s.generation, s.zone)))


def why_segment_waits(graph: nx.DiGraph, segment: Segment) -> list[str]:
    """The reasons on the edges into ``segment`` and everything before it, nearest first."""
    reasons: list[str] = []
    current = segment
    while True:
        preds = list(graph.predecessors(current))
        if not preds:
            return reasons
        pred = preds[0]
        reasons.append(f"{current.label} waits for {pred.label} ({graph.edges[pred, current]['reason']})")
        current = pred


@dataclass(frozen=True)
class ClusterPlace:
    name: str
    zone: str | None  # None: the host cluster (regional)


def cluster_steps(clusters: Sequence[ClusterPlace], host_cluster: str) -> tuple[list[list[str]], nx.DiGraph]:
    """The steps of a region plan: member clusters one zone at a time, the host cluster first or last.

    Clusters of one step (the member clusters of one zone) rotate together; steps follow each other.
    """
    graph = nx.DiGraph()
    zones = sorted({c.zone for c in clusters if c.zone is not None})
    by_zone = {z: sorted(c.name for c in clusters if c.zone == z) for z in zones}
    hosts = [c.name for c in clusters if c.zone is None]
    graph.add_nodes_from(c.name for c in clusters)
    for before, after in zip(zones, zones[1:], strict=False):
        for a in by_zone[before]:
            for b in by_zone[after]:
                graph.add_edge(a, b, reason=f"one zone at a time: zone {after} follows zone {before}")
    if zones:
        edge_zone = zones[0] if host_cluster == "first" else zones[-1]
        for host in hosts:
            for member in by_zone[edge_zone]:
                if host_cluster == "first":
                    graph.add_edge(host, member, reason="hostCluster: first")
                else:
                    graph.add_edge(member, host, reason="hostCluster: last")
    steps = [sorted(g) for g in nx.topological_generations(graph)]
    return steps, graph
