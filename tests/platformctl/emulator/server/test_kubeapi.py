"""The Kubernetes REST subset over simulated clusters, request by request, with the API's own answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from werkzeug.test import Client

from platformctl.emulator.server.objects import ApiError
from platformctl.kernel.cluster.model import LABEL_NODEGROUP, parse_time
from tests.platformctl.emulator.server.conftest import TABLE, Api

R = "/clusters/rules"
S = "/clusters/synth"


def body(response: Any) -> dict[str, Any]:
    return json.loads(response.get_data())


def status_of(response: Any) -> tuple[int, str]:
    data = body(response)
    assert data["kind"] == "Status" and data["code"] == response.status_code
    return response.status_code, data["reason"]


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "probe"}},
            "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "50m"}}}], **spec}}


def _deployment(name: str, replicas: int = 2, labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}]}}}}


# ------------------------------------------------------------------------------------ discovery


def test_discovery_lists_the_served_kinds_and_the_eviction_subresource(client: Client) -> None:
    version = body(client.get(f"{R}/version"))
    assert (version["major"], version["minor"]) == ("1", "32")
    assert body(client.get(f"{R}/api"))["versions"] == ["v1"]
    core = {r["name"]: r for r in body(client.get(f"{R}/api/v1"))["resources"]}
    assert core["pods/eviction"]["group"] == "policy" and core["pods/eviction"]["kind"] == "Eviction"
    assert "watch" in core["nodes"]["verbs"] and core["nodes"]["namespaced"] is False
    groups = {g["name"] for g in body(client.get(f"{R}/apis"))["groups"]}
    assert groups == {"apps", "batch", "policy", "scheduling.k8s.io", "rbac.authorization.k8s.io", "apiextensions.k8s.io",
                      "events.k8s.io", "admissionregistration.k8s.io", "networking.k8s.io"}
    apps = {r["name"] for r in body(client.get(f"{R}/apis/apps/v1"))["resources"]}
    assert {"deployments", "daemonsets", "statefulsets", "replicasets"} <= apps
    openapi = body(client.get(f"{R}/openapi/v3"))["paths"]
    doc = body(client.get(openapi["apis/apps/v1"]["serverRelativeURL"]))
    patch = doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"]["kind"] == "Deployment"


def test_unknown_cluster_path_and_group_are_404_statuses(client: Client) -> None:
    assert status_of(client.get("/clusters/nope/api/v1/nodes")) == (404, "NotFound")
    assert status_of(client.get(f"{R}/api/v1/services")) == (404, "NotFound")
    assert status_of(client.get(f"{R}/apis/apps/v2/deployments")) == (404, "NotFound")
    assert status_of(client.get(f"{R}/api/v1/namespaces/web/nodes")) == (404, "NotFound")  # nodes are not namespaced
    answer = client.get(f"{R}/no/such/thing")  # no handler: the mux's plain text, as kube-apiserver's
    assert (answer.status_code, answer.get_data(as_text=True)) == (404, "404 page not found\n")


# ------------------------------------------------------------------------------------ nodes


def test_node_list_honours_label_and_field_selectors(api: Api, client: Client) -> None:
    nodes = api.synth.list_nodes()
    pool = nodes[0].labels[LABEL_NODEGROUP]
    want = sorted(n.name for n in nodes if n.labels[LABEL_NODEGROUP] == pool)
    got = body(client.get(f"{S}/api/v1/nodes", query_string={"labelSelector": f"{LABEL_NODEGROUP}={pool}"}))
    assert [i["metadata"]["name"] for i in got["items"]] == want
    one = body(client.get(f"{S}/api/v1/nodes", query_string={"fieldSelector": f"metadata.name={nodes[0].name}"}))
    assert [i["metadata"]["name"] for i in one["items"]] == [nodes[0].name]
    assert status_of(client.get(f"{S}/api/v1/nodes", query_string={"labelSelector": "a in (b"})) == (400, "BadRequest")
    assert status_of(client.get(f"{S}/api/v1/nodes", query_string={"fieldSelector": "spec.podCIDR=x"})) == (400, "BadRequest")


def test_limit_and_continue_page_through_every_pod_once(api: Api, client: Client) -> None:
    seen: list[str] = []
    token = ""
    while True:
        page = body(client.get(f"{S}/api/v1/pods", query_string={"limit": "7", **({"continue": token} if token else {})}))
        assert len(page["items"]) <= 7
        seen += [f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert sorted(seen) == sorted(f"{p.namespace}/{p.name}" for p in api.synth.list_pods())
    assert len(seen) == len(set(seen))
    assert status_of(client.get(f"{S}/api/v1/pods", query_string={"continue": "garbage!"})) == (400, "BadRequest")


def test_the_pages_of_a_list_are_the_list_as_it_was_at_its_first_page(api: Api, client: Client) -> None:
    """As kube-apiserver reads a continued list from etcd at the first page's revision: a pod created after the first
    page is not in the later pages, one deleted still is, and every page carries the first page's resourceVersion; the
    continue of a list the server no longer keeps is 410 Expired (kube-apiserver's answer once etcd has compacted the
    revision), and a new list has the pods as they are now."""
    def pages(first: dict[str, Any], between: Any = None) -> tuple[list[str], set[str]]:
        names = [i["metadata"]["name"] for i in first["items"]]
        versions = {first["metadata"]["resourceVersion"]}
        token = first["metadata"]["continue"]
        if between is not None:
            between()
        while token:
            page = body(client.get(f"{R}/api/v1/namespaces/web/pods", query_string={"limit": "2", "continue": token}))
            names += [i["metadata"]["name"] for i in page["items"]]
            versions.add(page["metadata"]["resourceVersion"])
            token = page["metadata"].get("continue", "")
        return names, versions

    before = sorted(p.name for p in api.rules.list_pods("web"))
    assert len(before) > 2
    first = body(client.get(f"{R}/api/v1/namespaces/web/pods", query_string={"limit": "2"}))

    def change() -> None:
        assert client.post(f"{R}/api/v1/namespaces/web/pods", json=_pod("zz-late")).status_code == 201
        gone = client.delete(f"{R}/api/v1/namespaces/web/pods/{before[-1]}", query_string={"gracePeriodSeconds": "0"})
        assert gone.status_code == 200

    names, versions = pages(first, change)
    assert names == before and versions == {first["metadata"]["resourceVersion"]}
    now = sorted(p.name for p in api.rules.list_pods("web"))
    assert "zz-late" in now and before[-1] not in now
    first = body(client.get(f"{R}/api/v1/namespaces/web/pods", query_string={"limit": "2"}))
    api.app.pages = type(api.app.pages)()  # the server forgot the list (or restarted)
    expired = client.get(f"{R}/api/v1/namespaces/web/pods", query_string={"limit": "2", "continue": first["metadata"]["continue"]})
    assert status_of(expired) == (410, "Expired")
    names, _ = pages(body(client.get(f"{R}/api/v1/namespaces/web/pods", query_string={"limit": "2"})))
    assert names == now


def test_kubectl_tables_carry_the_api_servers_columns(api: Api, client: Client) -> None:
    nodes = body(client.get(f"{S}/api/v1/nodes", headers=TABLE))
    assert nodes["kind"] == "Table"
    columns = [(c["name"], c["priority"]) for c in nodes["columnDefinitions"]]
    assert columns[:5] == [("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0)]
    assert ("Internal-IP", 1) in columns  # what `-o wide` adds
    row = nodes["rows"][0]
    assert row["cells"][1] == "Ready" and row["object"]["kind"] == "PartialObjectMetadata"
    name = row["cells"][0]
    api.synth.cordon(name)
    again = body(client.get(f"{S}/api/v1/nodes/{name}", headers=TABLE))
    assert again["rows"][0]["cells"][1] == "Ready,SchedulingDisabled"
    pod = api.synth.list_pods()[0]
    api.synth.delete_pod(pod.namespace, pod.name)
    cells = body(client.get(f"{S}/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", headers=TABLE))["rows"][0]["cells"]
    assert cells[2] == "Terminating"


@pytest.mark.parametrize("content_type, patch", [
    ("application/strategic-merge-patch+json", {"spec": {"unschedulable": True}}),
    ("application/merge-patch+json", {"spec": {"unschedulable": True}}),
    ("application/json-patch+json", [{"op": "add", "path": "/spec/unschedulable", "value": True}]),
])
def test_every_patch_type_cordons_a_node(api: Api, client: Client, content_type: str, patch: Any) -> None:
    name = api.synth.list_nodes()[0].name
    response = client.patch(f"{S}/api/v1/nodes/{name}", data=json.dumps(patch), content_type=content_type)
    assert response.status_code == 200 and body(response)["spec"]["unschedulable"] is True
    assert api.synth.get_node(name).unschedulable
    uncordon = client.patch(f"{S}/api/v1/nodes/{name}", data=json.dumps({"spec": {"unschedulable": None}}),
                            content_type="application/strategic-merge-patch+json")
    assert "unschedulable" not in body(uncordon)["spec"] and not api.synth.get_node(name).unschedulable


def test_node_labels_and_taints_patch_through_to_scheduling(api: Api, client: Client) -> None:
    name = api.synth.list_nodes()[0].name
    patch = {"metadata": {"labels": {"team": "blue"}}, "spec": {"taints": [{"key": "dedicated", "value": "blue", "effect": "NoSchedule"}]}}
    response = client.patch(f"{S}/api/v1/nodes/{name}", data=json.dumps(patch), content_type="application/merge-patch+json")
    assert response.status_code == 200
    node = api.synth.get_node(name)
    assert node.labels["team"] == "blue" and [t.key for t in node.taints] == ["dedicated"]
    # A pod that does not tolerate the taint is never scheduled there.
    client.post(f"{S}/api/v1/namespaces/default/pods", json=_pod("picky", nodeSelector={"team": "blue"}))
    api.synth.advance(30)
    assert api.synth.get_pod("default", "picky").node_name is None


def test_bad_node_patches_are_rejected_and_change_nothing(api: Api, client: Client) -> None:
    name = api.synth.list_nodes()[0].name
    url = f"{S}/api/v1/nodes/{name}"
    before = api.synth.get_node(name)
    cases = [
        (json.dumps({"spec": {"unschedulable": "yes"}}), "application/merge-patch+json", (422, "Invalid")),
        (json.dumps({"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}), "application/merge-patch+json", (422, "Invalid")),
        (json.dumps([{"op": "remove", "path": "/spec/nothing"}]), "application/json-patch+json", (422, "Invalid")),
        ("{not json", "application/merge-patch+json", (400, "BadRequest")),
        (json.dumps({"metadata": {"name": "other"}}), "application/merge-patch+json", (400, "BadRequest")),
        ("apiVersion: v1", "application/apply-patch+yaml", (415, "UnsupportedMediaType")),
    ]
    for data, content_type, expected in cases:
        assert status_of(client.patch(url, data=data, content_type=content_type)) == expected, data
    assert api.synth.get_node(name) == before
    assert status_of(client.patch(f"{S}/api/v1/nodes/nope", data="{}", content_type="application/merge-patch+json")) == (404, "NotFound")


def test_deleting_a_node_loses_its_pods_as_pod_gc_does(api: Api, client: Client) -> None:
    name = api.synth.list_nodes()[0].name
    on_node = [p.name for p in api.synth.list_pods(node_name=name)]
    assert on_node
    response = client.delete(f"{S}/api/v1/nodes/{name}")
    assert response.status_code == 200 and body(response)["status"] == "Success"
    assert status_of(client.get(f"{S}/api/v1/nodes/{name}")) == (404, "NotFound")
    left = body(client.get(f"{S}/api/v1/pods", query_string={"fieldSelector": f"spec.nodeName={name}"}))["items"]
    assert left == []


# ------------------------------------------------------------------------------------ pods


def test_pod_create_get_and_field_selected_list(api: Api, client: Client) -> None:
    node = api.synth.list_nodes()[0].name
    created = client.post(f"{S}/api/v1/namespaces/default/pods", json=_pod("probe", nodeName=node))
    assert created.status_code == 201
    assert body(created)["metadata"]["namespace"] == "default" and body(created)["metadata"]["uid"]
    api.synth.advance(15)
    got = body(client.get(f"{S}/api/v1/namespaces/default/pods/probe"))
    assert got["status"]["phase"] == "Running" and got["spec"]["nodeName"] == node
    listed = body(client.get(f"{S}/api/v1/pods", query_string={"fieldSelector": f"spec.nodeName={node},metadata.namespace=default"}))
    assert [i["metadata"]["name"] for i in listed["items"]] == ["probe"]
    not_running = body(client.get(f"{S}/api/v1/namespaces/default/pods", query_string={"fieldSelector": "status.phase!=Running"}))
    assert "probe" not in [i["metadata"]["name"] for i in not_running["items"]]
    generated = body(client.post(f"{S}/api/v1/namespaces/default/pods",
                                 json={**_pod(""), "metadata": {"generateName": "probe-"}}))
    assert generated["metadata"]["name"].startswith("probe-") and len(generated["metadata"]["name"]) == len("probe-") + 5


def test_pod_mistakes_get_the_api_status_errors_and_create_nothing(api: Api, client: Client) -> None:
    before = len(api.synth.list_pods())
    url = f"{S}/api/v1/namespaces/default/pods"
    assert client.post(url, json=_pod("dup")).status_code == 201
    assert status_of(client.post(url, json=_pod("dup"))) == (409, "AlreadyExists")
    no_containers = _pod("empty")
    no_containers["spec"]["containers"] = []
    response = client.post(url, json=no_containers)
    assert status_of(response) == (422, "Invalid")
    assert body(response)["details"]["causes"][0]["field"] == "spec.containers"
    assert status_of(client.post(url, json=_pod("Bad_Name"))) == (422, "Invalid")
    assert status_of(client.post(url, json={"metadata": {}, "spec": {}})) == (422, "Invalid")
    assert status_of(client.post(url, data="{", content_type="application/json")) == (400, "BadRequest")
    assert status_of(client.post(url, json=[1, 2])) == (400, "BadRequest")
    assert status_of(client.post(url, json={**_pod("x"), "kind": "Node"})) == (400, "BadRequest")
    assert status_of(client.post(url, json={**_pod("x"), "metadata": {"name": "x", "namespace": "kube-system"}})) == (400, "BadRequest")
    assert status_of(client.post(f"{S}/api/v1/namespaces/ghost/pods", json=_pod("x"))) == (404, "NotFound")
    assert status_of(client.post(url, data=b"\x0a\x0b", content_type="application/vnd.kubernetes.protobuf")) == (415, "UnsupportedMediaType")
    assert status_of(client.put(url, json=_pod("x"))) == (405, "MethodNotAllowed")
    assert len(api.synth.list_pods()) == before + 1


def test_pod_delete_honours_the_grace_period(api: Api, client: Client) -> None:
    pods = [p for p in api.synth.list_pods() if p.grace_seconds > 0][:2]
    graceful = body(client.delete(f"{S}/api/v1/namespaces/{pods[0].namespace}/pods/{pods[0].name}"))
    assert graceful["metadata"]["deletionTimestamp"]
    assert api.synth.get_pod(pods[0].namespace, pods[0].name).terminating
    forced = client.delete(f"{S}/api/v1/namespaces/{pods[1].namespace}/pods/{pods[1].name}", query_string={"gracePeriodSeconds": "0"})
    assert forced.status_code == 200
    assert status_of(client.get(f"{S}/api/v1/namespaces/{pods[1].namespace}/pods/{pods[1].name}")) == (404, "NotFound")
    assert status_of(client.delete(f"{S}/api/v1/namespaces/default/pods/ghost")) == (404, "NotFound")


# ------------------------------------------------------------------------------------ eviction


def _evict(client: Client, ns: str, name: str, **meta: Any) -> Any:
    return client.post(f"{R}/api/v1/namespaces/{ns}/pods/{name}/eviction",
                       json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns, **meta}})


def test_eviction_answers_exactly_as_the_api_server(api: Api, client: Client) -> None:
    ok = _evict(client, "web", "web-7d9c-a1")
    assert ok.status_code == 201 and body(ok) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    refused = _evict(client, "web", "web-7d9c-b2")
    assert refused.status_code == 429
    assert body(refused) == api.rules.evict("web", "web-7d9c-b2").to_status()
    assert body(refused)["details"]["causes"][0]["reason"] == "DisruptionBudget"
    two = _evict(client, "double", "queue-0")
    assert two.status_code == 500 and "more than one PodDisruptionBudget" in body(two)["message"]
    assert status_of(_evict(client, "web", "ghost")) == (404, "NotFound")
    mismatch = client.post(f"{R}/api/v1/namespaces/web/pods/web-7d9c-c3/eviction", json={"metadata": {"name": "other"}})
    assert status_of(mismatch) == (400, "BadRequest")
    assert not api.rules.get_pod("web", "web-7d9c-c3").terminating


def test_budgets_are_served_with_the_status_the_disruption_controller_computes(api: Api, client: Client) -> None:
    served = {(i["metadata"]["namespace"], i["metadata"]["name"]): i for i in body(client.get(f"{R}/apis/policy/v1/poddisruptionbudgets"))["items"]}
    for pdb in api.rules.list_pdbs():
        assert served[pdb.key]["status"] == pdb.status.to_kube()
    created = client.post(f"{S}/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                          json={"metadata": {"name": "probe"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "probe"}}}})
    assert created.status_code == 201
    for i in range(2):
        client.post(f"{S}/api/v1/namespaces/default/pods", json=_pod(f"probe-{i}"))
    api.synth.advance(30)
    status = body(client.get(f"{S}/apis/policy/v1/namespaces/default/poddisruptionbudgets/probe"))["status"]
    assert (status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]) == (2, 1, 1)
    both = client.post(f"{S}/apis/policy/v1/namespaces/default/poddisruptionbudgets",
                       json={"metadata": {"name": "bad"}, "spec": {"minAvailable": 1, "maxUnavailable": 1}})
    assert status_of(both) == (422, "Invalid")
    assert client.delete(f"{S}/apis/policy/v1/namespaces/default/poddisruptionbudgets/probe").status_code == 200
    assert not api.synth.list_pdbs("default")


# ------------------------------------------------------------------------------------ namespaces and workloads


def test_namespaces_include_those_in_use_and_delete_their_contents(api: Api, client: Client) -> None:
    names = {i["metadata"]["name"] for i in body(client.get(f"{S}/api/v1/namespaces"))["items"]}
    assert {"default", "kube-system"} | {p.namespace for p in api.synth.list_pods()} <= names
    assert client.post(f"{S}/api/v1/namespaces", json={"metadata": {"name": "canary"}}).status_code == 201
    assert status_of(client.post(f"{S}/api/v1/namespaces", json={"metadata": {"name": "canary"}})) == (409, "AlreadyExists")
    client.post(f"{S}/api/v1/namespaces/canary/pods", json=_pod("probe"))
    api.synth.advance(15)
    gone = body(client.delete(f"{S}/api/v1/namespaces/canary"))
    assert gone["status"]["phase"] == "Terminating"
    assert status_of(client.post(f"{S}/api/v1/namespaces/canary/pods", json=_pod("late"))) == (403, "Forbidden")
    api.synth.advance(60)
    assert "canary" not in {i["metadata"]["name"] for i in body(client.get(f"{S}/api/v1/namespaces"))["items"]}
    assert status_of(client.delete(f"{S}/api/v1/namespaces/kube-system")) == (403, "Forbidden")


def test_a_deployment_runs_its_pods_and_deleting_it_removes_them(api: Api, client: Client) -> None:
    url = f"{S}/apis/apps/v1/namespaces/default/deployments"
    assert client.post(url, json=_deployment("web", replicas=3)).status_code == 201
    api.synth.advance(30)
    got = body(client.get(f"{url}/web"))
    assert got["status"]["readyReplicas"] == 3 and got["status"]["conditions"][0]["status"] == "True"
    pods = body(client.get(f"{S}/api/v1/namespaces/default/pods", query_string={"labelSelector": "app=web"}))["items"]
    assert len(pods) == 3
    rs = pods[0]["metadata"]["ownerReferences"][0]
    assert rs["kind"] == "ReplicaSet"
    replicaset = body(client.get(f"{S}/apis/apps/v1/namespaces/default/replicasets/{rs['name']}"))
    assert replicaset["metadata"]["ownerReferences"][0]["name"] == "web"
    assert [i["metadata"]["name"] for i in body(client.get(url))["items"]] == ["web"]
    assert client.delete(f"{url}/web").status_code == 200
    api.synth.advance(60)
    assert body(client.get(f"{S}/api/v1/namespaces/default/pods", query_string={"labelSelector": "app=web"}))["items"] == []
    assert status_of(client.get(f"{url}/web")) == (404, "NotFound")


def test_workload_mistakes_are_422_with_the_field(client: Client) -> None:
    url = f"{S}/apis/apps/v1/namespaces/default/deployments"
    mismatch = client.post(url, json=_deployment("web", labels={"app": "other"}))
    assert status_of(mismatch) == (422, "Invalid")
    assert body(mismatch)["details"]["causes"][0]["field"] == "spec.template.metadata.labels"
    no_selector = _deployment("web")
    del no_selector["spec"]["selector"]
    assert body(client.post(url, json=no_selector))["details"]["causes"][0]["field"] == "spec.selector"
    job = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
    response = client.post(f"{S}/apis/batch/v1/namespaces/default/jobs", json=job)
    assert body(response)["details"]["causes"][0]["field"] == "spec.template.spec.restartPolicy"
    cron = {"metadata": {"name": "c"}, "spec": {"schedule": "every minute", "jobTemplate": {"spec": job["spec"]}}}
    response = client.post(f"{S}/apis/batch/v1/namespaces/default/cronjobs", json=cron)
    assert body(response)["details"]["causes"][0]["field"] == "spec.schedule"
    assert body(client.get(url))["items"] == []


def test_daemonset_puts_a_pod_on_every_node(api: Api, client: Client) -> None:
    ds = {"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent"}]}}}}
    assert client.post(f"{S}/apis/apps/v1/namespaces/kube-system/daemonsets", json=ds).status_code == 201
    api.synth.advance(30)
    pods = body(client.get(f"{S}/api/v1/namespaces/kube-system/pods", query_string={"labelSelector": "app=agent"}))["items"]
    untainted = sorted(n.name for n in api.synth.list_nodes() if not n.taints)
    assert len(untainted) < len(api.synth.list_nodes())  # the GPU nodes' taint keeps the agent off them
    assert sorted(p["spec"]["nodeName"] for p in pods) == untainted
    status = body(client.get(f"{S}/apis/apps/v1/namespaces/kube-system/daemonsets/agent"))["status"]
    assert status["numberReady"] == len(untainted)


def test_controllers_the_simulator_runs_are_served_as_their_kinds(api: Api, client: Client) -> None:
    """kubectl drain looks up the DaemonSet a pod names; it must exist."""
    for pod in api.synth.list_pods():
        if pod.owner is None:
            continue
        plural = {"ReplicaSet": "replicasets", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets", "Job": "jobs"}[pod.owner.kind]
        got = body(client.get(f"{S}/apis/{'batch' if plural == 'jobs' else 'apps'}/v1/namespaces/{pod.namespace}/{plural}/{pod.owner.name}"))
        assert got["metadata"]["uid"] == pod.owner.uid


def test_cronjob_starts_jobs_on_the_virtual_clock_and_keeps_three(api: Api, client: Client) -> None:
    state = api.states["synth"]
    cron = {"metadata": {"name": "probe"}, "spec": {"schedule": "*/10 * * * *", "jobTemplate": {"spec": {"template": {
        "metadata": {"annotations": {"sim.platformctl.io/run-seconds": "60"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "probe"}]}}}}}}
    assert client.post(f"{S}/apis/batch/v1/namespaces/default/cronjobs", json=cron).status_code == 201
    for _ in range(6 * 6):  # an hour in 100 s steps
        api.synth.advance(100)
        state.tick()
    jobs = body(client.get(f"{S}/apis/batch/v1/namespaces/default/jobs"))["items"]
    assert all(j["metadata"]["ownerReferences"][0]["name"] == "probe" for j in jobs)
    # Six runs in the hour, each started at its scheduled time (the controller fires on the clock) and finished
    # 70 s later: the three newest finished ones are kept (successfulJobsHistoryLimit), pruned as each finishes.
    finished = [j["metadata"]["name"] for j in jobs if j["status"].get("succeeded") == 1]  # a 0 is left out, as
    active = [j["metadata"]["name"] for j in jobs if j["status"].get("active") == 1]  # kube-apiserver leaves it
    status = body(client.get(f"{S}/apis/batch/v1/namespaces/default/cronjobs/probe"))["status"]
    assert status["lastScheduleTime"].endswith("0:00Z")
    minute = int(parse_time(status["lastScheduleTime"], "lastScheduleTime", None) // 60)
    newest_done = minute if api.synth.now() >= minute * 60 + 70 else minute - 10
    assert finished == [f"probe-{newest_done - m}" for m in (20, 10, 0)]
    assert active == ([] if newest_done == minute else [f"probe-{minute}"])
    assert [a["name"] for a in status.get("active", [])] == active
    for job in jobs:  # each started at its scheduled minute
        scheduled = int(job["metadata"]["name"].rsplit("-", 1)[1]) * 60
        assert parse_time(job["status"]["startTime"], "startTime", None) == scheduled
    table = body(client.get(f"{S}/apis/batch/v1/namespaces/default/cronjobs", headers=TABLE))
    assert table["rows"][0]["cells"][1] == "*/10 * * * *"


@pytest.mark.parametrize("method, path, data", [
    ("GET", "/api/v1/nodes?limit=ten", None),
    ("GET", "/api/v1/pods?watch=true&resourceVersion=abc", None),
    ("GET", "/api/v1/pods?watch=true&timeoutSeconds=soon", None),
    ("POST", "/api/v1/nodes", "{}"),
    ("POST", "/api/v1/namespaces/default/pods", "null"),
    ("POST", "/api/v1/namespaces/default/pods", '{"metadata": "x"}'),
    ("POST", "/api/v1/namespaces/default/pods", '{"metadata": {"name": "p"}, "spec": {"containers": [{"name": 5}]}}'),
    ("POST", "/api/v1/namespaces/default/pods", '{"metadata": {"name": "p"}, "spec": {"containers": "c"}}'),
    ("POST", "/apis/apps/v1/namespaces/default/deployments", '{"metadata": {"name": "d"}, "spec": {"replicas": -1}}'),
    ("POST", "/apis/apps/v1/namespaces/default/deployments", '{"metadata": {"name": "d"}, "spec": {"template": 3}}'),
    ("POST", "/apis/batch/v1/namespaces/default/cronjobs", '{"metadata": {"name": "c"}, "spec": {"schedule": 5}}'),
    ("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", '{"metadata": {"name": "b"}, "spec": {"selector": 1}}'),
    ("POST", "/api/v1/namespaces/default/pods/x/eviction", '{"metadata": 1}'),
    ("POST", "/api/v1/namespaces/default/pods/x/binding", "{}"),
    ("DELETE", "/api/v1/namespaces/default/pods/x?gracePeriodSeconds=later", None),
    ("PATCH", "/api/v1/namespaces/default/pods/x", "{}"),
])
def test_malformed_requests_get_status_errors_never_a_500(client: Client, method: str, path: str, data: str | None) -> None:
    response = client.open(f"{S}{path}", method=method, data=data, content_type="application/json")
    code, _ = status_of(response)
    assert 400 <= code < 500, body(response)


def test_kinds_kept_as_written_create_get_list_and_delete(api: Api, client: Client) -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "canary"}}
    assert client.post(f"{R}/api/v1/namespaces", json=ns).status_code == 201
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prober"}}
    created = body(client.post(f"{R}/api/v1/namespaces/canary/serviceaccounts", json=account))
    assert created["metadata"]["namespace"] == "canary" and created["metadata"]["uid"]
    assert status_of(client.post(f"{R}/api/v1/namespaces/canary/serviceaccounts", json=account)) == (409, "AlreadyExists")
    assert status_of(client.post(f"{R}/api/v1/namespaces/nowhere/serviceaccounts", json=account)) == (404, "NotFound")
    assert [a["metadata"]["name"] for a in body(client.get(f"{R}/api/v1/serviceaccounts"))["items"]] == ["prober"]
    tier = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "reserved"},
            "value": 1000000, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority"}
    assert client.post(f"{R}/apis/scheduling.k8s.io/v1/priorityclasses", json=tier).status_code == 201
    row = body(client.get(f"{R}/apis/scheduling.k8s.io/v1/priorityclasses", headers=TABLE))["rows"][0]["cells"]
    assert row[:4] == ["reserved", 1000000, False, "PreemptLowerPriority"]
    assert body(client.get(f"{R}/apis/scheduling.k8s.io/v1/priorityclasses/reserved"))["value"] == 1000000
    assert client.delete(f"{R}/apis/scheduling.k8s.io/v1/priorityclasses/reserved").status_code == 200
    assert status_of(client.get(f"{R}/apis/scheduling.k8s.io/v1/priorityclasses/reserved")) == (404, "NotFound")
    # deleting the namespace deletes what it holds
    client.delete(f"{R}/api/v1/namespaces/canary")
    assert body(client.get(f"{R}/api/v1/serviceaccounts"))["items"] == []


def test_apply_creates_what_the_program_declares_once(api: Api) -> None:
    state = api.states["rules"]
    manifests = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "platformctl-system"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "rotation", "namespace": "platformctl-system"}},
        {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "rotate", "namespace": "platformctl-system"},
         "spec": {"schedule": "0 3 * * 1-5", "jobTemplate": {"spec": {"template": {"spec": {
             "restartPolicy": "Never", "containers": [{"name": "rotate", "image": "platformctl:0.1.0"}]}}}}}},
    ]
    for manifest in manifests * 2:  # applying again leaves what exists
        state.apply(manifest)
    assert [w.name for w in state.list_workloads("cronjobs", "platformctl-system")] == ["rotate"]
    assert [a["metadata"]["name"] for a in state.list_stored("serviceaccounts", "platformctl-system")] == ["rotation"]
    with pytest.raises(ApiError) as err:
        state.apply({"apiVersion": "federation.platformctl.io/v1alpha1", "kind": "MemberCluster", "metadata": {"name": "m"}})
    assert err.value.code == 404


# ------------------------------------------------------------------------------------ events


def _events(client: Client, path: str) -> list[dict[str, Any]]:
    return body(client.get(path))["items"]


def test_a_pod_no_node_fits_gets_the_schedulers_failed_scheduling_event(api: Api, client: Client) -> None:
    huge = _pod("huge")
    huge["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500"
    assert client.post(f"{S}/api/v1/namespaces/default/pods", json=huge).status_code == 201
    api.synth.advance(1)
    state = api.states["synth"]
    state.tick()
    uid = api.synth.get_pod("default", "huge").uid
    selector = f"involvedObject.name=huge,involvedObject.namespace=default,involvedObject.uid={uid}"  # as describe asks
    [failed] = _events(client, f"{S}/api/v1/namespaces/default/events?fieldSelector={selector}")
    nodes = len(api.synth.list_nodes())
    assert (failed["type"], failed["reason"], failed["source"]["component"]) == ("Warning", "FailedScheduling", "default-scheduler")
    assert failed["message"].startswith(f"0/{nodes} nodes are available: ") and "Insufficient cpu" in failed["message"]
    assert failed["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "huge", "uid": uid, "namespace": "default"}
    # Still Pending a minute later: counted again, as the scheduler keeps trying.
    api.synth.advance(120)
    state.tick()
    [again] = _events(client, f"{S}/api/v1/namespaces/default/events?fieldSelector=reason%3DFailedScheduling")
    assert again["count"] == 2 and parse_time(again["lastTimestamp"], "t", None) > parse_time(again["firstTimestamp"], "t", None)
    # events.k8s.io serves the same event in its own shape.
    [v1] = _events(client, f"{S}/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=reason%3DFailedScheduling")
    assert (v1["apiVersion"], v1["note"], v1["regarding"]["name"], v1["deprecatedCount"]) == \
        ("events.k8s.io/v1", again["message"], "huge", 2)
    table = body(client.get(f"{S}/api/v1/events", headers=TABLE))
    assert [c["name"] for c in table["columnDefinitions"][:5]] == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert ["Warning", "FailedScheduling", "pod/huge"] in [row["cells"][1:4] for row in table["rows"]]


def test_cordons_evictions_and_deletions_are_recorded_as_the_kubelet_records_them(api: Api, client: Client) -> None:
    state = api.states["synth"]
    node = api.synth.list_nodes()[0]
    client.patch(f"{S}/api/v1/nodes/{node.name}", json={"spec": {"unschedulable": True}},
                 headers={"Content-Type": "application/merge-patch+json"})
    victim = next(p for p in api.synth.list_pods(node_name=node.name) if p.owner and p.owner.kind == "ReplicaSet")
    client.post(f"{S}/api/v1/namespaces/{victim.namespace}/pods/{victim.name}/eviction",
                json={"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim.name}})
    api.synth.advance(60)
    state.tick()
    on_node = _events(client, f"{S}/api/v1/events?fieldSelector=involvedObject.kind%3DNode,involvedObject.name%3D{node.name}")
    assert ("NodeNotSchedulable", f"Node {node.name} status is now: NodeNotSchedulable") in \
        [(e["reason"], e["message"]) for e in on_node]
    assert all(e["metadata"]["namespace"] == "default" for e in on_node)  # node events live in default
    on_pod = _events(client, f"{S}/api/v1/namespaces/{victim.namespace}/events?fieldSelector=involvedObject.name%3D{victim.name}")
    assert "Killing" in [e["reason"] for e in on_pod]


def test_a_watch_sees_a_pod_go_even_when_nothing_else_changes(api: Api, client: Client) -> None:
    """`kubectl delete pod` waits on a watch for the pod's DELETED: the removal itself must reach the watch."""
    state = api.states["synth"]
    assert client.post(f"{S}/api/v1/namespaces/default/pods", json=_pod("lonely")).status_code == 201  # no controller
    api.synth.advance(60)
    state.tick()
    rv = api.synth.resource_version
    client.delete(f"{S}/api/v1/namespaces/default/pods/lonely")
    state.tick()
    api.synth.advance(31)  # the grace period runs out; nothing else happens in the cluster
    assert state.tick()
    changes = [c.type for c in state.changes.since("pods", rv) if c.obj.name == "lonely"]
    assert changes == ["MODIFIED", "DELETED"]


