"""The release reconciler driven through its transitions against a real SQLite ledger, with the stages' actions
recorded (the pipeline's own seam: deploy, rotate and the canary verdict are the application layer's), on a virtual
clock: promote through every stage, inconclusive then pass, inconclusive past the deadline, fail and roll back,
freezes in another time zone across a daylight-saving change, approvals, a superseded candidate; every decision
replays to the same outcome."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from platformctl.app.platform import Platform
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state import open_store
from release_pipeline.candidates import Candidate, StageImages, make_candidate
from release_pipeline.fold import WaitHeld
from release_pipeline.gate_inputs import EntryInputs, inputs_of
from release_pipeline.gates import freeze_window_at
from release_pipeline.ledger import Ledger
from release_pipeline.pipeline import Freeze, parse_pipeline
from release_pipeline.reconcile import tick
from release_pipeline.replay import replay
from release_pipeline.rotation_result import StageRotation
from release_pipeline.testing import FakeStages

STAGES = ("dev", "staging", "prod-canary", "prod")


def fake(start: float, **config: Any) -> FakeStages:
    """Every stage's actions on a clock starting at ``start``, each stage on its initial images."""
    return FakeStages(start, STAGES, **config)


def candidate(n: int, at: float = 0.0) -> Candidate:
    stages = [StageImages(s, "us-east-1", {"general": {"version": f"1.{n}.0", "id": f"ami-{s[:3]}{n:04d}"}}, "1.32", {})
              for s in STAGES]
    return make_candidate(stages, f"rev{n}", f"change {n}", at, "tester")


def pipeline(**overrides: Any) -> Any:
    stage = {"soak": "1h", "minResults": 100, "passFor": "30m", "deadline": "2h"}
    document = {"stages": [{"name": s, **stage} for s in STAGES], **overrides}
    return parse_pipeline(document, "pipeline.yaml", "digest")


def start(ledger: Ledger, c: Candidate, at: float, first: str = "dev") -> None:
    ledger.add_candidate(c)
    ledger.append(c.id, None, "start", at, c.note, {"ready_in": [first]}, "tester")


def run(ledger: Ledger, stages: FakeStages, p: Any, ticks: int, step: float = 300) -> None:
    for _ in range(ticks):
        tick(p, ledger, stages, "tester")
        stages.clock += step


def decisions(ledger: Ledger, cid: str | None = None) -> list[tuple[str | None, str]]:
    return [(e.stage, e.decision) for _, e in ledger.entries() if cid is None or e.candidate == cid]


def assert_every_decision_replays(ledger: Ledger) -> None:
    gated = [e for _, e in ledger.entries() if e.decision in ("wait", "enter", "soak", "promote", "halt")]
    assert gated
    for entry in gated:
        again = replay(entry)
        assert again["same"], again


T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC).timestamp()  # a Monday


def test_a_good_candidate_is_promoted_through_every_stage_one_step_per_tick(ledger: Ledger) -> None:
    stages, p, good = fake(T0), pipeline(), candidate(1)
    start(ledger, good, T0)
    run(ledger, stages, p, 80)
    assert stages.deploys == [(s, good.id) for s in STAGES] and stages.rotations == [(s, good.id) for s in STAGES]
    state = ledger.state()
    assert state.candidates[good.id].status == "released"
    assert {n: s.last_good for n, s in state.stages.items()} == dict.fromkeys(STAGES, good.id)
    steps = [d for s, d in decisions(ledger, good.id) if s == "dev"]
    assert steps[:6] == ["enter", "deploy", "deployed", "rotate", "rotated", "verdict"] and steps[-1] == "promote"
    promote = next(e for _, e in ledger.entries() if e.decision == "promote" and e.stage == "dev")
    rotated = next(e for _, e in ledger.entries() if e.decision == "rotated" and e.stage == "dev")
    assert promote.at - rotated.at >= 3600  # the soak counted from the end of the rotation
    assert promote.inputs["thresholds"]["soak"] == 3600 and promote.inputs["pipeline"] == "digest"
    assert_every_decision_replays(ledger)


