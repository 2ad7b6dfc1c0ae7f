"""The soak's verdict with a last good candidate: each new image's canary results since the rotation ended against the
results of the image it replaces from before, beside the stage's own window; the worse decides. Read from a real
SQLite state store, where the canary runner writes them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from e2e_canary.judge import JudgeConfig
from e2e_canary.results import keep
from e2e_canary.verdict import soak_verdict as judged
from platformctl.kernel.state.sqlite import SQLiteStore
from release_pipeline.candidates import StageImages, make_candidate
from release_pipeline.operations import replaced_images
from tests.e2e_canary.test_evidence_window import stage_results

ENTERED = 5 * 3600.0  # the candidate entered the stage
ROTATED = 6 * 3600.0  # the stage's last cluster finished rotating
WINDOW = 1800


def candidate(general: str, ml: str = "ami-ml") -> Any:
    images = {"general": {"version": general, "id": general}, "ml": {"version": "1", "id": ml}}
    return make_candidate([StageImages("dev", "us-west-2", images, "1.30", {})], "rev", "", 0.0, "test")


def stored(tmp_path: Path, new_latency: float, *, before: float = ROTATED) -> SQLiteStore:
    """The last good image (ami-old) from 0 to ``before`` and eight hours of the new one (ami-new) after the rotation, as
    the shipped canaries record them on dev's clusters; ``new_latency`` is the new image's pod startup."""
    store = SQLiteStore(tmp_path / "state.db")
    old = [dataclasses.replace(r, image="ami-old") for r in stage_results(0.0, before, seed=1)]
    new = [dataclasses.replace(r, image="ami-new") for r in stage_results(ROTATED, ROTATED + 8 * 3600, latency=new_latency,
                                                                           seed=2)]
    for row in old + new:
        keep(store, row)
    return store


def soak_verdict(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The soak's verdict as the ledger keeps it."""
    return judged(*args, **kwargs).to_dict()


def test_only_the_images_the_candidate_changed_are_compared_each_with_the_one_of_its_family() -> None:
    assert replaced_images("dev", candidate("ami-new"), candidate("ami-old")) == {"ami-new": "ami-old"}
    assert replaced_images("dev", candidate("ami-new"), None) == {}
    assert replaced_images("dev", candidate("ami-old"), candidate("ami-old")) == {}


def test_a_new_image_slower_than_the_last_good_one_fails_the_soak_its_own_window_would_pass(tmp_path: Path) -> None:
    # 2.5 s to start against 1.2 s: within the 5 s objective, and steady for longer than the windows reach back, so the
    # stage's window against the one before it sees no change; against the last good candidate's image it is a regression.
    store, now = stored(tmp_path, new_latency=2.5), ROTATED + 8 * 3600
    alone = soak_verdict(store, "dev", ROTATED, now, WINDOW)
    assert alone["verdict"] == "pass", alone["reason"]
    verdict = soak_verdict(store, "dev", ROTATED, now, WINDOW, {"ami-new": "ami-old"}, "c-good", ENTERED)
    assert verdict["verdict"] == "fail", verdict["reason"]
    assert verdict["images"]["baseline_until"] == ENTERED  # the old image before the candidate came, not during its rotation
    assert verdict["reason"].startswith("image ami-new against ami-old of c-good: canary ")
    assert "pod_startup_seconds: worse by 1.3, significant" in verdict["reason"]
    arm = verdict["images"]["arms"]["ami-new"]
    assert arm["results"]["baseline"] > 0 and arm["results"]["experiment"] > 0


def test_a_new_image_like_the_last_good_one_passes_and_says_it_was_compared(tmp_path: Path) -> None:
    store, now = stored(tmp_path, new_latency=1.2), ROTATED + 8 * 3600
    verdict = soak_verdict(store, "dev", ROTATED, now, WINDOW, {"ami-new": "ami-old"}, "c-good")
    assert verdict["verdict"] == "pass", verdict["reason"]
    assert verdict["reason"].endswith("every new image compared passes against the last good candidate c-good's")
    assert verdict["images"]["verdict"] == "pass"


def test_with_too_few_results_of_the_replaced_image_the_stage_window_alone_decides_and_says_so(tmp_path: Path) -> None:
    store, now = stored(tmp_path, new_latency=2.5, before=5.0), ROTATED + 8 * 3600  # the old image at most one pod an arm
    verdict = soak_verdict(store, "dev", ROTATED, now, WINDOW, {"ami-new": "ami-old"}, "c-good", ENTERED)
    assert verdict["verdict"] == "pass" and verdict["images"]["arms"] == {}
    assert "the stage's window alone decides" in verdict["images"]["reason"]
    assert verdict["images"]["not_compared"][0].startswith("ami-new (")


def test_too_few_results_of_the_new_image_are_never_a_pass_of_the_comparison(tmp_path: Path) -> None:
    store, now = stored(tmp_path, new_latency=1.2), ROTATED + 10  # ten seconds into the soak: ten pods of one round
    verdict = soak_verdict(store, "dev", ROTATED, now, WINDOW, {"ami-new": "ami-old"}, "c-good", ENTERED)
    assert verdict["verdict"] == "inconclusive", verdict["reason"]
    compared = verdict["images"]
    assert compared.get("verdict", "inconclusive") == "inconclusive", compared


def test_a_new_image_with_no_result_yet_holds_the_soak_when_the_old_one_had_enough(tmp_path: Path) -> None:
    store, now = stored(tmp_path, new_latency=1.2), ROTATED + 8 * 3600
    verdict = soak_verdict(store, "dev", ROTATED, now, WINDOW, {"ami-new": "ami-old", "ami-unseen": "ami-old"}, "c-good",
                           ENTERED)
    assert verdict["verdict"] == "inconclusive", verdict["reason"]
    assert verdict["reason"].startswith("image ami-unseen against ami-old of c-good: ")


def test_a_stage_judge_with_a_smaller_minimum_decides_a_soak_the_defaults_find_too_thin(tmp_path: Path) -> None:
    # Forty minutes after the rotation the cron canary has 12 attempts: too few for the judge's default minimum (20),
    # enough for a stage whose pipeline names a judge of its own (the demo's: one node a pool, fewer results).
    store, now = stored(tmp_path, new_latency=1.2), ROTATED + 2400
    thin = soak_verdict(store, "dev", ROTATED, now, WINDOW)
    assert thin["verdict"] == "inconclusive" and "too little data" in thin["reason"], thin["reason"]
    judge = JudgeConfig.model_validate({"minSamples": 10, "minAttempts": 10})
    judged = soak_verdict(store, "dev", ROTATED, now, WINDOW, config=judge)
    assert judged["verdict"] == "pass", judged["reason"]
