"""A Kubernetes API over simulated clusters: in process (werkzeug's test client) or on a real 127.0.0.1 port."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from werkzeug.serving import make_server
from werkzeug.test import Client

from platformctl.emulator.server.kubeapi import KubeAPI
from platformctl.emulator.server.objects import ClusterState
from platformctl.emulator.server.process import kubeconfig
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.emulator.synthetic import synthetic_cluster
from platformctl.kernel.cluster.model import load_snapshot

FIXTURES = Path(__file__).parents[3] / "fixtures"
TABLE = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}


@dataclass
class Api:
    states: dict[str, ClusterState]
    cond: threading.Condition
    app: KubeAPI

    @property
    def rules(self) -> SimulatedCluster:
        return self.states["rules"].sim

    @property
    def synth(self) -> SimulatedCluster:
        return self.states["synth"].sim


def make_api() -> Api:
    rules = SimulatedCluster.from_snapshot(load_snapshot(FIXTURES / "eviction_rules.json"), name="rules")
    synth, _ = synthetic_cluster(6, name="synth", seed=3, pods_per_node=10)
    synth.run_until_settled()
    states = {"rules": ClusterState(rules), "synth": ClusterState(synth)}
    cond = threading.Condition(threading.RLock())
    return Api(states, cond, KubeAPI(states, cond))


@pytest.fixture
def api() -> Api:
    return make_api()


@pytest.fixture
def client(api: Api) -> Client:
    return Client(api.app)


@dataclass
class Served(Api):
    url: str
    kubeconfig: Path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """The same API on a real port, with a kubeconfig whose contexts are the clusters."""
    api = make_api()
    server = make_server("127.0.0.1", 0, api.app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_port}"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig("test", url, list(api.states), "rules")))
    yield Served(api.states, api.cond, api.app, url, path)
    api.app.stopping.set()
    server.shutdown()
    thread.join(timeout=5)
