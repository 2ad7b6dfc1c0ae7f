"""The differential suite: the same scripted scenarios on the real control plane and on the local region's API server,
and their observable answers compared (status codes, ``Status`` bodies, what a list, a budget's status or a review
says). A scenario returns what a client would see; volatile values (uids, resource versions, times, generated names)
are left out of what it returns, never papered over after. A difference that stays is listed in ``EXPLAINED`` with
why, and in docs/simulator.md; any other fails the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from platformctl.emulator.realk8s import ControlPlane
from platformctl.kernel.cluster.model.objects import Taint
from tests.real_k8s.sides import Emulated, Real, Side, node

pytestmark = pytest.mark.real_k8s
Scenario = Callable[[Side, str], Any]
SCENARIOS: dict[str, Scenario] = {}
NODES = ("ip-10-9-0-1.us-west-2.compute.internal", "ip-10-9-0-2.us-west-2.compute.internal",
         "ip-10-9-0-3.us-west-2.compute.internal")
PAUSE = "registry.k8s.io/pause:3.10"
# Differences that stay, with why (each also in docs/simulator.md, "The real control plane").
EXPLAINED: dict[str, str] = {
    "malformed_continue_is_400": "the same 400 BadRequest; kube-apiserver's message quotes Go's JSON decoder on the "
                                 "token's bytes, which the region does not imitate (it never hands out such a token)",
    "a_cordoned_node_takes_no_new_pod": "the node lifecycle controller taints a cordoned node "
        "node.kubernetes.io/unschedulable:NoSchedule; the region does not (yet: the DaemonSet controller's automatic "
        "tolerations must come with it). Both keep new pods off it, and the planner reads spec.unschedulable before "
        "any taint, so it decides the same on both",
    "every_namespace_gets_the_root_ca_and_a_default_account": "the controller manager's root CA publisher and service "
        "account controller fill every namespace; the region's pods reach its API servers over plain HTTP with the "
        "token the kubelet projects, so it publishes no CA and keeps no default account",
}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__] = fn
    return fn


def status(answer: tuple[int, Any]) -> dict[str, Any]:
    """A refusal as a client reads it: the code and the ``Status`` body's words (never its volatile parts)."""
    code, body = answer
    if not isinstance(body, dict) or body.get("kind") != "Status":
        return {"code": code, "body": "not a Status" if code >= 400 else "ok"}
    return {"code": code, **{k: body.get(k) for k in ("status", "reason", "message", "details")}}


def namespace(side: Side, ns: str) -> None:
    assert side.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201


def pod(name: str, labels: dict[str, str] | None = None, node_name: str | None = None,
        tolerations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": PAUSE,
                                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def running(side: Side, ns: str, count: int, selector: str = "") -> list[dict[str, Any]]:
    def found() -> list[dict[str, Any]]:
        items = side.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")[1]["items"]
        ready = [p for p in items if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                 and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
        return sorted(ready, key=lambda p: p["metadata"]["name"]) if len(ready) == count else []
    return list(side.settle(found))


def deployment(side: Side, ns: str, name: str, replicas: int) -> None:
    labels = {"app": name}
    assert side.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                                             "template": {"metadata": {"labels": labels}, "spec": pod(name)["spec"]}}})[0] == 201


def budget(side: Side, ns: str, name: str, **spec: Any) -> None:
    assert side.request("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "metadata": {"name": name}, "spec": {**spec, "selector": {"matchLabels": {"app": name}}}})[0] == 201


def budget_status(side: Side, ns: str, name: str, settled: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        got = side.request("GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}")[1]["status"]
        return got if settled(got) else None
    got = side.settle(found)
    return {k: got.get(k) for k in ("currentHealthy", "desiredHealthy", "disruptionsAllowed", "expectedPods")}


def evict(side: Side, ns: str, name: str) -> dict[str, Any]:
    return status(side.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction",
                               {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}))


# ------------------------------------------------------------------------------------------------------ refusals


@scenario
def missing_pod_is_404(side: Side, ns: str) -> Any:
    namespace(side, ns)
    return status(side.request("GET", f"/api/v1/namespaces/{ns}/pods/nobody"))


@scenario
def missing_namespace_is_404(side: Side, ns: str) -> Any:
    return status(side.request("GET", f"/api/v1/namespaces/{ns}-none/pods/nobody"))


@scenario
def namespace_created_twice_is_409(side: Side, ns: str) -> Any:
    namespace(side, ns)
    return status(side.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}))


