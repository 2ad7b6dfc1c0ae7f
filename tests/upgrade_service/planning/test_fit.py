"""Every wave's evicted pods have somewhere to run: the plan's scheduling simulation, and the rotation it leads to.

Each scenario pins workloads to a pool under a tight budget, plans it (what ``rotate plan`` shows),
then rotates it with the executor against the simulator, whose scheduler applies the same filters,
and reads what a user would: the plan's waves and reasons, the event log (budgets, pods lost or
deleted), and how long any pod waited for a node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from platformctl.kernel.cluster.model import parse_snapshot
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import NEW, OLD, cluster
from tests.upgrade_service.rotation import NO_HARM, executor, harm, longest_pending, new_image, rotate, service
from upgrade_service.journal.rotation import read_state
from upgrade_service.planning.plan import RotationPlan, plan_cluster

BOOT = 120.0
GRACE = 30
POOL = "eks.amazonaws.com/nodegroup"
ANTI_HOST = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}}


def plan_of(sim: Any, policy: dict[str, Any], tmp_path: Path) -> RotationPlan:
    """The plan the executor starts from: the cluster as the API shows it, each pool's new nodes as its group's launch
    template makes them, and the room its group has (what ``rotate plan --context`` shows)."""
    run = executor(sim, tmp_path, {"durations": {"nodeBootSeconds": int(BOOT), "podStartSeconds": 10}, **policy})
    plan = run.plan(run.read(first=True))
    # From a snapshot (``rotate plan --snapshot``) the plan is the same wherever the groups' room does not matter.
    if policy.get("strategy") == "replace" and not any((run.capacity(run.read(), plan.policy).room or {}).values()):
        again = plan_cluster(parse_snapshot(sim.snapshot()), plan.policy, sim.now()).to_dict()
        assert {k: v for k, v in plan.to_dict().items() if k not in ("cluster", "source")} == \
            {k: v for k, v in again.items() if k not in ("cluster", "source")}
    return plan


def system_waves(plan: RotationPlan) -> list[list[str]]:
    return [[n for n in w.nodes if plan.view.by_name[n].pool == "system"] for w in plan.waves
            if any(plan.view.by_name[n].pool == "system" for n in w.nodes)]


def issue_cluster() -> Any:
    """The cluster the issue hung on: 3 system, 30 general and 6 ml nodes in one zone, a 3-replica service pinned to
    the system pool with a budget of minAvailable 2, and services on the other pools."""
    sim = cluster({"system": 3, "general": 30, "ml": 6}, boot=BOOT)
    service(sim, "coredns", 3, ns="kube-system", min_available=2, node_selector={POOL: "system"})
    service(sim, "web", 60, min_available=54, node_selector={POOL: "general"})
    service(sim, "trainer", 6, min_available=5, node_selector={POOL: "ml"})
    sim.run_until_settled()
    new_image(sim)
    return sim


ISSUE_POLICY = {"strategy": "replace", "maxInFlight": 6, "minZoneCapacityPercent": 80,
                "poolOrder": {"general": ["system"], "ml": ["general"]}}


def test_the_wave_that_took_every_system_node_is_split_and_the_rotation_finishes(tmp_path: Path) -> None:
    sim = issue_cluster()
    plan = plan_of(sim, ISSUE_POLICY, tmp_path)
    naive = plan_cluster(parse_snapshot(sim.snapshot()), plan.policy, sim.now(), naive=True)
    # Budgets and limits alone would take all three system nodes at once: the service's three pods at once.
    assert max(len(w) for w in system_waves(naive)) == 3
    # The simulation keeps one system node out of every wave, so an evicted replica always has a system node to go to.
    assert max(len(w) for w in system_waves(plan)) <= 2
    split = next(w for w in plan.waves if any("split" in r for r in w.reasons))
    assert any("kube-system/coredns" in r for r in split.reasons)
    assert all(not w.stuck for w in plan.waves)
    start = sim.now()
    outcome = rotate(sim, tmp_path, {**ISSUE_POLICY, "durations": {"nodeBootSeconds": int(BOOT), "podStartSeconds": 10}})
    assert outcome.status == "done", outcome.reason
    assert harm(sim) == NO_HARM
    assert all(n.image == NEW for n in sim.list_nodes())
    waited, pod = longest_pending(sim, start)
    assert waited <= BOOT, f"{pod} waited {waited} s for a node"


def one_replica_a_node(sim: Any, pool: str = "db", replicas: int = 4) -> None:
    """A service whose every replica needs most of a node (so no node takes two) and that can lose one at a time."""
    service(sim, "db", replicas, min_available=replicas - 1, cpu=6000, grace=GRACE, node_selector={POOL: pool})
    sim.run_until_settled()
    new_image(sim)


@pytest.mark.parametrize("strategy", ["replace", "surge"])
def test_a_pool_that_can_only_be_rotated_one_node_at_a_time_is_planned_so_and_says_why(strategy: str, tmp_path: Path) -> None:
    sim = cluster({"db": 4}, boot=BOOT, max_size=4)  # no room to surge
    one_replica_a_node(sim)
    policy = {"strategy": strategy, "maxInFlight": 4, "minZoneCapacityPercent": 0}
    plan = plan_of(sim, policy, tmp_path)
    assert [len(w.nodes) for w in plan.waves] == [1, 1, 1, 1]
    assert any(r.startswith("split") for r in plan.waves[0].reasons)
    # Each wave's replica waits for the replacement: the budget can afford that one, and the wave says so.
    for wave in plan.waves:
        assert len(wave.waiting) == 1 and wave.waiting[0].startswith("app/db-") and not wave.stuck
        assert wave.start_seconds == 10  # the waiting pod starts once the replacement is Ready
    explained = "\n".join(plan.explain(plan.waves[0].nodes[0]))
    assert "a replacement node of pool db (once it boots): nowhere until then" in explained
    assert "Insufficient cpu" in explained
    start = sim.now()
    outcome = rotate(sim, tmp_path, {**policy, "durations": {"nodeBootSeconds": int(BOOT), "podStartSeconds": 10}})
    assert outcome.status == "done", outcome.reason
    assert harm(sim) == NO_HARM and all(n.image == NEW for n in sim.list_nodes())
    # A replica with nowhere else to go waits for its node's replacement: its old pod's grace period, then the boot.
    waited, pod = longest_pending(sim, start)
    assert waited <= GRACE + BOOT + 15, f"{pod} waited {waited} s"
    assert [len(w["nodes"]) for w in outcome.report["waves"]] == [1, 1, 1, 1]


def test_under_surge_with_room_the_pinned_replicas_move_to_the_surge_nodes_and_never_wait(tmp_path: Path) -> None:
    sim = cluster({"db": 4}, boot=BOOT)  # no ceiling: a surge node for every node of the wave
    one_replica_a_node(sim)
    policy = {"strategy": "surge", "maxInFlight": 4}
    plan = plan_of(sim, policy, tmp_path)
    assert [len(w.nodes) for w in plan.waves] == [4] and not plan.waves[0].waiting
    start = sim.now()
    outcome = rotate(sim, tmp_path, {**policy, "durations": {"nodeBootSeconds": int(BOOT), "podStartSeconds": 10}})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    waited, pod = longest_pending(sim, start)
    assert waited <= 1, f"{pod} waited {waited} s"


def two_replicas_a_node(sim: Any) -> None:
    """Two replicas on each node of the pool, a budget that lets one go at a time, and no room elsewhere."""
    service(sim, "db", 4, min_available=3, cpu=3500, grace=GRACE, node_selector={POOL: "db"})
    sim.run_until_settled()
    new_image(sim)


def test_a_replace_wave_whose_pods_cannot_wait_gets_a_surge_node_when_its_group_has_room(tmp_path: Path) -> None:
    sim = cluster({"db": 2}, boot=BOOT, max_size=3)
    two_replicas_a_node(sim)
    policy = {"strategy": "replace", "maxInFlight": 2, "minZoneCapacityPercent": 0}
    plan = plan_of(sim, policy, tmp_path)
    assert [len(w.nodes) for w in plan.waves] == [1, 1]
    # Draining one node alone evicts two replicas that could only come back on its replacement, which boots after
    # the drain: one surge node first, which takes them both.
    assert all(w.surge == {"db": 1} and w.planned_surge and not w.waiting for w in plan.waves)
    assert "surge node(s) of pool db first" in " ".join(plan.waves[0].reasons)
    start = sim.now()
    outcome = rotate(sim, tmp_path, {**policy, "durations": {"nodeBootSeconds": int(BOOT), "podStartSeconds": 10}})
    assert outcome.status == "done", outcome.reason
    assert harm(sim) == NO_HARM and sim.pool("db").desired == 2 and len(sim.list_nodes()) == 2
    waited, pod = longest_pending(sim, start)
    assert waited <= 1, f"{pod} waited {waited} s"


def test_without_room_that_wave_is_planned_alone_with_its_reason_and_the_run_stops_within_a_minute(tmp_path: Path) -> None:
    sim = cluster({"db": 2}, boot=BOOT, max_size=2)
    two_replicas_a_node(sim)
    policy = {"strategy": "replace", "maxInFlight": 2, "minZoneCapacityPercent": 0}
    plan = plan_of(sim, policy, tmp_path)
    assert [len(w.nodes) for w in plan.waves] == [1, 1]
    assert plan.waves[0].stuck and "PodDisruptionBudget app/db allows 1 disruption" in plan.waves[0].stuck
    assert any("cannot be drained without pods waiting" in w for w in plan.warnings)
    outcome = rotate(sim, tmp_path, {**policy, "durations": {"nodeBootSeconds": int(BOOT), "podStartSeconds": 10}})
    assert outcome.status == "halted"
    failed = outcome.report["nodes_failed"]
    assert len(failed) == 1 and "app/db-" in failed[0]["reason"] and "Insufficient cpu" in failed[0]["reason"]
    state = read_state(SQLiteStore(tmp_path / "state.db"), "test")
    first_eviction = min(e.time for e in sim.events if e.kind == "PodEvicted")
    assert state.halted is not None and state.halted.at - first_eviction <= 60
    assert harm(sim) == NO_HARM
    assert sim.pool("db").desired == 2 and sum(1 for n in sim.list_nodes() if n.image == OLD) == 2


@pytest.mark.parametrize("strategy", ["replace", "surge"])
def test_required_anti_affinity_one_replica_a_host_moves_one_node_at_a_time_or_onto_surge_nodes(strategy: str,
                                                                                                  tmp_path: Path) -> None:
    sim = cluster({"db": 3, "general": 3}, boot=BOOT, max_size=3 if strategy == "replace" else None)
    service(sim, "db", 3, min_available=2, grace=GRACE, node_selector={POOL: "db"}, kind="StatefulSet", spec=ANTI_HOST)
    service(sim, "web", 6, min_available=4, node_selector={POOL: "general"})
    sim.run_until_settled()
    assert len({p.node_name for p in sim.list_pods(namespace="app") if p.labels["app"] == "db"}) == 3
    new_image(sim)
    policy = {"strategy": strategy, "maxInFlight": 3, "minZoneCapacityPercent": 0, "poolOrder": {"general": ["db"]}}
    plan = plan_of(sim, policy, tmp_path)
    db_waves = [w for w in plan.waves if "db" in w.segment.pools]
    if strategy == "replace":
        # Every db node holds a replica that only an empty host takes: one db node at a time, each replica waiting
        # for its node's replacement (the budget allows that one).
        assert [len(w.nodes) for w in db_waves] == [1, 1, 1]
        assert all(len(w.waiting) == 1 for w in db_waves)
        why = "\n".join(plan.explain(db_waves[0].nodes[0]))
        assert "didn't match pod anti-affinity rules" in why
    else:
        assert [len(w.nodes) for w in db_waves] == [3] and not db_waves[0].waiting  # three surge hosts take them
    start = sim.now()
    outcome = rotate(sim, tmp_path, {**policy, "durations": {"nodeBootSeconds": int(BOOT), "podStartSeconds": 10}})
    assert outcome.status == "done", outcome.reason
    assert harm(sim) == NO_HARM
    # The simulator's scheduler honoured the anti-affinity too: never two replicas on one host.
    db_nodes = [p.node_name for p in sim.list_pods(namespace="app") if p.labels["app"] == "db"]
    assert len(db_nodes) == 3 and len(set(db_nodes)) == 3
    waited, pod = longest_pending(sim, start)
    assert waited <= (GRACE + BOOT + 15 if strategy == "replace" else 1), f"{pod} waited {waited} s"


def test_zone_spread_do_not_schedule_keeps_a_zones_replicas_waiting_for_its_own_replacements(tmp_path: Path) -> None:
    from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster

    sim = SimulatedCluster("host")
    for zone in ("us-east-1a", "us-east-1b", "us-east-1c"):
        sim.add_pool(NodePoolSpec(f"system-{zone[-1]}", zone, "m6i.2xlarge", OLD, 2, BOOT, "system", {"role": "system"}))
    spread = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                             "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "api"}}}]}
    service(sim, "api", 6, min_available=4, node_selector={"role": "system"}, spec=spread)
    sim.run_until_settled()
    assert sorted(sum(1 for p in sim.list_pods(namespace="app") if p.node_name and sim.get_node(p.node_name).zone == z)
                  for z in ("us-east-1a", "us-east-1b", "us-east-1c")) == [2, 2, 2]
    new_image(sim)
    plan = plan_of(sim, {"strategy": "replace", "maxInFlight": 2, "minZoneCapacityPercent": 0}, tmp_path)
    first = plan.waves[0]
    assert len(first.nodes) == 2 and first.segment.zone == "us-east-1a"
    # Moving zone a's two replicas to b or c would make the skew 2: they wait for zone a's new nodes, which the
    # budget (two disruptions allowed) affords.
    assert len(first.waiting) == 2 and not first.stuck
    assert "didn't match pod topology spread constraints" in "\n".join(plan.explain(first.nodes[0]))


def test_a_stuck_drain_recovers_with_a_surge_node_once_its_group_has_room(tmp_path: Path) -> None:
    """The plan saw that the wave's pods would have nowhere to go (no room to surge) and planned it alone; meanwhile
    an operator raised the group's maximum: the drain notices its evicted pod is Unschedulable, adds a surge node,
    and goes on, its capacity given back when the node it stands in for is terminated."""
    sim = cluster({"db": 2}, boot=BOOT, max_size=2)
    two_replicas_a_node(sim)
    policy = {"strategy": "replace", "maxInFlight": 2, "minZoneCapacityPercent": 0,
              "durations": {"nodeBootSeconds": int(BOOT), "podStartSeconds": 10}}
    run = executor(sim, tmp_path, policy)
    raised: list[float] = []

    def operator(view: Any) -> None:
        if view.phase == "cordon" and not raised:
            sim.pool("db").max_size = 3
            raised.append(sim.now())

    run._progress = operator
    outcome = run.run()
    assert outcome.status == "done", outcome.reason
    assert harm(sim) == NO_HARM
    assert sim.pool("db").desired == 2 and all(n.image == NEW for n in sim.list_nodes())
    state = read_state(SQLiteStore(tmp_path / "state.db"), "test")
    surges = [w for w in state.waves.values() if w.extra_surge]
    assert surges, "no surge was added for the stuck drain"
    # The pod that had nowhere to go waited for the surge node's boot, not for drainTimeoutSeconds.
    waited, pod = longest_pending(sim, raised[0])
    assert waited <= 60 + BOOT + 15, f"{pod} waited {waited} s"
