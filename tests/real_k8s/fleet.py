"""A small fleet on the real control plane: moto's AWS (with the local region's extensions) behind two pools' Auto
Scaling groups whose instances join as the kubelet would (``Kubelets``), workloads under budgets, a wait-for-completion
Job, a new image in the launch templates, and ``platformctl`` run as the operator runs it. Shared by the rotation
modules (each starts its own control plane)."""

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

from platformctl.emulator import moto_extensions
from platformctl.emulator.realk8s import ControlPlane, Kubelets
from platformctl.kernel.nodeadm import registration_labels, render_user_data
from tests.real_k8s.test_control_plane import until

REGION, CLUSTER, NAMESPACE = "us-west-2", "real", "apps"
POOLS = {"system": 2, "general": 3}  # nodes a pool (the shipped policy rotates system before general)
GROUPS = {pool: f"{CLUSTER}-{pool}" for pool in POOLS}
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": REGION}
BUDGETS = {"web": 2, "kvstore": 1}  # the fewest ready pods each workload's budget promises


@contextmanager
def moto_aws() -> Iterator[dict[str, str]]:
    """moto on loopback, as the local region's AWS is (its extensions installed), and this process's environment
    pointing at it."""
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


def images(ec2: Any) -> list[str]:
    """The first image: the region's EKS-optimised AL2023 image for 1.32; the second: one baked from it (``CreateImage``
    of an instance of it, as the image pipeline bakes), so that both run a kubelet that joins."""
    moto_extensions.publish_eks_optimized_images(REGION)
    first = client({"AWS_ENDPOINT_URL": ec2.meta.endpoint_url}, "ssm").get_parameter(
        Name=moto_extensions.EKS_PARAMETER.format(version="1.32", arch="x86_64", variant="standard"))["Parameter"]["Value"]
    builder = ec2.run_instances(ImageId=first, InstanceType="m6i.large", MinCount=1, MaxCount=1)["Instances"][0]
    baked = ec2.create_image(InstanceId=builder["InstanceId"], Name="platformctl-base-1.32-real")["ImageId"]
    ec2.terminate_instances(InstanceIds=[builder["InstanceId"]])
    return [first, baked]


def plain_image(ec2: Any) -> str:
    """Plain Amazon Linux 2023 (no kubelet, no nodeadm): an instance of it never joins a cluster."""
    return str(client({"AWS_ENDPOINT_URL": ec2.meta.endpoint_url}, "ssm").get_parameter(
        Name="/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-6.1-x86_64")["Parameter"]["Value"])


def user_data(image: str, pool: str) -> str:
    return render_user_data(CLUSTER, "https://127.0.0.1", "", "10.96.0.0/16",
                            registration_labels(CLUSTER, pool, "general", image))


def ready_nodes(real: ControlPlane) -> list[dict[str, Any]]:
    return [n for n in real.get("/api/v1/nodes")[1]["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))]


class Fleet:
    """The pools' groups (``POOLS`` instances of the first image), their kubelets, and the workloads."""

    def __init__(self, real: ControlPlane, env: dict[str, str]) -> None:
        self.real, self.env = real, env
        self.ec2, self.asg = client(env, "ec2"), client(env, "autoscaling")
        self.images = images(self.ec2)
        self.templates: dict[str, str] = {}
        for pool, nodes in POOLS.items():
            self.templates[pool] = self.ec2.create_launch_template(LaunchTemplateName=GROUPS[pool], LaunchTemplateData={
                "ImageId": self.images[0], "InstanceType": "m6i.large", "UserData": user_data(self.images[0], pool)})[
                "LaunchTemplate"]["LaunchTemplateId"]
            self.asg.create_auto_scaling_group(
                AutoScalingGroupName=GROUPS[pool], MinSize=0, MaxSize=3 * nodes, DesiredCapacity=nodes,
                LaunchTemplate={"LaunchTemplateId": self.templates[pool], "Version": "$Default"},
                AvailabilityZones=[f"{REGION}a"])
        self.kubelets = Kubelets(real, CLUSTER, REGION, period=0.5,
                                 kubelet_of=lambda image: moto_extensions.kubelet_of(REGION, image)).start()
        self.refused: set[str] = set()  # instances a test expects never to join
        total = sum(POOLS.values())
        until(lambda: len(ready_nodes(real)) == total, what=f"the pools' {total} nodes Ready")
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

    def new_image(self, image: str | None = None) -> str:
        """Every pool's launch template boots ``image`` (the second image, unless said) from a new default version."""
        image = image or self.images[1]
        for pool, template in self.templates.items():
            version = self.ec2.create_launch_template_version(
                LaunchTemplateId=template, SourceVersion="1",
                LaunchTemplateData={"ImageId": image, "UserData": user_data(image, pool)})["LaunchTemplateVersion"]
            self.ec2.modify_launch_template(LaunchTemplateId=template, DefaultVersion=str(version["VersionNumber"]))
        return image

    def training(self, seconds: int) -> str:
        """A Job the shipped policy waits for (``workload: training``: wait-for-completion), its one pod running for
        ``seconds`` (kwok's stage reads the annotation), Running when this returns. Its pod's uid."""
        body = {"metadata": {"name": "train"}, "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"workload": "training"},
                         "annotations": {"sim.platformctl.io/run-seconds": str(seconds)}},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "c", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}
        assert self.real.request("POST", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs", body)[0] == 201
        return str(until(lambda: next((p["metadata"]["uid"] for p in self.real.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=workload%3Dtraining")[1]["items"]
            if p["status"].get("phase") == "Running"), None), what="the training pod Running"))

    def job(self, name: str) -> dict[str, Any]:
        return dict(self.real.get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name}")[1]["status"])

    def job_counted(self, name: str) -> dict[str, Any]:
        """The Job's status once its controller has counted its pods' end (``succeeded`` or ``failed``): the count
        follows the pod's by a sync of the Job controller (its pods' finalizers, ``uncountedTerminatedPods``), which a
        loaded machine can make seconds."""
        def counted() -> dict[str, Any] | None:
            status = self.job(name)
            return status if status.get("succeeded") or status.get("failed") else None

        return dict(until(counted, what=f"Job {name}'s pods counted succeeded or failed"))

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
        return [a["Description"] for group in GROUPS.values()
                for a in self.asg.describe_scaling_activities(AutoScalingGroupName=group)["Activities"]]

    def group(self, pool: str) -> dict[str, Any]:
        return dict(self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[GROUPS[pool]])["AutoScalingGroups"][0])

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
