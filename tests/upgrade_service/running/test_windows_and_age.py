"""When a rotation may start and what it rotates beyond a new image. Under maintenance windows: no wave (nor first
light) starts outside one, a run at a window's end stops as ``outside-window`` (exit 0, not a halt), the next run in the
next window goes on, and the pipeline reads it as waiting. Under ``maxNodeAge``: exactly the older nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from platformctl.app.stage_operations import stage_rotation
from platformctl.kernel.cluster.model import Snapshot
from platformctl.kernel.state.sqlite import SQLiteStore
from release_pipeline.rotation_result import Status
from tests.clusters import NEW
from tests.upgrade_service.rotation import NO_HARM, executor, harm, serving
from upgrade_service.journal.records import WAVE_STARTED
from upgrade_service.journal.rotation import read_state, stream_of
from upgrade_service.planning.plan import plan_cluster
from upgrade_service.planning.policy import parse_policy
from upgrade_service.running.run_types import EXIT_DONE, RunStatus

# The first 4 minutes of every second hour, in UTC: a wave of one node takes a minute or two, so a window holds few.
POLICY = {"maxInFlight": 1, "overlapWaves": False, "durations": {"nodeBootSeconds": 120},  # the pool boots in 120 s
          "maintenanceWindows": [{"name": "short", "cron": "0 */2 * * *", "duration": "4m", "timezone": "UTC"}]}


def test_no_wave_starts_outside_a_window_and_each_run_goes_on_in_the_next(tmp_path: Path) -> None:
    sim = serving(nodes=6)
    schedule = parse_policy(POLICY, "policy.yaml").schedule
    sim.advance(3600 - sim.now() % 7200 + 600)  # an hour into the two: outside
    assert not schedule.open(sim.now())
    outside = executor(sim, tmp_path, POLICY).run()
    assert (outside.status, outside.exit_code) == (RunStatus.OUTSIDE_WINDOW, EXIT_DONE)
    assert "the next opens at" in outside.reason
    store = SQLiteStore(tmp_path / "state.db")
    assert store.read(stream_of("test")) == []  # nothing written: nothing was started
    policy = parse_policy(POLICY, "policy.yaml").with_targets({"general": NEW})
    now = Snapshot(tuple(sim.list_nodes()), tuple(sim.list_pods()), tuple(sim.list_pdbs()))
    predicted = plan_cluster(now, policy, sim.now()).windows  # what `rotate plan` says
    assert predicted is not None
    # A live cluster's time is not a whole second: the plan's waves still start at the openings, not a moment before.
    assert plan_cluster(now, policy, sim.now() + 0.5).windows == (predicted[0], predicted[1] + 0.5)
    runs = []
    while len(runs) < 20:
        opens = schedule.next_opening(sim.now())
        assert opens is not None
        sim.advance(opens - sim.now())
        outcome = executor(sim, tmp_path, POLICY).run()
        runs.append(outcome.status)
        if outcome.status is RunStatus.DONE:
            break
        assert (outcome.status, outcome.exit_code) == (RunStatus.OUTSIDE_WINDOW, EXIT_DONE), outcome.reason
    assert runs[-1] is RunStatus.DONE and len(runs) >= 3, runs  # six nodes take several windows
    assert abs(len(runs) - predicted[0]) <= 1 and abs(sim.now() - predicted[1]) <= 2 * 3600, (runs, predicted)
    assert {n.image for n in sim.list_nodes()} == {NEW} and harm(sim) == NO_HARM
    started = [r.data["at"] for r in store.read(stream_of("test")) if r.data.get("kind") == WAVE_STARTED]
    assert len(started) == 6 and all(schedule.open(at) for at in started), started
    assert read_state(store, "test").status == "finished"


def test_the_pipeline_reads_a_rotation_outside_its_window_as_waiting_not_as_failed(tmp_path: Path) -> None:
    from platformctl.app.rotation import RotationResult

    sim = serving(nodes=2)
    sim.advance(3600 - sim.now() % 7200 + 600)
    outcome = executor(sim, tmp_path, POLICY).run()
    said = stage_rotation(RotationResult([outcome]), {})
    assert said.status is Status.BUSY and "outside the policy's maintenance windows" in said.reason


@pytest.mark.parametrize("strategy", ["surge", "replace"])
def test_max_node_age_rotates_exactly_the_older_nodes_onto_the_same_image_without_harm(tmp_path: Path,
                                                                                      strategy: str) -> None:
    """Drift beyond the image: a node older than ``maxNodeAge`` is rotated though it runs its pool's image, the younger
    ones are not, under the same budgets (Karpenter's ``expireAfter``)."""
    from tests.clusters import cluster
    from tests.upgrade_service.rotation import service

    sim = cluster({"general": 3})
    sim.advance(3 * 86400)
    sim.scale_pool("general", 5)  # two nodes three days younger than the first three
    service(sim, "web", 5, min_available=4)
    sim.run_until_settled()
    old = {n.name for n in sim.list_nodes() if sim.now() - n.created > 2 * 86400}
    young = {n.name for n in sim.list_nodes()} - old
    assert len(old) == 3 and len(young) == 2
    image = {n.image for n in sim.list_nodes()}.pop()
    policy = {"maxNodeAge": "2d", "durations": {"nodeBootSeconds": 120}, "strategy": strategy,
              "minZoneCapacityPercent": 60}  # replace: one of five nodes out at a time
    snapshot = Snapshot(tuple(sim.list_nodes()), tuple(sim.list_pods()), tuple(sim.list_pdbs()))
    plan = plan_cluster(snapshot, parse_policy(policy, "policy.yaml").with_targets({"general": str(image)}), sim.now())
    assert {n for w in plan.waves for n in w.nodes} == old
    assert "older than maxNodeAge 172800 s" in plan.explain(sorted(old)[0])[0]
    outcome = executor(sim, tmp_path, policy).run()
    assert outcome.status is RunStatus.DONE, outcome.reason
    after = {n.name for n in sim.list_nodes()}
    assert not (old & after) and young <= after and len(after) == 5
    assert {n.image for n in sim.list_nodes()} == {image} and harm(sim) == NO_HARM


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_the_scheduled_rotation_keeps_the_pipelines_freezes_and_gates_and_lights_as_the_pipeline_does(
        tmp_path: Path, stage: str) -> None:
    """The policy the program gives the stage's ``platformctl-rotate`` CronJob, run as the job runs it: in the pipeline
    file's year-end freeze no node moves (the run waits as ``outside-window``); a week before it the same run lights
    each pool first (proven after the first stage), gates every wave on the canaries and rotates every node."""
    import dataclasses
    import json
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from e2e_canary.runner import Runner
    from e2e_canary.verdict import canary_gate
    from infra.mocked import run_stage
    from platformctl.emulator.nodegroups import SimulatedNodeGroups
    from platformctl.kernel.state.sqlite import SQLiteStore
    from tests.infra.images import stack_config
    from tests.upgrade_service.running.test_first_light import CANARY, POLL
    from upgrade_service.running.execute import Executor
    from upgrade_service.running.run_types import Options, Target

    run = run_stage(stage, config=stack_config(stage), release=True)
    [configmap] = [r.inputs for r in run.resources if r.type == "kubernetes:core/v1:ConfigMap"
                   and r.inputs["metadata"]["name"] == "platformctl-rotation"]
    policy = json.loads(configmap["data"]["policy.yaml"])

    def scheduled(sim: Any, folder: Path) -> Any:
        store = SQLiteStore(folder / "state.db")
        runner, judge = Runner(stage, "test", sim, store), canary_gate(store, 1800.0)

        def canaries(question: Any) -> Any:  # the cluster's canary runner, a period between two asks
            runner.run(CANARY)
            return judge(dataclasses.replace(question, now=sim.now()))

        return Executor(Target("test", sim, SimulatedNodeGroups(sim)), parse_policy(policy, "policy.yaml"), store,
                        Options(stage=stage, canary=canaries, gate_poll_seconds=POLL)).run(), store

    berlin = ZoneInfo("Europe/Berlin")
    sim = serving(nodes=3)
    sim.advance(datetime(2026, 12, 29, 4, 0, tzinfo=berlin).timestamp() - sim.now())  # a Tuesday, in the year-end freeze
    frozen, store = scheduled(sim, tmp_path)
    assert (frozen.status, frozen.exit_code) == (RunStatus.OUTSIDE_WINDOW, EXIT_DONE), frozen.reason
    assert "freeze year-end" in frozen.reason
    assert store.read(stream_of("test")) == [] and {n.image for n in sim.list_nodes()} != {NEW}

    sim = serving(nodes=3)
    sim.advance(datetime(2026, 12, 16, 4, 0, tzinfo=berlin).timestamp() - sim.now())  # a Wednesday a week before
    (tmp_path / "before").mkdir()
    done, store = scheduled(sim, tmp_path / "before")
    assert done.status is RunStatus.DONE, done.reason
    assert {n.image for n in sim.list_nodes()} == {NEW} and harm(sim) == NO_HARM
    kinds = [r.data.get("kind") for r in store.read(stream_of("test"))]
    assert "first-light" in " ".join(str(k) for k in kinds), kinds
    gates = [r.data for r in store.read(stream_of("test")) if r.data.get("kind") == "gate"]
    assert gates and all(g.get("verdict") == "pass" for g in gates[-1:]), gates
