"""A promotion an operator can trust, driven as an operator drives it (the ledger, the tick, the app layer's commands)
against a real SQLite ledger and the tests' stage fake on a virtual clock: stages only move forward under supersede
and queue with three candidates in flight; a rollback whose rotation fails keeps its stage closed until it finishes;
a rollback by hand takes a candidate out of every stage that holds it; freezes keep their zone's wall time across
daylight saving; approvals come from identities, not names; one stage's fault does not stall another; every gate is
tested at its boundaries; the ledger stays small and replays by meaning."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from platformctl.app.platform import Platform
from platformctl.kernel.environment import Environment
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state import open_store
from release_pipeline.candidates import Candidate
from release_pipeline.fold import Entry
from release_pipeline.gates import entry_decision, freeze_window_at, soak_decision
from release_pipeline.held import Approval, VerdictChange
from release_pipeline.ledger import Ledger, checkpoints
from release_pipeline.pipeline import Freeze, StagePolicy, parse_pipeline
from release_pipeline.reconcile import tick
from release_pipeline.replay import replay
from release_pipeline.rotation_result import ClusterRotation, FirstLightSaid, StageRotation
from release_pipeline.testing import FakeStages
from tests.release_pipeline.contract import RESULT_OF, rotation_results_keep_the_contract
from tests.release_pipeline.test_reconcile import (
    STAGES,
    T0,
    assert_every_decision_replays,
    candidate,
    decisions,
    fake,
    pipeline,
    run,
    start,
    write_pipeline,
)

FAST = {"soak": 0, "passFor": 0, "minResults": 0}


def order_of(stages: FakeStages, stage: str, names: dict[str, str]) -> list[str]:
    return [names[c] for s, c in stages.deploys if s == stage]


# ------------------------------------------------------------------------------------------------ only forward


@pytest.mark.parametrize("mode", ["supersede", "queue"])
def test_with_three_candidates_in_flight_no_stage_ever_deploys_an_older_one(ledger: Ledger, mode: str) -> None:
    """c0 soaks in staging while c1 then c2 pass dev: prod ends on c2 and never goes back to c1 (before, the older one
    was dropped from staging's queue in memory only and the next fold brought it back: prod ran c2 then c1)."""
    p = pipeline(stages=[{"name": "dev", **FAST}, {"name": "staging", "soak": "3h", "passFor": 0, "minResults": 0},
                         {"name": "prod", **FAST}], onNewer=mode)
    stages = fake(T0)
    c0, c1, c2 = candidate(0), candidate(1), candidate(2)
    names = {c0.id: "c0", c1.id: "c1", c2.id: "c2"}
    start(ledger, c0, T0)
    for _ in range(40):  # until c0 soaks in staging
        run(ledger, stages, p, 1)
        if ledger.state().stage("staging").step == "soaking":
            break
    start(ledger, c1, stages.clock)
    run(ledger, stages, p, 8)
    start(ledger, c2, stages.clock)
    run(ledger, stages, p, 120)
    for name in ("staging", "prod"):
        ran = [int(x[1]) for x in order_of(stages, name, names)]
        assert ran == sorted(ran), (name, ran)  # never backwards
    state = ledger.state()
    assert state.stage("prod").last_good == c2.id
    if mode == "supersede":
        assert order_of(stages, "staging", names) == ["c0", "c2"] and order_of(stages, "prod", names) == ["c0", "c2"]
        superseded = next(e for _, e in ledger.entries() if e.decision == "superseded")
        assert superseded.candidate == c1.id and superseded.stage == "staging"
        assert superseded.inputs["by_candidate"] == c2.id and state.candidates[c1.id].status == "superseded"
        run(ledger, stages, p, 20)  # folded again and again, it never comes back
        assert order_of(stages, "prod", names) == ["c0", "c2"]
    else:
        assert order_of(stages, "staging", names) == ["c0", "c1", "c2"] == order_of(stages, "prod", names)


def test_approve_refuses_a_superseded_candidate_and_one_about_to_give_way_naming_the_newer(tmp_path: Path,
                                                                                          ledger: Ledger) -> None:
    from platformctl.app.release import ApproveRequest, approve

    text = "stages:\n  - {name: dev, soak: 0, passFor: 0, minResults: 0, approvals: 1}\napprovers: {unauthenticated: true}\n"
    path = write_pipeline(tmp_path, text)
    p, stages = parse_pipeline(yaml.safe_load(text), str(path), "digest"), fake(T0)
    old, new = candidate(1), candidate(2)
    start(ledger, old, T0)
    start(ledger, new, T0 + 1)
    with pytest.raises(PlatformError, match=f"gives way to the newer {new.id}"):  # not yet recorded: still refused
        approve(Platform.from_os(), ApproveRequest(old.id, "dev", "ok", path, str(tmp_path / "release.db")))
    run(ledger, stages, p, 1)
    assert ledger.state().candidates[old.id].status == "superseded"
    with pytest.raises(PlatformError, match=f"superseded by {new.id}"):
        approve(Platform.from_os(), ApproveRequest(old.id, "dev", "ok", path, str(tmp_path / "release.db")))
    assert not [e for _, e in ledger.entries() if e.decision == "approve"]  # nothing written


# ------------------------------------------------------------------------------------------------ rollbacks


def failing_rollback(failures: int = 2) -> FakeStages:
    """Stages whose rollback's rotation does not finish ``failures`` times."""
    left = [failures]

    def rotate(stages: FakeStages, stage: str, c: Candidate, rollback: bool, hold: Any) -> StageRotation | None:
        if not (rollback and left[0]):
            return None
        left[0] -= 1
        stages.rotations.append((stage, c.id))
        return StageRotation("halted", f"{stage}-use1-az1: a node did not drain")
    return fake(T0, before_rotate=rotate)


def first_light_fails(bad: str) -> FakeStages:
    """Stages whose first cluster boots one node a pool on ``bad``'s images, and the canaries fail it there."""

    def rotate(stages: FakeStages, stage: str, c: Candidate, rollback: bool, hold: Any) -> StageRotation | None:
        if rollback or c.id != bad:
            return None
        stages.rotations.append((stage, c.id))
        images = sorted(c.image_ids(stage))
        lit = FirstLightSaid("fail", f"target image {images[0]}: pods CreateContainerError", 2, ["general", "system"], {},
                             240.0)
        return StageRotation("halted", f"{stage}-a: halted: first light: {lit.reason}", {images[0]: ["i-lit1", "i-lit2"]},
                             {images[0]: ["i-lit1", "i-lit2"]}, None,
                             [ClusterRotation(f"{stage}-a", "halted", halted="first-light-fail", first_light=lit),
                              ClusterRotation(f"{stage}-b", "halted")])
    return fake(T0, before_rotate=rotate)


def test_a_candidate_first_light_fails_is_halted_in_the_first_stage_with_its_evidence_and_its_instances_told_apart(
        ledger: Ledger) -> None:
    from platformctl.app.release_status import candidate_report

    p = pipeline(stages=[{"name": "dev", **FAST}, {"name": "staging", **FAST}])
    good, bad = candidate(1), candidate(2)
    stages = first_light_fails(bad.id)
    start(ledger, good, T0)
    run(ledger, stages, p, 30)
    start(ledger, bad, stages.clock)
    run(ledger, stages, p, 10)
    halt = next(e for _, e in ledger.entries() if e.decision == "halt" and e.candidate == bad.id)
    assert halt.stage == "dev" and halt.reason.startswith("first light stopped the images: dev-a: target image")
    assert "first-light" in halt.inputs["decision"]["unmet"] and "first-light-fail" in halt.inputs["decision"]["unmet"]
    said = halt.inputs["result"]
    assert said["first_light_count"] == 2 and said["clusters"][0]["first_light"]["verdict"] == "fail"
    assert ("staging", bad.id) not in stages.deploys
    report = candidate_report(ledger, ledger.state(), None)[bad.id].to_dict()
    assert report["status"] == "halted" and report["instances_booted"] == 2
    assert report["instances_booted_first_light_by_stage"]["dev"] == 2 and report["instances_booted_first_light"] == 2
    assert set(report["instances_booted_in_waves_by_stage"].values()) == {0}
    assert_every_decision_replays(ledger)
    assert rotation_results_keep_the_contract(e for _, e in ledger.entries()) >= 2  # rotated (good), halt (bad)


def test_a_rollback_whose_rotation_fails_is_recorded_failed_keeps_the_stage_closed_and_is_retried(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "passFor": "30m", "minResults": 0}])
    stages = failing_rollback()
    good, bad, waiting = candidate(1), candidate(2), candidate(3)
    start(ledger, good, T0)
    run(ledger, stages, p, 30)
    stages.verdicts[bad.id] = "fail"
    start(ledger, bad, stages.clock)
    for _ in range(20):  # enter, deploy, rotate, the verdict fails: halt, rollback-deploy, the rollback's rotation fails
        run(ledger, stages, p, 1)
        if "rollback-failed" in [d for _, d in decisions(ledger, bad.id)]:
            break
    said = [d for _, d in decisions(ledger, bad.id)]
    assert said[-2:] == ["rollback-rotate", "rollback-failed"] and "rolled-back" not in said, said
    dev = ledger.state().stage("dev")
    assert dev.step == "rolling-back" and dev.rollback_failures == 1
    start(ledger, waiting, stages.clock)  # the next candidate may not enter while nodes run the halted image
    run(ledger, stages, p, 1)
    assert ("dev", waiting.id) not in stages.deploys and ledger.state().stage("dev").rollback_failures == 2
    run(ledger, stages, p, 1)  # the third try finishes
    assert [d for _, d in decisions(ledger, bad.id)][-1] == "rolled-back"
    done = next(e for _, e in ledger.entries() if e.decision == "rolled-back" and e.candidate == bad.id)
    assert done.inputs["done"] is True and stages.running["dev"] == good.id
    run(ledger, stages, p, 3)
    assert ("dev", waiting.id) in stages.deploys  # open again only once the rollback finished
    kept = [e.decision for _, e in ledger.entries() if e.decision in RESULT_OF]
    assert {"rollback-failed", "rolled-back"} <= set(kept)
    assert rotation_results_keep_the_contract(e for _, e in ledger.entries()) >= len(kept) - kept.count("halt")


