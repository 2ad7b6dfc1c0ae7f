"""The local region's kubelet (``local up --run-jobs``): a Job's pod of the toolkit's image runs as a process, with the
Secrets and ConfigMaps it names made as a node would make them, or waits for them as a kubelet does. What is checked is
what kubectl shows: the pod's status, its events, its logs and the Job's completion."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from platformctl.emulator.server.kubelet import Kubelet
from platformctl.emulator.server.objects import ClusterState
from platformctl.emulator.server.process import kubeconfig
from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from tests.platformctl.emulator.server.conftest import Served

NS = "platformctl-system"


def _job(name: str, container: dict[str, Any], volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec = {"restartPolicy": "Never", "containers": [{"name": "tool", "image": "ghcr.io/platformctl/platformctl:1.0",
                                                      **container}], "volumes": volumes or []}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"annotations": {"sim.platformctl.io/start-seconds": "1"}},
                                                     "spec": spec}}}


class Region:
    def __init__(self, served: Served, tmp: Path) -> None:
        self.served = served
        self.sim = SimulatedCluster("w")
        self.sim.add_pool(NodePoolSpec("system", "us-east-1a", "m6i.2xlarge", "ami-1", 2))
        self.state = served.states["w"] = ClusterState(self.sim)
        served.kubeconfig.write_text(yaml.safe_dump(kubeconfig("test", served.url, list(served.states), "w")))
        self.kubelet = Kubelet(self.state, tmp / "state", served.kubeconfig, "http://127.0.0.1:9", None, served.cond,
                               self.state.tick, kinds=frozenset({"Job", "ReplicaSet"}))
        self.sim.use_runtime(self.kubelet)
        with served.cond:
            self.state.create_namespace({"metadata": {"name": NS}})
            self.sim.advance(60)
            self.state.tick()

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        binary = shutil.which("kubectl")
        assert binary is not None, "kubectl is not installed (.ci/run installs it)"
        out = subprocess.run([binary, "--kubeconfig", str(self.served.kubeconfig), "--context", "w", "-n", NS, *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 or not check, out.stderr
        return out

    def advance(self, seconds: float) -> None:
        with self.served.cond:
            self.sim.advance(seconds)
            self.state.tick()

    def pod_of(self, job: str) -> dict[str, Any]:
        [pod] = json.loads(self.kubectl("get", "pods", "-l", f"job-name={job}", "-o", "json").stdout)["items"]
        return dict(pod)

    def wait_job(self, job: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.advance(1)
            status = json.loads(self.kubectl("get", "job", job, "-o", "json").stdout)["status"]
            if status.get("succeeded") or status.get("failed"):
                return dict(status)
            time.sleep(0.2)
        raise AssertionError(f"job {job} did not end in {timeout} s")


@pytest.fixture
def region(served: Served, tmp_path: Path) -> Any:
    region = Region(served, tmp_path)
    yield region
    region.kubelet.stop_all()


def test_a_pod_waits_for_the_secret_it_names_and_runs_once_it_exists(region: Region) -> None:
    region.sim.create_object(_job("tick", {"args": ["--help"], "envFrom": [{"secretRef": {"name": "pulumi"}}],
                                           "env": [{"name": "WHERE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}))
    region.advance(15)
    pod = region.pod_of("tick")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"
    events = json.loads(region.kubectl("get", "events", "-o", "json").stdout)["items"]
    said = {(e["reason"], e["message"]) for e in events if e["involvedObject"]["name"] == pod["metadata"]["name"]}
    assert ("Failed", 'Error: secret "pulumi" not found') in said
    region.kubectl("create", "secret", "generic", "pulumi", "--from-literal=PULUMI_CONFIG_PASSPHRASE=s3cret")
    secret = json.loads(region.kubectl("get", "secret", "pulumi", "-o", "json").stdout)
    assert secret["type"] == "Opaque" and secret["data"] == {"PULUMI_CONFIG_PASSPHRASE": "czNjcmV0"}
    status = region.wait_job("tick")
    assert status.get("succeeded") == 1, status
    assert "Usage: platformctl" in region.kubectl("logs", pod["metadata"]["name"]).stdout


def test_a_container_this_kubelet_cannot_make_fails_at_its_start_and_says_why(region: Region) -> None:
    region.sim.create_object(_job("odd", {"command": ["/bin/sh"], "args": ["-c", "true"]}))
    status = region.wait_job("odd")
    assert status.get("failed") == 1, status
    pod = region.pod_of("odd")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 128
    assert "the image's entrypoint is platformctl" in region.kubectl("logs", pod["metadata"]["name"]).stdout


def test_a_deployments_pod_projects_only_the_items_it_lists_and_is_restarted_in_place_when_it_exits(
        region: Region) -> None:
    """A Deployment's pod of the toolkit's image (the canary runner's) runs as a process: a ConfigMap volume with
    ``items`` holds only the keys listed, each at its path, and waits for a listed key that is not there; its container
    that exits is started again in the same pod after the kubelet's back-off (restartPolicy Always)."""
    region.kubectl("create", "configmap", "runner", "--from-literal=other=x")
    volume = {"name": "config", "configMap": {"name": "runner", "items": [
        {"key": "canary-pool.yaml", "path": "canaries/pool.yaml"}]}}
    container = {"name": "runner", "image": "ghcr.io/platformctl/platformctl:1.0",
                 "args": ["canary", "list", "--canaries", "/etc/cfg/canaries"],
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/cfg"}]}
    region.sim.create_object({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "runner", "namespace": NS},
                              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "runner"}}, "template": {
                                  "metadata": {"labels": {"app": "runner"}},
                                  "spec": {"containers": [container], "volumes": [volume]}}}})
    region.advance(15)
    [pod] = json.loads(region.kubectl("get", "pods", "-l", "app=runner", "-o", "json").stdout)["items"]
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    events = json.loads(region.kubectl("get", "events", "-o", "json").stdout)["items"]
    assert any("configmap references non-existent config key: canary-pool.yaml" in e["message"] for e in events)
    region.kubectl("delete", "configmap", "runner")
    region.kubectl("create", "configmap", "runner", "--from-literal=canary-pool.yaml=name: pool\nkind: node-pool\n",
                   "--from-literal=other=x")
    name = pod["metadata"]["name"]
    deadline = time.monotonic() + 60
    while True:  # it runs, lists the one canary it was given, exits, and is started again in the same pod
        region.advance(5)
        [now] = json.loads(region.kubectl("get", "pods", "-l", "app=runner", "-o", "json").stdout)["items"]
        if now["status"]["containerStatuses"][0]["restartCount"] >= 2:  # at once, then after a back-off
            break
        assert time.monotonic() < deadline, now["status"]
        time.sleep(0.2)
    assert now["metadata"]["name"] == name and now["metadata"]["uid"] == pod["metadata"]["uid"]
    log = region.kubectl("logs", name).stdout
    assert "pool" in log and "node-pool" in log
    folder = next(Path(region.kubelet.root).glob(f"{NS}_{name}/volumes/config"))
    assert sorted(str(f.relative_to(folder)) for f in folder.rglob("*") if f.is_file()) == ["canaries/pool.yaml"]
    events = json.loads(region.kubectl("get", "events", "-o", "json").stdout)["items"]
    assert any(e["reason"] == "BackOff" and e["message"].startswith("Back-off restarting failed container runner")
               for e in events), [e["message"] for e in events]

