"""Property: on any cluster and any policy, a plan obeys every rule, and a node is blocked exactly
when the eviction API (the simulator's) would refuse one of its pods right now.

Clusters are made by the simulator (pools in several zones, services with budgets of every shape,
one-at-a-time stateful sets, some pods made unready), saved as a snapshot, and some nodes marked
current by rewriting their image label, as a half-finished rotation leaves them.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from platformctl.kernel.cluster.model import LABEL_IMAGE, PodDisruptionBudget, parse_snapshot
from platformctl.kernel.cluster.selectors import IntOrPercent, LabelSelector
from tests.platformctl.emulator.helpers import template
from tests.platformctl.emulator.test_eviction_property import budget_specs
from upgrade_service.planning.plan import plan_cluster
from upgrade_service.planning.policy import parse_policy

ZONES = ("us-east-1a", "us-east-1b")
workloads = st.lists(
    st.tuples(st.sampled_from(["ReplicaSet", "StatefulSet"]), st.integers(1, 5), budget_specs,
              st.sampled_from([None, "AlwaysAllow"]), st.sampled_from([False, False, False, True]), st.booleans()),
    min_size=1, max_size=5,
)
policies = st.fixed_dictionaries({
    "maxInFlight": st.integers(1, 6),
    "maxInFlightPerPool": st.sampled_from([{}, {"ml": 1}, {"general": 2}]),
    "zoneAtATime": st.booleans(),
    "strategy": st.sampled_from(["replace", "surge"]),
    "minZoneCapacityPercent": st.sampled_from([0, 50, 75, 90]),
    "poolOrder": st.sampled_from([{}, {"general": ["ml"]}, {"ml": ["general"]}]),
})


def build(pools: list[tuple[str, str, int]], specs: list, current: set[int], seed: int) -> tuple[dict, SimulatedCluster]:
    sim = SimulatedCluster("prop", seed=seed)
    for pool, zone, count in pools:
        sim.add_pool(NodePoolSpec(f"{pool}-{zone[-1]}", zone, "m6i.xlarge", "ami-old", count, 60, "general",
                                  {"eks.amazonaws.com/nodegroup": pool}))
    for i, (kind, replicas, spec, unhealthy, second, one_at_a_time) in enumerate(specs):
        name = f"w{i}"
        notes = {"platformctl.io/rotation": "one-at-a-time"} if one_at_a_time else {}
        t = template("app", name, labels={"app": name, "group": "all" if second else name})
        t = replace(t, annotations={**t.annotations, **notes})
        sim.create_workload(kind, t, replicas)
        if spec is not None:
            kind_, value = spec
            sim.create_pdb(PodDisruptionBudget("app", name, f"u{i}", LabelSelector((("app", name),)),
                                               min_available=value if kind_ == "min" else None,
                                               max_unavailable=value if kind_ == "max" else None,
                                               unhealthy_pod_eviction_policy=unhealthy))
        if second and i == 0:
            # A second budget over every "group: all" pod: those pods sit under two budgets.
            sim.create_pdb(PodDisruptionBudget("app", "all", "u-all", LabelSelector((("group", "all"),)),
                                               max_unavailable=IntOrPercent(1)))
    sim.run_until_settled(max_seconds=600, step=5)
    doc = sim.snapshot()
    nodes = [item for item in doc["items"] if item["kind"] == "Node"]
    for i in current:
        if i < len(nodes):
            nodes[i]["metadata"]["labels"][LABEL_IMAGE] = "ami-new"
    return doc, sim


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pools=st.lists(st.tuples(st.sampled_from(["general", "ml"]), st.sampled_from(ZONES), st.integers(1, 6)),
                   min_size=1, max_size=4, unique_by=lambda p: (p[0], p[1])),
    specs=workloads,
    current=st.sets(st.integers(0, 10), max_size=4),
    fields=policies,
    seed=st.integers(0, 3),
)
def test_every_plan_obeys_the_rules(pools, specs, current, fields, seed) -> None:
    doc, sim = build(pools, specs, current, seed)
    snap = parse_snapshot(doc, "prop.json")
    policy = parse_policy({"targets": {"general": "ami-new", "ml": "ami-new"}, **fields}, "prop.yaml")
    plan = plan_cluster(snap, policy, sim.now())

    outdated = {n.name for n in snap.nodes if n.image != "ami-new"}
    placed = [n for w in plan.waves for n in w.nodes]
    blocked = {b.node: b for b in plan.blocked}
    # Every node needing rotation is in exactly one wave or blocked; no other node appears.
    assert sorted(placed + list(blocked)) == sorted(outdated)
    assert len(set(placed)) == len(placed)

    by_name = {n.name: n for n in snap.nodes}
    zone_sizes = {z: sum(1 for n in snap.nodes if n.zone == z) for z in ZONES}
    pool_wave: dict[str, list[int]] = {}
    for wave in plan.waves:
        nodes = [by_name[n] for n in wave.nodes]
        assert len(nodes) <= policy.max_in_flight
        for pool, cap in policy.max_in_flight_per_pool.items():
            assert sum(n.pool == pool for n in nodes) <= cap
        if policy.zone_at_a_time:
            assert len({n.zone for n in nodes}) == 1
        if policy.strategy == "replace":
            for zone in ZONES:
                in_flight = sum(n.zone == zone for n in nodes)
                assert zone_sizes[zone] - in_flight >= math.ceil(zone_sizes[zone] * policy.min_zone_capacity_percent / 100)
        for n in nodes:
            pool_wave.setdefault(n.pool, []).append(wave.index)
        # A one-at-a-time workload never has two of its nodes in one wave.
        placed_on = {(p.owner.name, p.node_name) for p in snap.pods if p.node_name in wave.nodes and p.owner
                     and p.annotations.get("platformctl.io/rotation") == "one-at-a-time"}
        owners = [owner for owner, _ in placed_on]
        assert len(owners) == len(set(owners))
    for pool, before in policy.pool_order.items():
        for dep in before:
            if pool in pool_wave and dep in pool_wave:
                assert max(pool_wave[dep]) < min(pool_wave[pool])

    # Blocked exactly when the eviction API refuses one of the node's pods right now.
    for name in outdated:
        refused = []
        for pod in snap.pods:
            if pod.node_name != name or pod.is_daemonset or pod.is_mirror or pod.is_finished:
                continue
            fresh = SimulatedCluster.from_snapshot(snap, clock=None)
            refused.append(fresh.evict(pod.namespace, pod.name).code)
        eviction_fails = any(code >= 400 for code in refused)
        capacity = name in blocked and blocked[name].causes[0].kind == "zone-capacity"
        assert (name in blocked and not capacity) == eviction_fails, (name, refused, blocked.get(name))
