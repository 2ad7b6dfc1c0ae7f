"""The two sides a differential scenario runs on: the real control plane, and the local region's API server over a
simulated cluster (in process, as tests/platformctl/emulator/server/test_rbac.py builds it). Each answers a request
with its status and JSON body, makes the same nodes (``build_node``'s, by name), mints a service account's token, and
waits for its controllers (``settle``: wall time for the real one, the simulation's virtual clock for the other)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any, Protocol

from werkzeug.test import Client

from platformctl.emulator.realk8s import ControlPlane
from platformctl.emulator.server.iam import Issuers
from platformctl.emulator.server.kubeapi import KubeAPI
from platformctl.emulator.server.objects import ClusterState
from platformctl.emulator.server.rbac import API_AUDIENCE, Authenticator
from platformctl.emulator.simulation.pools import build_node
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.model.objects import Node, Taint

CLUSTER = "diff"
ISSUER = "https://oidc.eks.us-west-2.amazonaws.com/id/DIFF"


def node(name: str, zone: str = "us-west-2a", taints: tuple[Taint, ...] = (), labels: dict[str, str] | None = None) -> Node:
    return build_node(name=name, zone=zone, region="us-west-2", instance_type="m6i.large",
                      instance_id="i-" + name.encode().hex()[-17:].rjust(17, "0"), labels=labels or {}, taints=taints)


class Side(Protocol):
    name: str

    def request(self, method: str, path: str, body: Any = None, token: str | None = None,
                content_type: str = "application/json", accept: str = "application/json") -> tuple[int, Any]: ...

    def add_nodes(self, nodes: list[Node]) -> None: ...

    def token(self, namespace: str, account: str) -> str: ...

    def settle(self, done: Callable[[], Any], seconds: float = 60.0) -> Any: ...


class Real:
    name = "real"

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def request(self, method: str, path: str, body: Any = None, token: str | None = None,
                content_type: str = "application/json", accept: str = "application/json") -> tuple[int, Any]:
        return self.plane.request(method, path, body, token, content_type, accept)

    def add_nodes(self, nodes: list[Node]) -> None:
        self.plane.register([n.to_kube() for n in nodes])
        names = {n.name for n in nodes}
        self.settle(lambda: all(  # Ready, and the node lifecycle controller's not-ready taint gone
            n["metadata"]["name"] not in names or (
                any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
                and not any(t["key"] == "node.kubernetes.io/not-ready" for t in n["spec"].get("taints", [])))
            for n in self.plane.get("/api/v1/nodes")[1]["items"]) and names <= {
                n["metadata"]["name"] for n in self.plane.get("/api/v1/nodes")[1]["items"]})

    def token(self, namespace: str, account: str) -> str:
        return self.plane.token(namespace, account)

    def settle(self, done: Callable[[], Any], seconds: float = 60.0) -> Any:
        from tests.real_k8s.test_control_plane import until

        return until(done, seconds, f"{self.name}: settled")


class Emulated:
    name = "emulated"

    def __init__(self) -> None:
        self.sim = SimulatedCluster(CLUSTER)
        self.state = ClusterState(self.sim)
        self.issuers = Issuers()
        authenticator = Authenticator(self.issuers, lambda c: ISSUER, lambda c: [],
                                      lambda c: self.state.stored["serviceaccounts"], self.sim.now)
        self.client = Client(KubeAPI({CLUSTER: self.state}, threading.Condition(threading.RLock()),
                                     authenticator=authenticator))

    def request(self, method: str, path: str, body: Any = None, token: str | None = None,
                content_type: str = "application/json", accept: str = "application/json") -> tuple[int, Any]:
        headers = {"Content-Type": content_type, "Accept": accept}
        environ = {}
        if token is not None:  # as a pod sends it, from a node (no token from outside is the operator)
            headers["Authorization"] = f"Bearer {token}"
            environ["platformctl.from_node"] = f"{CLUSTER}/n-1"
        data = None if body is None else json.dumps(body)
        answer = self.client.open(f"/clusters/{CLUSTER}{path}", method=method, headers=headers, data=data,
                                  environ_overrides=environ)
        try:
            return answer.status_code, json.loads(answer.get_data() or b"null")
        except ValueError:
            return answer.status_code, answer.get_data(as_text=True)

    def add_nodes(self, nodes: list[Node]) -> None:
        for n in nodes:
            self.sim.add_node(n)

    def token(self, namespace: str, account: str) -> str:
        return self.issuers.mint(ISSUER, namespace, account, self.sim.now(), API_AUDIENCE)

    def settle(self, done: Callable[[], Any], seconds: float = 60.0) -> Any:
        for _ in range(int(seconds)):
            found = done()
            if found:
                return found
            self.sim.advance(1.0)
        raise AssertionError(f"{self.name}: not settled in {seconds:.0f} virtual s")
