"""A freeze set by hand (``release freeze``) binds the stage's scheduled rotation too: each tick tells the stage's own
jobs the freezes by hand that hold it, in the stage's state store (``frozen/<stage>``), where the ``platformctl-rotate``
CronJob and ``rotate run --stage`` read them as exclusions: no wave starts while one holds. The tick's own rotation is
held by the ledger (it pauses), not by that record."""

from __future__ import annotations

from pathlib import Path

from platformctl.app.rotation import hand_freeze_windows
from platformctl.kernel.state.frozen import HandFreeze, frozen_in, record_frozen, stream_of
from platformctl.kernel.state.sqlite import SQLiteStore
from release_pipeline.fold import Kind
from release_pipeline.ledger import Ledger
from release_pipeline.reconcile import tick
from tests.clusters import NEW
from tests.release_pipeline.test_reconcile import T0, fake, pipeline
from tests.upgrade_service.rotation import serving
from upgrade_service.journal.rotation import stream_of as rotation_stream
from upgrade_service.planning.policy import parse_policy
from upgrade_service.running.run_types import EXIT_DONE, RunStatus


def test_each_tick_tells_a_stage_the_freezes_by_hand_that_bind_it_and_when_none_is_left(ledger: Ledger) -> None:
    stages, p = fake(T0), pipeline()
    ledger.append(None, "prod", Kind.FREEZE, T0, "incident 4711", {"until": None}, "alice")
    ledger.append(None, None, Kind.FREEZE, T0, "year-end by hand", {"until": T0 + 3600}, "bob")  # every stage, an hour
    tick(p, ledger, stages, "tester")
    said = {stage: [(f.reason, f.until, f.by) for f in freezes] for stage, freezes in stages.held_by_hand.items()}
    assert said["prod"] == [("incident 4711", None, "alice"), ("year-end by hand", T0 + 3600, "bob")]
    assert said["dev"] == [("year-end by hand", T0 + 3600, "bob")]
    stages.clock = T0 + 7200  # the hour is over; prod's stays until unfrozen
    tick(p, ledger, stages, "tester")
    assert stages.held_by_hand["dev"] == [] and [f.reason for f in stages.held_by_hand["prod"]] == ["incident 4711"]
    ledger.append(None, "prod", Kind.UNFREEZE, T0 + 7300, "resolved", None, "alice")
    tick(p, ledger, stages, "tester")
    assert stages.held_by_hand["prod"] == []


def test_the_frozen_record_is_written_once_a_change(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    freeze = HandFreeze("incident 4711", T0, None, "alice")
    assert record_frozen(store, "prod", [freeze], T0) and not record_frozen(store, "prod", [freeze], T0 + 60)
    assert frozen_in(store, "prod") == [freeze] and len(store.read(stream_of("prod"))) == 1
    assert record_frozen(store, "prod", [], T0 + 120) and frozen_in(store, "prod") == []


def test_a_rotation_outside_the_pipeline_starts_no_wave_while_a_freeze_by_hand_holds_its_stage(tmp_path: Path) -> None:
    """The stage's scheduled rotation with its freezes by hand as exclusions (as ``prepare`` adds them): inside one it
    waits as ``outside-window`` (exit 0, no wave, no node moved) and names the freeze; once it ends, it rotates."""
    from platformctl.emulator.nodegroups import SimulatedNodeGroups
    from upgrade_service.running.execute import Executor
    from upgrade_service.running.run_types import Options, Target

    sim = serving(nodes=3)
    now = sim.now()
    freezes = [HandFreeze("incident 4711", now - 60, now + 7200, "alice")]
    policy = parse_policy({"strategy": "surge", "maxInFlight": 1}, "policy.yaml").with_exclusions(hand_freeze_windows(freezes))
    store = SQLiteStore(tmp_path / "state.db")
    held = Executor(Target("test", sim, SimulatedNodeGroups(sim)), policy, store, Options(stage="prod")).run()
    assert (held.status, held.exit_code) == (RunStatus.OUTSIDE_WINDOW, EXIT_DONE), held.reason
    assert "freeze by hand (alice: incident 4711" in held.reason, held.reason
    assert not any(r.data.get("kind") == "wave-started" for r in store.read(rotation_stream("test")))
    assert {n.image for n in sim.list_nodes()} != {NEW}
    sim.advance(7300)
    done = Executor(Target("test", sim, SimulatedNodeGroups(sim)), policy, store, Options(stage="prod")).run()
    assert done.status is RunStatus.DONE and {n.image for n in sim.list_nodes()} == {NEW}, done.reason


def test_a_freeze_by_hand_written_while_a_scheduled_rotation_runs_stops_it_at_its_next_wave(tmp_path: Path) -> None:
    """The run reads the stage's record again each time a wave may start (``HandFreezes``, as ``prepare`` gives it):
    the tick writes a freeze after the first wave began, and no second wave starts."""
    from platformctl.app.rotation import HandFreezes
    from platformctl.emulator.nodegroups import SimulatedNodeGroups
    from upgrade_service.journal.records import WAVE_STARTED
    from upgrade_service.running.execute import Executor
    from upgrade_service.running.run_types import Options, Target

    sim = serving(nodes=3)
    store = SQLiteStore(tmp_path / "state.db")

    class TickWritesMidRun(HandFreezes):
        def __call__(self) -> list:  # type: ignore[type-arg]
            if any(r.data.get("kind") == WAVE_STARTED for r in store.read(rotation_stream("test"))):
                record_frozen(store, "prod", [HandFreeze("incident 4711", sim.now(), None, "alice")], sim.now())
            return super().__call__()

    policy = parse_policy({"strategy": "surge", "maxInFlight": 1}, "policy.yaml")
    held = Executor(Target("test", sim, SimulatedNodeGroups(sim)), policy, store,
                    Options(stage="prod", exclusions=TickWritesMidRun(store, "prod"))).run()
    assert held.status is RunStatus.OUTSIDE_WINDOW and "freeze by hand (alice: incident 4711" in held.reason, held.reason
    started = [r for r in store.read(rotation_stream("test")) if r.data.get("kind") == WAVE_STARTED]
    assert len(started) == 1 and sum(n.image == NEW for n in sim.list_nodes()) == 1