@scenario
def pod_created_twice_is_409(side: Side, ns: str) -> Any:
    namespace(side, ns)
    side.request("POST", f"/api/v1/namespaces/{ns}/pods", pod("twice"))
    return status(side.request("POST", f"/api/v1/namespaces/{ns}/pods", pod("twice")))


@scenario
def pod_with_an_invalid_name_is_422(side: Side, ns: str) -> Any:
    namespace(side, ns)
    return status(side.request("POST", f"/api/v1/namespaces/{ns}/pods", pod("Not_Valid")))


@scenario
def unknown_field_selector_is_400(side: Side, ns: str) -> Any:
    namespace(side, ns)
    return status(side.request("GET", f"/api/v1/namespaces/{ns}/pods?fieldSelector=spec.nope%3Dx"))


@scenario
def malformed_continue_is_400(side: Side, ns: str) -> Any:
    namespace(side, ns)
    return status(side.request("GET", f"/api/v1/namespaces/{ns}/pods?limit=1&continue=garbage"))


@scenario
def eviction_of_a_missing_pod_is_404(side: Side, ns: str) -> Any:
    namespace(side, ns)
    return evict(side, ns, "nobody")


# ------------------------------------------------------------------------------------------------------ evictions


@scenario
def eviction_a_budget_refuses_is_429(side: Side, ns: str) -> Any:
    namespace(side, ns)
    deployment(side, ns, "web", 2)
    budget(side, ns, "web", minAvailable=2)
    pods = running(side, ns, 2, "app%3Dweb")
    seen = budget_status(side, ns, "web", lambda s: s.get("currentHealthy") == 2)
    return [seen, evict(side, ns, pods[0]["metadata"]["name"])]


@scenario
def eviction_a_budget_allows_is_201(side: Side, ns: str) -> Any:
    namespace(side, ns)
    deployment(side, ns, "web", 3)
    budget(side, ns, "web", minAvailable=2)
    pods = running(side, ns, 3, "app%3Dweb")
    seen = budget_status(side, ns, "web", lambda s: s.get("disruptionsAllowed") == 1)
    return [seen, evict(side, ns, pods[0]["metadata"]["name"])]


@scenario
def budget_with_max_unavailable_counts_as_the_controller_does(side: Side, ns: str) -> Any:
    namespace(side, ns)
    deployment(side, ns, "kv", 3)
    budget(side, ns, "kv", maxUnavailable=1)
    running(side, ns, 3, "app%3Dkv")
    return budget_status(side, ns, "kv", lambda s: s.get("expectedPods") == 3 and s.get("currentHealthy") == 3)


@scenario
def budget_follows_its_controllers_scale(side: Side, ns: str) -> Any:
    namespace(side, ns)
    deployment(side, ns, "kv", 2)
    budget(side, ns, "kv", maxUnavailable=1)
    running(side, ns, 2, "app%3Dkv")
    budget_status(side, ns, "kv", lambda s: s.get("expectedPods") == 2)
    side.request("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/kv/scale", {"spec": {"replicas": 4}},
                 content_type="application/merge-patch+json")
    running(side, ns, 4, "app%3Dkv")
    return budget_status(side, ns, "kv", lambda s: s.get("expectedPods") == 4 and s.get("currentHealthy") == 4)


@scenario
def budget_with_a_percentage_rounds_up(side: Side, ns: str) -> Any:
    namespace(side, ns)
    deployment(side, ns, "web", 3)
    budget(side, ns, "web", minAvailable="50%")
    running(side, ns, 3, "app%3Dweb")
    return budget_status(side, ns, "web", lambda s: s.get("currentHealthy") == 3)


@scenario
def budget_selecting_nothing(side: Side, ns: str) -> Any:
    namespace(side, ns)
    budget(side, ns, "ghost", minAvailable=1)
    return budget_status(side, ns, "ghost", lambda s: "expectedPods" in s)


