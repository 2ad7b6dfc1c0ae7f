"""`platformctl local fault` for what canaries must catch: a bad image, a slow one, an API server that answers 503.

Pods are created and read through the region's Kubernetes API (and kubectl) as a user's would be; what is
asserted is what a user sees: the pod's phase, its containers' state, its conditions' times, its events.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

from platformctl.kernel.cluster.model import parse_time
from tests.process import region_fixture, run

KUBECTL = shutil.which("kubectl")
CLUSTER = "dev-usw2a-01"


def _api(info: dict[str, Any]) -> None:
    info["api"] = f"{info['kubernetes_endpoint']}/clusters/{CLUSTER}"


region = region_fixture("--no-workloads", prepare=_api)


def call(region: dict[str, Any], method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{region['api']}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def general_node(region: dict[str, Any]) -> dict[str, Any]:
    _, nodes = call(region, "GET", "/api/v1/nodes?labelSelector=eks.amazonaws.com/nodegroup%3Dgeneral")
    return nodes["items"][0]


def pod_on(node: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def wait_for(region: dict[str, Any], name: str, check: Any, virtual_seconds: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + virtual_seconds / float(region["speed"]) + 10
    while True:
        _, pod = call(region, "GET", f"/api/v1/namespaces/default/pods/{name}")
        if check(pod) or time.monotonic() > deadline:
            return pod
        time.sleep(0.1)


def fault(region: dict[str, Any], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(region["home"], "local", "fault", *args, check=check)


def test_on_a_bad_image_containers_never_start_and_kubectl_says_why(region: dict[str, Any]) -> None:
    node = general_node(region)
    image = node["metadata"]["labels"]["platformctl.io/image"]
    fault(region, "bad-image", image)
    assert call(region, "POST", "/api/v1/namespaces/default/pods", pod_on(node["metadata"]["name"], "stuck"))[0] == 201
    pod = wait_for(region, "stuck", lambda p: p["status"].get("containerStatuses", [{}])[0].get("state", {}).get("waiting", {})
                   .get("reason") == "CreateContainerError", 120)
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "CreateContainerError"}}
    time.sleep(60 / float(region["speed"]))  # a minute of the region's time: still not running
    _, pod = call(region, "GET", "/api/v1/namespaces/default/pods/stuck")
    assert pod["status"]["phase"] == "Pending"
    _, events = call(region, "GET", "/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dstuck")
    assert ("Warning", "Failed", "Error: CreateContainerError") in {(e["type"], e["reason"], e["message"]) for e in events["items"]}
    if KUBECTL:
        shown = subprocess.run([KUBECTL, "--kubeconfig", region["kubeconfig"], "--context", CLUSTER, "get", "pod", "stuck"],
                               capture_output=True, text=True, timeout=60)
        assert "CreateContainerError" in shown.stdout, shown.stdout + shown.stderr
    fault(region, "clear")
    pod = wait_for(region, "stuck", lambda p: p["status"]["phase"] == "Running", 120)
    assert pod["status"]["phase"] == "Running" and pod["status"]["containerStatuses"][0]["ready"]


def test_a_slow_image_shows_in_the_pods_own_timestamps(region: dict[str, Any]) -> None:
    node = general_node(region)
    fault(region, "slow-start", node["metadata"]["labels"]["platformctl.io/image"], "120")
    call(region, "POST", "/api/v1/namespaces/default/pods", pod_on(node["metadata"]["name"], "slow"))
    pod = wait_for(region, "slow", lambda p: p["status"]["phase"] == "Running", 400)
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    scheduled = parse_time(conditions["PodScheduled"]["lastTransitionTime"], "", None)
    running = parse_time(pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"], "", None)
    ready = parse_time(conditions["Ready"]["lastTransitionTime"], "", None)
    created = parse_time(pod["metadata"]["creationTimestamp"], "", None)
    assert created <= scheduled and running - scheduled >= 120 and ready >= running
    fault(region, "clear")


def test_api_errors_answer_creates_with_503_at_the_rate(region: dict[str, Any]) -> None:
    fault(region, "api-errors", CLUSTER, "100%")
    code, status = call(region, "POST", "/api/v1/namespaces/default/pods", pod_on("any", "refused"))
    assert code == 503 and status["reason"] == "ServiceUnavailable"
    assert call(region, "GET", "/api/v1/nodes")[0] == 200  # reads still answer
    fault(region, "api-errors", CLUSTER, "0.5")
    codes = [call(region, "POST", "/api/v1/namespaces/default/pods", pod_on("any", f"half-{i}"))[0] for i in range(40)]
    assert 5 <= codes.count(503) <= 35 and set(codes) == {201, 503}
    listed = json.loads(fault(region, "list", "-o", "json").stdout)["faults"]
    assert {"kind": "api-errors", "cluster": CLUSTER, "rate": 0.5, "verbs": "create"} in [
        {k: v for k, v in f.items() if k != "since"} for f in listed]
    fault(region, "clear")
    assert call(region, "POST", "/api/v1/namespaces/default/pods", pod_on("any", "accepted"))[0] == 201


def test_a_fault_the_region_cannot_apply_is_one_line_exit_2(region: dict[str, Any]) -> None:
    for args, says in ((("bad-image", "ami-0000000000000dead"), "no image ami-0000000000000dead"),
                       (("api-errors", CLUSTER, "lots"), "'lots' is not a rate"),
                       (("api-errors", "dev-usw2z-01", "0.1"), "no cluster 'dev-usw2z-01'")):
        result = fault(region, *args, check=False)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and says in result.stderr, result.stderr