def test_a_stage_with_no_good_candidate_rolls_back_to_the_images_it_ran_before_the_halted_ones_deploy(
        ledger: Ledger) -> None:
    """The pipeline's first candidate fails in dev: there is no good candidate to go back to, so dev goes back to what
    its launch templates booted before the deploy (recorded with it), deployed and rotated as any rollback, and is
    done only when that rotation finished."""
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "passFor": "30m", "minResults": 0}])
    stages, first, second = fake(T0), candidate(1), candidate(2)
    before = stages.deployed("dev")
    stages.verdicts[first.id] = "fail"
    start(ledger, first, T0)
    for _ in range(30):
        run(ledger, stages, p, 1)
        if "halt" in [d for _, d in decisions(ledger, first.id)] and "rotate" in [d for _, d in decisions(ledger, first.id)]:
            break
    assert stages.nodes["dev"] != before  # the halted rotation had moved nodes
    stages.halts.append("dev")  # and the rollback's first rotation does not finish: closed, tried again
    for _ in range(30):
        run(ledger, stages, p, 1)
        if "rolled-back" in [d for _, d in decisions(ledger, first.id)]:
            break
    deploy = next(e for _, e in ledger.entries() if e.decision == "deploy")
    assert deploy.inputs["before"] == before
    said = [d for _, d in decisions(ledger, first.id)]
    assert said[-6:] == ["rollback-deploy", "rollback-deployed", "rollback-rotate", "rollback-failed", "rollback-rotate",
                         "rolled-back"], said
    assert stages.rotations[-2:] == [("dev", f"{first.id}~before")] * 2  # the failed rotation, then the one that finished
    assert stages.nodes["dev"] == stages.templates["dev"] == before  # every node back on what it ran before
    done = next(e for _, e in ledger.entries() if e.decision == "rolled-back")
    assert done.inputs["done"] is True and done.inputs["before"] == before and "ran before" in done.reason
    state = ledger.state()
    assert state.stage("dev").step == "idle" and state.stage("dev").last_good is None
    assert state.candidates[first.id].status == "halted"
    start(ledger, second, stages.clock)  # open again: the next candidate enters, and its own deploy records before
    run(ledger, stages, p, 3)
    assert ("dev", second.id) in stages.deploys
    assert [e.inputs["before"] for _, e in ledger.entries() if e.decision == "deploy"][-1] == before