# ------------------------------------------------------------------------------------------------------ lists


@scenario
def paged_list_hands_a_continue_and_counts_the_rest(side: Side, ns: str) -> Any:
    namespace(side, ns)
    for i in range(5):
        side.request("POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": f"s-{i}"}})
    code, first = side.request("GET", f"/api/v1/namespaces/{ns}/secrets?limit=2")
    token = first["metadata"].get("continue")
    _, second = side.request("GET", f"/api/v1/namespaces/{ns}/secrets?limit=2&continue={token}")
    _, last = side.request("GET", f"/api/v1/namespaces/{ns}/secrets?limit=2&continue={second['metadata']['continue']}")
    return [code, [i["metadata"]["name"] for i in first["items"]], first["metadata"].get("remainingItemCount"),
            [i["metadata"]["name"] for i in second["items"]], second["metadata"].get("remainingItemCount"),
            [i["metadata"]["name"] for i in last["items"]], "continue" in last["metadata"]]


@scenario
def every_namespace_gets_the_root_ca_and_a_default_account(side: Side, ns: str) -> Any:
    namespace(side, ns)

    def filled() -> Any:
        found = [side.request("GET", f"/api/v1/namespaces/{ns}/configmaps")[1]["items"],
                 side.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts")[1]["items"]]
        return [sorted(o["metadata"]["name"] for o in kind) for kind in found] if side.name == "emulated" or all(
            found) else None
    return side.settle(filled, 10)


@scenario
def label_selectors(side: Side, ns: str) -> Any:
    namespace(side, ns)
    for name, labels in (("a", {"tier": "web", "env": "prod"}), ("b", {"tier": "db", "env": "prod"}),
                         ("c", {"tier": "web"})):
        side.request("POST", f"/api/v1/namespaces/{ns}/pods", pod(name, labels, node_name=NODES[0]))
    out = {}
    for selector in ("tier%3Dweb", "tier!%3Dweb", "env", "!env", "tier+in+(web,db),env%3Dprod", "tier+notin+(db)"):
        items = side.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")[1]["items"]
        out[selector] = sorted(i["metadata"]["name"] for i in items)
    return out


@scenario
def field_selector_on_the_node(side: Side, ns: str) -> Any:
    namespace(side, ns)
    side.request("POST", f"/api/v1/namespaces/{ns}/pods", pod("on-1", node_name=NODES[0]))
    side.request("POST", f"/api/v1/namespaces/{ns}/pods", pod("on-2", node_name=NODES[1]))
    out = {}
    for selector in (f"spec.nodeName%3D{NODES[0]}", f"spec.nodeName!%3D{NODES[0]}", "metadata.name%3Don-2"):
        items = side.request("GET", f"/api/v1/namespaces/{ns}/pods?fieldSelector={selector}")[1]["items"]
        out[selector] = sorted(i["metadata"]["name"] for i in items)
    return out


# ------------------------------------------------------------------------------------------------------ scheduling


@scenario
def a_pod_no_node_tolerates_stays_pending(side: Side, ns: str) -> Any:
    namespace(side, ns)
    side.request("POST", f"/api/v1/namespaces/{ns}/pods", pod("picky", {}, tolerations=None) | {
        "spec": {**pod("picky")["spec"], "nodeSelector": {"no-such": "label"}}})

    def scheduled_condition() -> dict[str, Any] | None:
        got = side.request("GET", f"/api/v1/namespaces/{ns}/pods/picky")[1]
        found = [c for c in got["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        return found[0] if found else None
    condition = side.settle(scheduled_condition)
    return [condition["status"], condition.get("reason")]


@scenario
def a_cordoned_node_takes_no_new_pod(side: Side, ns: str) -> Any:
    namespace(side, ns)
    side.request("PATCH", f"/api/v1/nodes/{NODES[2]}", {"spec": {"unschedulable": True}},
                 content_type="application/merge-patch+json")
    node_now = side.settle(lambda: (lambda n: n if side.name == "emulated" or n["spec"].get("taints") else None)(
        side.request("GET", f"/api/v1/nodes/{NODES[2]}")[1]), 10)  # the node lifecycle controller's taint, once made
    for i in range(4):
        side.request("POST", f"/api/v1/namespaces/{ns}/pods", pod(f"p{i}"))
    pods = running(side, ns, 4)
    side.request("PATCH", f"/api/v1/nodes/{NODES[2]}", {"spec": {"unschedulable": None}},
                 content_type="application/merge-patch+json")
    taints = sorted((t["key"], t["effect"]) for t in node_now["spec"].get("taints", []))
    return [node_now["spec"].get("unschedulable"), taints, NODES[2] in {p["spec"]["nodeName"] for p in pods}]


# ------------------------------------------------------------------------------------------------------ RBAC


def service_account(side: Side, ns: str, rules: list[dict[str, Any]]) -> str:
    namespace(side, ns)
    side.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "job"}})
    side.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {"metadata": {"name": f"{ns}-job"},
                                                                              "rules": rules})
    side.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "metadata": {"name": f"{ns}-job"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{ns}-job"},
        "subjects": [{"kind": "ServiceAccount", "name": "job", "namespace": ns}]})
    token = side.token(ns, "job")
    side.settle(lambda: side.request("GET", "/api/v1/nodes", token=token)[0] == 200)
    return token


