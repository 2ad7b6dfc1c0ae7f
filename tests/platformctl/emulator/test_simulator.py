"""What the simulator does over time: scheduling, controllers, node lifecycle."""

from __future__ import annotations

from collections import Counter

from platformctl.emulator import simulator as s
from platformctl.emulator.invariants import eviction_budget_violations, lost_pods
from platformctl.emulator.simulator import Event, NodePoolSpec
from platformctl.kernel.cluster.drain import drain
from platformctl.kernel.cluster.model import LABEL_NODE_TYPE, PodDisruptionBudget, Taint, Toleration
from platformctl.kernel.cluster.selectors import IntOrPercent, LabelSelector
from tests.clusters import cluster
from tests.platformctl.emulator.helpers import template


def test_pods_start_after_their_start_time_and_spread_over_nodes() -> None:
    sim = cluster({"general": 3}, instance_type="m6i.xlarge")
    sim.create_workload("ReplicaSet", template(start=20), 6)
    sim.advance(1)
    pods = sim.list_pods("app")
    assert len(pods) == 6 and all(p.node_name and not p.ready for p in pods)
    sim.advance(40)
    pods = sim.list_pods("app")
    assert all(p.ready and p.phase == "Running" for p in pods)
    # Each start varies about its 20 s, as a real one does (whole seconds, as the API stamps them).
    took = [p.running_at - p.created for p in pods if p.running_at is not None]
    assert len(took) == 6 and all(12 <= t <= 35 and t == int(t) for t in took) and len(set(took)) > 1
    assert Counter(p.node_name for p in pods).most_common(1)[0][1] == 2


def test_scheduler_respects_capacity_taints_selectors_and_cordon() -> None:
    sim = cluster({"general": 2}, instance_type="m6i.large")  # 1930m CPU each
    gpu = NodePoolSpec("ml", "us-east-1a", "g5.xlarge", "ami-0old", 1, 300, "ml", {}, (Taint("nvidia.com/gpu", "true", "NoSchedule"),))
    sim.add_pool(gpu)
    ml_node = sim.pool_nodes("ml")[0].name
    sim.create_workload("ReplicaSet", template(name="big", cpu=1500), 3)
    sim.create_workload("ReplicaSet", template(name="train", gpus=1, node_selector={LABEL_NODE_TYPE: "ml"},
                                               tolerations=(Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)), 1)
    sim.advance(30)
    big = sim.list_pods("app", "app=big")
    placed = [p for p in big if p.node_name]
    assert len(placed) == 2 and len(sim.pending_pods()) == 1  # the third does not fit anywhere
    assert all(p.node_name != ml_node for p in placed)  # the GPU taint keeps them off
    assert sim.list_pods("app", "app=train")[0].node_name == ml_node

    sim.cordon(placed[0].node_name)
    sim.scale_pool("general", 3)
    sim.advance(121)  # the new node boots and takes the pending pod
    assert not sim.pending_pods()


def test_a_no_execute_taint_evicts_the_pods_that_do_not_tolerate_it_at_once() -> None:
    sim = cluster({"general": 1}, instance_type="m6i.xlarge")
    sim.create_workload("ReplicaSet", template(name="plain"), 1)
    sim.create_workload("ReplicaSet", template(name="tolerant", tolerations=(
        Toleration("drain", "Exists", "", "NoExecute"),)), 1)
    sim.advance(30)
    node = sim.list_nodes()[0].name
    sim.taint(node, Taint("drain", "x", "NoExecute"))  # the taint manager's, as kube-controller-manager runs it
    sim.advance(31)  # past the pod's grace: it is gone, and its replacement has nowhere to go
    assert sim.list_pods("app", "app=tolerant")[0].node_name == node
    assert all(p.node_name is None or p.node_name != node for p in sim.list_pods("app", "app=plain"))
    assert any(e.kind == "PodTaintEvicted" for e in sim.events)


