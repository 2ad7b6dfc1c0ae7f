"""The local region's API servers authenticate and authorize as kube-apiserver does (``platformctl.emulator.server.rbac``),
over the RBAC objects the Pulumi program deploys: what is checked is the HTTP answer a client gets (its status and
kube-apiserver's ``Status`` body) and what the cluster holds after."""

from __future__ import annotations

import json
import threading
import time
from functools import cache
from typing import Any

import pytest
from werkzeug.test import Client

from infra.materialize import _plain  # the engine's floats as the provider sends them: integers
from platformctl.emulator.server.iam import Issuers
from platformctl.emulator.server.kubeapi import KubeAPI
from platformctl.emulator.server.objects import ClusterState
from platformctl.emulator.server.rbac import API_AUDIENCE, Authenticator
from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from tests.infra.test_program import declared, k8s_objects

CLUSTER = "dev-usw2a-01"
ISSUER = "https://oidc.eks.us-west-2.amazonaws.com/id/RBAC"
REMEDIATION = ("platformctl-system", "platformctl-remediation")
CANARY = ("platformctl-canary", "platformctl-canary-runner")


@cache
def program_objects() -> list[dict[str, Any]]:
    """The dev stack's Kubernetes objects of one member cluster, as the program declares them."""
    run = declared("dev")
    return [o for kind in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                           "ValidatingAdmissionPolicyBinding") for o in k8s_objects(run, CLUSTER, kind)]


