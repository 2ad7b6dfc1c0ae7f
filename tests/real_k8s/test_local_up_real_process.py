"""``platformctl local up --control-plane real --cluster NAME``: the region as ever, and cluster NAME's context a real
control plane whose nodes are NAME's instances in the region's AWS and which holds the program's objects, so that the
jobs' RBAC is checked with real service-account tokens from the TokenRequest API (``kubectl create token``). What is
checked is what kubectl and moto answer, then that `local down` leaves no process of it behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import yaml

pytestmark = pytest.mark.real_k8s
CLUSTER = "dev-usw2a-01"


def run(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(Path(sys.executable).parent / "platformctl"), *args], capture_output=True, text=True,
                          env={**os.environ, "PLATFORMCTL_HOME": str(home)}, timeout=600, check=False)
    assert not check or done.returncode == 0, done.stderr[-3000:]
    return done


def kubectl(kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "--context", CLUSTER, *args], capture_output=True,
                          text=True, timeout=60, check=False)


def _token_kubeconfig(config: str, token: str, path: Path) -> str:
    """The cluster's context with only the job's token (no client certificate beside it)."""
    found = yaml.safe_load(Path(config).read_text())
    cluster = next(c for c in found["clusters"] if c["name"] == CLUSTER)
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": CLUSTER, "clusters": [cluster],
                                    "users": [{"name": "job", "user": {"token": token}}],
                                    "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": "job"}}]}))
    return str(path)


def test_a_cluster_served_by_a_real_control_plane_has_its_instances_as_nodes_and_the_programs_rbac(tmp_path: Path) -> None:
    bad = run(tmp_path, "local", "up", "--stage", "dev", "--control-plane", "real", "--cluster", "nope", check=False)
    assert bad.returncode == 2 and "--cluster" in bad.stderr and not (tmp_path / "server.json").exists()
    info = json.loads(run(tmp_path, "local", "up", "--stage", "dev", "--no-workloads", "--no-canaries",
                          "--control-plane", "real", "--cluster", CLUSTER, "-o", "json").stdout)
    try:
        assert list(info["real_control_planes"]) == [CLUSTER]
        config = info["kubeconfig"]
        version = json.loads(kubectl(config, "version", "-o", "json").stdout)
        assert version["serverVersion"]["gitVersion"] == "v1.32.9"
        autoscaling = boto3.client("autoscaling", endpoint_url=info["aws_endpoint"], region_name=info["region"],
                                   aws_access_key_id="testing", aws_secret_access_key="testing")
        instances = {i["InstanceId"] for g in autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
                     if {"Key": "platformctl.io/cluster", "Value": CLUSTER} in [
                         {"Key": t["Key"], "Value": t["Value"]} for t in g.get("Tags", [])]
                     for i in g["Instances"]}
        nodes = json.loads(kubectl(config, "get", "nodes", "-o", "json").stdout)["items"]
        assert instances and {n["spec"]["providerID"].rsplit("/", 1)[-1] for n in nodes} == instances
        assert all(n["metadata"]["labels"]["platformctl.io/cluster"] == CLUSTER for n in nodes)
        # kube-apiserver took every object the program declares for the cluster (it refused the remediation CronJob
        # until its podFailurePolicy pattern said its status: a CronJob's job template is not defaulted).
        refused = tmp_path / "local" / "real" / CLUSTER / "apply.log"
        assert not refused.exists() or refused.read_text() == "", refused.read_text()
        assert kubectl(config, "get", "cronjob", "platformctl-remediate", "-n", "platformctl-system").returncode == 0
        # The program's remediation role, with a token from the TokenRequest API.
        token = kubectl(config, "create", "token", "platformctl-remediation", "-n", "platformctl-system")
        assert token.returncode == 0, token.stderr
        as_job = _token_kubeconfig(config, token.stdout.strip(), tmp_path / "remediation.kubeconfig")
        can = {what: kubectl(as_job, "auth", "can-i", *what.split()).stdout.strip()
               for what in ("list nodes", "create pods --subresource=eviction -n default", "get secrets -n platformctl-system",
                            "delete namespaces")}
        assert can == {"list nodes": "yes", "create pods --subresource=eviction -n default": "yes",
                       "get secrets -n platformctl-system": "no", "delete namespaces": "no"}, can
    finally:
        run(tmp_path, "local", "down")
    left = subprocess.run(["pgrep", "-f", str(tmp_path / "local" / "real")], capture_output=True, text=True, check=False).stdout
    assert left == "", left
