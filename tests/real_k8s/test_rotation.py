"""``rotate plan`` and ``rotate run`` on a real control plane: kube-apiserver answers every list, watch and eviction,
the disruption controller keeps the budgets, the scheduler places the evicted pods, and the nodes follow moto's Auto
Scaling group as EKS nodes follow their instances (``Kubelets``). What is checked is what the API server saw: every
node replaced by one booting the new image, each eviction it answered, and each workload's ready pods over the run,
from a watch of its own, never below what its budget promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from platformctl.emulator.realk8s import ControlPlane, Kubelets
from platformctl.kernel.nodeadm import registration_labels, render_user_data

pytestmark = pytest.mark.real_k8s
REGION, CLUSTER, POOL = "us-west-2", "real", "general"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION}


@pytest.fixture(scope="module")
def moto(real: ControlPlane) -> Iterator[dict[str, str]]:
    from platformctl.emulator import moto_extensions

    moto_extensions.install()  # the local region's AWS: new launch template versions' user data as EC2 keeps it
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {**KEYS, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


def client(env: dict[str, str], service: str) -> Any:
    return boto3.client(service, endpoint_url=env["AWS_ENDPOINT_URL"], region_name=REGION,  # type: ignore[call-overload]
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def user_data(image: str) -> str:
    return render_user_data(CLUSTER, "https://127.0.0.1", "", "10.96.0.0/16",
                            registration_labels(CLUSTER, POOL, "general", image))


class Watched:
    """Each deployment's and statefulset's ready pods, from a watch of the namespace's pods: the lowest count seen."""

    def __init__(self, real: ControlPlane, namespace: str) -> None:
        self.real, self.namespace = real, namespace
        self.lowest: dict[str, int] = {}
        self.ready: dict[str, dict[str, bool]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.1):
            items = self.real.get(f"/api/v1/namespaces/{self.namespace}/pods")[1]["items"]
            counts: dict[str, int] = {}
            for pod in items:
                app = pod["metadata"]["labels"].get("app", "")
                ready = pod["metadata"].get("deletionTimestamp") is None and any(
                    c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
                counts[app] = counts.get(app, 0) + ready
            for app, n in counts.items():
                self.lowest[app] = min(self.lowest.get(app, n), n)


def test_rotate_run_replaces_every_node_with_no_budget_broken_on_a_real_control_plane(
        real: ControlPlane, moto: dict[str, str], tmp_path: Path) -> None:
    ec2, asg = client(moto, "ec2"), client(moto, "autoscaling")
    images = [i["ImageId"] for i in ec2.describe_images(Owners=["amazon"])["Images"][:2]]
    template = ec2.create_launch_template(LaunchTemplateName=f"{CLUSTER}-{POOL}", LaunchTemplateData={
        "ImageId": images[0], "InstanceType": "m6i.large", "UserData": user_data(images[0])})["LaunchTemplate"]
    asg.create_auto_scaling_group(
        AutoScalingGroupName=f"{CLUSTER}-{POOL}", MinSize=0, MaxSize=8, DesiredCapacity=3,
        LaunchTemplate={"LaunchTemplateId": template["LaunchTemplateId"], "Version": "$Default"},
        AvailabilityZones=[f"{REGION}a"],
        Tags=[{"Key": "platformctl.io/cluster", "Value": CLUSTER, "PropagateAtLaunch": True,
               "ResourceId": f"{CLUSTER}-{POOL}", "ResourceType": "auto-scaling-group"}])
    kubelets = Kubelets(real, CLUSTER, REGION, period=0.5).start()
    try:
        _rotate(real, moto, ec2, images, template["LaunchTemplateId"], tmp_path)
    except BaseException as exc:
        exc.add_note(f"the kubelets' errors: {kubelets.errors[-3:]}; never joined: {kubelets.never_joined}")
        raise
    finally:
        kubelets.stop()
    assert kubelets.errors == [] and kubelets.never_joined == {}


def _ready_nodes(real: ControlPlane) -> list[dict[str, Any]]:
    return [n for n in real.get("/api/v1/nodes")[1]["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))]


def _rotate(real: ControlPlane, env: dict[str, str], ec2: Any, images: list[str], template: str, tmp: Path) -> None:
    from tests.real_k8s.test_control_plane import until

    until(lambda: len(_ready_nodes(real)) == 3, what="the group's three nodes Ready")
    before = {n["metadata"]["name"] for n in _ready_nodes(real)}
    ns = "apps"
    real.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    spec = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    for kind, name, replicas, budget in (("deployments", "web", 3, {"minAvailable": 2}),
                                         ("statefulsets", "kvstore", 2, {"maxUnavailable": 1})):
        body: dict[str, Any] = {"metadata": {"name": name}, "spec": {
            "replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}
        if kind == "statefulsets":
            body["spec"]["serviceName"] = name
        assert real.request("POST", f"/apis/apps/v1/namespaces/{ns}/{kind}", body)[0] == 201
        assert real.request("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
            "metadata": {"name": name}, "spec": {**budget, "selector": {"matchLabels": {"app": name}}}})[0] == 201
    watched = Watched(real, ns)
    until(lambda: sum(1 for p in real.get(f"/api/v1/namespaces/{ns}/pods")[1]["items"]
                      if p["status"].get("phase") == "Running") == 5, what="five running pods")
    ec2.create_launch_template_version(LaunchTemplateId=template, SourceVersion="1", LaunchTemplateData={
        "ImageId": images[1], "UserData": user_data(images[1])})
    ec2.modify_launch_template(LaunchTemplateId=template, DefaultVersion="2")
    policy = tmp / "rotation.yaml"
    policy.write_text(Path("upgrade_service/examples/rotation.yaml").read_text())
    command = [str(Path(sys.executable).parent / "platformctl")]
    common = ["--policy", str(policy), "--context", real.name, "--kubeconfig", str(real.kubeconfig), "--output", "json"]
    plan = subprocess.run([*command, "rotate", "plan", *common], capture_output=True, text=True, env={**os.environ, **env},
                          timeout=120, check=False)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert sorted(n for w in planned["waves"] for n in w["nodes"]) == sorted(before), planned
    watched.thread.start()
    try:
        run = subprocess.run([*command, "rotate", "run", *common, "--region", REGION, "--state", f"sqlite:///{tmp / 'state.db'}"],
                             capture_output=True, text=True, env={**os.environ, **env}, timeout=300, check=False)
    finally:
        watched.stop.set()
        watched.thread.join()
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    after = _ready_nodes(real)
    assert not before & {n["metadata"]["name"] for n in after}
    assert {n["metadata"]["labels"]["platformctl.io/image"] for n in after} == {images[1]}
    assert watched.lowest["web"] >= 2 and watched.lowest["kvstore"] >= 1, watched.lowest
    pods = real.get(f"/api/v1/namespaces/{ns}/pods")[1]["items"]
    assert sum(1 for p in pods if p["status"].get("phase") == "Running") == 5
