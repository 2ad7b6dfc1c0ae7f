"""``rotate plan`` and ``rotate run`` on a real control plane: kube-apiserver answers every list, watch and eviction,
the disruption controller keeps the budgets, the scheduler places the evicted pods, and the nodes of two pools follow
moto's Auto Scaling groups as EKS nodes follow their instances (``Kubelets``). What is checked is what the API server
and moto saw: every node replaced by one booting the new image, one launch per node, each workload's ready pods over
the run, from the API server's own answers, never below what its budget promises, and a wait-for-completion Job's pod
left to finish (the Job controller counts it succeeded, none failed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platformctl.emulator.realk8s import ControlPlane
from tests.real_k8s.fleet import BUDGETS, REGION, Fleet, Watched, ready_nodes

pytestmark = pytest.mark.real_k8s


def test_rotate_run_replaces_every_node_with_no_budget_broken_on_a_real_control_plane(
        real: ControlPlane, fleet: Fleet, tmp_path: Path) -> None:
    image = fleet.new_image()
    policy = fleet.policy(tmp_path)
    common = ["--policy", str(policy), "--context", real.name, "--kubeconfig", str(real.kubeconfig), "-o", "json"]
    plan = fleet.platformctl("rotate", "plan", *common)
    assert plan.returncode == 0, plan.stderr
    planned = json.loads(plan.stdout)
    assert sorted(n for w in planned["waves"] for n in w["nodes"]) == sorted(fleet.before), planned
    fleet.training(30)  # on one of the nodes: its drain waits for the Job's pod to finish
    with Watched(real) as watched:
        run = fleet.platformctl("rotate", "run", *common, "--region", REGION, "--state", f"sqlite:///{tmp_path / 'state.db'}")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    after = ready_nodes(real)
    assert not set(fleet.before) & {n["metadata"]["name"] for n in after}
    assert {n["metadata"]["labels"]["platformctl.io/image"] for n in after} == {image}
    assert all(watched.lowest[app] >= fewest for app, fewest in BUDGETS.items()), watched.lowest
    assert fleet.running() == 5
    # The Job's one pod ran to its end: evicted, it would have counted failed, and backoffLimit 0 fails the Job.
    job = fleet.job_counted("train")
    assert job.get("succeeded") == 1 and not job.get("failed"), job
    launched = [a for a in fleet.activities() if a.startswith("Launching")]
    assert len(launched) == 2 * len(fleet.before)  # the group's first nodes, then one new node for each old one
