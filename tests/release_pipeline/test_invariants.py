"""The pipeline's invariants (docs/release.md, "What always holds") where weeks of operation broke them: a halt that
lands between a tick's read and its write, a rollback whose target is halted elsewhere, a stage with no good
candidate left, blocked-node patience across progress and freezes, records that grew with a soak's flapping verdict
and with lapsed freezes; and the seeded random model (``model.py``) run over a bounded number of histories."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from platformctl.kernel.state import open_store
from release_pipeline.candidates import Candidate
from release_pipeline.gate_inputs import inputs_of
from release_pipeline.ledger import Ledger
from release_pipeline.reconcile import BLOCKED_PATIENCE, rollback_by_hand
from release_pipeline.replay import replay
from release_pipeline.rotation_result import StageRotation
from release_pipeline.testing import FakeStages
from tests.release_pipeline import model
from tests.release_pipeline.test_reconcile import (
    T0,
    assert_every_decision_replays,
    candidate,
    decisions,
    fake,
    pipeline,
    run,
    start,
)

LIMIT = 100_000  # bytes: an entry or a checkpoint, far below DynamoDB's 400 kB item


class Between(Ledger):
    """The ledger, with a write of someone else's that lands right before the tick's next ``decision`` entry."""

    def __init__(self, path: Path) -> None:
        super().__init__(open_store(str(path)))
        self.before: dict[str, Callable[[], None]] = {}

    def append(self, candidate: str | None, stage: str | None, decision: str, at: float, reason: str,
               inputs: Any = None, by: str = "", salt: str = "", key: str | None = None) -> Any:
        if by == "tester" and str(decision) in self.before:
            self.before.pop(str(decision))()
        return super().append(candidate, stage, decision, at, reason, inputs, by, salt, key)


def roll_back_by_hand(ledger: Ledger, name: str, at: float) -> str:
    """``release rollback --stage NAME`` as the app writes it; the candidate it halts."""
    stage = ledger.state().stage(name)
    cid, target = rollback_by_hand(stage, name)
    Ledger.append(ledger, cid, name, "halt", at, "rolled back by hand", {"manual": True, "rollback_to": target}, "alice")
    return cid


def test_a_candidate_halted_between_a_ticks_read_and_its_enter_never_enters_nor_deploys(tmp_path: Path) -> None:
    ledger, stages = Between(tmp_path / "ledger.db"), fake(T0)
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "minResults": 100, "passFor": "30m"},
                         {"name": "staging", "soak": "1h", "minResults": 100, "passFor": "30m"}])
    first, second = candidate(1), candidate(2)
    start(ledger, first, T0)
    run(ledger, stages, p, 30)
    start(ledger, second, stages.clock)
    while ledger.state().stage("dev").last_good != second.id:  # the second passes dev and is ready in staging
        run(ledger, stages, p, 1)
    assert second.id in ledger.state().stage("staging").ready
    # The tick reads staging (the second may enter), then dev's rollback by hand halts the second, then the tick writes
    # its enter.
    ledger.before["enter"] = lambda: roll_back_by_hand(ledger, "dev", stages.clock)
    run(ledger, stages, p, 20)
    state = ledger.state()
    assert state.candidates[second.id].status == "halted"
    assert ("staging", second.id) not in stages.deploys and stages.running["staging"] == first.id
    assert state.stage("staging").step == "idle" and state.stage("staging").last_good == first.id
    assert [d for s, d in decisions(ledger, second.id) if s == "staging"] == ["enter"]  # written, and passed over
    assert stages.running["dev"] == first.id and state.stage("dev").last_good == first.id


def test_a_stage_rolling_back_to_a_candidate_halted_elsewhere_goes_back_to_the_good_one_before_it(tmp_path: Path) -> None:
    ledger, stages = Between(tmp_path / "ledger.db"), fake(T0)
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "minResults": 100, "passFor": "30m", "deadline": "2h"},
                         {"name": "staging", "soak": "1h", "minResults": 100, "passFor": "30m", "deadline": "2h"}])
    first, second, third = candidate(1), candidate(2), candidate(3)
    for c in (first, second):
        start(ledger, c, stages.clock)
        while ledger.state().stage("dev").last_good != c.id:
            run(ledger, stages, p, 1)
    while ledger.state().stage("staging").current != second.id:  # the second in flight in staging
        run(ledger, stages, p, 1)
    start(ledger, third, stages.clock)
    stages.verdicts[third.id] = "fail"
    while ledger.state().stage("dev").step != "rolling-back":  # the third fails in dev: back to the second
        run(ledger, stages, p, 1)
    assert ledger.state().stage("dev").rollback_to == second.id
    # Before dev's rollback deploys, the second is rolled back by hand in staging: halted everywhere.
    ledger.before["rollback-deploy"] = lambda: roll_back_by_hand(ledger, "staging", stages.clock)
    run(ledger, stages, p, 12)
    state = ledger.state()
    assert state.candidates[second.id].status == "halted"
    assert state.stage("dev").step == "idle" and state.stage("dev").last_good == first.id
    assert stages.running["dev"] == first.id and stages.templates["dev"] == {"general": "ami-dev0001"}
    assert ("dev", second.id) not in stages.deploys[stages.deploys.index(("dev", third.id)):]  # never deployed back


def test_a_stage_left_with_no_good_candidate_goes_back_to_what_it_ran_before_the_pipeline_never_a_halted_ones_images(
        tmp_path: Path) -> None:
    ledger, stages = Between(tmp_path / "ledger.db"), fake(T0)
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "minResults": 100, "passFor": "30m", "deadline": "2h"},
                         {"name": "staging", "soak": "1h", "minResults": 100, "passFor": "30m", "deadline": "2h"}])
    first, second = candidate(1), candidate(2)
    start(ledger, first, T0)
    while ledger.state().stage("staging").current != first.id:
        run(ledger, stages, p, 1)
    start(ledger, second, stages.clock)
    stages.verdicts[second.id] = "fail"
    while ledger.state().stage("dev").current != second.id or ledger.state().stage("dev").step != "soaking":
        run(ledger, stages, p, 1)
    roll_back_by_hand(ledger, "staging", stages.clock)  # the first, halted: dev has no good candidate left
    assert ledger.state().stage("dev").last_good is None
    run(ledger, stages, p, 30)  # the second fails in dev: back to what dev ran before the pipeline, not the first's
    state = ledger.state()
    assert state.candidates[second.id].status == "halted" and state.stage("dev").step == "idle"
    assert stages.templates["dev"] == stages.nodes["dev"] == {"general": "ami-dev-initial"}
    assert all(replay(e)["same"] for _, e in ledger.entries() if inputs_of(e) is not None)


@dataclass
class Blocking:
    """Rotations that answer ``blocked`` ``blocked_rotations`` times, booting ``moving`` more instances a tick while they
    move (a ``before_rotate`` hook)."""

    booted: int = 0
    moving: int = 0
    blocked_rotations: int = 0

    def __call__(self, stages: FakeStages, stage: str, candidate: Candidate, rollback: bool, hold: Any) -> StageRotation | None:
        if self.blocked_rotations <= 0 or rollback:
            return None
        self.blocked_rotations -= 1
        if hold is not None and (why := hold()) is not None:
            return StageRotation("frozen", why)
        self.booted += self.moving
        ids = [f"i-{n:05d}" for n in range(self.booted)]
        return StageRotation("blocked", "a budget allows no disruption now", {"ami-new": ids})


def test_blocked_patience_counts_from_the_last_block_after_the_rotation_moved(tmp_path: Path) -> None:
    blocking = Blocking(blocked_rotations=10_000, moving=3)
    ledger, stages = Ledger(open_store(str(tmp_path / "ledger.db"))), fake(T0, before_rotate=blocking)
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "minResults": 100, "passFor": "30m"}])
    c = candidate(1)
    start(ledger, c, T0)
    run(ledger, stages, p, 2)  # enter, deploy
    run(ledger, stages, p, int(2 * 3600 / 300))  # two hours blocked each tick, but moving on each tick
    assert ledger.state().stage("dev").step == "rotating"
    blocking.moving = 0  # stuck from now on
    run(ledger, stages, p, int(BLOCKED_PATIENCE / 300) - 2)
    assert ledger.state().stage("dev").step == "rotating", decisions(ledger)[-3:]  # less than the patience since it moved
    run(ledger, stages, p, 4)
    assert ledger.state().candidates[c.id].status == "halted"
    halt = next(e for _, e in ledger.entries() if e.decision == "halt")
    assert halt.inputs["decision"]["unmet"] == ["rotation", "blocked"]


def test_blocked_patience_starts_again_after_a_freeze_paused_the_rotation(tmp_path: Path) -> None:
    ledger, stages = Ledger(open_store(str(tmp_path / "ledger.db"))), fake(T0, before_rotate=Blocking(blocked_rotations=10_000))
    p = pipeline(stages=[{"name": "dev", "soak": "1h", "minResults": 100, "passFor": "30m"}])
    c = candidate(1)
    start(ledger, c, T0)
    run(ledger, stages, p, 2 + 6)  # blocked for half an hour
    ledger.append(None, "dev", "freeze", stages.clock, "the weekend", {"until": stages.clock + 64 * 3600}, "oncall")
    run(ledger, stages, p, int(64 * 3600 / 300) + 1)  # paused through the freeze
    state = ledger.state()
    assert state.stage("dev").step == "rotating" and "paused" in [d for _, d in decisions(ledger)]
    run(ledger, stages, p, 3)  # resumed, blocked again: fifteen minutes, not 64 hours
    assert ledger.state().stage("dev").step == "rotating" and ledger.state().candidates[c.id].status != "halted"
    run(ledger, stages, p, int(BLOCKED_PATIENCE / 300) + 2)
    assert ledger.state().candidates[c.id].status == "halted"


def _sizes(ledger: Ledger) -> tuple[int, int]:
    written = [r for s in ledger.store.streams("release/state@") if (r := ledger.store.last(s)) is not None]
    assert written, "no tick wrote a checkpoint"
    last = max(written, key=lambda r: len(json.dumps(r.data)))
    return len(json.dumps(last.data)), max(len(json.dumps(e.to_dict())) for _, e in ledger.entries())


def test_a_verdict_that_flaps_through_a_36_hour_soak_keeps_every_record_small_and_replays(tmp_path: Path) -> None:
    def flapping(stages: FakeStages, stage: str, candidate: Candidate, baseline: Candidate | None, since: float,
                 window: int, entered: float | None) -> Any:
        from e2e_canary.verdict import Verdict

        said = "pass" if int(stages.clock / 300) % 2 else "inconclusive"
        reason = f"{said}: " + "every canary's evidence, at length; " * 20
        return Verdict(said, reason, results_since=1000)

    ledger, stages = Ledger(open_store(str(tmp_path / "ledger.db"))), fake(T0, judge=flapping)
    p = pipeline(stages=[{"name": "dev", "soak": "36h", "minResults": 100, "passFor": "30m", "deadline": "2h"}])
    c = candidate(1)
    start(ledger, c, T0)
    run(ledger, stages, p, int(40 * 3600 / 300))
    assert ledger.state().candidates[c.id].status == "halted"  # never pass for 30 minutes: the deadline
    assert len([d for _, d in decisions(ledger) if d == "verdict"]) > 400
    checkpoint, largest = _sizes(ledger)
    assert checkpoint < LIMIT and largest < LIMIT, (checkpoint, largest)
    assert_every_decision_replays(ledger)


def test_lapsed_freezes_leave_the_state_and_the_entries_that_copy_it(tmp_path: Path) -> None:
    ledger, stages = Ledger(open_store(str(tmp_path / "ledger.db"))), fake(T0)
    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0, "approvals": 1}])
    for n in range(1600):  # a freeze by hand of a minute, every few minutes, for days
        ledger.append(None, "dev", "freeze", T0 - 600_000 + n * 300, f"freeze {n}", {"until": T0 - 600_000 + n * 300 + 60},
                      "oncall", salt=str(n))
    c = candidate(1)
    start(ledger, c, T0)
    run(ledger, stages, p, 3)  # waits for its approval
    state = ledger.state()
    assert state.freezes == [] and "approval" in (state.stage("dev").waiting_for or "")
    wait = next(e for _, e in ledger.entries() if e.decision == "wait")
    assert wait.inputs["manual_freezes"] == []
    ledger.checkpoint(ledger.state(), ["dev"])
    checkpoint, largest = _sizes(ledger)
    assert checkpoint < 10_000 and largest < 10_000, (checkpoint, largest)


# A bounded number of the random model's histories in every run (``make soak`` runs thousands); a failure names its
# seed, which ``python -m tests.release_pipeline.model --seed S`` replays.
HISTORIES = int(os.environ.get("PLATFORMCTL_MODEL_HISTORIES", "12"))


@pytest.mark.parametrize("first", range(0, HISTORIES, 3))
def test_weeks_of_random_operation_keep_every_invariant(first: int) -> None:
    for seed in range(first, min(first + 3, HISTORIES)):
        counts = model.run_one(seed)
        assert counts["started"] > 20 and counts.get("halted", 0) + counts.get("halts", 0) > 0, counts


def test_a_superseded_candidate_sent_by_hand_keeps_the_approvals_it_had_whatever_the_checkpoints(tmp_path: Path) -> None:
    """Found by the random model (seed 1368): a checkpoint let a superseded candidate's approvals go, so the state
    read from it differed from the ledger folded from the start, and one sent by hand later lost them."""
    ledger, stages = Ledger(open_store(str(tmp_path / "ledger.db"))), fake(T0)
    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0, "approvals": 2}])
    one, two = candidate(1), candidate(2)
    start(ledger, one, T0)
    run(ledger, stages, p, 1)  # waits for two approvals
    ledger.append(one.id, "dev", "approve", stages.clock, "ok", by="alice")
    start(ledger, two, stages.clock)
    run(ledger, stages, p, 2)  # the newer one goes instead: the first superseded (a checkpoint written)
    assert ledger.state().candidates[one.id].status == "superseded"
    ledger.append(one.id, "dev", "force", stages.clock, "sent back by hand", {}, "alice")
    ledger.append(one.id, "dev", "approve", stages.clock, "ok", by="bob")
    run(ledger, stages, p, 3)
    assert stages.deploys == [("dev", one.id)]  # alice's approval, from before the checkpoint, still counts
