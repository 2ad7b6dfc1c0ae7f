"""The rotation Job evicted by its own rotation, on the local region that runs the toolkit's Jobs as processes
(``local up --run-jobs``).

The stage's scheduled rotation is the CronJob the Pulumi program deploys in the host cluster (``platformctl-rotate``,
its ConfigMap and its DynamoDB state table, as the region applied them from the program), started now as an operator
would (``kubectl create job --from=cronjob/platformctl-rotate``). It rotates every cluster of the stage, the host
cluster too, so its drains evict its own pod: the process gets SIGTERM, stops at a safe point and gives its leases
back; the Job (``podFailurePolicy``: a disruption is no failure) starts another pod once the first has ended, which
resumes the journal, and the Job completes with no failure counted and every node on the new images. What is checked
is what an operator sees: kubectl's Job, pods and events, and the nodes."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from platformctl.kernel.cluster.live import LiveCluster
from tests.process import get, new_images, region_fixture

NAMESPACE = "platformctl-system"
region = region_fixture("--no-workloads", "--run-jobs")


def kubectl(region: dict[str, Any], *args: str, context: str | None = None) -> str:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is not installed (.ci/run installs it)"
    out = subprocess.run([binary, "--kubeconfig", region["kubeconfig"], "--context", context or host(region), *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def host(region: dict[str, Any]) -> str:
    """The stage's host cluster: the kubeconfig's current context."""
    return str(yaml.safe_load(Path(region["kubeconfig"]).read_text())["current-context"])


def ungated(region: dict[str, Any]) -> None:
    """The scheduled rotation's policy as the program applied it (the pipeline's for the stage, under its freezes) but
    for its canary gate and first light: no canary runs in this region, and the gate is not what is tried here."""
    configmap = json.loads(kubectl(region, "get", "configmap", "platformctl-rotation", "-n", NAMESPACE, "-o", "json"))
    policy = json.loads(configmap["data"]["policy.yaml"])
    assert policy["healthGate"] == {"canary": {"window": "30m"}} and "firstLight" in policy  # dev's, as shipped
    plain = {k: v for k, v in policy.items() if k not in ("healthGate", "firstLight", "gateTimeoutSeconds")}
    configmap["data"]["policy.yaml"] = json.dumps(plain)
    configmap["metadata"] = {k: v for k, v in configmap["metadata"].items() if k in ("name", "namespace", "labels")}
    path = Path(region["home"]) / "rotation-configmap.json"
    path.write_text(json.dumps(configmap))
    kubectl(region, "delete", "configmap", "platformctl-rotation", "-n", NAMESPACE)  # the region stores it whole
    kubectl(region, "create", "-f", str(path))


def test_the_rotation_job_evicted_by_its_own_drain_starts_again_and_resumes_its_journal(region: dict[str, Any]) -> None:
    images = new_images(region, "7.0.0")
    ungated(region)
    for cluster in region["clusters"]:  # remediation's CronJob (every 5 minutes, a process each) is not what is tried
        kubectl(region, "patch", "cronjob", "platformctl-remediate", "-n", NAMESPACE, "-p", '{"spec":{"suspend":true}}',
                context=cluster["name"])
    cron = json.loads(kubectl(region, "get", "cronjob", "platformctl-rotate", "-n", NAMESPACE, "-o", "json"))
    assert cron["spec"]["jobTemplate"]["spec"]["podFailurePolicy"]["rules"][0]["action"] == "Ignore"
    # the schedule's own run (weekdays at 03:00 UTC, which the region's fast clock may reach) is not what is tried
    kubectl(region, "patch", "cronjob", "platformctl-rotate", "-n", NAMESPACE, "-p", '{"spec":{"suspend":true}}')
    kubectl(region, "create", "job", "rotate-now", "--from=cronjob/platformctl-rotate", "-n", NAMESPACE)
    give_up = time.monotonic() + 420
    pods: dict[str, dict[str, Any]] = {}
    while time.monotonic() < give_up:
        job = json.loads(kubectl(region, "get", "job", "rotate-now", "-n", NAMESPACE, "-o", "json"))
        for pod in json.loads(kubectl(region, "get", "pods", "-n", NAMESPACE, "-l", "job-name=rotate-now", "-o",
                                      "json"))["items"]:
            pods[pod["metadata"]["name"]] = pod
        done = {c["type"] for c in job["status"].get("conditions", []) if c["status"] == "True"}
        if done & {"Complete", "Failed"}:
            break
        time.sleep(1)
    logs = {name: Path(region["log"]).parent.glob(f"pods/*/{NAMESPACE}_{name}/log") for name in pods}
    said = {name: "".join(p.read_text()[-2000:] for p in paths) for name, paths in logs.items()}
    assert "Complete" in done, (job["status"], said)
    ended = {name: (pod["status"].get("phase"), [c.get("state") for c in pod["status"].get("containerStatuses", [])],
                    pod["status"].get("conditions")) for name, pod in pods.items()}
    assert job["status"].get("failed", 0) == 0 and job["status"]["succeeded"] == 1, (job["status"], ended, said)
    assert len(pods) >= 2, said  # the first was evicted by its own rotation, another went on
    # The pod that finished resumed the host cluster's run its evicted predecessor had begun: kubectl logs shows it.
    last = max(pods.values(), key=lambda p: p["metadata"]["creationTimestamp"])
    state = last["status"]["containerStatuses"][0]["state"]
    assert state["terminated"]["exitCode"] == 0 and state["terminated"]["finishedAt"] >= state["terminated"]["startedAt"]
    output = kubectl(region, "logs", last["metadata"]["name"], "-n", NAMESPACE)
    outcome = json.loads(output[output.index("{"):])
    mine = {c["cluster"]: c for c in outcome["clusters"]}[host(region)]
    assert mine["status"] == "done", mine
    assert mine["report"]["started"] < last["metadata"]["creationTimestamp"], (mine["report"]["started"], last["metadata"])
    # Each pod ran as the rotation's own IAM role (IRSA through the region's STS), and AWS refused it nothing.
    assert get(region, "/platformctl/v1/iam-decisions?refused=1")["decisions"] == []
    mine = get(region, f"/platformctl/v1/iam-decisions?role={host(region)}-rotation")["decisions"]
    assert {"autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"} <= \
        {d["action"] for d in mine if d["decision"] == "allowed"}
    # In every cluster it was that role (`aws eks get-token`, the clusters' access entries), and RBAC refused it nothing.
    assert get(region, "/platformctl/v1/rbac-decisions?refused=1")["decisions"] == []
    evictions = [d for d in get(region, "/platformctl/v1/rbac-decisions")["decisions"] if d.get("subresource") == "eviction"]
    assert {d["cluster"] for d in evictions} == {c["name"] for c in region["clusters"]}
    assert {d["user"].rsplit("/", 1)[0] for d in evictions} == \
        {f"arn:aws:sts::123456789012:assumed-role/{host(region)}-rotation"}
    events = json.loads(kubectl(region, "get", "events", "-n", NAMESPACE, "-o", "json"))["items"]
    evicted = [e for e in events if e["involvedObject"]["name"] in pods and e["reason"] in ("Evicted", "Killing")]
    assert evicted, [(e["reason"], e["involvedObject"]["name"]) for e in events]
    for cluster in region["clusters"]:
        live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=cluster["name"])
        nodes = live.list_nodes()
        assert {n.image for n in nodes} <= set(images.values()), cluster["name"]
        # read from the label the program writes into each launch template's user data: EKS's own is managed groups'
        assert not any("eks.amazonaws.com/nodegroup-image" in n.labels for n in nodes), cluster["name"]
        assert not any(n.unschedulable for n in nodes), cluster["name"]
        report = get(region, f"/platformctl/v1/clusters/{cluster['name']}/invariants")
        assert report["budget_violations"] == [] and report["deleted_without_eviction"] == [], report
