"""The real control plane (``platformctl.emulator.realk8s``): etcd, kube-apiserver, kube-controller-manager,
kube-scheduler of Kubernetes v1.32.9 and kwok, built by ``scripts/real-k8s/build.sh``. What is checked is what the real
components answer: kubectl's output, the eviction API's answers under a budget the disruption controller keeps, RBAC's
decisions for the program's roles with tokens from the TokenRequest API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from platformctl.emulator.realk8s import ControlPlane
from platformctl.emulator.simulation.pools import build_node
from platformctl.kernel.cluster.model.objects import Taint

pytestmark = pytest.mark.real_k8s


def until(check: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def kubectl(real: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shutil.which("kubectl") or "kubectl", "--kubeconfig", str(real.kubeconfig), *args],
                          capture_output=True, text=True, check=False, timeout=60)


def test_nodes_registered_from_instances_turn_ready_and_kubectl_sees_them_as_the_kubelet_registered_them(
        real: ControlPlane) -> None:
    nodes = [build_node(name=f"ip-10-0-1-{i}.us-west-2.compute.internal", zone="us-west-2a", region="us-west-2",
                        instance_type="m6i.large", instance_id=f"i-0000000000000000{i}", pool="general",
                        cluster="dev-usw2a-01", image="ami-0abc", taints=[Taint("dedicated", "ci", "NoSchedule")] if i == 3
                        else []) for i in (1, 2, 3)]
    real.register([n.to_kube() for n in nodes])
    def ready() -> Any:
        # Ready, and the node lifecycle controller's not-ready taint (on every new node until then) taken off.
        out = json.loads(kubectl(real, "get", "nodes", "-o", "json").stdout)
        return out if len(out["items"]) == 3 and all(
            any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            and not any(t["key"].startswith("node.kubernetes.io/") for t in n["spec"].get("taints", []))
            for n in out["items"]) else None

    shown = until(ready, what="three Ready nodes")
    by_name = {n["metadata"]["name"]: n for n in shown["items"]}
    for node in nodes:
        got = by_name[node.name]
        assert got["spec"]["providerID"] == node.provider_id
        assert {k: v for k, v in got["metadata"]["labels"].items() if k in node.labels} == dict(node.labels)
    assert by_name[nodes[2].name]["spec"]["taints"] == [{"key": "dedicated", "value": "ci", "effect": "NoSchedule"}]


def test_an_eviction_the_budget_does_not_allow_is_429_with_the_api_servers_own_words(real: ControlPlane) -> None:
    ns = "evict"
    assert real.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
    labels = {"app": "web"}
    real.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "metadata": {"name": "web"}, "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}}}})
    real.request("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}}})

    def running() -> list[str]:
        pods = real.get(f"/api/v1/namespaces/{ns}/pods")[1]["items"]
        return [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"] if len(pods) == 2 else []

    pods = until(running, what="two running pods")
    until(lambda: real.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/web")[1]["status"].get(
        "currentHealthy") == 2, what="the disruption controller's count")
    status, body = real.request("POST", f"/api/v1/namespaces/{ns}/pods/{pods[0]}/eviction",
                                {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pods[0]}})
    assert status == 429, body
    assert body["reason"] == "TooManyRequests" and body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert body["details"]["causes"][0]["message"] == \
        "The disruption budget web needs 2 healthy pods and has 2 currently"
    real.request("PATCH", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/web", {"spec": {"minAvailable": 1}},
                 content_type="application/merge-patch+json")
    until(lambda: real.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/web")[1]["status"].get(
        "disruptionsAllowed") == 1, what="one disruption allowed")
    status, body = real.request("POST", f"/api/v1/namespaces/{ns}/pods/{pods[0]}/eviction",
                                {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pods[0]}})
    assert status == 201, body


def test_a_service_accounts_token_from_the_token_request_api_may_do_what_its_cluster_role_grants_only(
        real: ControlPlane) -> None:
    for obj in ({"metadata": {"name": "platformctl-system"}},):
        real.request("POST", "/api/v1/namespaces", obj)
    real.request("POST", "/api/v1/namespaces/platformctl-system/serviceaccounts", {"metadata": {"name": "remediation"}})
    real.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "metadata": {"name": "platformctl:remediation"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}]})
    real.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": "platformctl:remediation"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "platformctl:remediation"},
        "subjects": [{"kind": "ServiceAccount", "name": "remediation", "namespace": "platformctl-system"}]})
    token = real.token("platformctl-system", "remediation")
    assert until(lambda: real.request("GET", "/api/v1/nodes", token=token)[0] == 200, what="the binding in force")
    status, body = real.request("DELETE", "/api/v1/namespaces/kube-system", token=token)
    assert status == 403
    assert body["message"] == ('namespaces "kube-system" is forbidden: User '
                               '"system:serviceaccount:platformctl-system:remediation" cannot delete resource '
                               '"namespaces" in API group "" in the namespace "kube-system"')
    assert real.request("GET", "/api/v1/nodes", token=token + "x")[0] == 401
