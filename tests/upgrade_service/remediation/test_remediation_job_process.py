"""Remediation as the Pulumi program runs it: each cluster's CronJob pod, with its own IAM role's credentials (IRSA,
through the region's STS), under the region's IAM (``local up --run-jobs``).

A node stops answering; the member cluster's CronJob finds it past its policy's threshold, surges its group, drains
the node and retires its instance. What is checked is what an operator and AWS would show: the node gone and a new one
Ready, the instance terminated once, and the region's IAM decisions: the remediation's role made the surge and the
retirement itself, and nothing any job asked was refused. On the program of main before this test (a remediation role
with neither ``autoscaling:SetDesiredCapacity`` nor ``ec2:DescribeLaunchTemplateVersions``), the surge is refused and
the node stays cordoned: this test failed there."""

from __future__ import annotations

import time
from typing import Any

from platformctl.kernel.cluster.live import LiveCluster
from tests.process import get, region_fixture, region_now, run

NAMESPACE = "platformctl-system"
CLUSTER = "dev-usw2a-01"
region = region_fixture("--no-workloads", "--run-jobs")


def nodes(region: dict[str, Any]) -> dict[str, Any]:
    return {n.name: n for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER).list_nodes()}


def test_each_clusters_remediation_job_replaces_a_broken_node_with_its_own_role_and_nothing_is_refused(
        region: dict[str, Any]) -> None:
    before = nodes(region)
    node = sorted(before)[0]
    pool = before[node].pool
    run(region["home"], "local", "fault", "node-notready", node)
    # Ready Unknown after the node controller's grace, past the policy's 300 s, then the next 5-minute schedule; the
    # surge's node boots and joins, the drain, the retirement: well under an hour of the region's time.
    until = region_now(region) + 3600
    while region_now(region) < until:
        now = nodes(region)
        if node not in now and sum(n.pool == pool and n.ready for n in now.values()) >= \
                sum(n.pool == pool for n in before.values()):
            break
        time.sleep(0.5)
    refused = get(region, "/platformctl/v1/iam-decisions?refused=1")["decisions"]
    assert refused == [], refused
    forbidden = get(region, "/platformctl/v1/rbac-decisions?refused=1")["decisions"]
    assert forbidden == [], forbidden
    after = nodes(region)
    assert node not in after, (after[node].labels, after[node].unschedulable) if node in after else None
    assert sum(n.pool == pool and n.ready for n in after.values()) == sum(n.pool == pool for n in before.values())
    terminated = get(region, "/platformctl/v1/aws-calls?action=TerminateInstanceInAutoScalingGroup")["calls"]
    assert [c["params"]["InstanceId"] for c in terminated if c["status"] == 200] == [before[node].instance_id]
    # The remediation's own role did it (its session's decisions), not the region's or the operator's credentials.
    mine = get(region, f"/platformctl/v1/iam-decisions?role={CLUSTER}-remediation")["decisions"]
    done = {d["action"] for d in mine if d["decision"] == "allowed"}
    assert {"autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup",
            "ec2:DescribeLaunchTemplateVersions"} <= done, done
    assert all(d["resource"].endswith(f"autoScalingGroupName/{CLUSTER}-{pool}") for d in mine
               if d["action"].startswith("autoscaling:") and d["resource"] != "*"), mine
    # In the cluster it was the remediation's service account (its projected token), under the program's RBAC.
    drained = [d for d in get(region, "/platformctl/v1/rbac-decisions")["decisions"]
               if d["cluster"] == CLUSTER and (d.get("subresource") == "eviction" or d.get("verb") == "patch")]
    assert drained and {d["user"] for d in drained} == {f"system:serviceaccount:{NAMESPACE}:platformctl-remediation"}
