"""Snapshots in the format of `kubectl get nodes,pods,pdb -A -o json`: reading, writing, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from platformctl.emulator.simulator import SimulatedCluster
from platformctl.emulator.synthetic import synthetic_cluster
from platformctl.kernel.cluster.model import load_snapshot, parse_snapshot, save_snapshot
from platformctl.kernel.errors import PlatformError
from tests.conftest import FIXTURES


def test_reads_what_kubectl_prints() -> None:
    snap = load_snapshot(FIXTURES / "eviction_rules.json")
    assert len(snap.nodes) == 2 and len(snap.pdbs) == 12
    node = snap.nodes[0]
    assert (node.pool, node.image, node.zone, node.instance_id) == ("general", "ami-0old", "us-east-1a", "i-0a1b2c3d4e5f60010")
    assert (node.allocatable.cpu_millis, node.allocatable.memory_bytes, node.max_pods) == (15890, 62771496 * 1024, 234)
    pod = next(p for p in snap.pods if p.name == "web-7d9c-a1")
    assert (pod.owner_kind, pod.requests.cpu_millis, pod.requests.memory_bytes, pod.ready) == ("ReplicaSet", 250, 256 * 1024**2, True)
    going = next(p for p in snap.pods if p.name == "solo-9f-going")
    assert going.terminating
    mirror = next(p for p in snap.pods if p.name.startswith("kube-proxy"))
    assert mirror.is_mirror


def test_saved_snapshot_reads_back_identically(tmp_path: Path) -> None:
    sim, _ = synthetic_cluster(12)
    sim.evict(*sim.list_pods("team-001")[0].key)  # a terminating pod too
    path = tmp_path / "snap.json"
    save_snapshot(sim.snapshot(), path)
    snap = load_snapshot(path)
    assert snap.to_kube() == json.loads(path.read_text())
    again = SimulatedCluster.from_snapshot(snap)
    assert again.snapshot() == sim.snapshot()


def test_saved_snapshot_is_valid_for_the_official_client(tmp_path: Path) -> None:
    """The official client's models accept every object we write, field for field."""
    from kubernetes.client import ApiClient

    sim, _ = synthetic_cluster(6)
    doc = sim.snapshot()
    api = ApiClient()
    kinds = {"Node": "V1Node", "Pod": "V1Pod", "PodDisruptionBudget": "V1PodDisruptionBudget"}

    class _Response:
        def __init__(self, item: dict) -> None:
            self.data = json.dumps(item)

    for item in doc["items"][:: max(len(doc["items"]) // 200, 1)]:
        model = api.deserialize(_Response(item), kinds[item["kind"]])
        # The client writes timestamps as +00:00 where the API server (and kubectl) write Z.
        again = json.dumps(api.sanitize_for_serialization(model), sort_keys=True).replace("+00:00", "Z")
        assert json.loads(again) == item


def test_pdb_status_in_a_snapshot_is_what_the_controller_computes() -> None:
    sim = SimulatedCluster.from_snapshot(load_snapshot(FIXTURES / "eviction_rules.json"))
    doc = sim.snapshot()
    web = next(i for i in doc["items"] if i["kind"] == "PodDisruptionBudget" and i["metadata"]["name"] == "web")
    assert {k: web["status"][k] for k in ("currentHealthy", "desiredHealthy", "expectedPods", "disruptionsAllowed")} == {
        "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3, "disruptionsAllowed": 1}


@pytest.mark.parametrize(
    ("content", "field", "message"),
    [
        ("{not json", None, "not valid JSON (line 1 column 2)"),
        ('{"kind": "PodList", "items": []}', "kind", "expected a v1 List"),
        ('{"kind": "List", "items": [{"kind": "Service", "metadata": {"name": "x"}}]}', "items[0].kind", "unsupported kind 'Service'"),
        ('{"kind": "List", "items": [{"kind": "Node", "metadata": {}}]}', "items[0].metadata.name", "required string is missing"),
        ('{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", '
         '"resources": {"requests": {"cpu": "lots"}}}]}}]}', "items[0].spec.containers[0].resources.requests.cpu",
         "'lots' is not a Kubernetes quantity"),
        ('{"kind": "List", "items": [{"kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": {"minAvailable": "half"}}]}',
         "items[0].spec.minAvailable", "must be an integer or a percentage"),
        ('{"kind": "List", "items": [{"kind": "PodDisruptionBudget", "metadata": {"name": "b"}, "spec": {"selector": '
         '{"matchExpressions": [{"key": "a", "operator": "Like"}]}}}]}', "items[0].spec.selector.matchExpressions[0].operator",
         "operator must be one of"),
        ('{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n"}}, {"kind": "Node", "metadata": {"name": "n"}}]}',
         "items", "node n appears twice"),
    ],
)
def test_malformed_snapshots_name_the_file_and_the_field(tmp_path: Path, content: str, field: str | None, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(PlatformError) as err:
        load_snapshot(path)
    assert err.value.file == str(path)
    assert err.value.field == field
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_snapshot_file(tmp_path: Path) -> None:
    with pytest.raises(PlatformError, match="snapshot file not found"):
        load_snapshot(tmp_path / "nope.json")


def test_limits_stand_in_for_missing_requests() -> None:
    doc = {"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}}]}
    pod = parse_snapshot(doc).pods[0]
    assert (pod.requests.cpu_millis, pod.requests.memory_bytes, pod.requests.gpus) == (2000, 1024**3, 1)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")
def test_kubectl_reads_saved_snapshots_offline(tmp_path: Path) -> None:
    """kubectl's own decoder (``--local``: no server) takes every object of a saved snapshot."""
    sim, _ = synthetic_cluster(8)
    path = tmp_path / "snap.json"
    save_snapshot(sim.snapshot(), path)
    proc = subprocess.run(["kubectl", "label", "--local", "-f", str(path), "checked=yes", "-o", "name"],
                          capture_output=True, text=True, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    expected = [f"node/{n.name}" for n in sorted(sim.list_nodes(), key=lambda n: n.name)]
    expected += [f"pod/{p.name}" for p in sorted(sim.list_pods(), key=lambda p: p.key)]
    expected += [f"poddisruptionbudget.policy/{b.name}" for b in sorted(sim.list_pdbs(), key=lambda b: b.key)]
    assert proc.stdout.split() == expected