def test_a_rollback_by_hand_two_stages_behind_takes_the_candidate_out_of_every_stage_that_passed_it(
        tmp_path: Path, ledger: Ledger) -> None:
    from platformctl.app.release import RollbackRequest, rollback

    text = "stages:\n" + "".join(f"  - {{name: {s}, soak: 0, passFor: 0, minResults: 0}}\n" for s in ("dev", "staging", "prod"))
    path = write_pipeline(tmp_path, text)
    p, stages = parse_pipeline(yaml.safe_load(text), str(path), "digest"), fake(T0)
    first, second = candidate(1), candidate(2)
    for c in (first, second):
        start(ledger, c, stages.clock)
        run(ledger, stages, p, 40)
    state = ledger.state()
    assert all(state.stages[s].last_good == second.id for s in ("dev", "staging", "prod"))
    rollback(Platform.from_os(), RollbackRequest("dev", "a leak found late", path, str(tmp_path / "release.db")))
    state = ledger.state()
    for name in ("dev", "staging", "prod"):  # no stage keeps it as its last good
        assert state.stage(name).last_good == first.id and second.id not in state.stage(name).good, name
        assert state.stage(name).step == "rolling-back", name
    run(ledger, stages, p, 6)
    assert {s: stages.running[s] for s in ("dev", "staging", "prod")} == dict.fromkeys(("dev", "staging", "prod"), first.id)
    assert all(ledger.state().stages[s].step == "idle" for s in ("dev", "staging", "prod"))


