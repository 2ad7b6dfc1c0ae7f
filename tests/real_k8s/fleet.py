"""A small fleet on the real control plane: moto's AWS (with the local region's extensions) behind one Auto Scaling
group whose instances join as the kubelet would (``Kubelets``), workloads under budgets, a new image in the launch
template, and ``platformctl`` run as the operator runs it. Shared by the rotation modules (each starts its own
control plane)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import yaml
from moto.moto_server.threaded_moto_server import ThreadedMotoServer

from platformctl.emulator.realk8s import ControlPlane, Kubelets
from platformctl.kernel.nodeadm import registration_labels, render_user_data
from tests.real_k8s.test_control_plane import until

REGION, CLUSTER, POOL, NAMESPACE = "us-west-2", "real", "general", "apps"
GROUP = f"{CLUSTER}-{POOL}"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION}
BUDGETS = {"web": 2, "kvstore": 1}  # the fewest ready pods each workload's budget promises


@contextmanager
def moto_aws() -> Iterator[dict[str, str]]:
    """moto on loopback, as the local region's AWS is (its extensions installed), and this process's environment
    pointing at it."""
    from platformctl.emulator import moto_extensions

    moto_extensions.install()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {**KEYS, "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        # moto's accounts are this process's: left empty for the next module's fleet.
        urllib.request.urlopen(urllib.request.Request(env["AWS_ENDPOINT_URL"] + "/moto-api/reset", method="POST"))
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


def ready_nodes(real: ControlPlane) -> list[dict[str, Any]]:
    return [n for n in real.get("/api/v1/nodes")[1]["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))]


class Fleet:
    """The group (``nodes`` instances of the first image), its kubelets, and the workloads."""

    def __init__(self, real: ControlPlane, env: dict[str, str], nodes: int = 3) -> None:
        self.real, self.env = real, env
        self.ec2, self.asg = client(env, "ec2"), client(env, "autoscaling")
        self.images = [i["ImageId"] for i in self.ec2.describe_images(Owners=["amazon"])["Images"][:2]]
        self.template = self.ec2.create_launch_template(LaunchTemplateName=GROUP, LaunchTemplateData={
            "ImageId": self.images[0], "InstanceType": "m6i.large", "UserData": user_data(self.images[0])})[
            "LaunchTemplate"]["LaunchTemplateId"]
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=GROUP, MinSize=0, MaxSize=3 * nodes, DesiredCapacity=nodes,
            LaunchTemplate={"LaunchTemplateId": self.template, "Version": "$Default"}, AvailabilityZones=[f"{REGION}a"])
        self.kubelets = Kubelets(real, CLUSTER, REGION, period=0.5).start()
        until(lambda: len(ready_nodes(real)) == nodes, what=f"the group's {nodes} nodes Ready")
        self.before = {n["metadata"]["name"]: n["spec"]["providerID"].rsplit("/", 1)[-1] for n in ready_nodes(real)}
        self._workloads()

    def _workloads(self) -> None:
        real = self.real
        real.request("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        spec = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
        for kind, name, replicas, budget in (("deployments", "web", 3, {"minAvailable": BUDGETS["web"]}),
                                             ("statefulsets", "kvstore", 2, {"maxUnavailable": 1})):
            body: dict[str, Any] = {"metadata": {"name": name}, "spec": {
                "replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}
            if kind == "statefulsets":
                body["spec"]["serviceName"] = name
            assert real.request("POST", f"/apis/apps/v1/namespaces/{NAMESPACE}/{kind}", body)[0] == 201
            assert real.request("POST", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets", {
                "metadata": {"name": name}, "spec": {**budget, "selector": {"matchLabels": {"app": name}}}})[0] == 201
        until(lambda: self.running() == 5, what="five running pods")

    def running(self) -> int:
        pods = self.real.get(f"/api/v1/namespaces/{NAMESPACE}/pods")[1]["items"]
        return sum(1 for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))

    def new_image(self) -> str:
        self.ec2.create_launch_template_version(LaunchTemplateId=self.template, SourceVersion="1", LaunchTemplateData={
            "ImageId": self.images[1], "UserData": user_data(self.images[1])})
        self.ec2.modify_launch_template(LaunchTemplateId=self.template, DefaultVersion="2")
        return self.images[1]

    def policy(self, folder: Path, **changes: Any) -> Path:
        """The shipped example policy, its one-at-a-time settle shortened (wall time here: kwok starts pods at once)."""
        policy = yaml.safe_load(Path("upgrade_service/examples/rotation.yaml").read_text())
        for rule in policy["workloadRules"]:
            if rule.get("mode") == "one-at-a-time":
                rule["settleSeconds"] = 5
        policy.update(changes)
        path = folder / "rotation.yaml"
        path.write_text(yaml.safe_dump(policy))
        return path

    def platformctl(self, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = [str(Path(sys.executable).parent / "platformctl"), *args]
        return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **self.env, **(env or {})},
                              timeout=timeout, check=False)

    def activities(self) -> list[str]:
        return [a["Description"] for a in self.asg.describe_scaling_activities(AutoScalingGroupName=GROUP)["Activities"]]

    def close(self) -> None:
        self.kubelets.stop()


class Watched:
    """Each workload's ready pods, from the API server's own answers every 0.1 s while a run goes on: the fewest seen."""

    def __init__(self, real: ControlPlane) -> None:
        self.real = real
        self.lowest: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Watched:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            counts: dict[str, int] = {}
            for pod in self.real.get(f"/api/v1/namespaces/{NAMESPACE}/pods")[1]["items"]:
                app = pod["metadata"]["labels"].get("app", "")
                ready = pod["metadata"].get("deletionTimestamp") is None and any(
                    c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
                counts[app] = counts.get(app, 0) + ready
            for app, n in counts.items():
                self.lowest[app] = min(self.lowest.get(app, n), n)