READ_NODES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]


@scenario
def forbidden_is_403_with_kube_apiservers_words(side: Side, ns: str) -> Any:
    token = service_account(side, ns, READ_NODES)
    return [status(side.request("DELETE", "/api/v1/namespaces/kube-system", token=token)),
            status(side.request("GET", f"/api/v1/namespaces/{ns}/secrets", token=token)),
            status(side.request("POST", f"/api/v1/namespaces/{ns}/pods/x/eviction", {"apiVersion": "policy/v1",
                                "kind": "Eviction", "metadata": {"name": "x"}}, token=token)),
            status(side.request("PATCH", f"/api/v1/nodes/{NODES[0]}", {"spec": {"unschedulable": True}}, token=token,
                                content_type="application/merge-patch+json"))]


@scenario
def a_forged_token_is_401(side: Side, ns: str) -> Any:
    token = service_account(side, ns, READ_NODES)
    return status(side.request("GET", "/api/v1/nodes", token=token[:-4] + "AAAA"))


@scenario
def self_subject_access_review(side: Side, ns: str) -> Any:
    token = service_account(side, ns, READ_NODES + [
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}])
    out = []
    for attributes in ({"verb": "list", "resource": "nodes"}, {"verb": "delete", "resource": "nodes"},
                       {"verb": "create", "resource": "pods", "subresource": "eviction", "namespace": ns},
                       {"verb": "create", "resource": "pods", "namespace": ns}):
        code, body = side.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}}, token=token)
        out.append([code, body["status"].get("allowed"), bool(body["status"].get("denied"))])
    return out


@scenario
def escalation_is_refused(side: Side, ns: str) -> Any:
    token = service_account(side, ns, READ_NODES + [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]}])
    return status(side.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "metadata": {"name": f"{ns}-more"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]},
        token=token))


# ------------------------------------------------------------------------------------------------------ the run


@pytest.fixture(scope="module")
def sides(real: ControlPlane) -> Iterator[tuple[Side, Side]]:
    made: tuple[Side, Side] = (Real(real), Emulated())
    for side in made:
        side.add_nodes([node(NODES[0]), node(NODES[1], "us-west-2b"),
                        node(NODES[2], "us-west-2c", labels={"disk": "ssd"})])
    yield made


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_local_region_answers_as_kube_apiserver_does(sides: tuple[Side, Side], name: str) -> None:
    ns = "d-" + name.replace("_", "-")[:50].rstrip("-")
    real, emulated = (SCENARIOS[name](side, ns) for side in sides)
    if name in EXPLAINED:
        assert real != emulated, f"{name} is listed as a difference that stays, but the two now agree: delete it"
        return
    assert emulated == real, f"{name}: the local region answered differently from kube-apiserver"


# Referenced so that a scenario module's helpers are not reported unused.
_ = Taint
