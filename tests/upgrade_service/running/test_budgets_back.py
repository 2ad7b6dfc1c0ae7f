"""A budget at its floor while its pods come back is a wait; one whose pods cannot come back is a block.

The cluster: four outdated nodes, each running one pod of ``web`` too large to share a node, under a budget that needs
four healthy pods; a fifth replica starts on a node already on the new image. Until it is Ready the budget allows no
disruption, so every outdated node is held by it. What is read is what a user sees: the simulator's event log, the
nodes' images, the run's report and its progress lines.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from platformctl.emulator import simulator as sim_events
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.model import PDBStatus
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import NEW, OLD, cluster
from tests.upgrade_service.rotation import NO_HARM, executor, harm, new_image, service
from upgrade_service.journal.rotation import read_state
from upgrade_service.planning.plan import plan_cluster
from upgrade_service.running.report import build_report
from upgrade_service.running.run_types import EXIT_DONE, EXIT_HALTED, Progress

START = 60  # web's pods take a minute from scheduled to Ready
POOL = "eks.amazonaws.com/nodegroup"


def fifth_replica_starting(fault: float | None = 0.0) -> SimulatedCluster:
    """The cluster above, the fifth replica scheduled and starting; ``fault``: extra start seconds of the new image's
    pods (None: its runtime cannot create containers)."""
    sim = cluster({"general": 4}, max_size=8)
    service(sim, "web", 4, min_available=4, start=START, cpu=5000)
    sim.run_until_settled()
    new_image(sim)
    sim.scale_pool("general", 5)  # a node on the new image, already Ready when the rotation starts
    sim.advance(150)
    assert sorted(n.image for n in sim.list_nodes()) == [NEW, OLD, OLD, OLD, OLD]
    if fault != 0.0:
        sim.set_image_fault(NEW, fault)
    uid = next(w[3] for w in sim.workloads() if w[2] == "web")
    sim.scale_workload(uid, 5)
    sim.advance(5)
    fifth = [p for p in sim.list_pods("app") if not p.ready]
    assert len(fifth) == 1 and fifth[0].node_name is not None  # bound, not Ready
    return sim


def outdated(sim: SimulatedCluster) -> list[str]:
    return sorted(n.name for n in sim.list_nodes() if n.image == OLD)


def test_the_planner_tells_a_budget_whose_pods_are_starting_from_one_whose_pods_cannot_start(tmp_path: Path) -> None:
    run = executor(fifth_replica_starting(), tmp_path)
    plan = run.plan(run.read(first=True))
    assert not plan.waves and len(plan.blocked) == 4 and all(b.waiting for b in plan.blocked)
    cause = plan.blocked[0].causes[0]
    assert cause.kind == "pdb-recovering" and cause.budget == "app/web"
    assert "needs 4 healthy pods and has 4), but 1 of its pods is on the way back (1 starting)" in cause.message

    (tmp_path / "broken").mkdir()
    broken = executor(fifth_replica_starting(fault=None), tmp_path / "broken")
    plan = broken.plan(broken.read(first=True))
    assert len(plan.blocked) == 4 and not any(b.waiting for b in plan.blocked)
    assert "CreateContainerError" in plan.blocked[0].reason and plan.blocked[0].causes[0].kind == "pdb-no-room"


def test_a_budget_whose_status_lags_its_ready_pods_is_a_wait(tmp_path: Path) -> None:
    """The disruption controller writes a budget's status after its pods change, and a watch may bring the pod's
    Ready before the budget's new status: the pods say there is room, the status not yet."""
    sim = fifth_replica_starting()
    sim.advance(2 * START)
    run = executor(sim, tmp_path)
    read = run.read(first=True)
    stale = PDBStatus(current_healthy=4, desired_healthy=4, expected_pods=5, disruptions_allowed=0, observed_generation=1)
    snapshot = replace(read.snapshot, pdbs=tuple(replace(b, status=stale) for b in read.snapshot.pdbs))
    plan = plan_cluster(snapshot, run.policy.with_targets(read.targets), sim.now())
    assert all(b.waiting for b in plan.blocked) and len(plan.blocked) == 4
    assert "its status lags its pods, 5 of which are healthy" in plan.blocked[0].reason


@pytest.mark.parametrize("strategy", [{"strategy": "surge"}, {"strategy": "replace", "minZoneCapacityPercent": 50}],
                         ids=["surge", "replace"])