# ------------------------------------------------------------------------------------------------ freezes

WEEKEND = Freeze(name="weekend", timezone="America/New_York", rrule="FREQ=WEEKLY;BYDAY=FR;BYHOUR=16;BYMINUTE=0;BYSECOND=0",
                 duration=64 * 3600, start=datetime(2026, 1, 2, 16, 0))


def local(zone: str, *args: int) -> float:
    from zoneinfo import ZoneInfo

    return datetime(*args, tzinfo=ZoneInfo(zone)).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize("friday, monday", [
    ((2026, 10, 30), (2026, 11, 2)),  # daylight saving ends on the Sunday between
    ((2027, 3, 12), (2027, 3, 15)),  # daylight saving starts on the Sunday between
    ((2026, 7, 10), (2026, 7, 13)),  # no change
])
def test_the_weekend_freeze_ends_monday_08_00_in_new_york_in_every_season(friday: tuple[int, int, int],
                                                                          monday: tuple[int, int, int]) -> None:
    ny = "America/New_York"
    window = freeze_window_at(WEEKEND, local(ny, *friday, 16, 0))
    assert window == (local(ny, *friday, 16, 0), local(ny, *monday, 8, 0))
    assert freeze_window_at(WEEKEND, local(ny, *monday, 7, 59, 59)) is not None  # the instant before: frozen
    assert freeze_window_at(WEEKEND, local(ny, *monday, 8, 0)) is None  # exactly at its end: open
    assert freeze_window_at(WEEKEND, local(ny, *friday, 15, 59, 59)) is None


def test_a_daily_freeze_in_sydney_keeps_its_wall_times_across_both_changes() -> None:
    sydney = "Australia/Sydney"
    nightly = Freeze(name="nightly", timezone=sydney, rrule="FREQ=DAILY;BYHOUR=22;BYMINUTE=0;BYSECOND=0",
                     duration=10 * 3600, start=datetime(2026, 1, 1, 22, 0))
    for night, morning in (((2026, 4, 4), (2026, 4, 5)), ((2026, 10, 3), (2026, 10, 4)), ((2026, 6, 1), (2026, 6, 2))):
        window = freeze_window_at(nightly, local(sydney, *night, 23, 0))
        assert window == (local(sydney, *night, 22, 0), local(sydney, *morning, 8, 0)), night
        assert freeze_window_at(nightly, local(sydney, *morning, 8, 0)) is None
    # a daily rule is in force every night, not only from the moment it is read
    assert freeze_window_at(nightly, local(sydney, 2026, 11, 20, 23, 30)) is not None


def test_a_recurrence_without_a_fixed_anchor_is_refused_in_one_line(tmp_path: Path) -> None:
    document = {"stages": [{"name": "dev"}], "freezes": [{"name": "nightly", "timezone": "UTC",
                                                          "rrule": "FREQ=DAILY;BYHOUR=22", "duration": "8h"}]}
    with pytest.raises(PlatformError, match="freezes") as err:
        parse_pipeline(document, "pipeline.yaml")
    assert "fixed anchor" in str(err.value) and "\n" not in str(err.value)


