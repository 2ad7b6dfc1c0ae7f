"""The planner's rules, each proved on a hand-made snapshot."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.upgrade_service.kube import STAMP, node, pdb, pod, policy, snapshot
from upgrade_service.planning.order import ClusterPlace
from upgrade_service.planning.plan import plan_cluster, plan_region

NOW = datetime.fromisoformat(STAMP.replace("Z", "+00:00")).timestamp()


def waves_of(plan):
    return [list(w.nodes) for w in plan.waves]


def blocked_of(plan):
    return {b.node: b for b in plan.blocked}


# ------------------------------------------------------------------ which nodes, once each


def test_only_outdated_nodes_of_target_pools_appear_each_exactly_once() -> None:
    snap = snapshot(
        node("a", image="ami-old"), node("b", image="ami-new"), node("c", pool="system", image="ami-old"),
        node("d", image="ami-old"), node("e", image="ami-older", unschedulable=True), node("f", ready=False),
    )
    plan = plan_cluster(snap, policy(), NOW)
    placed = [n for w in plan.waves for n in w.nodes]
    assert sorted(placed) == ["a", "d", "e", "f"]  # b is current, c's pool is not a target
    assert len(placed) == len(set(placed)) and not plan.blocked
    assert plan.to_dict()["nodes_to_rotate"] == 4


def test_custom_pool_and_image_labels() -> None:
    raw = node("a")
    raw["metadata"]["labels"].update({"team.io/pool": "general", "team.io/image": "v1"})
    plan = plan_cluster(snapshot(raw, node("b")), policy(poolLabel="team.io/pool", imageLabel="team.io/image",
                                                         targets={"general": "v2"}), NOW)
    assert [n for w in plan.waves for n in w.nodes] == ["a"]  # b has no team.io/pool label


# ------------------------------------------------------------------ hard limits


def test_max_in_flight_and_per_pool_limits() -> None:
    nodes = [node(f"g{i}") for i in range(7)] + [node(f"m{i}", pool="ml") for i in range(5)]
    plan = plan_cluster(snapshot(*nodes), policy(targets={"general": "ami-new", "ml": "ami-new"}, maxInFlight=4,
                                                 maxInFlightPerPool={"ml": 2}), NOW)
    for w in plan.waves:
        assert len(w.nodes) <= 4
        assert sum(n.startswith("m") for n in w.nodes) <= 2
    assert sum(len(w.nodes) for w in plan.waves) == 12


def test_pool_order_is_a_dag_respected_by_waves() -> None:
    nodes = [node(f"s{i}", pool="system") for i in range(3)] + [node(f"g{i}") for i in range(3)]
    nodes += [node(f"m{i}", pool="ml") for i in range(3)]
    pol = policy(targets={"system": "ami-new", "general": "ami-new", "ml": "ami-new"},
                 poolOrder={"ml": ["general"], "general": ["system"]}, maxInFlight=10)
    plan = plan_cluster(snapshot(*nodes), pol, NOW)
    wave = {n: w.index for w in plan.waves for n in w.nodes}
    assert max(wave[f"s{i}"] for i in range(3)) < min(wave[f"g{i}"] for i in range(3))
    assert max(wave[f"g{i}"] for i in range(3)) < min(wave[f"m{i}"] for i in range(3))
    assert "poolOrder: ml after general" in "\n".join(plan.explain("m0"))


def test_pool_order_through_a_pool_that_does_not_rotate_still_holds() -> None:
    nodes = [node("s0", pool="system"), node("m0", pool="ml")]
    pol = policy(targets={"system": "ami-new", "ml": "ami-new"}, poolOrder={"ml": ["general"], "general": ["system"]})
    plan = plan_cluster(snapshot(*nodes), pol, NOW)
    assert waves_of(plan) == [["s0"], ["m0"]]
    assert any("poolOrder: pool 'general' is not in this cluster" in w for w in plan.warnings)


def test_zone_at_a_time_puts_one_zone_in_each_wave() -> None:
    nodes = [node(f"{z}{i}", zone=f"us-east-1{z}") for z in "abc" for i in range(2)]
    plan = plan_cluster(snapshot(*nodes), policy(zoneAtATime=True), NOW)
    zones = [{n[0] for n in w} for w in waves_of(plan)]
    assert all(len(z) == 1 for z in zones)
    assert [z.pop() for z in zones] == ["a", "b", "c"]  # zone after zone, never back
    together = plan_cluster(snapshot(*nodes), policy(zoneAtATime=False), NOW)
    assert waves_of(together) == [sorted(n["metadata"]["name"] for n in nodes)]


def test_replace_keeps_min_zone_capacity_out_of_flight() -> None:
    # 10 nodes in the zone (2 of them current), 80% must stay in service: 2 in flight at most.
    nodes = [node(f"n{i}") for i in range(8)] + [node("x1", image="ami-new"), node("x2", image="ami-new")]
    plan = plan_cluster(snapshot(*nodes), policy(minZoneCapacityPercent=80, strategy="replace"), NOW)
    assert [len(w) for w in waves_of(plan)] == [2, 2, 2, 2]
    surge = plan_cluster(snapshot(*nodes), policy(minZoneCapacityPercent=80, strategy="surge"), NOW)
    assert [len(w) for w in waves_of(surge)] == [8]


def test_zone_too_small_for_the_capacity_rule_is_blocked_with_that_reason() -> None:
    plan = plan_cluster(snapshot(node("a"), node("b"), node("c")), policy(minZoneCapacityPercent=90, strategy="replace"), NOW)
    assert not plan.waves
    assert set(blocked_of(plan)) == {"a", "b", "c"}
    assert "minZoneCapacityPercent 90%" in plan.blocked[0].reason and "surge" in plan.blocked[0].reason


# ------------------------------------------------------------------ one-at-a-time


def test_one_at_a_time_workload_never_has_two_nodes_in_a_wave_and_settles() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    kv = [pod(f"kv-{i}", on=f"n{i}", ns="kv", labels={"app": "kvstore"}, owner=("StatefulSet", "kv")) for i in range(3)]
    pol = policy(workloadRules=[{"selector": {"matchLabels": {"app": "kvstore"}}, "namespaces": ["kv"],
                                 "mode": "one-at-a-time", "settleSeconds": 600}])
    plan = plan_cluster(snapshot(*nodes, *kv), pol, NOW)
    for w in plan.waves:
        assert sum(n in ("n0", "n1", "n2") for n in w.nodes) <= 1
    assert len(plan.waves) == 3
    settled = [w for w in plan.waves if w.settle_seconds]
    assert len(settled) == 3 and all(w.settle_seconds == 600 for w in settled)
    assert "its nodes rotate in turn" in "\n".join(plan.explain("n1"))


def test_rule_namespaces_limit_where_it_applies() -> None:
    nodes = [node("n0"), node("n1")]
    pods = [pod("kv-0", on="n0", ns="other", labels={"app": "kvstore"}), pod("kv-1", on="n1", ns="other", labels={"app": "kvstore"})]
    pol = policy(workloadRules=[{"selector": {"matchLabels": {"app": "kvstore"}}, "namespaces": ["kv"], "mode": "one-at-a-time"}])
    assert waves_of(plan_cluster(snapshot(*nodes, *pods), pol, NOW)) == [["n0", "n1"]]


def test_annotations_declare_the_protocol_and_the_operator_rule_wins() -> None:
    nodes = [node(f"n{i}") for i in range(3)]
    notes = {"platformctl.io/rotation": "one-at-a-time", "platformctl.io/settle-seconds": "120"}
    pods = [pod(f"db-{i}", on=f"n{i}", ns="db", labels={"app": "db"}, owner=("StatefulSet", "db"), annotations=notes) for i in range(3)]
    plan = plan_cluster(snapshot(*nodes, *pods), policy(), NOW)
    assert len(plan.waves) == 3 and {w.settle_seconds for w in plan.waves} == {120}
    override = policy(workloadRules=[{"selector": {"matchLabels": {"app": "db"}}, "mode": "skip"}])
    plan = plan_cluster(snapshot(*nodes, *pods), override, NOW)
    assert not plan.waves and "workloadRules[0]" in plan.blocked[0].reason


def test_a_malformed_annotation_blocks_the_node_instead_of_guessing() -> None:
    bad = pod("x", on="a", annotations={"platformctl.io/rotation": "one-by-one"})
    plan = plan_cluster(snapshot(node("a"), node("b"), bad), policy(), NOW)
    assert waves_of(plan) == [["b"]]
    assert "platformctl.io/rotation='one-by-one'" in blocked_of(plan)["a"].reason


# ------------------------------------------------------------------ blocked exactly when eviction must fail


def test_pod_under_two_budgets_blocks_its_node_with_the_500() -> None:
    snap = snapshot(node("a"), node("b"), pod("web-1", on="a", labels={"app": "web", "tier": "front"}),
                    pdb("by-app", match_labels={"app": "web"}, allowed=1),
                    pdb("by-tier", expressions=[{"key": "tier", "operator": "In", "values": ["front", "back"]}], allowed=1))
    plan = plan_cluster(snap, policy(), NOW)
    reason = blocked_of(plan)["a"].reason
    assert "more than one PodDisruptionBudget (app/by-app, app/by-tier)" in reason and "500" in reason
    assert "ReplicaSet app/web" in reason
    assert waves_of(plan) == [["b"]]


def test_zero_budget_blocks_and_names_workload_and_budget() -> None:
    snap = snapshot(node("a"), pod("solo", on="a", labels={"app": "solo"}, owner=("ReplicaSet", "solo-5f")),
                    pdb("solo", match_labels={"app": "solo"}, min_available=1))
    plan = plan_cluster(snap, policy(), NOW)
    b = blocked_of(plan)["a"]
    assert "PodDisruptionBudget app/solo allows no disruption now (needs 1 healthy pods and has 1)" in b.reason
    assert b.causes[0].workload == "ReplicaSet app/solo-5f" and "429" in b.reason


def test_budgets_are_scoped_to_their_namespace() -> None:
    snap = snapshot(node("a"), pod("web-1", on="a", ns="shop", labels={"app": "web"}),
                    pdb("web", ns="other", match_labels={"app": "web"}, allowed=0))
    assert waves_of(plan_cluster(snap, policy(), NOW)) == [["a"]]


def test_match_expressions_select_the_budget() -> None:
    snap = snapshot(node("a"), node("b"),
                    pod("w1", on="a", labels={"app": "web", "tier": "front"}), pod("w2", on="b", labels={"app": "web"}),
                    pdb("front", expressions=[{"key": "tier", "operator": "Exists"}], allowed=0))
    plan = plan_cluster(snap, policy(), NOW)
    assert set(blocked_of(plan)) == {"a"} and waves_of(plan) == [["b"]]


def test_daemonset_mirror_and_finished_pods_never_block() -> None:
    everything = pdb("all", ns="kube-system", match_labels={}, allowed=0)
    snap = snapshot(
        node("a"),
        pod("ds-1", on="a", ns="kube-system", owner=("DaemonSet", "agent")),
        pod("static-a", on="a", ns="kube-system", owner=("Node", "a"), annotations={"kubernetes.io/config.mirror": "x"}),
        pod("job-done", on="a", ns="kube-system", owner=("Job", "once"), phase="Succeeded", ready=False),
        pod("job-failed", on="a", ns="kube-system", owner=("Job", "twice"), phase="Failed", ready=False),
        everything,
    )
    plan = plan_cluster(snap, policy(), NOW)
    assert waves_of(plan) == [["a"]] and not plan.blocked


def test_unready_pod_under_an_always_allow_budget_does_not_block() -> None:
    snap = snapshot(node("a"), node("b"), pod("w1", on="a", ready=False), pod("w2", on="b", ready=False, labels={"app": "api"}),
                    pdb("web", match_labels={"app": "web"}, allowed=0, policy="AlwaysAllow"),
                    pdb("api", match_labels={"app": "api"}, allowed=0, healthy=2))
    plan = plan_cluster(snap, policy(), NOW)
    # w1 goes (AlwaysAllow); w2's budget is not met (2 healthy of 3 desired, IfHealthyBudget): 429.
    assert waves_of(plan) == [["a"]] and set(blocked_of(plan)) == {"b"}
    met = snapshot(node("b"), pod("w2", on="b", ready=False, labels={"app": "api"}), pdb("api", match_labels={"app": "api"}, allowed=0))
    assert waves_of(plan_cluster(met, policy(), NOW)) == [["b"]]  # a met budget lets an unready pod go


def test_pending_and_terminating_pods_never_block() -> None:
    terminating = pod("w2", on="a")
    terminating["metadata"]["deletionTimestamp"] = STAMP
    snap = snapshot(node("a"), pod("w1", on="a", phase="Pending", ready=False), terminating,
                    pdb("web", match_labels={"app": "web"}, allowed=0))
    assert waves_of(plan_cluster(snap, policy(), NOW)) == [["a"]]


def test_skip_blocks_with_the_rule_that_said_so() -> None:
    snap = snapshot(node("a"), pod("gw", on="a", labels={"app": "gateway"}))
    pol = policy(workloadRules=[{"selector": {"matchLabels": {"app": "gateway"}}, "mode": "skip"}])
    reason = blocked_of(plan_cluster(snap, pol, NOW))["a"].reason
    assert "pod app/gw of ReplicaSet app/web asks not to be disrupted (rotation: skip, from workloadRules[0])" == reason


# ------------------------------------------------------------------ budgets without status: the controller's arithmetic


@pytest.mark.parametrize(("spec", "drain"), [
    # a round waits for the last one's successors to start (60 s); the last evicted pod's grace (30 s) ends it
    ({"min_available": "60%"}, 2 * 60 + 30),  # desired ceil(1.8) = 2 of 3: one disruption at a time, three rounds
    ({"max_unavailable": "50%"}, 1 * 60 + 30),  # ceil(1.5) = 2 may be down: two rounds
    ({"max_unavailable": "34%"}, 1 * 60 + 30),  # ceil(1.02) = 2
    ({"min_available": 2}, 2 * 60 + 30),
])
def test_percentages_round_up_as_the_disruption_controller_rounds(spec: dict, drain: int) -> None:
    nodes = [node(f"n{i}") for i in range(3)]
    pods = [pod(f"w{i}", on=f"n{i}") for i in range(3)]
    plan = plan_cluster(snapshot(*nodes, *pods, pdb("web", match_labels={"app": "web"}, **spec)), policy(maxInFlight=3), NOW)
    assert [w.drain_seconds for w in plan.waves] == [drain]


def test_percentage_that_leaves_no_room_blocks() -> None:
    nodes = [node(f"n{i}") for i in range(3)]
    pods = [pod(f"w{i}", on=f"n{i}") for i in range(3)]
    plan = plan_cluster(snapshot(*nodes, *pods, pdb("web", match_labels={"app": "web"}, min_available="67%")), policy(), NOW)
    assert set(blocked_of(plan)) == {"n0", "n1", "n2"}  # ceil(2.01) = 3 of 3 must stay


# ------------------------------------------------------------------ the estimate


def test_wave_estimate_is_boot_plus_paced_drain_plus_settle() -> None:
    nodes = [node("n0", pool="ml"), node("n1")]
    pods = [pod("w0", on="n0", grace=45), pod("w1", on="n1", grace=20), pod("w2", on="n1", grace=20),
            pod("slow", on="n1", labels={"app": "slow"}, grace=200),
            pod("kv", on="n1", labels={"app": "kv"}, annotations={"platformctl.io/rotation": "one-at-a-time",
                                                                   "platformctl.io/settle-seconds": "30"})]
    pol = policy(targets={"general": "ami-new", "ml": "ami-new"}, zoneAtATime=False,
                 durations={"nodeBootSeconds": {"ml": 500, "default": 200}, "podStartSeconds": 10})
    plan = plan_cluster(snapshot(*nodes, *pods, pdb("web", match_labels={"app": "web"}, allowed=1)), pol, NOW)
    (wave,) = plan.waves
    # boot: ml's 500; drain: budget web has 3 pods, 1 at a time: 3 x (45 + 10) = 165 < slow's grace 200; settle 30
    assert (wave.boot_seconds, wave.drain_seconds, wave.settle_seconds) == (500, 200, 30)
    assert wave.estimated_seconds == plan.estimated_seconds == 730


def test_budget_pods_are_spread_across_waves_not_queued_in_one() -> None:
    nodes = [node(f"n{i}") for i in range(4)]
    pods = [pod("w0", on="n0"), pod("w1", on="n1"), pod("other", on="n2", labels={"app": "x"})]
    snap = snapshot(*nodes, *pods, pdb("web", match_labels={"app": "web"}, allowed=1))
    plan = plan_cluster(snap, policy(maxInFlight=2), NOW)
    naive = plan_cluster(snap, policy(maxInFlight=2), NOW, naive=True)
    assert waves_of(naive)[0] == ["n0", "n1"]  # name order queues both of web's pods in one wave
    assert all(not {"n0", "n1"} <= set(w) for w in waves_of(plan))
    assert plan.estimated_seconds < naive.estimated_seconds
    assert len(plan.waves) == len(naive.waves) == 2


def test_wait_for_completion_waves_go_last_and_wait_for_their_bound() -> None:
    nodes = [node(f"n{i}") for i in range(3)]
    job = pod("train", on="n0", ns="ml", owner=("Job", "train"), labels={"job": "train"},
              annotations={"platformctl.io/rotation": "wait-for-completion", "platformctl.io/max-wait-seconds": "7200"})
    plan = plan_cluster(snapshot(*nodes, job), policy(maxInFlight=1), NOW)
    assert waves_of(plan)[-1] == ["n0"]
    last = plan.waves[-1]
    # The job started at NOW; earlier waves ran meanwhile and the wave's own new node (surge) booted beside it: the
    # wave waits only for what is left of the job's bound, and its drain ends that long after the bound.
    assert 0 < last.wait_seconds < 7200
    assert plan.spans[last.index].head_end == 7200 + last.drain_seconds
    assert any("wait-for-completion" in r for r in last.reasons)


# ------------------------------------------------------------------ region plans


def test_region_plan_goes_zone_by_zone_with_the_host_as_the_policy_says() -> None:
    def one(zone: str):
        return snapshot(node(f"{zone}-n", zone=zone))

    places = [ClusterPlace("host", None), ClusterPlace("a-01", "z-a"), ClusterPlace("a-02", "z-a"), ClusterPlace("b-01", "z-b")]
    snaps = {"host": snapshot(node("h1", zone="z-a"), node("h2", zone="z-b")), "a-01": one("z-a"), "a-02": one("z-a"),
             "b-01": one("z-b")}
    last = plan_region("dev", "us-east-1", places, snaps, policy(), NOW)
    assert last.steps == [["a-01", "a-02"], ["b-01"], ["host"]]
    first = plan_region("dev", "us-east-1", places, snaps, policy(hostCluster="first"), NOW)
    assert first.steps == [["host"], ["a-01", "a-02"], ["b-01"]]
    data = last.to_dict()
    assert data["estimated_seconds"] == sum(s["estimated_seconds"] for s in data["steps"])
    assert data["steps"][1]["reasons"] == ["one zone at a time: zone z-b follows zone z-a"]
    assert set(data["clusters"]) == {"host", "a-01", "a-02", "b-01"}


def test_improvement_pass_moves_a_node_that_alone_slows_its_wave() -> None:
    from upgrade_service.planning.disruption import view_cluster
    from upgrade_service.planning.packing import improve, rebuild
    from upgrade_service.planning.plan import limits_for

    notes = {"platformctl.io/rotation": "one-at-a-time", "platformctl.io/settle-seconds": "600"}
    snap = snapshot(node("a"), node("b"), node("c"), pod("kv-a", on="a", labels={"app": "kv"}, annotations=notes),
                    pod("db-c", on="c", labels={"app": "db"}, annotations=notes, owner=("StatefulSet", "db")))
    pol = policy(maxInFlight=3)
    view = view_cluster(snap, pol, NOW)
    limits = limits_for(pol, view)
    a, b, c = view.nodes
    waves = [rebuild([a, b], limits), rebuild([c], limits)]  # two waves that each settle 600 s
    before = sum(w.cost for w in waves)
    after = improve(waves, limits)
    assert sum(w.cost for w in after) < before
    assert sorted(len(w.nodes) for w in after) == [3]  # kv and db are different workloads: one wave suffices


def test_pods_with_no_grace_period_under_a_budget_are_planned_and_paced() -> None:
    """Pods that end at once (terminationGracePeriodSeconds: 0, as canaries' are) still pace their budget; a
    rotation of a cluster running one once stopped on a KeyError while packing."""
    nodes = [node(f"n{i}") for i in range(4)]
    pods = [pod(f"w{i}", on=f"n{i % 4}", grace=0) for i in range(8)]
    pol = policy(maxInFlight=4, zoneAtATime=False, durations={"nodeBootSeconds": 100, "podStartSeconds": 10})
    plan = plan_cluster(snapshot(*nodes, *pods, pdb("web", match_labels={"app": "web"}, allowed=1)), pol, NOW)
    assert sorted(n for w in waves_of(plan) for n in w) == ["n0", "n1", "n2", "n3"]
    # one at a time, each round waits for the last one's successor to start: (pods in the wave - 1) x 10 s
    for wave in plan.waves:
        pods_in_wave = 2 * len(wave.nodes)
        assert wave.drain_seconds == (pods_in_wave - 1) * 10