def test_inconclusive_extends_the_soak_and_a_later_pass_promotes(ledger: Ledger) -> None:
    stages, p, c = fake(T0), pipeline(stages=[{"name": "dev", "soak": "1h", "passFor": "30m", "deadline": "3h"}]), candidate(2)
    start(ledger, c, T0)
    stages.verdicts[c.id] = "inconclusive"
    run(ledger, stages, p, 20)  # 100 minutes: the soak's hour is over, the verdict still undecided
    assert ledger.state().stages["dev"].step == "soaking"
    assert "the verdict is inconclusive" in (ledger.state().stages["dev"].waiting_for or "")
    stages.verdicts[c.id] = "pass"
    run(ledger, stages, p, 4)
    assert ledger.state().stages["dev"].step == "soaking"  # pass for less than passFor yet
    run(ledger, stages, p, 8)
    assert ledger.state().stages["dev"].last_good == c.id
    assert_every_decision_replays(ledger)


def test_inconclusive_past_the_deadline_halts_never_a_pass_and_a_fail_rolls_back_to_the_last_good(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "passFor": "30m", "deadline": "1h"},
                         {"name": "staging", "soak": "1h", "passFor": "30m"}])
    stages, good, unsure, bad = fake(T0), candidate(1), candidate(2), candidate(3)
    start(ledger, good, T0)
    run(ledger, stages, p, 60)
    assert ledger.state().stages["staging"].last_good == good.id
    start(ledger, unsure, stages.clock)
    stages.verdicts[unsure.id] = "inconclusive"
    run(ledger, stages, p, 40)
    halt = next(e for _, e in ledger.entries() if e.decision == "halt" and e.candidate == unsure.id)
    assert "deadline" in halt.inputs["decision"]["unmet"] and halt.inputs["rollback_to"] == good.id
    assert stages.running["dev"] == good.id and ledger.state().stages["dev"].last_good == good.id  # rotated back
    start(ledger, bad, stages.clock)
    stages.verdicts[bad.id] = "fail"
    run(ledger, stages, p, 20)
    state = ledger.state()
    assert state.candidates[bad.id].status == "halted" and stages.running["dev"] == good.id
    assert ("staging", bad.id) not in stages.deploys and ("staging", unsure.id) not in stages.deploys  # never later
    assert [d for s, d in decisions(ledger, bad.id) if s == "dev"][-5:] == [
        "halt", "rollback-deploy", "rollback-deployed", "rollback-rotate", "rolled-back"]
    assert_every_decision_replays(ledger)


def test_a_freeze_in_another_time_zone_holds_across_a_daylight_saving_change(ledger: Ledger) -> None:
    weekly = Freeze(name="friday-evening", timezone="Europe/Berlin", rrule="FREQ=WEEKLY;BYDAY=FR;BYHOUR=18;BYMINUTE=0;BYSECOND=0",
                    duration=3 * 3600, start=datetime(2026, 1, 2, 18, 0))
    summer = datetime(2026, 10, 23, 16, 30, tzinfo=UTC).timestamp()  # 18:30 in Berlin (CEST, +2)
    winter = datetime(2026, 10, 30, 17, 30, tzinfo=UTC).timestamp()  # 18:30 in Berlin (CET, +1), after the change
    assert freeze_window_at(weekly, summer) == (datetime(2026, 10, 23, 16, 0, tzinfo=UTC).timestamp(),
                                                datetime(2026, 10, 23, 19, 0, tzinfo=UTC).timestamp())
    assert freeze_window_at(weekly, winter) is not None
    assert freeze_window_at(weekly, datetime(2026, 10, 30, 16, 30, tzinfo=UTC).timestamp()) is None  # 17:30 in Berlin
    cron = Freeze(name="nightly", timezone="America/New_York", cron="0 22 * * *", duration=8 * 3600)
    assert freeze_window_at(cron, datetime(2026, 11, 2, 4, 0, tzinfo=UTC).timestamp()) is not None  # 23:00 EST
    p = pipeline(freezes=[weekly.model_dump(mode="json", by_alias=True)])
    stages, c = fake(winter), candidate(4)
    start(ledger, c, winter)
    run(ledger, stages, p, 1)
    dev = ledger.state().stages["dev"]
    assert dev.step == "waiting" and "frozen" in (dev.waiting_for or "") and dev.opens_at == winter + 9000  # 21:00 in Berlin
    run(ledger, stages, p, 30)
    enter = next(e for _, e in ledger.entries() if e.decision == "enter")
    assert enter.at >= winter + 9000
    assert_every_decision_replays(ledger)