def test_an_override_ends_with_the_freeze_it_was_given_in(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "prod", **FAST}], freezes=[WEEKEND.model_dump(mode="json", by_alias=True)])
    friday = local("America/New_York", 2026, 11, 6, 17, 0)
    stages, one, two = fake(friday), candidate(1), candidate(2)
    start(ledger, one, friday, first="prod")
    run(ledger, stages, p, 1)
    covers = [f"weekend@{local('America/New_York', 2026, 11, 6, 16, 0):.0f}"]
    ledger.append(one.id, "prod", "override", stages.clock, "the CVE fix", {"covers": covers}, "alice")
    run(ledger, stages, p, 3)
    assert stages.deploys == [("prod", one.id)]
    # the next weekend: an override for the candidate (given for last weekend's freeze) no longer applies
    stages.clock = local("America/New_York", 2026, 11, 13, 17, 0)
    start(ledger, two, stages.clock, first="prod")
    ledger.append(two.id, "prod", "override", stages.clock - 7 * 86400, "old", {"covers": covers}, "alice")
    run(ledger, stages, p, 2)
    assert ("prod", two.id) not in stages.deploys and "frozen" in (ledger.state().stage("prod").waiting_for or "")
    # Replay checks again what an override covered: the first entry replays as it was decided; the same entry with
    # its override's windows changed to another weekend's does not.
    enter = next(e for _, e in ledger.entries() if e.decision == "enter" and e.candidate == one.id)
    assert replay(enter)["same"] and enter.inputs["override"]
    other = dict(enter.inputs, override={**enter.inputs["override"], "freezes": ["weekend@0"]})
    assert not replay(dataclasses.replace(enter, inputs=other))["same"]


# ------------------------------------------------------------------------------------------------ approvals


