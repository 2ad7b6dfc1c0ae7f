"""A drain whose evicted pod has nowhere to go, as a scheduled ``rotate run`` meets it: separate processes, the local region.

An application pins two replicas to one node (a ``kubernetes.io/hostname`` selector) under a budget
that lets one go at a time. Its evicted replica can only run on the node it is leaving, which is
cordoned: the scheduler says so in the pod's ``PodScheduled`` condition and in ``FailedScheduling``
events, and the budget then refuses the second. The plan says beforehand that the node's drain will
wait; the run notices it within a minute of the region's time (not after ``drainTimeoutSeconds``),
finds nothing that would make room, fails the node with the scheduler's words and halts, leaving it
cordoned and every budget whole.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from platformctl.kernel.cluster.live import LiveCluster
from platformctl.kernel.cluster.model import parse_time
from tests.process import new_images, region_fixture, run

CLUSTER = "dev-usw2a-01"


region = region_fixture("--no-workloads")


def get(region: dict[str, Any], path: str) -> Any:
    with urllib.request.urlopen(f"{region['kubernetes_endpoint']}{path}", timeout=30) as response:
        return json.loads(response.read())


def test_a_pinned_replica_with_nowhere_to_go_halts_the_run_within_a_minute_with_the_schedulers_reason(
        region: dict[str, Any]) -> None:
    home = region["home"]
    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER)
    node = sorted(n.name for n in live.list_nodes() if n.pool == "general")[0]
    live.create_namespace("pinned")
    labels = {"app": "pinned"}
    live.create_object({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "pinned", "namespace": "pinned"},
                        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
                            "metadata": {"labels": labels},
                            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                     "containers": [{"name": "app", "image": "registry.example/app:1",
                                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}})
    live.create_object({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                        "metadata": {"name": "pinned", "namespace": "pinned"},
                        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}})
    clock = live.clock
    deadline = clock.now() + 600
    while sum(p.ready for p in live.list_pods(namespace="pinned")) < 2:
        assert clock.now() < deadline, "the pinned replicas never became Ready"
        clock.sleep(10)
    new_images(region, "9.1.0")
    policy = home / "policy.yaml"
    policy.write_text("maxInFlight: 1\ndrainTimeoutSeconds: 3600\ndurations: {nodeBootSeconds: 180, podStartSeconds: 20}\n")

    plan = run(home, "rotate", "plan", "--context", CLUSTER, "--policy", str(policy), "-o", "json")
    said = json.loads(plan.stdout)
    stuck = [w for w in said["waves"] if w["stuck"]]
    assert [w["nodes"] for w in stuck] == [[node]], said["warnings"]
    assert "pinned/pinned-" in stuck[0]["stuck"] and "node(s) didn't match Pod's node affinity/selector" in stuck[0]["stuck"]
    explained = run(home, "rotate", "plan", "--context", CLUSTER, "--policy", str(policy), "--explain", node).stdout
    assert "pinned/pinned-" in explained and "nowhere" in explained

    out = run(home, "rotate", "run", "--context", CLUSTER, "--policy", str(policy), "-o", "json", check=False,
              timeout=600)
    result = json.loads(out.stdout)["clusters"][0]
    assert out.returncode == 1 and result["status"] == "halted", out.stdout[-2000:]
    failed = result["report"]["nodes_failed"]
    assert [f["node"] for f in failed] == [node], failed
    reason = failed[0]["reason"]
    assert "PodDisruptionBudget pinned/pinned" in reason and "pinned/pinned-" in reason
    assert "nodes are available" in reason and "node(s) didn't match Pod's node affinity/selector" in reason
    # What kubectl shows: the evicted replica's successor Pending, FailedScheduling, the node cordoned on its old image.
    pods = live.list_pods(namespace="pinned")
    pending = [p for p in pods if p.node_name is None]
    assert len(pending) == 1 and pending[0].unschedulable.startswith("0/")
    events = get(region, f"/clusters/{CLUSTER}/api/v1/namespaces/pinned/events")["items"]
    evicted = [parse_time(e["lastTimestamp"], "event", None) for e in events if e["reason"] == "Killing"]  # the kubelet stops the evicted pod
    assert any(e["reason"] == "FailedScheduling" and "didn't match Pod's node affinity/selector" in e["message"] for e in events)
    # Noticed within a minute of the region's time from the eviction, not after drainTimeoutSeconds (an hour).
    status = json.loads(run(home, "rotate", "status", "--context", CLUSTER, "-o", "json").stdout)
    halted_at = parse_time(status["clusters"][0]["halted"]["at"], "halted", None)
    assert evicted and halted_at - min(evicted) <= 60, (min(evicted), halted_at)
    assert live.get_node(node).unschedulable  # left cordoned for someone to decide
    invariants = get(region, f"/platformctl/v1/clusters/{CLUSTER}/invariants")
    assert (invariants["budget_violations"], invariants["lost_pods"], invariants["deleted_without_eviction"]) == ([], [], [])