class Cluster:
    def __init__(self) -> None:
        sim = SimulatedCluster(CLUSTER)
        sim.add_pool(NodePoolSpec("general", "us-west-2a", "m6i.large", "ami-1", 2))
        self.state = ClusterState(sim)
        for obj in program_objects():
            self.state.apply(json.loads(json.dumps(obj)))
        self.issuers = Issuers()
        self.now = time.time()
        authenticator = Authenticator(self.issuers, lambda c: ISSUER, lambda c: [],
                                      lambda c: self.state.stored["serviceaccounts"], lambda: self.now)
        self.client = Client(KubeAPI({CLUSTER: self.state}, threading.Condition(threading.RLock()),
                                     authenticator=authenticator))

    def token(self, account: tuple[str, str], audience: str = API_AUDIENCE, issuer: str = ISSUER) -> str:
        return self.issuers.mint(issuer, account[0], account[1], self.now, audience)

    def call(self, method: str, path: str, token: str | None, body: dict[str, Any] | None = None,
             node: bool = True) -> Any:
        """A request as a pod on a node sends it (``node``), or as a client outside the stage's network."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        environ = {"platformctl.from_node": f"{CLUSTER}/n-1"} if node else {}  # as NodeNetwork marks a pod's request
        return self.client.open(f"/clusters/{CLUSTER}{path}", method=method, headers=headers, json=body,
                                environ_overrides=environ)


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def test_a_service_account_may_do_what_its_cluster_role_grants_and_nothing_else(cluster: Cluster) -> None:
    token = cluster.token(REMEDIATION)
    assert cluster.call("GET", "/api/v1/nodes", token).status_code == 200
    refused = cluster.call("GET", "/api/v1/namespaces/platformctl-system/secrets", token)
    assert refused.status_code == 403
    assert refused.json == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
        "details": {"kind": "secrets"},
        "message": 'secrets is forbidden: User "system:serviceaccount:platformctl-system:platformctl-remediation" '
                   'cannot list resource "secrets" in API group "" in the namespace "platformctl-system"'}
    deleted = cluster.call("DELETE", "/api/v1/namespaces/kube-system", token)
    assert deleted.status_code == 403 and 'cannot delete resource "namespaces"' in deleted.json["message"]
    assert cluster.call("GET", "/api/v1/namespaces/kube-system", None, node=False).status_code == 200  # still there


def test_tokens_the_api_server_would_not_take_are_401(cluster: Cluster) -> None:
    for token in (cluster.token(REMEDIATION, audience="sts.amazonaws.com"),  # IRSA's token is for STS, not the API
                  cluster.token(REMEDIATION, issuer="https://oidc.eks.us-west-2.amazonaws.com/id/OTHER"),
                  Issuers().mint(ISSUER, *REMEDIATION, time.time(), API_AUDIENCE),  # another key
                  cluster.token(("platformctl-system", "no-such-account")),
                  "local-regio"):
        answer = cluster.call("GET", "/api/v1/nodes", token)
        assert answer.status_code == 401 and answer.json["reason"] == "Unauthorized", token
    # A pod with no token is anonymous: it may read the version, nothing else.
    assert cluster.call("GET", "/version", None).status_code == 200
    assert cluster.call("GET", "/api/v1/nodes", None).status_code == 403


def test_the_operator_is_the_stacks_creator_and_may_check_anyone_with_can_i(cluster: Cluster) -> None:
    # kubectl sends no token over plain HTTP: from outside the stage's network that is the operator, a cluster admin.
    assert cluster.call("GET", "/api/v1/namespaces/platformctl-system/secrets", None, node=False).status_code == 200
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": "create", "group": "", "resource": "pods",
                                              "subresource": "eviction", "namespace": "default"}}}
    mine = cluster.call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", cluster.token(REMEDIATION),
                        review)
    assert mine.status_code == 201 and mine.json["status"]["allowed"] is True
    canary = cluster.call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", cluster.token(CANARY), review)
    assert canary.json["status"]["allowed"] is False
    # Impersonation (kubectl --as): the operator may; a service account may not.
    headers = {"Impersonate-User": "system:serviceaccount:platformctl-canary:platformctl-canary-runner"}
    seen = cluster.client.get(f"/clusters/{CLUSTER}/api/v1/namespaces/platformctl-system/secrets", headers=headers)
    assert seen.status_code == 403 and "platformctl-canary-runner" in seen.json["message"]
    escalated = cluster.client.get(f"/clusters/{CLUSTER}/api/v1/namespaces/platformctl-system/secrets",
                                   headers={**headers, "Authorization": f"Bearer {cluster.token(REMEDIATION)}"},
                                   environ_overrides={"platformctl.from_node": f"{CLUSTER}/n-1"})
    assert escalated.status_code == 403 and 'cannot impersonate resource "serviceaccounts"' in escalated.json["message"]


def _path(obj: dict[str, Any]) -> str:
    from platformctl.kernel.cluster.apiobjects import PLURAL_OF_KIND, RESOURCES

    plural = PLURAL_OF_KIND[obj["kind"]]
    res = RESOURCES[plural]
    base = f"/apis/{res.group}/{res.version}" if res.group else "/api/v1"
    namespace = obj["metadata"].get("namespace")
    return f"{base}/namespaces/{namespace}/{plural}" if res.namespaced and namespace else f"{base}/{plural}"


@pytest.mark.parametrize("cluster_name", ["dev-usw2-host", CLUSTER])
def test_the_ticks_deploy_applies_every_object_of_the_program_as_its_access_entry_admits_it(cluster_name: str) -> None:
    """The tick's `pulumi up` signs in as its IAM role; the cluster's access entry gives it its groups. On the program
    of main before this test (the rotation's group only), its first object (a namespace) was 403."""
    run = declared("dev")
    role_arn = next(r.outputs["arn"] for r in run.of_type("aws:iam/role:Role") if r.name == "dev-usw2-host-release")
    [entry] = [r.inputs for r in run.of_type("aws:eks/accessEntry:AccessEntry")
               if r.inputs["principalArn"] == role_arn and r.inputs["clusterName"] == cluster_name]
    sim = SimulatedCluster(cluster_name)
    state = ClusterState(sim)
    client = Client(KubeAPI({cluster_name: state}, threading.Condition(threading.RLock()),
                            authenticator=Authenticator(Issuers(), lambda c: ISSUER, lambda c: [], lambda c: {}, time.time)))
    kinds = ("Namespace", "PriorityClass", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
             "ServiceAccount", "ConfigMap", "CronJob", "Deployment")
    objects = [_plain(o) for kind in kinds for o in k8s_objects(run, cluster_name, kind)]
    # The operator's first `pulumi up` made the deploy's own role and binding (what lets the tick in at all).
    for obj in objects:
        if obj["metadata"]["name"] == "platformctl:deploy":
            assert client.post(f"/clusters/{cluster_name}{_path(obj)}", json=obj).status_code == 201
    as_tick = {"Impersonate-User": "arn:aws:sts::123456789012:assumed-role/dev-usw2-host-release/tick",
               "Impersonate-Group": entry["kubernetesGroups"]}
    answers = {}
    for obj in objects:
        if obj["metadata"]["name"] == "platformctl:deploy":
            continue
        answer = client.post(f"/clusters/{cluster_name}{_path(obj)}", json=obj, headers=as_tick)
        answers[f'{obj["kind"]}/{obj["metadata"]["name"]}'] = (answer.status_code, answer.json.get("message"))
    assert {k: v for k, v in answers.items() if v[0] != 201} == {}
    # A later deploy replaces each object it changed at the resourceVersion it read (pulumi-kubernetes' update).
    updated = {}
    for obj in objects:
        at = f"/clusters/{cluster_name}{_path(obj)}/{obj['metadata']['name']}"
        read = client.get(at, headers=as_tick)
        assert read.status_code == 200, (at, read.json)
        changed = {**obj, "metadata": {**obj["metadata"], "resourceVersion": read.json["metadata"]["resourceVersion"],
                                       "annotations": {"platformctl.io/deployed-by": "test"}}}
        answer = client.put(at, json=changed, headers=as_tick)
        updated[f'{obj["kind"]}/{obj["metadata"]["name"]}'] = (answer.status_code, answer.json.get("message"))
        if answer.status_code == 200:
            assert answer.json["metadata"]["annotations"] == {"platformctl.io/deployed-by": "test"}
            assert answer.json["metadata"]["resourceVersion"] != read.json["metadata"]["resourceVersion"]
    assert {k: v for k, v in updated.items() if v[0] != 200} == {}
    # The rotation's identity reads nodes and evicts pods; it changes none of the program's objects.
    as_rotation = {"Impersonate-User": "arn:aws:sts::123456789012:assumed-role/dev-usw2-host-rotation/r",
                   "Impersonate-Group": "platformctl:rotation"}
    job = next(o for o in objects if o["kind"] in ("CronJob", "Deployment"))
    refused = client.put(f"/clusters/{cluster_name}{_path(job)}/{job['metadata']['name']}", json=job, headers=as_rotation)
    assert refused.status_code == 403 and 'cannot update resource "' in refused.json["message"]
    # What it may not: a Secret (the operator's Pulumi one is there), a namespace not the program's, a role of its own.
    assert client.get(f"/clusters/{cluster_name}/api/v1/namespaces/platformctl-system/secrets",
                      headers=as_tick).status_code == 403
    assert client.delete(f"/clusters/{cluster_name}/api/v1/namespaces/kube-system", headers=as_tick).status_code == 403
    rogue = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "rogue"},
             "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}
    refused = client.post(f"/clusters/{cluster_name}/apis/rbac.authorization.k8s.io/v1/clusterroles", json=rogue,
                          headers=as_tick)
    assert refused.status_code == 403 and "attempting to grant RBAC permissions not currently held" in refused.json["message"]
    admin = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "mine"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
             "subjects": [{"kind": "Group", "name": "platformctl:deploy"}]}
    assert client.post(f"/clusters/{cluster_name}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", json=admin,
                       headers=as_tick).status_code == 403


