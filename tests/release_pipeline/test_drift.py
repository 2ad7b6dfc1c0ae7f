"""Drift: what a stage's launch templates boot, read from AWS at every tick, against what the ledger says the stage
runs. A drifted pool is recorded as a typed ``drift`` entry (stage, cluster, pool, found, expected) within one tick,
the stage takes no step while it lasts (no rotation onto the drifted image, no promotion, no candidate entering), and
an entry with no pools says when it is over."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from release_pipeline.fold import Kind, Step
from release_pipeline.held import Drift
from release_pipeline.ledger import Ledger
from release_pipeline.reconcile import tick
from release_pipeline.testing import FakeStages
from tests.release_pipeline.test_reconcile import STAGES, T0, candidate, decisions, fake, pipeline, run, start


def drift_entries(ledger: Ledger) -> list[list[Drift]]:
    return [[Drift.from_dict(d) for d in e.inputs["drift"]] for _, e in ledger.entries() if e.decision == Kind.DRIFT]


def until(ledger: Ledger, stages: FakeStages, p: object, done: object, limit: int = 200) -> None:
    for _ in range(limit):
        if done():  # type: ignore[operator]
            return
        tick(p, ledger, stages, "tester")  # type: ignore[arg-type]
        stages.clock += 300
    raise AssertionError(f"not done in {limit} ticks: {decisions(ledger)[-5:]}")


def test_a_template_changed_by_hand_in_an_idle_stage_is_reported_within_one_tick_and_holds_the_stage(ledger: Ledger) -> None:
    stages, p, good = fake(T0), pipeline(), candidate(1)
    start(ledger, good, T0)
    until(ledger, stages, p, lambda: ledger.state().stage("dev").last_good == good.id)
    expected = good.stages["dev"].images["general"]["id"]
    stages.templates["dev"]["general"] = "ami-by-hand"  # someone's `pulumi up` with another lock, or EC2 by hand
    tick(p, ledger, stages, "tester")
    [drift] = drift_entries(ledger)
    assert drift == [Drift("dev-1", "general", "general", "ami-by-hand", expected)]
    assert ledger.state().stage("dev").drift == drift
    # A newer candidate does not enter the drifted stage (nor is anything rotated onto the drifted image).
    newer = candidate(2)
    start(ledger, newer, stages.clock)
    run(ledger, stages, p, 5)
    assert ("dev", newer.id) not in stages.deploys and ("dev", newer.id) not in stages.rotations
    assert len(drift_entries(ledger)) == 1  # written when the drift changes, not every tick
    # Put back: an entry with no pools, and the stage goes on.
    stages.templates["dev"]["general"] = expected
    tick(p, ledger, stages, "tester")
    assert drift_entries(ledger)[-1] == [] and ledger.state().stage("dev").drift == []
    until(ledger, stages, p, lambda: ("dev", newer.id) in stages.deploys)


def test_a_template_with_the_promoted_image_and_settings_no_deploy_made_is_drift_naming_them(ledger: Ledger) -> None:
    """A version made by hand with the same image and another user data (a label, a taint, a kubelet flag): the tick
    names the settings, the stage takes no step, and a deploy of the pipeline's puts it back."""
    stages, p, good = fake(T0), pipeline(), candidate(1)
    start(ledger, good, T0)
    until(ledger, stages, p, lambda: ledger.state().stage("dev").last_good == good.id)
    expected = good.stages["dev"].images["general"]["id"]
    stages.settings["dev"] = {"general": ("UserData",)}
    tick(p, ledger, stages, "tester")
    [drift] = drift_entries(ledger)
    assert drift == [Drift("dev-1", "general", "general", expected, expected, ("UserData",))]
    assert drift[0].said() == f"dev-1/general launches {expected} with other UserData than the pipeline deployed (general)"
    newer = candidate(2)
    start(ledger, newer, stages.clock)
    run(ledger, stages, p, 5)
    assert ("dev", newer.id) not in stages.deploys
    stages.settings.pop("dev")  # `platformctl stage deploy`: the candidate's own program again
    tick(p, ledger, stages, "tester")
    assert drift_entries(ledger)[-1] == []
    until(ledger, stages, p, lambda: ("dev", newer.id) in stages.deploys)


def test_a_drift_while_a_candidate_soaks_is_never_promoted(ledger: Ledger) -> None:
    stages, p, good = fake(T0), pipeline(), candidate(1)
    start(ledger, good, T0)
    until(ledger, stages, p, lambda: ledger.state().stage("dev").step == Step.SOAKING)
    stages.templates["dev"]["general"] = "ami-by-hand"
    run(ledger, stages, p, 40)  # far past the soak's hour and its deadline
    assert ledger.state().stage("dev").step == Step.SOAKING and ("dev", "promote") not in decisions(ledger, good.id)
    assert ledger.state().stage("staging").current is None and [s for s, _ in stages.deploys] == ["dev"]