def test_approvals_are_waited_for_and_counted_by_distinct_people(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0, "approvals": 2}])
    stages, c = fake(T0), candidate(5)
    start(ledger, c, T0)
    run(ledger, stages, p, 2)
    assert "waits for approval: 0 of 2" in (ledger.state().stages["dev"].waiting_for or "")
    ledger.append(c.id, "dev", "approve", stages.clock, "looks good", by="alice")
    ledger.append(c.id, "dev", "approve", stages.clock + 1, "again", by="alice")
    run(ledger, stages, p, 2)
    assert "1 of 2 (alice)" in (ledger.state().stages["dev"].waiting_for or "") and not stages.deploys
    ledger.append(c.id, "dev", "approve", stages.clock, "ok", by="bob")
    run(ledger, stages, p, 6)
    assert stages.deploys == [("dev", c.id)]
    assert_every_decision_replays(ledger)
    # A wait is written again when what holds the gate changes (an approval), never on a tick where nothing did.
    waits = [e for _, e in ledger.entries() if e.decision == "wait"]
    assert [WaitHeld.of(e.inputs).approved_by for e in waits] == [(), ("alice", "alice")]
    assert all(inputs_of(e) == EntryInputs.from_dict(e.inputs) and e.inputs["gate"] == "entry" for e in waits)


def test_a_newer_candidate_supersedes_an_older_one_still_waiting_and_queue_keeps_both(tmp_path: Path) -> None:
    for mode, expected in (("supersede", ["c2"]), ("queue", ["c1", "c2"])):
        ledger = Ledger(open_store(str(tmp_path / f"{mode}.db")))
        p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0, "approvals": 1}], onNewer=mode)
        stages, one, two = fake(T0), candidate(1), candidate(2)
        start(ledger, one, T0)
        run(ledger, stages, p, 1)
        start(ledger, two, stages.clock)
        for c in (one, two):
            ledger.append(c.id, "dev", "approve", stages.clock, "ok", by="alice")
        run(ledger, stages, p, 20)
        names = {one.id: "c1", two.id: "c2"}
        assert [names[c] for _, c in stages.deploys] == expected
        if mode == "supersede":
            assert ledger.state().candidates[one.id].status == "superseded"


def test_what_an_operator_writes_during_a_tick_is_in_the_checkpoint_the_tick_leaves(ledger: Ledger) -> None:
    def freeze_meanwhile(stages: FakeStages, stage: str, c: Candidate, rollback: bool) -> None:
        ledger.append(None, "prod", "freeze", stages.clock, "incident during the deploy", {"until": None}, "oncall")

    stages, p, c = fake(T0, before_deploy=freeze_meanwhile), pipeline(), candidate(6)
    start(ledger, c, T0)
    run(ledger, stages, p, 2)  # enter, then deploy (during which the freeze is written)
    assert [f.reason for f in ledger.state().freezes] == ["incident during the deploy"]
    assert ledger.store.last("release/state@prod") is not None
    checkpoint = ledger.store.last("release/state@prod").data["state"]  # type: ignore[union-attr]
    assert [f["reason"] for f in checkpoint["freezes"]] == ["incident during the deploy"]


def two_good_in_dev(ledger: Ledger, stages: FakeStages, p: Any) -> tuple[Candidate, Candidate]:
    first, second = candidate(1), candidate(2)
    for c in (first, second):
        start(ledger, c, stages.clock)
        run(ledger, stages, p, 30)
        assert ledger.state().stages["dev"].last_good == c.id
    return first, second