def test_replicaset_replaces_at_once_and_statefulset_after_the_old_pod_is_gone() -> None:
    sim = cluster({"general": 3}, instance_type="m6i.xlarge")
    sim.create_workload("ReplicaSet", template(name="web", grace=30), 2)
    sim.create_workload("StatefulSet", template(name="kv", grace=30), 2)
    sim.advance(30)
    web = sim.list_pods("app", "app=web")[0]
    assert sim.evict("app", web.name).code == 201
    sim.advance(0)
    assert len([p for p in sim.list_pods("app", "app=web") if not p.terminating]) == 2  # replacement already there
    assert sim.evict("app", "kv-0").code == 201
    sim.advance(10)
    assert sim.get_pod("app", "kv-0").terminating  # same name: waits for the old pod
    sim.advance(25)
    kv0 = sim.get_pod("app", "kv-0")
    assert not kv0.terminating and kv0.uid != "" and kv0.created > sim.now() - 10


def test_daemonset_follows_nodes_and_drain_leaves_it() -> None:
    sim = cluster({"general": 2}, instance_type="m6i.xlarge", boot=60)
    sim.create_workload("DaemonSet", template(namespace="kube-system", name="agent", tolerations=(Toleration(operator="Exists"),)), 0)
    sim.advance(20)
    assert len(sim.list_pods("kube-system")) == 2
    sim.scale_pool("general", 3)
    new = [n for n in sim.list_nodes() if not n.ready][0].name
    assert len(sim.list_pods("kube-system", node_name=new)) == 1  # created at once, starts once the node is Ready
    sim.advance(90)
    assert all(p.ready for p in sim.list_pods("kube-system"))
    report = drain(sim, [new])
    assert report.complete and report.evictions == 0
    assert len(sim.list_pods(node_name=new)) == 1


def test_job_runs_to_completion_and_ttl_removes_it() -> None:
    sim = cluster({"general": 3}, instance_type="m6i.xlarge")
    sim.create_workload("Job", template(name="report", run=300), 2, completions=4, ttl_seconds=60)
    sim.advance(340)
    phases = Counter(p.phase for p in sim.list_pods("app"))
    assert phases == {"Succeeded": 2, "Running": 2}
    sim.advance(320)
    assert Counter(p.phase for p in sim.list_pods("app")) == {"Succeeded": 4}
    sim.advance(61)
    assert sim.list_pods("app") == []


def test_node_boots_not_ready_then_ready() -> None:
    sim = cluster({"general": 1}, instance_type="m6i.xlarge", boot=200)
    sim.scale_pool("general", 2)
    fresh = [n for n in sim.list_nodes() if not n.ready]
    assert len(fresh) == 1
    sim.advance(199)
    assert not sim.get_node(fresh[0].name).ready
    sim.advance(1)
    assert sim.get_node(fresh[0].name).ready


def test_deleting_a_node_loses_its_pods_and_the_pool_replaces_it() -> None:
    sim = cluster({"general": 2}, instance_type="m6i.xlarge", boot=60)
    sim.create_workload("ReplicaSet", template(), 4)
    sim.advance(20)
    victim = sim.list_pods("app")[0].node_name
    on_victim = {p.name for p in sim.list_pods(node_name=victim)}
    sim.delete_node(victim)
    assert {e.name for e in sim.events if e.kind == s.POD_LOST} == on_victim
    assert len(sim.list_nodes()) == 2  # the pool launched a replacement
    sim.advance(90)
    assert len([p for p in sim.list_pods("app") if p.ready]) == 4


def test_pool_image_change_applies_to_new_nodes_only() -> None:
    sim = cluster({"general": 2}, instance_type="m6i.xlarge")
    sim.set_pool_image("general", "ami-0new")
    sim.scale_pool("general", 3)
    images = Counter(n.image for n in sim.list_nodes())
    assert images == {"ami-0old": 2, "ami-0new": 1}
    sim.scale_pool("general", 1)  # scale-in removes old-image nodes first
    assert [n.image for n in sim.list_nodes()] == ["ami-0new"]