def test_two_approvals_by_one_aws_identity_under_two_user_names_count_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws

    from platformctl.kernel.who import who

    for key, value in {"AWS_ACCESS_KEY_ID": "AKIAALICE", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        monkeypatch.setenv("USER", "alice")
        first = who(Environment.from_os().aws)
        monkeypatch.setenv("USER", "bob")
        second = who(Environment.from_os().aws)
    assert first == second and first.startswith("arn:aws:") and "(local)" not in first
    approvals = [Approval(first, T0, "ok"), Approval(second, T0 + 1, "ok")]
    said = entry_decision(StagePolicy(name="prod", approvals=2), T0 + 2, [], approvals, None)
    assert said.decision == "wait" and said.unmet == ("approvals",)


def test_a_stage_can_require_approvers_other_than_the_candidates_creator(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", **FAST, "approvals": 1, "approversOtherThanCreator": True}])
    stages, c = fake(T0), candidate(1)  # created by "tester"
    start(ledger, c, T0)
    ledger.append(c.id, "dev", "approve", T0, "mine", by="tester")
    run(ledger, stages, p, 2)
    assert not stages.deploys and "creator's own approval does not count" in (ledger.state().stage("dev").waiting_for or "")
    ledger.append(c.id, "dev", "approve", stages.clock, "ok", by="alice")
    run(ledger, stages, p, 2)
    assert stages.deploys == [("dev", c.id)]
    assert_every_decision_replays(ledger)


# ------------------------------------------------------------------------------------------------ stages apart


def test_an_exception_in_one_stages_deploy_is_its_decision_and_another_stages_failing_candidate_is_halted(
        ledger: Ledger) -> None:
    def staging_down(stages: FakeStages, stage: str, c: Candidate, rollback: bool) -> None:
        if stage == "staging":
            raise ConnectionResetError("staging's API went away")

    p = pipeline(stages=[{"name": "dev", "soak": "1h", "passFor": 0, "minResults": 0},
                         {"name": "staging", **FAST}])
    stages, good, bad = fake(T0, before_deploy=staging_down), candidate(1), candidate(2)
    start(ledger, good, T0)
    for _ in range(30):
        run(ledger, stages, p, 1)
        if ledger.state().stage("staging").step == "deploying":
            break
    stages.verdicts[bad.id] = "fail"
    start(ledger, bad, stages.clock)
    reports = [tick(p, ledger, stages, "tester") for _ in range(6)]
    assert all(r.errors and r.errors[0].stage == "staging" for r in reports)
    errors = [e for _, e in ledger.entries() if e.decision == "error"]
    assert len(errors) == 1 and errors[0].inputs["error"]["type"] == "ConnectionResetError"  # recorded once
    assert ("dev", "halt") in decisions(ledger, bad.id)  # dev went on and halted its failing candidate
    assert ledger.state().stage("staging").error is not None


def test_a_transient_fault_makes_the_stage_busy_and_only_a_lasting_or_permanent_one_makes_it_failing(
        ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib.error

    from platformctl.kernel.errors import ApiRefused
    from release_pipeline import reconcile

    faults: list[BaseException] = []

    def flaky(stages: FakeStages, stage: str, c: Candidate, rollback: bool) -> None:
        if faults:
            raise faults.pop(0)

    wall = [1_000.0]
    monkeypatch.setattr(reconcile.time, "time", lambda: wall[0])
    p = pipeline(stages=[{"name": "dev", **FAST}])
    stages, c = fake(T0, before_deploy=flaky), candidate(1)
    start(ledger, c, T0)
    assert [e.decision for e in tick(p, ledger, stages, "tester").steps] == ["enter"]
    # the region's clock timing out, a refused connection, a 503: the same step tried again, nothing halted
    faults += [TimeoutError("timed out"), urllib.error.URLError(ConnectionRefusedError(111, "refused")),
               ApiRefused("the server is scaling", 503)]
    reports = []
    for _ in range(3):
        reports.append(tick(p, ledger, stages, "tester"))
        wall[0] += 60
    assert all(r.errors and r.errors[0].transient for r in reports)
    assert all(not r.failing(wall[0]) for r in reports)  # busy: the tick exits 0
    assert {r.errors[0].since for r in reports} == {1_000.0}  # one run of transient faults, from its first
    assert not stages.deploys and ("dev", "halt") not in decisions(ledger, c.id)
    assert ledger.state().stage("dev").error.transient is True
    tick(p, ledger, stages, "tester")  # the API answers again: the candidate is deployed, the error over
    assert stages.deploys == [("dev", c.id)] and ledger.state().stage("dev").error is None
    assert [e.decision for _, e in ledger.entries()].count("recovered") == 1

    run(ledger, stages, p, 6)
    assert ledger.state().stage("dev").step == "idle"
    other = candidate(2)
    start(ledger, other, stages.clock + 1)
    stages.clock += 10
    tick(p, ledger, stages, "tester")  # entered
    faults += [TimeoutError("timed out")] * 2
    first = tick(p, ledger, stages, "tester")
    wall[0] += reconcile.TRANSIENT_PATIENCE  # the same stage still not answering after 15 minutes: someone looks
    late = tick(p, ledger, stages, "tester")
    assert not first.failing(wall[0] - reconcile.TRANSIENT_PATIENCE) and late.failing(wall[0])
    faults[:] = [ApiRefused("forbidden: the tick's role cannot UpdateClusterVersion", 403)]
    denied = tick(p, ledger, stages, "tester")  # a permanent fault needs someone at once
    assert denied.failing(wall[0]) and not denied.errors[0].transient
    assert not any(e.decision in ("halt", "rollback") for _, e in ledger.entries())
    assert_every_decision_replays(ledger)


def test_a_tick_acts_in_dev_while_another_holds_stagings_lease(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", **FAST}, {"name": "staging", **FAST}])
    stages, c = fake(T0), candidate(1)
    start(ledger, c, T0)
    other = ledger.stage_leases("staging's rotation tick", 60.0)
    mine = Ledger(ledger.store).stage_leases("this tick", 60.0)
    with other("staging") as held:
        assert held
        theirs = Ledger(ledger.store)
        report = tick(p, theirs, stages, "tester", lease=mine)
        assert report.held == ["staging"] and [e.decision for e in report.steps] == ["enter"]
        lease = ledger.store.lease("release/tick/staging")
        assert lease is not None and lease.holder == "staging's rotation tick"  # left to its holder
    assert ledger.store.lease("release/tick/dev") is None  # this tick released dev's when done


# ------------------------------------------------------------------------------------------------ gates at their edges


def policy(**kw: Any) -> StagePolicy:
    return StagePolicy.model_validate({"name": "dev", "soak": "1h", "minResults": 100, "passFor": "30m", "deadline": "2h", **kw})


def test_the_soak_gate_at_its_boundaries() -> None:
    rotated = T0
    passing = [VerdictChange(rotated, "pass", "ok")]
    at = rotated + 3600
    assert soak_decision(policy(), rotated, at, passing, 99).decision == "wait"  # one result short
    assert soak_decision(policy(), rotated, at, passing, 99).unmet == ("results",)
    assert soak_decision(policy(), rotated, at, passing, 100).decision == "pass"  # exactly at minResults
    assert soak_decision(policy(), rotated, at - 1, passing, 100).unmet == ("soak-time",)  # one second short of the soak
    late = [VerdictChange(at - 1800 + 1, "pass", "ok")]
    assert soak_decision(policy(), rotated, at, late, 100).unmet == ("pass-for",)  # passFor one second short
    assert soak_decision(policy(), rotated, at, [VerdictChange(at - 1800, "pass", "ok")], 100).decision == "pass"
    unsure = [VerdictChange(rotated, "inconclusive", "thin")]
    deadline = rotated + 3600 + 7200
    assert soak_decision(policy(), rotated, deadline - 1, unsure, 100).decision == "wait"  # the instant before
    assert soak_decision(policy(), rotated, deadline, unsure, 100).decision == "halt"  # exactly at the deadline


def test_the_entry_gate_at_its_boundaries() -> None:
    one = [Approval("arn:aws:iam::1:user/alice", T0, "ok")]
    assert entry_decision(StagePolicy(name="prod", approvals=2), T0, [], one, None).unmet == ("approvals",)
    two = one + [Approval("arn:aws:iam::1:user/bob", T0, "ok")]
    assert entry_decision(StagePolicy(name="prod", approvals=2), T0, [], two, None).decision == "enter"


# ------------------------------------------------------------------------------------------------ the ledger


def test_a_long_soak_writes_a_soak_entry_only_when_what_holds_it_changes(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", "soak": "4h", "passFor": "1h", "minResults": 100, "deadline": "2h"}])
    stages, c = fake(T0), candidate(1)
    start(ledger, c, T0)
    run(ledger, stages, p, 80, step=300)  # four hours of soak, ticked every five minutes
    soaks = [e for _, e in ledger.entries() if e.decision == "soak"]
    assert ("dev", "promote") in decisions(ledger, c.id)
    assert 1 <= len(soaks) <= 3, [e.inputs["decision"]["unmet"] for e in soaks]  # was one per tick: ~48


def test_replay_compares_the_decision_and_what_held_it_never_the_words(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "passFor": "30m", "minResults": 100}])
    stages, c = fake(T0), candidate(1)
    start(ledger, c, T0)
    run(ledger, stages, p, 30)
    soak = next(e for _, e in ledger.entries() if e.decision == "soak")
    reworded = json.loads(json.dumps(soak.to_dict()))
    reworded["inputs"]["decision"]["reason"] = "worded another way entirely"
    assert replay(Entry.from_dict(reworded))["same"]
    flipped = json.loads(json.dumps(soak.to_dict()))
    flipped["inputs"]["decision"]["unmet"] = ["verdict"]
    assert not replay(Entry.from_dict(flipped))["same"]


def test_a_hundred_releases_keep_the_checkpoint_small(ledger: Ledger) -> None:
    """(The benchmark measures the tick's cost over 100 releases on a 10,000-node fleet; here: the size.)"""
    def boots(stage: str, c: Candidate) -> dict[str, list[str]]:
        return {f"ami-{stage}-{c.id}": [f"i-{c.id[2:10]}{n:06d}" for n in range(2500)]}

    p = pipeline(stages=[{"name": s, **FAST} for s in STAGES])
    stages = fake(T0, boots=boots)
    for n in range(100):
        c = candidate(n)
        start(ledger, c, stages.clock)
        run(ledger, stages, p, 7)
    run(ledger, stages, p, 10)
    last = ledger.store.last(checkpoints("prod"))
    assert last is not None and len(json.dumps(last.data)) < 100_000
    assert ledger.state().stage("prod").last_good == candidate(99).id


def test_a_freeze_that_begins_after_the_entry_holds_the_deploy_until_it_ends(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", **FAST}])
    stages, c = fake(T0), candidate(1)
    start(ledger, c, T0)
    run(ledger, stages, p, 1)  # entered
    assert ledger.state().stage("dev").step == "deploying"
    ledger.append(None, "dev", "freeze", stages.clock, "incident 7", {"until": stages.clock + 3600}, "oncall")
    reports = [tick(p, ledger, stages, "tester") for _ in range(3)]
    assert not stages.deploys and all("frozen before its deploy" in " ".join(r.waiting) for r in reports)
    stages.clock += 3600
    run(ledger, stages, p, 2)
    assert stages.deploys == [("dev", c.id)]


def test_a_freeze_that_begins_during_a_rotation_pauses_it_and_the_tick_resumes_it_when_it_ends(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", **FAST}])
    stages, c = fake(T0), candidate(1)
    start(ledger, c, T0)
    run(ledger, stages, p, 2)  # entered, deployed
    assert ledger.state().stage("dev").step == "rotating"
    begins = stages.clock + 600
    stages.freeze_at = begins
    ledger.append(None, "dev", "freeze", begins, "incident 9", {"until": begins + 3600}, "oncall")
    run(ledger, stages, p, 4, step=300)  # the rotation pauses ten minutes in; the next ticks stay inside the freeze
    assert stages.paused == [("dev", c.id)] and stages.rotations == [] and stages.resumed == []
    assert ledger.state().stage("dev").paused and [d for _, d in decisions(ledger, c.id)][-1] == "paused"
    stages.clock = begins + 3600  # the freeze's end
    run(ledger, stages, p, 2)
    assert stages.resumed == ["dev"] and stages.rotations == [("dev", c.id)]
    said = [d for _, d in decisions(ledger, c.id)]
    assert said[said.index("paused"):said.index("rotated") + 1] == ["paused", "resumed", "rotated"], said
    assert rotation_results_keep_the_contract(e for _, e in ledger.entries()) == 2  # paused, rotated


def test_an_approval_names_one_person_whom_aws_vouches_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real ledger (DynamoDB), an approval is a person's: an IAM user, an IAM Identity Center user under any
    permission set (one person), a user of a role the identity provider assumes; never a role assumed under a session
    name of the caller's choosing (one person as two), never a role of the platform's own jobs, never ``(local)``
    when STS does not answer."""
    import boto3
    from moto import mock_aws

    from platformctl.app.release import ApproveRequest, approve

    text = ("stages:\n  - {name: dev, soak: 0, passFor: 0, minResults: 0, approvals: 2}\n"
            "approvers: {identityRoles: [okta-engineers, dev-usw2-host-release]}\n")
    path = write_pipeline(tmp_path, text)
    table = "dynamodb://platformctl-release?region=us-east-1"
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    def acting_as(keys: dict[str, str]) -> None:
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it keeps the credentials it first resolved
        for key, value in keys.items():
            monkeypatch.setenv(key, value)
        if "AWS_SESSION_TOKEN" not in keys:
            monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)

    def assumed(role: str, session: str) -> dict[str, str]:
        acting_as(admin)
        arn = iam.create_role(RoleName=role, AssumeRolePolicyDocument="{}")["Role"]["Arn"] \
            if role not in roles else roles[role]
        roles[role] = arn
        creds = boto3.client("sts").assume_role(RoleArn=arn, RoleSessionName=session)["Credentials"]
        return {"AWS_ACCESS_KEY_ID": creds["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
                "AWS_SESSION_TOKEN": creds["SessionToken"]}

    def approving(keys: dict[str, str]) -> dict[str, Any]:
        acting_as(keys)
        return approve(Platform.from_os(), ApproveRequest(c.id, "dev", "ok", path, table)).to_dict()

    with mock_aws():
        admin = {"AWS_ACCESS_KEY_ID": "AKIAADMIN", "AWS_SECRET_ACCESS_KEY": "x"}
        acting_as(admin)
        boto3.client("dynamodb").create_table(
            TableName="platformctl-release", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "N"}])
        iam, roles = boto3.client("iam"), {}
        iam.create_user(UserName="alice")
        key = iam.create_access_key(UserName="alice")["AccessKey"]
        alice = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
        ledger = Ledger(open_store(table))
        c = candidate(1)
        start(ledger, c, T0)
        run(ledger, fake(T0), parse_pipeline(yaml.safe_load(text), str(path), "digest"), 1)  # waits in dev

        said = approving(alice)
        assert said["by"] == "user/alice@123456789012" and said["inputs"]["caller"].endswith(":user/alice")
        for session in ("alice", "bob"):  # a role anyone allowed may assume under any name: nobody in particular
            with pytest.raises(PlatformError, match="names no one person"):
                approving(assumed("deployers", session))
        with pytest.raises(PlatformError, match="names no one person"):  # a job's role, even if listed
            approving(assumed("dev-usw2-host-release", "carol"))
        sso = [approving(assumed(role, "carol@example.com")) for role in
               ("AWSReservedSSO_Admin_0123abcd", "AWSReservedSSO_ReadOnly_4567ef01")]
        assert {s["by"] for s in sso} == {"carol@example.com"}  # one person under two permission sets
        assert approving(assumed("okta-engineers", "dave@example.com"))["by"] == "dave@example.com"
        approvals = ledger.state().approvals[f"{c.id}/dev"]
        assert sorted({a.by for a in approvals}) == ["carol@example.com", "dave@example.com", "user/alice@123456789012"]
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")  # STS not answering: no one, never (local)
        with pytest.raises(PlatformError, match="STS did not say who you are"):
            approving(alice)
    assert all("(local)" not in a.by for a in approvals)