def write_pipeline(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


DEV_STAGING = "stages:\n  - {name: dev, soak: 1h, passFor: 30m, deadline: 2h}\n  - {name: staging, soak: 1h, approvals: 1}\n"


def test_a_rollback_by_hand_takes_the_stage_back_to_the_good_candidate_before_and_the_rolled_back_one_goes_no_further(
        tmp_path: Path, ledger: Ledger) -> None:
    from platformctl.app.release import PromoteRequest, RollbackRequest, promote, rollback

    path = write_pipeline(tmp_path, DEV_STAGING)
    p, stages = parse_pipeline(yaml.safe_load(DEV_STAGING), str(path), "digest"), fake(T0)
    first, second = two_good_in_dev(ledger, stages, p)
    assert second.id in ledger.state().stages["staging"].ready  # waiting for staging's approval
    entry = rollback(Platform.from_os(), RollbackRequest("dev", "a memory leak seen in dev", path, str(tmp_path / "release.db"))).to_dict()
    assert entry["decision"] == "halt" and entry["candidate"] == second.id and entry["inputs"]["rollback_to"] == first.id
    state = ledger.state()
    assert state.stages["dev"].step == "rolling-back" and state.candidates[second.id].status == "halted"
    assert second.id not in state.stages["staging"].ready  # it never enters a later stage
    run(ledger, stages, p, 4)
    assert stages.running["dev"] == first.id and stages.deploys[-1] == ("dev", first.id)
    state = ledger.state()
    assert state.stages["dev"].last_good == first.id and state.stages["dev"].step == "idle"
    # The first candidate is now the only good one: nothing earlier to roll back to; a second rollback is exit 2.
    with pytest.raises(PlatformError, match="no earlier one"):
        rollback(Platform.from_os(), RollbackRequest("dev", "again", path, str(tmp_path / "release.db")))
    # The first was superseded in staging by the second: never eligible again unless an operator sends it by hand.
    assert ledger.state().candidates[first.id].status == "superseded"
    run(ledger, stages, p, 5)
    assert not [d for d in stages.deploys if d[0] == "staging"]
    promote(Platform.from_os(), PromoteRequest(first.id, "staging", "the second was rolled back", path, str(tmp_path / "release.db")))
    ledger.append(first.id, "staging", "approve", stages.clock, "ok", by="alice")
    run(ledger, stages, p, 30)
    assert ("staging", first.id) in stages.deploys and ("staging", second.id) not in stages.deploys


def test_a_rollback_by_hand_during_a_rotation_stands_over_the_rotation_the_tick_then_records(
        tmp_path: Path, ledger: Ledger) -> None:
    from platformctl.app.release import RollbackRequest
    from platformctl.app.release import rollback as roll_back

    path = write_pipeline(tmp_path, DEV_STAGING)
    p = parse_pipeline(yaml.safe_load(DEV_STAGING), str(path), "digest")

    def rolled_back_meanwhile(stages: FakeStages, stage: str, c: Candidate, said: StageRotation) -> StageRotation:
        if c.id == third.id:  # an operator rolls dev back while the tick's rotation runs
            roll_back(Platform.from_os(), RollbackRequest("dev", "pages from dev", path, str(tmp_path / "release.db")))
        return said

    third = candidate(3)
    stages = fake(T0, after_rotate=rolled_back_meanwhile)
    _, second = two_good_in_dev(ledger, stages, p)
    start(ledger, third, stages.clock)
    run(ledger, stages, p, 3)  # enter, deploy and deployed, rotate (the rollback is written inside it) and rotated
    said = [d for _, d in decisions(ledger, third.id)]
    assert said[-3:] == ["rotate", "halt", "rotated"], said
    assert ledger.state().stages["dev"].step == "rolling-back"  # the rotated entry after the halt is passed over
    run(ledger, stages, p, 6)
    state = ledger.state()
    assert stages.running["dev"] == second.id and state.stages["dev"].last_good == second.id
    assert ("staging", third.id) not in stages.deploys and "promote" not in [d for _, d in decisions(ledger, third.id)]


def test_an_override_lets_one_candidate_enter_during_a_freeze_and_is_recorded(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0}])
    stages, one, two = fake(T0), candidate(1), candidate(2)
    ledger.append(None, "dev", "freeze", T0 - 1, "the holidays", {"until": None}, "oncall")
    start(ledger, one, T0)
    run(ledger, stages, p, 2)
    assert "frozen: the holidays" in (ledger.state().stages["dev"].waiting_for or "") and not stages.deploys
    ledger.append(two.id, "dev", "override", stages.clock, "someone else's fix", by="alice")  # not this candidate's
    run(ledger, stages, p, 2)
    assert not stages.deploys
    ledger.append(one.id, "dev", "override", stages.clock, "the CVE fix cannot wait", by="alice")
    run(ledger, stages, p, 2)
    assert stages.deploys == [("dev", one.id)]
    enter = next(e for _, e in ledger.entries() if e.decision == "enter")
    assert "overridden by alice: the CVE fix cannot wait" in enter.reason
    assert enter.inputs["override"]["by"] == "alice" and enter.inputs["freezes"][0]["reason"] == "the holidays"
    assert_every_decision_replays(ledger)


