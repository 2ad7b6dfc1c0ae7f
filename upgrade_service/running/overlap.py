"""Waves that overlap: whether the next wave may start while earlier ones are still open, by what the cluster and the
groups show now. It decides; the executor acts.

An open wave has drained and terminated its nodes and waits for its replacements, its evicted pods and its
one-at-a-time workloads' settle time. The next wave may start beside it when every limit holds at this instant
(``upgrade_service.planning.schedule`` models the same rules for the plan's estimate):

- its pools are the open waves' pools, and a wave of those pools has already come through in this run (its new
  nodes Ready, its pods back): a pool's first wave proves its image alone, and ``poolOrder`` holds because a new
  pool starts only when every open wave has its nodes replaced and its pods back. A wave whose one-at-a-time
  workloads are only settling holds nothing but their own next pods (below);
- ``maxInFlight`` and ``maxInFlightPerPool`` count what is out of service: the nodes the run cordoned and has not
  terminated, each group's capacity that is not (yet) a Ready node (replacements booting, launches the group still
  owes; not the surge nodes the run added), and the next wave's nodes;
- ``minZoneCapacityPercent`` (strategy ``replace``) counts the same way per zone: a booting node is absent;
- budgets are the eviction API's to keep: the drain waits on 429 as it always does;
- a one-at-a-time workload whose pod an open wave moved and that is not back, or is settling, keeps its next pod
  where it is: ``carried`` hands the open waves' record of them to the next drain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from platformctl.kernel.cluster.model import Node
from platformctl.kernel.nodegroups import GroupState
from upgrade_service.journal.rotation import RunState, WaveState
from upgrade_service.planning.plan import Wave
from upgrade_service.planning.policy import RotationPolicy


@dataclass(frozen=True)
class Carried:
    """One-at-a-time workloads the open waves moved: on the way back (workload -> the eviction as journalled), and
    settling (workload -> until when). What the next drain holds their next pod back for."""

    in_flight: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    settling: dict[str, float] = field(default_factory=dict)


def carried(waves: Iterable[WaveState]) -> Carried:
    """The open waves' one-at-a-time workloads, oldest wave first: a later record of a workload is the one that holds
    (a later wave's drain saw it back and settling, or moved it again)."""
    out = Carried()
    for wave in waves:
        for workload, until in wave.settling.items():
            out.in_flight.pop(workload, None)
            out.settling[workload] = max(out.settling.get(workload, 0.0), until)
        for workload, eviction in wave.in_flight.items():  # moved after its last settle, if it had one
            out.in_flight[workload] = eviction
    return out


@dataclass(frozen=True)
class OutOfService:
    """What is out of service now: cordoned and not terminated, or an instance not (yet) a Ready node."""

    pools: Counter[str]
    zones: Counter[str]
    zone_sizes: Counter[str]  # every node and every booting instance, by zone

    @property
    def total(self) -> int:
        return sum(self.pools.values())


def out_of_service(nodes: Sequence[Node], cordoned: Iterable[str], group_of: Mapping[str, str],
                   groups: Mapping[str, GroupState], added: Mapping[str, int], pool_label: str) -> OutOfService:
    """``added``: group -> capacity the run added and has not given back (surge nodes are no node missing)."""
    held = set(cordoned)
    members = {name: frozenset(state.instances) for name, state in groups.items()}
    pools: Counter[str] = Counter()
    zones: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    ready: Counter[str] = Counter()
    pool_of: dict[str, str] = {}
    zones_of: dict[str, set[str]] = {}
    for node in nodes:
        pool = node.labels.get(pool_label, "")
        zone = node.zone or ""
        sizes[zone] += 1
        group = group_of.get(node.name)
        if group is not None:
            pool_of.setdefault(group, pool)
            zones_of.setdefault(group, set()).add(zone)
            member = node.instance_id in members.get(group, ())
            if node.ready and member:  # a terminated instance's node that has not left yet is no capacity
                ready[group] += 1
        if node.name in held:
            pools[pool] += 1
            zones[zone] += 1
    for name, state in groups.items():
        booting = state.desired - added.get(name, 0) - ready[name]  # replacements not Ready yet, and launches owed
        if booting <= 0:
            continue
        pools[pool_of.get(name, "")] += booting
        for where in zones_of.get(name, ()):  # a group across zones: absent from each of them, to be safe
            zones[where] += booting
            sizes[where] += booting
    return OutOfService(pools, zones, sizes)


def why_wait(wave: Wave, state: RunState, out: OutOfService, policy: RotationPolicy, nodes: Sequence[Node]) -> str | None:
    """Why ``wave`` may not start beside the open waves of ``state`` now, or None when it may."""
    pools = frozenset(wave.segment.pools)
    working = [w for w in state.open_waves if not w.back]  # the rest only settle: they hold their workloads alone
    other = next((w for w in working if frozenset(w.started.pools) != pools), None)
    if other is not None:
        return f"wave {other.number} of other pools ({', '.join(other.started.pools)}) is still open"
    if working and not state.proven(pools):
        return f"no wave of pools {', '.join(sorted(pools))} has come through yet: the first proves the image"
    if out.total + len(wave.nodes) > policy.max_in_flight:
        return f"maxInFlight {policy.max_in_flight}: {out.total} node(s) out of service and {len(wave.nodes)} in the wave"
    names = set(wave.nodes)
    mine = [n for n in nodes if n.name in names]
    for pool, count in sorted(Counter(n.labels.get(policy.pool_label, "") for n in mine).items()):
        cap = policy.max_in_flight_per_pool.get(pool)
        if cap is not None and out.pools[pool] + count > cap:
            return f"maxInFlightPerPool {pool}={cap}: {out.pools[pool]} out of service and {count} in the wave"
    if policy.strategy == "replace":
        keep = policy.min_zone_capacity_percent
        for zone, count in sorted(Counter(n.zone or "" for n in mine).items()):
            if out.zones[zone] + count > out.zone_sizes[zone] * (100 - keep) // 100:
                return (f"minZoneCapacityPercent {keep}: zone {zone or '-'} has {out.zones[zone]} of "
                        f"{out.zone_sizes[zone]} nodes out of service, booting ones counted absent")
    return None