def test_a_drift_between_the_deploy_and_the_rotation_is_never_rotated_onto(ledger: Ledger) -> None:
    stages, p, good = fake(T0), pipeline(), candidate(1)
    start(ledger, good, T0)
    until(ledger, stages, p, lambda: ledger.state().stage("dev").step == Step.ROTATING)
    assert stages.rotations == []
    stages.templates["dev"]["general"] = "ami-by-hand"
    run(ledger, stages, p, 10)
    assert stages.rotations == [] and ledger.state().stage("dev").step == Step.ROTATING
    [drift] = drift_entries(ledger)
    assert [(d.pool, d.found, d.expected) for d in drift] == [("general", "ami-by-hand", good.stages["dev"].images["general"]["id"])]


def test_a_stage_the_pipeline_never_deployed_has_nothing_to_drift_from(ledger: Ledger) -> None:
    stages, p, good = fake(T0), pipeline(), candidate(1)
    start(ledger, good, T0)
    until(ledger, stages, p, lambda: ledger.state().stage("dev").last_good == good.id)
    stages.templates["prod"] = {"general": "ami-whatever-it-ran"}  # the ledger says nothing of prod yet
    stages.templates["dev"]["general"] = "ami-by-hand"  # dev it does
    tick(p, ledger, stages, "tester")
    assert [e.stage for _, e in ledger.entries() if e.decision == Kind.DRIFT] == ["dev"]
    assert ledger.state().stage("prod").drift == []


def test_a_template_changed_while_the_stage_rotates_is_never_called_rotated(ledger: Ledger) -> None:
    """The rotation passes over the drifted pool and ends; the tick reads the templates again before it records the
    rotation finished: the soak never starts on a stage whose pool was not rotated."""
    p, good = pipeline(), candidate(1)

    def changed_by_hand_meanwhile(s: FakeStages, stage: str, c: object, rollback: bool, hold: object) -> None:
        if stage == "dev" and not rollback:
            s.templates["dev"]["general"] = "ami-by-hand"
        return None

    stages = fake(T0, before_rotate=changed_by_hand_meanwhile)  # type: ignore[arg-type]
    start(ledger, good, T0)
    until(ledger, stages, p, lambda: any(e.decision == Kind.DRIFT for _, e in ledger.entries()))
    run(ledger, stages, p, 5)
    assert ("dev", "rotated") not in decisions(ledger, good.id) and ledger.state().stage("dev").step == Step.ROTATING
    stages.before_rotate = None
    stages.templates["dev"]["general"] = good.stages["dev"].images["general"]["id"]  # put back
    until(ledger, stages, p, lambda: ("dev", "rotated") in decisions(ledger, good.id))


def test_release_status_names_each_drifted_pool_and_exits_4_until_it_is_put_back(ledger: Ledger, tmp_path: Path) -> None:
    import json

    import yaml
    from click.testing import CliRunner

    from platformctl.cli import cli

    stages, p, good = fake(T0), pipeline(), candidate(1)
    start(ledger, good, T0)
    until(ledger, stages, p, lambda: ledger.state().stage("dev").last_good == good.id)
    (tmp_path / "pipeline.yaml").write_text(yaml.safe_dump({"stages": [
        {"name": s, "soak": "1h", "minResults": 100, "passFor": "30m", "deadline": "2h"} for s in STAGES]}))

    def status(*args: str) -> Any:
        return CliRunner().invoke(cli, ["release", "status", "--pipeline", str(tmp_path / "pipeline.yaml"), "--ledger",
                                        str(tmp_path / "release.db"), *args])

    assert status().exit_code == 0
    stages.templates["dev"]["general"] = "ami-by-hand"
    tick(p, ledger, stages, "tester")
    out = status()
    assert out.exit_code == 4, out.output
    assert "Drift" in out.output and "dev-1" in out.output and "ami-by-hand" in out.output
    said = status("-o", "json")
    assert said.exit_code == 4
    assert json.loads(said.output)["stages"]["dev"]["drift"] == [
        {"cluster": "dev-1", "pool": "general", "family": "general", "found": "ami-by-hand",
         "expected": good.stages["dev"].images["general"]["id"]}]
    stages.templates["dev"]["general"] = good.stages["dev"].images["general"]["id"]
    tick(p, ledger, stages, "tester")
    assert status().exit_code == 0