def test_a_rotation_whose_lease_another_holds_writes_nothing_and_the_next_tick_carries_on(ledger: Ledger) -> None:
    busy = [StageRotation("busy", "another rotation of dev-use1-az1 is running")] * 2

    def held(stages: FakeStages, stage: str, c: Candidate, rollback: bool, hold: Any) -> StageRotation | None:
        return busy.pop() if busy else None

    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0}])
    stages, c = fake(T0, before_rotate=held), candidate(1)
    start(ledger, c, T0)
    reports = [tick(p, ledger, stages, "tester") for _ in range(6)]
    assert [d for _, d in decisions(ledger, c.id)][:5] == ["start", "enter", "deploy", "deployed", "rotate"]
    assert reports[3].waiting and not reports[3].steps  # held back, nothing written, said why
    assert stages.rotations == [("dev", c.id)] and ledger.state().stages["dev"].step != "rolling-back"


def test_nodes_a_budget_blocks_for_now_are_planned_again_next_tick_and_halt_only_past_the_patience(
        ledger: Ledger) -> None:
    """A Deployment whose pods are still starting has a budget that allows no disruption now: the planner leaves its
    nodes, and the pipeline tries again next tick instead of halting; blocked for an hour, it halts."""
    from release_pipeline.reconcile import BLOCKED_PATIENCE

    def blocked(times: int, slow_first: float = 0.0) -> Any:
        """Rotations that answer blocked ``times`` times (the first after ``slow_first`` seconds of the clock)."""
        left = [times]

        def rotate(stages: FakeStages, stage: str, c: Candidate, rollback: bool, hold: Any) -> StageRotation | None:
            if not stages.rotations:
                stages.clock += slow_first
            if not left[0]:
                return None
            left[0] -= 1
            stages.rotations.append((stage, c.id))
            return StageRotation("blocked", "dev-use1-az1: incomplete: 3 outdated node(s) were not rotated: 3 blocked")
        return rotate

    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0}])
    stages, c = fake(T0, before_rotate=blocked(2)), candidate(1)
    start(ledger, c, T0)
    reports = [tick(p, ledger, stages, "tester") for _ in range(6)]
    assert [d for _, d in decisions(ledger, c.id)][:7] == ["start", "enter", "deploy", "deployed", "rotate", "blocked",
                                                           "rotated"]  # blocked recorded once
    assert reports[3].waiting and not reports[3].steps and "3 blocked" in " ".join(reports[3].waiting)
    assert len(stages.rotations) == 3

    # A rotation that ran for two hours before its last node was blocked has its full patience from the block.
    forever = fake(T0 + 86400, before_rotate=blocked(10**6, slow_first=2 * 3600))
    forever.templates["dev"] = dict(stages.templates["dev"])  # the same fleet, as the first rotation left it
    c2 = candidate(2)
    start(ledger, c2, T0 + 86400)
    for _ in range(12):
        tick(p, ledger, forever, "tester")
        forever.clock += BLOCKED_PATIENCE / 4
    entries = [e for _, e in ledger.entries() if e.candidate == c2.id]
    blocked = next(e for e in entries if e.decision == "blocked")
    halt = next(e for e in entries if e.decision == "halt")
    assert blocked.at - next(e for e in entries if e.decision == "deployed").at >= 2 * 3600
    assert halt.at - blocked.at >= BLOCKED_PATIENCE and halt.inputs["blocked_since"] == blocked.at
    # the tick before the halt was inside the patience: nothing halted then
    assert halt.at - blocked.at < BLOCKED_PATIENCE + BLOCKED_PATIENCE / 4 + 1
    assert_every_decision_replays(ledger)


def test_a_tick_for_one_stage_acts_in_that_stage_only(ledger: Ledger) -> None:
    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0},
                         {"name": "staging", "soak": 0, "passFor": 0, "minResults": 0}])
    stages, c = fake(T0), candidate(1)
    start(ledger, c, T0)
    for _ in range(10):
        tick(p, ledger, stages, "staging's cronjob", only=("staging",))
    assert stages.deploys == [] and ledger.state().stages["dev"].step == "idle"  # dev's own tick enters dev
    for _ in range(10):
        tick(p, ledger, stages, "dev's cronjob", only=("dev",))
    assert stages.deploys == [("dev", c.id)] and c.id in ledger.state().stages["staging"].ready
    for _ in range(10):
        tick(p, ledger, stages, "staging's cronjob", only=("staging",))
    assert stages.deploys == [("dev", c.id), ("staging", c.id)]