def test_a_rotation_waits_for_a_budget_whose_pods_are_starting_and_rotates_every_node(
        tmp_path: Path, strategy: dict[str, Any]) -> None:
    sim = fifth_replica_starting()
    began = sim.now()
    run = executor(sim, tmp_path, {"maxInFlight": 1, **strategy})
    seen: list[Progress] = []
    shown: list[dict] = []  # what `rotate status` shows from another process meanwhile: the run's journal

    def progress(view: Progress) -> None:
        seen.append(replace(view))
        if view.phase == "waiting" and not shown:
            shown.append(dict(build_report(read_state(SQLiteStore(tmp_path / "state.db"), "test"))))

    run._progress = progress
    outcome = run.run()
    assert (outcome.status, outcome.exit_code) == ("done", EXIT_DONE), outcome.reason
    assert harm(sim) == NO_HARM and outdated(sim) == []
    assert outcome.report["nodes_rotated"] == 4 and outcome.report["nodes_blocked"] == []
    waited = [v.message for v in seen if v.phase == "waiting"]
    assert waited and "PodDisruptionBudget app/web" in waited[0] and "1 starting" in waited[0]
    status = shown[0]
    assert status["status"] == "running" and status["nodes_blocked"] == [] and len(status["waiting"]["nodes"]) == 4
    assert "1 of its pods is on the way back" in status["waiting"]["reason"]
    assert outcome.report["waiting"] is None  # the run is over: nothing waits
    # Nothing was evicted before the fifth replica was Ready: the budget was never spent past its floor.
    ready = min(e.time for e in sim.events if e.kind == sim_events.POD_READY and e.time > began)
    first_eviction = min(e.time for e in sim.events if e.kind == sim_events.POD_EVICTED)
    assert ready <= first_eviction


def test_a_budget_whose_pods_stop_coming_back_is_given_up_on_within_stuck_seconds_past_their_start(tmp_path: Path) -> None:
    sim = fifth_replica_starting(fault=10**6)  # the new image's containers start, in a fortnight
    began = sim.now()
    outcome = executor(sim, tmp_path, {"stuckSeconds": 30}).run()
    assert (outcome.status, outcome.exit_code) == ("incomplete", EXIT_HALTED)
    blocked = outcome.report["nodes_blocked"]
    assert len(blocked) == 4 and "PodDisruptionBudget app/web" in blocked[0]["reason"]
    assert "given up" in blocked[0]["reason"]
    # stuckSeconds past the minute its pods take to start, and a poll: not an hour, not at once
    assert 30 + START <= sim.now() - began <= 30 + 2 * START
    assert not [e for e in sim.events if e.kind == sim_events.POD_EVICTED] and outdated(sim) == [n["node"] for n in blocked]


def test_a_budget_whose_pods_cannot_start_blocks_at_once_with_the_kubelets_reason(tmp_path: Path) -> None:
    sim = fifth_replica_starting(fault=None)
    began = sim.now()
    outcome = executor(sim, tmp_path).run()
    assert (outcome.status, outcome.exit_code) == ("incomplete", EXIT_HALTED)
    assert "CreateContainerError" in outcome.report["nodes_blocked"][0]["reason"]
    assert sim.now() - began < 30 and not [e for e in sim.events if e.kind == sim_events.POD_EVICTED]


def test_a_pool_ordered_after_one_whose_nodes_wait_for_their_budget_waits_with_them(tmp_path: Path) -> None:
    """``poolOrder: {ml: [general]}``: while general's nodes wait for web's fifth replica, ml is not planned first as if
    general were done; it waits with them, and rotates after the last general node has gone."""
    sim = cluster({"general": 4, "ml": 1}, max_size=8)
    service(sim, "web", 4, min_available=4, start=START, cpu=5000, node_selector={POOL: "general"})
    sim.run_until_settled()
    new_image(sim)
    sim.scale_pool("general", 5)
    sim.advance(150)
    uid = next(w[3] for w in sim.workloads() if w[2] == "web")
    sim.scale_workload(uid, 5)
    sim.advance(5)
    run = executor(sim, tmp_path, {"poolOrder": {"ml": ["general"]}, "maxInFlight": 1})
    plan = run.plan(run.read(first=True))
    assert not plan.waves and len(plan.blocked) == 5 and all(b.waiting for b in plan.blocked)
    ml = next(b for b in plan.blocked if b.pool == "ml")
    assert ml.causes[0].rule == "poolOrder" and "goes after general" in ml.reason

    outcome = run.run()
    assert outcome.status == "done" and harm(sim) == NO_HARM and outdated(sim) == []
    ml_node = ml.node
    general_gone = max(e.time for e in sim.events if e.kind == sim_events.NODE_DELETED and e.name != ml_node)
    ml_cordoned = min(e.time for e in sim.events if e.kind == sim_events.NODE_CORDONED and e.name == ml_node)
    assert ml_cordoned >= general_gone