@pytest.mark.parametrize("kept", [200_000, 2])
def test_the_pods_changes_reach_watchers_whether_or_not_the_simulators_log_still_holds_them(api: Api, client: Client,
                                                                                          kept: int) -> None:
    """The change log reads which pods changed from the simulator's own log; when that log has dropped some of them
    (``kept`` 2), every pod is compared instead: a watcher hears the same either way."""
    state = api.states["synth"]
    api.synth.change_log().capacity = kept
    rv = api.synth.resource_version
    for name in ("one", "two", "three"):
        assert client.post(f"{S}/api/v1/namespaces/default/pods", json=_pod(name)).status_code == 201
    api.synth.advance(60)
    client.delete(f"{S}/api/v1/namespaces/default/pods/two?gracePeriodSeconds=0")
    state.tick()
    changes = [(c.type, c.obj.name) for c in state.changes.since("pods", rv) if c.obj.name in ("one", "two", "three")]
    assert {("ADDED", "one"), ("ADDED", "three")} <= set(changes)
    assert [n for t, n in changes if t == "DELETED"] == ["two"]
    assert [n for t, n in changes if t == "MODIFIED" and n != "two"]  # scheduled and started: heard too
    listed = {p.name for p in state.changes.current("pods")}  # what a watch from nothing starts from
    assert {"one", "three"} <= listed and "two" not in listed


def test_a_stateful_pod_made_again_under_its_name_is_deleted_then_added(api: Api, client: Client) -> None:
    state = api.states["synth"]
    sts = _deployment("kv", replicas=1) | {"apiVersion": "apps/v1", "kind": "StatefulSet"}
    assert client.post(f"{S}/apis/apps/v1/namespaces/default/statefulsets", json=sts).status_code == 201
    api.synth.advance(30)
    pod = api.synth.get_pod("default", "kv-0")
    state.tick()
    rv = api.synth.resource_version
    api.synth.delete_pod("default", "kv-0", grace_seconds=0)  # gone, and its controller makes it again at once
    again = api.synth.get_pod("default", "kv-0")
    assert again.uid != pod.uid
    state.tick()
    seen = [(c.type, c.obj.uid) for c in state.changes.since("pods", rv) if c.obj.name == "kv-0"]
    assert seen[:2] == [("DELETED", pod.uid), ("ADDED", again.uid)]