def test_drain_is_paced_by_the_budget() -> None:
    sim = cluster({"general": 4}, instance_type="m6i.xlarge")
    sim.create_workload("ReplicaSet", template(name="web", start=30, grace=5), 4)
    sim.create_pdb(PodDisruptionBudget("app", "web", "u", LabelSelector((("app", "web"),)), max_unavailable=IntOrPercent(1)))
    sim.advance(40)
    nodes = sorted({p.node_name for p in sim.list_pods("app")})
    report = drain(sim, nodes[:2], poll_seconds=5)
    assert report.complete and report.evictions == 2
    assert report.refusals["429 TooManyRequests"] > 0  # the second pod waited for the first replacement
    assert report.seconds >= 30
    assert all(n.unschedulable for n in sim.list_nodes() if n.name in nodes[:2])
    assert eviction_budget_violations(sim.events) == []


def test_a_budget_follows_its_controllers_new_scale() -> None:
    """``maxUnavailable: 1`` over a ReplicaSet scaled from 3 to 5 and then to 2: the disruption controller reads the
    scale on each sync, so one disruption is allowed each time (the simulator kept expecting 3: three at 5 replicas,
    none at 2), and a watcher hears the budget's status move."""
    sim = cluster({"general": 6}, instance_type="m6i.xlarge")
    sim.create_workload("ReplicaSet", template(name="web", start=5), 3)
    sim.create_pdb(PodDisruptionBudget("app", "web", "u", LabelSelector((("app", "web"),)), max_unavailable=IntOrPercent(1)))
    sim.run_until_settled()
    log = sim.change_log()
    at = sim.resource_version
    uid = next(w[3] for w in sim.workloads() if w[2] == "web")
    for replicas in (5, 2):
        sim.scale_workload(uid, replicas)
        sim.run_until_settled()
        status = sim.list_pdbs("app")[0].status
        assert (status.expected_pods, status.current_healthy, status.desired_healthy, status.disruptions_allowed) == (
            replicas, replicas, replicas - 1, 1)
    assert [t for _, t, _ in log.since("pdbs", at)].count("MODIFIED") >= 2


def test_label_and_field_selectors_on_lists() -> None:
    sim = cluster({"general": 2}, instance_type="m6i.xlarge")
    sim.create_workload("ReplicaSet", template(name="web", labels={"app": "web", "tier": "front"}), 2)
    sim.create_workload("ReplicaSet", template(name="db", labels={"app": "db"}), 1)
    sim.advance(20)
    assert len(sim.list_pods(label_selector="tier in (front,back)")) == 2
    assert [p.labels["app"] for p in sim.list_pods(label_selector="app,!tier")] == ["db"]
    assert len(sim.list_pods(label_selector="app!=web")) == 1
    assert len(sim.list_nodes("eks.amazonaws.com/nodegroup=general,topology.kubernetes.io/zone=us-east-1a")) == 2


def test_checker_catches_an_eviction_that_broke_a_budget() -> None:
    budget = ("app", "web")
    events = [
        Event(0, s.POD_CREATED, "app", "a", ("ua", (budget,), True)),
        Event(0, s.POD_CREATED, "app", "b", ("ub", (budget,), True)),
        Event(1, s.POD_EVICTED, "app", "a", ("ua", True, budget, 1)),
        Event(2, s.POD_EVICTED, "app", "b", ("ub", True, budget, 1)),
    ]
    violations = eviction_budget_violations(events)
    assert len(violations) == 1 and "app/b" in violations[0]


def test_checker_is_clean_on_a_busy_synthetic_cluster_and_lost_pods_are_reported() -> None:
    from platformctl.emulator.synthetic import synthetic_cluster

    sim, summary = synthetic_cluster(30)
    assert summary.pdbs > 0 and summary.workloads["StatefulSet"] > 0
    general = sorted(n.name for n in sim.list_nodes("platformctl.io/node-type=general"))
    sim.scale_pool("general", len(general) + 5)
    sim.advance(200)
    report = drain(sim, general[:5])
    assert report.complete
    for name in general[:5]:
        sim.terminate_instance(name, decrement_desired=True)
    assert eviction_budget_violations(sim.events) == []
    assert lost_pods(sim.events) == []  # drained first: only their daemons went with them
    assert len(lost_pods(sim.events, include_daemonsets=True)) == 5 * 3
    sim.delete_node(general[6])
    assert lost_pods(sim.events)


