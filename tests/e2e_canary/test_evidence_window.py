"""`canary verdict` over each canary's evidence window: a healthy stage with the shipped canaries' cadences passes
once the slowest canary has gathered its minimum evidence, a broken one fails, too little is never a pass."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from e2e_canary.definitions import CANARY_DIR, load_canaries
from e2e_canary.results import CanaryResult
from e2e_canary.verdict import EVIDENCE_STEPS
from e2e_canary.verdict import canary_verdicts as judged
from tests.e2e_canary.results import result

CLUSTERS = ("dev-usw2-host", "dev-usw2a-01", "dev-usw2b-01")
WINDOW = 1800.0


def stage_results(start: float, end: float, *, failing: float = 0.0, latency: float = 1.2, seed: int = 7,
                  clusters: tuple[str, ...] = CLUSTERS) -> list[CanaryResult]:
    """What the shipped canaries record on ``clusters`` between ``start`` and ``end``: each canary every ``interval``
    plus up to ``jitter``, one row per attempt (node-pool: one per pod, five per arm, two arms), with pod startup
    samples around ``latency``; ``failing`` of the attempts fail."""
    rng = random.Random(seed)
    out: list[CanaryResult] = []
    for canary in load_canaries(CANARY_DIR):
        for cluster in clusters:
            at = start + rng.uniform(0, canary.jitter)
            while at <= end:
                pods = 10 if canary.kind == "node-pool" else 1
                for _ in range(pods):
                    ok = rng.random() >= failing
                    samples = [latency + rng.uniform(-0.2, 0.2) for _ in range(1 if canary.kind == "node-pool" else 3)]
                    out.append(result(canary.name, "ok" if ok else "fail", at, canary_kind=canary.kind, cluster=cluster,
                                      image="ami-a", reason="" if ok else "CreateContainerError",
                                      metrics={"pod_startup_seconds": samples, "check_seconds": 20 + rng.uniform(0, 5)}
                                      if ok else {}))
                at += canary.interval + rng.uniform(0, canary.jitter)
    return sorted(out, key=lambda r: r.at)


def canary_verdicts(rows: list[CanaryResult], now: float, window: float) -> dict[str, Any]:
    """The verdict's JSON, as `canary verdict` prints it."""
    return judged(rows, now, window).to_dict()


def test_a_fresh_healthy_stage_is_inconclusive_at_first_then_passes_within_the_slowest_canarys_window() -> None:
    rows = stage_results(0.0, 8 * 3600.0)
    early = canary_verdicts([r for r in rows if r.at <= 1800], 1800.0, WINDOW)
    assert early["verdict"] == "inconclusive" and "too little data" in early["reason"]  # never a pass on too little
    passed_at = next(t for t in range(1800, 8 * 3600, 300)
                     if canary_verdicts([r for r in rows if r.at <= t], float(t), WINDOW)["verdict"] == "pass")
    verdict = canary_verdicts([r for r in rows if r.at <= passed_at], float(passed_at), WINDOW)
    windows = {name: c["window_seconds"] for name, c in verdict["canaries"].items()}
    # The daemon and cron canaries (every 10 minutes on three clusters) need the longest: 20 attempts is seven rounds.
    assert windows["node-pool"] == WINDOW and windows["daemon"] > WINDOW and windows["cron"] > WINDOW
    assert verdict["evidence_window_seconds"] == max(windows.values())
    assert passed_at <= verdict["evidence_window_seconds"] + 600  # within the slowest canary's window, give or take a round
    slowest = [c for c in verdict["canaries"].values() if c["window_seconds"] == verdict["evidence_window_seconds"]]
    assert all(c["baseline"].startswith("its objectives") for c in slowest)  # nothing before them yet
    assert verdict["canaries"]["node-pool"]["baseline"] == "the window before"  # ten pods a round: it has a before
    assert all(f"{name} over {c['window']}" in verdict["reason"] for name, c in verdict["canaries"].items())


