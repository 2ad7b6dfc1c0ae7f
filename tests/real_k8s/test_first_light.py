"""First light on a real control plane: before the first wave, ``rotate run`` boots one node of each pool on its new
image, taints it ``platformctl.io/first-light`` as it registers, and asks the health gate. An image with no kubelet
never registers a node (as the local region refuses it) and halts the run before anything moves. Judged from what the API
server and moto saw, not from the run's report: the gate (a command, as an operator's is) records, when it is asked,
which nodes carry the taint and which pods run there; a ``fail`` leaves one more launch and one termination in the
group's activities and every workload pod where it was; a ``pass`` lets the node in as capacity the run added and the
rotation goes on to the end with no budget broken."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from platformctl.emulator.realk8s import ControlPlane
from tests.real_k8s.fleet import BUDGETS, NAMESPACE, POOLS, REGION, Fleet, Watched, plain_image, ready_nodes
from tests.real_k8s.test_control_plane import until

pytestmark = pytest.mark.real_k8s
TAINT = "platformctl.io/first-light"
GATE = f'''
import json, os, subprocess, sys
kubeconfig, verdict, evidence = sys.argv[1:4]
def get(*what):
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", *what, "-o", "json"], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)["items"]
lit = sorted(n["metadata"]["name"] for n in get("nodes")
             if any(t["key"] == "{TAINT}" for t in n["spec"].get("taints") or []))
there = sorted(p["metadata"]["namespace"] + "/" + p["metadata"]["name"] for p in get("pods", "-A")
               if p["spec"].get("nodeName") in lit)
with open(evidence, "a") as f:
    f.write(json.dumps({{"wave": os.environ.get("PLATFORMCTL_WAVE"), "lit": lit, "pods": there}}) + "\\n")
print(json.dumps({{"verdict": open(verdict).read().strip(), "reason": "the operator's gate says so"}}))
'''


def pods(real: ControlPlane) -> dict[str, str]:
    """Each workload pod's uid by name (a pod evicted and made again has another name, and another uid)."""
    return {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in real.get(f"/api/v1/namespaces/{NAMESPACE}/pods")[1]["items"]}


def test_first_light_boots_one_node_a_pool_and_moves_no_workload_until_the_gate_passes(
        real: ControlPlane, fleet: Fleet, tmp_path: Path) -> None:
    image = fleet.new_image()
    gate, verdict, evidence = tmp_path / "gate.py", tmp_path / "verdict", tmp_path / "evidence.jsonl"
    gate.write_text(GATE)
    policy = fleet.policy(tmp_path, healthGate={"command": [sys.executable, str(gate), str(real.kubeconfig),
                                                            str(verdict), str(evidence)]},
                          firstLight={"pools": "all", "minResults": 1, "timeout": "5m"}, gateTimeoutSeconds=60,
                          nodeReadyTimeoutSeconds=20)
    common = ["rotate", "run", "--policy", str(policy), "--context", real.name, "--kubeconfig", str(real.kubeconfig),
              "--region", REGION, "-o", "json"]
    workloads = pods(real)

    plain = fleet.new_image(plain_image(fleet.ec2))  # an image that cannot join: its nodes never register
    verdict.write_text("pass")
    stuck = fleet.platformctl(*common, "--state", f"sqlite:///{tmp_path / 'stuck.db'}")
    assert stuck.returncode == 1 and "first-light-not-ready" in stuck.stdout, stuck.stdout[-2000:] + stuck.stderr[-2000:]
    assert f"no node registered on {plain}" in stuck.stdout, stuck.stdout[-2000:]
    fleet.refused |= set(fleet.kubelets.never_joined)
    assert len(fleet.refused) == len(POOLS) and all("has no kubelet" in why for why in fleet.kubelets.never_joined.values())
    assert not evidence.exists() and pods(real) == workloads  # never judged, nothing moved
    fleet.new_image()
    verdict.write_text("fail")
    failed = fleet.platformctl(*common, "--state", f"sqlite:///{tmp_path / 'failed.db'}")
    assert failed.returncode == 1, failed.stdout[-2000:] + failed.stderr[-2000:]
    assert "first-light-fail" in failed.stdout, failed.stdout[-2000:]
    [asked] = [json.loads(line) for line in evidence.read_text().splitlines()]
    assert asked["wave"] == "first-light" and len(asked["lit"]) == len(POOLS) and asked["pods"] == [], asked
    assert pods(real) == workloads  # nothing evicted, nothing moved
    until(lambda: sorted(n["metadata"]["name"] for n in ready_nodes(real)) == sorted(fleet.before),
          what="the first-light nodes gone with their instances")
    launched = [a.rsplit(" ", 1)[-1] for a in fleet.activities() if a.startswith("Launching")]
    lit = set(launched) - set(fleet.before.values()) - fleet.refused  # one launch more a pool; those instances gone
    assert len(lit) == len(POOLS) and {i["State"]["Name"] for r in fleet.ec2.describe_instances(
        InstanceIds=sorted(lit))["Reservations"] for i in r["Instances"]} == {"terminated"}
    for pool, nodes in POOLS.items():
        group = fleet.group(pool)
        assert len(group["Instances"]) == group["DesiredCapacity"] == nodes, group
    assert {i["InstanceId"] for pool in POOLS for i in fleet.group(pool)["Instances"]} == set(fleet.before.values())

    verdict.write_text("pass")
    evidence.unlink()
    with Watched(real) as watched:
        passed = fleet.platformctl(*common, "--state", f"sqlite:///{tmp_path / 'passed.db'}")
    assert passed.returncode == 0, passed.stdout[-2000:] + passed.stderr[-2000:]
    asked, *waves = [json.loads(line) for line in evidence.read_text().splitlines()]  # first light, then each wave
    assert asked["wave"] == "first-light" and len(asked["lit"]) == len(POOLS) and asked["pods"] == [], asked
    assert waves and all(w["wave"] != "first-light" and w["lit"] == [] for w in waves), waves  # let in: untainted
    after = ready_nodes(real)
    assert set(asked["lit"]) <= {n["metadata"]["name"] for n in after}  # let in: they stayed, as their pools' nodes
    assert not any(t["key"] == TAINT for n in after for t in n["spec"].get("taints") or [])
    assert not set(fleet.before) & {n["metadata"]["name"] for n in after} and len(after) == len(fleet.before)
    assert {n["metadata"]["labels"]["platformctl.io/image"] for n in after} == {image}
    assert all(watched.lowest[app] >= fewest for app, fewest in BUDGETS.items()), watched.lowest
    assert fleet.running() == 5
    # The first nodes, the two failed first lights', then one per node replaced (the first-light nodes among them).
    assert sum(a.startswith("Launching") for a in fleet.activities()) == 2 * len(fleet.before) + 2 * len(POOLS)