def test_bare_pod_is_not_recreated_after_eviction() -> None:
    sim = cluster({"general": 1}, instance_type="m6i.xlarge")
    sim.create_pod(template(name="debug"))
    sim.advance(15)
    assert sim.get_pod("app", "debug").ready
    assert sim.evict("app", "debug").code == 201
    sim.advance(31)
    assert sim.list_pods("app") == []


def test_higher_priority_pods_are_placed_first() -> None:
    sim = cluster({"general": 1}, instance_type="m6i.large")  # 1930m CPU
    sim.create_pod(template(name="low", cpu=1200, priority=-100))
    sim.create_pod(template(name="high", cpu=1200, priority=1000))
    sim.advance(1)
    assert sim.get_pod("app", "high").node_name and sim.get_pod("app", "low").node_name is None


def test_controllers_inferred_from_a_snapshot_keep_working(rules) -> None:  # type: ignore[no-untyped-def]
    from platformctl.emulator.simulator import build_node

    rules.add_node(build_node(name="ip-10-0-1-12.ec2.internal", zone="us-east-1a", region="us-east-1", instance_type="m6i.4xlarge",
                              pool="general", image="ami-0new", instance_id="i-0a1b2c3d4e5f60012"), ready_after=60)
    daemons = rules.list_pods("kube-system", "k8s-app=aws-node", node_name="ip-10-0-1-12.ec2.internal")
    assert len(daemons) == 1  # the DaemonSet seen in the snapshot follows the new node
    assert rules.evict("web", "web-7d9c-a1").code == 201
    rules.advance(0)
    web = [p for p in rules.list_pods("web") if not p.terminating]
    assert len(web) == 3 and all(p.owner and p.owner.name == "web-7d9c" for p in web)  # scale 3, as in the snapshot


def test_budget_the_controller_cannot_sync_is_still_being_processed() -> None:
    sim = cluster({"general": 2}, instance_type="m6i.xlarge")
    sim.create_workload("Job", template(name="etl", labels={"job-name": "etl"}, run=3600), 2)
    sim.create_pdb(PodDisruptionBudget("app", "etl", "u", LabelSelector((("job-name", "etl"),)), max_unavailable=IntOrPercent(1)))
    sim.advance(20)
    result = sim.evict("app", sim.list_pods("app")[0].name)
    assert (result.code, result.retry_after_seconds) == (429, 10)
    assert result.causes == (("DisruptionBudget", "The disruption budget etl is still being processed by the server."),)


def test_a_start_varies_by_instance_type_and_a_slow_image_shifts_it() -> None:
    """Starts are a distribution, not a constant: fewer cores start containers slower on the whole, and a slow image
    moves every start on its nodes by its delay."""
    sim = cluster({"small": 3}, instance_type="m6i.large")
    sim.add_pool(NodePoolSpec("big", "us-east-1a", "m6i.8xlarge", "ami-0new", 3))
    sim.advance(200)
    for pool in ("small", "big"):
        sim.create_workload("ReplicaSet", template(name=pool, start=10, node_selector={"eks.amazonaws.com/nodegroup": pool}), 30)
    sim.advance(60)

    def took(pool: str) -> list[float]:
        return [p.running_at - p.created for p in sim.list_pods("app") if p.labels["app"] == pool and p.running_at is not None]

    small, big = took("small"), took("big")
    assert len(small) == len(big) == 30 and len(set(small)) >= 3 and len(set(big)) >= 3
    assert sum(small) / 30 > sum(big) / 30
    sim.set_image_fault("ami-0new", 20.0)
    sim.create_workload("ReplicaSet", template(name="late", start=10, node_selector={"eks.amazonaws.com/nodegroup": "big"}), 30)
    sim.advance(90)
    late = [p.running_at - p.created for p in sim.list_pods("app") if p.labels["app"] == "late" and p.running_at is not None]
    assert len(late) == 30 and sum(late) / 30 - sum(big) / 30 > 15
