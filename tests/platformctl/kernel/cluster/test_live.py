"""The live adapter: the official client, configured from a kubeconfig, behind the same interface.

Against a running API server it is exercised by the local region server's tests; here it is checked
on what needs no server: configuration errors, an unreachable server, and the Status bodies it turns
into eviction results.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.clock import VIRTUAL_EPOCH, VirtualClock
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.live import LiveCluster
from platformctl.kernel.cluster.model import EvictionResult
from platformctl.kernel.errors import ApiUnreachable, PlatformError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "local", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "me", "user": {"token": "t"}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "me"}}],
    }))
    return path


def test_both_implementations_satisfy_the_interface(tmp_path: Path) -> None:
    live = LiveCluster.from_kubeconfig(str(_kubeconfig(tmp_path, _closed_port())))
    assert isinstance(live, Cluster) and isinstance(SimulatedCluster(), Cluster)
    assert live.name == "local"


def test_unreachable_server_is_a_one_line_error(tmp_path: Path) -> None:
    port = _closed_port()
    path = _kubeconfig(tmp_path, port)
    clock = VirtualClock()  # the adapter's backoff would wait on it
    live = LiveCluster.from_kubeconfig(str(path), context="local", clock=clock)
    with pytest.raises(ApiUnreachable) as err:
        live.list_nodes()
    assert err.value.file == str(path) and f"cannot reach the Kubernetes API at http://127.0.0.1:{port}" in str(err.value)
    # nothing listens there and it never answered: a wrong address, said at once (test_live_paging_retry: once it
    # has answered, the same is waited out)
    assert clock.now() == VIRTUAL_EPOCH and live.retried == 0


def test_unknown_context_names_the_kubeconfig(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path, _closed_port())
    with pytest.raises(PlatformError) as err:
        LiveCluster.from_kubeconfig(str(path), context="prod-use1a-01")
    assert err.value.file == str(path) and err.value.field == "--context"
    assert err.value.detail == "no context 'prod-use1a-01' (contexts: local)"  # names the ones that exist


def test_eviction_status_bodies_become_results_unchanged() -> None:
    body = {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.", "reason": "TooManyRequests",
        "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]},
        "code": 429,
    }
    result = EvictionResult.from_status(body, 429)
    assert not result.allowed and result.to_status() == body
    ok = EvictionResult.from_status({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201)
    assert ok.allowed and ok == EvictionResult(201)
