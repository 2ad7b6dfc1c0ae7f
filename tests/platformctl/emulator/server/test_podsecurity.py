"""Pod Security admission in the local region's API servers (``platformctl.emulator.server.podsecurity``): a pod that
breaks its namespace's enforced level is refused with kube-apiserver's message, whether a client sends it or a
controller makes it (the Job then says ``FailedCreate``, as ``kubectl describe job`` shows)."""

from __future__ import annotations

import threading
from typing import Any

from werkzeug.test import Client

from platformctl.emulator.server.kubeapi import KubeAPI
from platformctl.emulator.server.objects import ClusterState
from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster

LOCKED = {"metadata": {"name": "locked", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}
SAFE = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}}


def _cluster() -> tuple[ClusterState, Client]:
    sim = SimulatedCluster("c")
    sim.add_pool(NodePoolSpec("general", "us-west-2a", "m6i.large", "ami-1", 2))
    state = ClusterState(sim)
    client = Client(KubeAPI({"c": state}, threading.Condition(threading.RLock())))
    assert client.post("/clusters/c/api/v1/namespaces", json=LOCKED).status_code == 201
    return state, client


def _pod(name: str, security: dict[str, Any] | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "nginx"}
    if security is not None:
        container["securityContext"] = security
    return {"metadata": {"name": name}, "spec": {"containers": [container]}}


def test_a_pod_breaking_restricted_is_refused_with_kube_apiservers_message_and_a_compliant_one_runs() -> None:
    _, client = _cluster()
    refused = client.post("/clusters/c/api/v1/namespaces/locked/pods", json=_pod("loose", None))
    assert refused.status_code == 403
    assert refused.json["message"] == (
        'pods "loose" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
        '(container "app" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
        '(container "app" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container '
        '"app" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "app" must set '
        'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")')
    assert client.get("/clusters/c/api/v1/namespaces/locked/pods/loose").status_code == 404
    assert client.post("/clusters/c/api/v1/namespaces/locked/pods", json=_pod("tight", SAFE)).status_code == 201
    # A namespace that enforces nothing takes either.
    assert client.post("/clusters/c/api/v1/namespaces/default/pods", json=_pod("loose", None)).status_code == 201


def test_a_jobs_pod_breaking_restricted_is_never_made_and_the_job_says_failed_create() -> None:
    state, client = _cluster()
    for name, security in (("loose", None), ("tight", SAFE)):
        job = {"metadata": {"name": name}, "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", **_pod(name, security)["spec"]}}}}
        assert client.post("/clusters/c/apis/batch/v1/namespaces/locked/jobs", json=job).status_code == 201
    state.sim.run_until_settled(max_seconds=60)
    pods = {p["metadata"]["labels"].get("job-name") for p in
            client.get("/clusters/c/api/v1/namespaces/locked/pods").json["items"]}
    assert pods == {"tight"}
    events = client.get("/clusters/c/api/v1/namespaces/locked/events").json["items"]
    failed = [e for e in events if e["involvedObject"]["name"] == "loose" and e["reason"] == "FailedCreate"]
    assert len(failed) == 1 and failed[0]["message"].startswith(
        'Error creating: pods "loose-" is forbidden: violates PodSecurity "restricted:latest"'), failed