def test_a_rollback_by_hand_takes_the_candidate_back_out_of_a_later_stage_it_already_entered(
        tmp_path: Path, ledger: Ledger) -> None:
    from platformctl.app.release import RollbackRequest, rollback

    text = "stages:\n  - {name: dev, soak: 1h, passFor: 30m, deadline: 2h}\n  - {name: staging, soak: 1h, deadline: 2h}\n"
    path = write_pipeline(tmp_path, text)
    p, stages = parse_pipeline(yaml.safe_load(text), str(path), "digest"), fake(T0)
    first, second = candidate(1), candidate(2)
    start(ledger, first, T0)
    run(ledger, stages, p, 60)
    assert ledger.state().stages["staging"].last_good == first.id
    start(ledger, second, stages.clock)
    for _ in range(40):  # until the second is soaking in staging
        run(ledger, stages, p, 1)
        if ledger.state().stages["staging"].step == "soaking":
            break
    assert ledger.state().stages["staging"].current == second.id
    rollback(Platform.from_os(), RollbackRequest("dev", "a leak found in dev", path, str(tmp_path / "release.db")))
    run(ledger, stages, p, 12)
    state = ledger.state()
    assert stages.running["dev"] == first.id and stages.running["staging"] == first.id  # both stages back on the first
    assert state.stages["staging"].last_good == first.id and state.stages["staging"].step == "idle"
    assert "promote" not in [d for s, d in decisions(ledger, second.id) if s == "staging"]


def test_the_fold_keeps_a_rollback_by_hand_over_what_a_tick_read_before_it(ledger: Ledger) -> None:
    a, b, c, d = candidate(1), candidate(2), candidate(3), candidate(4)
    for x in (a, b, c, d):
        start(ledger, x, T0)
    for x in (a, b):  # both passed dev: b is the last good one
        for step in ("enter", "deploy", "deployed", "rotate", "rotated", "promote"):
            ledger.append(x.id, "dev", step, T0, step, {"ready_in": []} if step == "promote" else {})
    ledger.append(c.id, "dev", "wait", T0 + 1, "frozen", {"decision": {"decision": "wait", "reason": "frozen"}})
    # An operator rolls dev back (b, back to a); a tick that read the stage before writes its next steps after it.
    ledger.append(b.id, "dev", "halt", T0 + 2, "by hand", {"manual": True, "rollback_to": a.id, "step": "waiting"})
    ledger.append(c.id, "dev", "wait", T0 + 3, "frozen still", {"decision": {"decision": "wait", "reason": "x"}})
    ledger.append(d.id, "dev", "enter", T0 + 4, "entered", {})
    state = ledger.state()
    dev = state.stages["dev"]
    assert (dev.step, dev.current, dev.rollback_to, dev.last_good) == ("rolling-back", b.id, a.id, a.id)
    assert dev.ready.count(c.id) == 1 and state.candidates[d.id].status == "queued"  # nothing stranded or doubled


def test_a_rollback_by_hand_that_races_an_entry_leaves_the_entered_candidate_in_flight(ledger: Ledger) -> None:
    a, b, c = candidate(1), candidate(2), candidate(3)
    for x in (a, b, c):
        start(ledger, x, T0)
    for x in (a, b):
        for step in ("enter", "deploy", "deployed", "rotate", "rotated", "promote"):
            ledger.append(x.id, "dev", step, T0, step, {"ready_in": []} if step == "promote" else {})
    ledger.append(c.id, "dev", "enter", T0 + 1, "entered", {})  # between the rollback's read and its write
    ledger.append(b.id, "dev", "halt", T0 + 2, "by hand", {"manual": True, "rollback_to": a.id, "step": "idle"})
    state = ledger.state()
    dev = state.stages["dev"]
    assert (dev.step, dev.current, dev.last_good) == ("deploying", c.id, a.id)
    assert state.candidates[b.id].status == "halted" and state.candidates[c.id].status == "in flight"