def test_with_history_each_canary_is_judged_against_the_same_span_before_it() -> None:
    rows = stage_results(0.0, 10 * 3600.0)
    verdict = canary_verdicts(rows, 10 * 3600.0, WINDOW)
    assert verdict["verdict"] == "pass", verdict["reason"]
    assert {c["baseline"] for c in verdict["canaries"].values()} == {"the window before"}
    daemon = verdict["canaries"]["daemon"]
    assert daemon["metrics"]["failure_rate"]["baseline"]["n"] >= 20 and daemon["metrics"]["failure_rate"]["experiment"]["n"] >= 20


def test_a_stage_whose_attempts_fail_fails_on_a_fresh_stage_and_against_its_history() -> None:
    fresh = stage_results(0.0, 1800.0, failing=0.5)
    verdict = canary_verdicts(fresh, 1800.0, WINDOW)
    assert verdict["verdict"] == "fail" and "failure_rate" in verdict["reason"] and "budget" in verdict["reason"]
    history = stage_results(0.0, 6 * 3600.0) + stage_results(6 * 3600.0, 7 * 3600.0, failing=0.3, seed=8)
    assert canary_verdicts(sorted(history, key=lambda r: r.at), 7 * 3600.0, WINDOW)["verdict"] == "fail"


def test_slow_pod_startup_fails_against_the_objective_with_no_history() -> None:
    verdict = canary_verdicts(stage_results(0.0, 4 * 3600.0, latency=7.0), 4 * 3600.0, WINDOW)
    assert verdict["verdict"] == "fail" and "objective" in verdict["reason"]


def test_too_little_in_every_window_is_inconclusive_and_a_definition_can_fix_the_window() -> None:
    one = stage_results(0.0, 3600.0 * EVIDENCE_STEPS / 2, clusters=("dev-usw2-host",))
    daemon = [r for r in one if r.canary == "daemon"][-10:]  # ten attempts over the last hour and more
    verdict = canary_verdicts(daemon, daemon[-1].at, WINDOW)
    assert verdict["verdict"] == "inconclusive"
    assert verdict["canaries"]["daemon"]["window_seconds"] == EVIDENCE_STEPS * WINDOW
    fixed = [dataclasses.replace(r, evidence_window=7200) for r in one if r.canary == "service"]
    said = canary_verdicts(fixed, fixed[-1].at, WINDOW)["canaries"]["service"]
    assert said["window_seconds"] == 7200 and said["window_fixed"] and said["window"] == "120m"


def test_no_results_is_inconclusive() -> None:
    assert canary_verdicts([], 1000.0, WINDOW)["verdict"] == "inconclusive"


@pytest.mark.parametrize("text, seconds", [("2h", 7200), (5400, 5400)])
def test_a_definition_names_its_evidence_window(tmp_path: Any, text: Any, seconds: int) -> None:
    (tmp_path / "daemon.yaml").write_text(f"name: daemon\nkind: daemon\nevidenceWindow: {text}\n")
    assert load_canaries(tmp_path)[0].evidence_window == seconds


def test_a_failing_verdict_names_the_commonest_failed_result_even_when_another_canary_fails_it_first() -> None:
    history = stage_results(0.0, 6 * 3600.0)
    # After six healthy hours the daemon's checks slow down everywhere, and a node-pool pod in five cannot start.
    late = stage_results(6 * 3600.0, 7 * 3600.0, seed=9)
    for r in late:
        if r.canary == "daemon" and r.ok:
            r.metrics["check_seconds"] += 40
    rows = sorted(history + late, key=lambda r: r.at)
    verdict = canary_verdicts(rows, 7 * 3600.0, WINDOW)
    assert verdict["verdict"] == "fail" and verdict["reason"].startswith("canary daemon ")
    assert "CreateContainerError" not in verdict["reason"]  # nothing failed: the slower check alone
    pods = stage_results(6 * 3600.0, 7 * 3600.0, failing=0.2, seed=9)
    broken = sorted(history + [r for r in pods if r.canary == "node-pool"]
                    + [r for r in late if r.canary != "node-pool"], key=lambda r: r.at)
    verdict = canary_verdicts(broken, 7 * 3600.0, WINDOW)
    assert verdict["verdict"] == "fail" and verdict["reason"].startswith("canary daemon ")
    pool = verdict["canaries"]["node-pool"]["failures"]
    assert pool and pool[0]["reason"] == "CreateContainerError" and pool[0]["count"] >= 1
    assert "CreateContainerError" in verdict["reason"]
