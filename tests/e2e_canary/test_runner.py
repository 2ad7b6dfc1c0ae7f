"""The runner and the stage verdict against a simulated cluster: on a bad image the node-pool arm of that
image fails with the kubelet's reason while the old image's arm passes, and the verdict against the old
image says fail, naming the new one."""

from __future__ import annotations

from pathlib import Path

from e2e_canary.definitions import parse_canary
from e2e_canary.runner import Runner, results
from e2e_canary.verdict import stage_verdict
from platformctl.cluster.simulator import NodePoolSpec, SimulatedCluster
from platformctl.state.sqlite import SQLiteStore

OLD, NEW = "ami-0000000000000001a", "ami-0000000000000002b"


def cluster() -> SimulatedCluster:
    sim = SimulatedCluster("c1")
    sim.add_pool(NodePoolSpec("general", "us-east-1a", "m6i.2xlarge", OLD, 2))
    sim.set_pool_image("general", NEW)
    sim.scale_pool("general", 4)  # mid-rotation: two nodes on each image
    sim.run_until_settled()
    return sim


CANARY = parse_canary({"name": "node-pool", "kind": "node-pool", "podsPerArm": 10, "deadline": 120}, "node-pool")


def test_a_bad_image_fails_its_own_arm_and_the_verdict_names_it(tmp_path: Path) -> None:
    sim = cluster()
    sim.set_image_fault(NEW, None)
    store = SQLiteStore(tmp_path / "state.db")
    runner = Runner("dev", "c1", sim, store)
    for _ in range(3):
        report = runner.run(CANARY)
        by_image = {(r["image"], r["outcome"]) for r in report.results}
        assert by_image == {(OLD, "ok"), (NEW, "fail")}, by_image
    failed = next(r for r in report.results if r["outcome"] == "fail")
    assert "CreateContainerError" in failed["reason"] and NEW in failed["reason"]
    ok = next(r for r in report.results if r["outcome"] == "ok")
    assert ok["metrics"]["pod_startup_seconds"] == 1.0 and ok["pool"] == "general" and ok["zone"] == "us-east-1a"
    sim.advance(1)  # their grace period (0 s) runs out
    assert sim.list_namespaces("platformctl.io/canary") == [] and not sim.list_pods(namespace=report.namespace)
    verdict = stage_verdict(results(store, "dev"), sim.now(), 3600, baseline=OLD)
    assert verdict["verdict"] == "fail" and NEW in verdict["reason"]
    assert verdict["arms"][NEW]["metrics"]["failure_rate"]["verdict"] == "fail"


def test_a_healthy_stage_passes_and_a_crashed_runs_leftovers_are_reaped(tmp_path: Path) -> None:
    sim = cluster()
    store = SQLiteStore(tmp_path / "state.db")
    runner = Runner("dev", "c1", sim, store)
    for _ in range(3):
        report = runner.run(CANARY)
        assert {r["outcome"] for r in report.results} == {"ok"}
    assert stage_verdict(results(store, "dev"), sim.now(), 3600, baseline=OLD)["verdict"] == "pass"
    sim.create_namespace("canary-node-pool-dead", {"platformctl.io/canary": "node-pool"})
    sim.create_pod(runner._pod(CANARY, "dead", "canary-node-pool-dead", runner.arms()[0], 0))
    assert runner.reap() == ["canary-node-pool-dead"]
    assert sim.list_namespaces("platformctl.io/canary") == []