def test_the_canary_runner_writes_only_in_the_namespaces_it_makes_and_labels(cluster: Cluster) -> None:
    """RBAC lets the runner write namespaces, pods and workloads anywhere; the program's admission policy keeps it to
    the namespaces carrying the canary label, so it cannot start a pod in platformctl-system (where the release
    account's IAM role deploys the stage) nor delete kube-system."""
    token = cluster.token(CANARY)
    mine = {"metadata": {"name": "canary-web-1", "labels": {"platformctl.io/canary": "web"}}}
    assert cluster.call("POST", "/api/v1/namespaces", token, mine).status_code == 201
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    assert cluster.call("POST", "/api/v1/namespaces/canary-web-1/pods", token, pod).status_code == 201
    escalation = {**pod, "spec": {**pod["spec"], "serviceAccountName": "platformctl-release"}}
    refused = cluster.call("POST", "/api/v1/namespaces/platformctl-system/pods", token, escalation)
    assert refused.status_code == 403
    assert refused.json["message"] == (
        "pods is forbidden: ValidatingAdmissionPolicy 'platformctl-canary-confined' with binding "
        "'platformctl-canary-confined' denied request: the canary runner writes only in namespaces labelled "
        "platformctl.io/canary, which it makes")
    unlabelled = cluster.call("POST", "/api/v1/namespaces", token, {"metadata": {"name": "mine-too"}})
    assert unlabelled.status_code == 403
    for victim in ("kube-system", "platformctl-system"):
        answer = cluster.call("DELETE", f"/api/v1/namespaces/{victim}", token)
        assert answer.status_code == 403 and "platformctl-canary-confined" in answer.json["message"], victim
        assert cluster.call("GET", f"/api/v1/namespaces/{victim}", None, node=False).status_code == 200
    assert cluster.call("DELETE", "/api/v1/namespaces/canary-web-1", token).status_code == 200
    # Anyone else is not held to it: the operator may still do what RBAC (and the namespace's Pod Security) lets it.
    locked = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
              "seccompProfile": {"type": "RuntimeDefault"}}
    tight = {**pod, "spec": {"containers": [{**pod["spec"]["containers"][0], "securityContext": locked}]}}
    assert cluster.call("POST", "/api/v1/namespaces/platformctl-system/pods", None, tight, node=False).status_code == 201
