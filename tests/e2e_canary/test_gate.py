"""The rotation's canary gate (``healthGate: {canary: {window}}``): the target images against the images they replace."""

from __future__ import annotations

import pytest

from e2e_canary.judge import Arm, judge
from e2e_canary.results import CanaryResult, Outcome
from e2e_canary.verdict import rotation_verdict
from tests.e2e_canary.results import result
from upgrade_service.planning.policy import parse_policy

OLD, NEW = "ami-0ld", "ami-new"
NOW = 10_000.0


def rows(image: str, outcome: Outcome, n: int, latency: float = 1.0, at: float = NOW - 60,
         pool: str = "general") -> list[CanaryResult]:
    def metrics(i: int) -> dict[str, float | list[float] | None]:
        return {"pod_startup_seconds": latency + i * 0.01, "check_seconds": latency + 1 + i * 0.01} if outcome == "ok" else {}

    return [result("node-pool", outcome, at, image=image, pool=pool, metrics=metrics(i)) for i in range(n)]


def test_a_broken_image_fails_on_its_first_attempts_and_a_healthy_one_needs_enough_data_to_pass() -> None:
    assert judge(Arm({}, {"ok": 40}), Arm({}, {"fail": 4})).metrics["failure_rate"].verdict == "fail"
    small = judge(Arm({"pod_startup_seconds": [1.0] * 40}, {"ok": 40}), Arm({"pod_startup_seconds": [1.0] * 4}, {"ok": 4}))
    assert small.verdict == "inconclusive" and small.metrics["failure_rate"].verdict == "inconclusive"


def test_before_the_first_wave_the_stage_is_judged_against_its_failure_budget() -> None:
    targets = {"general": NEW}
    none = rotation_verdict([], NOW, 600, "c1", targets, {OLD})
    assert none.verdict == "inconclusive" and "canary run" in none.reason
    healthy = rotation_verdict(rows(OLD, "ok", 30), NOW, 600, "c1", targets, {OLD})
    assert healthy.verdict == "pass" and "no node boots a target image yet" in healthy.reason
    few = rotation_verdict(rows(OLD, "ok", 5), NOW, 600, "c1", targets, {OLD})
    assert few.verdict == "inconclusive"
    broken = rotation_verdict(rows(OLD, "ok", 20) + rows(OLD, "fail", 10), NOW, 600, "c1", targets, {OLD})
    assert broken.verdict == "fail" and "fail already" in broken.reason
    stale = rotation_verdict(rows(OLD, "ok", 30, at=NOW - 3600), NOW, 600, "c1", targets, {OLD})
    assert stale.verdict == "inconclusive"  # results older than the window do not count


def test_after_a_wave_the_target_image_is_judged_against_the_image_it_replaces() -> None:
    targets = {"general": NEW}
    waiting = rotation_verdict(rows(OLD, "ok", 30), NOW, 600, "c1", targets, {OLD, NEW})
    assert waiting.verdict == "inconclusive" and f"nodes boot {NEW} but no canary result" in waiting.reason
    bad = rotation_verdict(rows(OLD, "ok", 30) + rows(NEW, "fail", 4), NOW, 600, "c1", targets, {OLD, NEW})
    assert bad.verdict == "fail" and NEW in bad.reason and "failure_rate" in bad.reason
    good = rotation_verdict(rows(OLD, "ok", 30) + rows(NEW, "ok", 30), NOW, 600, "c1", targets, {OLD, NEW})
    assert good.verdict == "pass", good.reason
    slow = rotation_verdict(rows(OLD, "ok", 30) + rows(NEW, "ok", 30, latency=3.0), NOW, 600, "c1", targets, {OLD, NEW})
    assert slow.verdict == "fail" and "pod_startup_seconds" in slow.reason


def test_the_policy_takes_exactly_one_gate_and_a_window_as_people_write_it() -> None:
    policy = parse_policy({"healthGate": {"canary": {"window": "45m"}}}, "p.yaml")
    assert policy.health_gate is not None and policy.health_gate.canary is not None
    assert policy.health_gate.canary.window == 2700
    try:
        parse_policy({"healthGate": {"canary": {}, "url": "http://x"}}, "p.yaml")
    except Exception as exc:
        assert "p.yaml" in str(exc) and "healthGate" in str(exc) and "exactly one" in str(exc)
    else:
        raise AssertionError("two gates were accepted")


def pooled(image: str, outcome: Outcome, n: int, pool: str, latency: float = 1.0) -> list[CanaryResult]:
    return rows(image, outcome, n, latency, pool=pool)


def test_first_light_needs_min_results_in_every_pool_and_a_proven_image_one_clean_canary_period() -> None:
    targets = {"general": NEW, "batch": NEW}
    old = pooled(OLD, "ok", 30, "general") + pooled(OLD, "ok", 30, "batch")
    # the general pool's node has its ten; the batch pool's only four: not judged on the other pool's evidence
    thin = rotation_verdict(old + pooled(NEW, "ok", 30, "general") + pooled(NEW, "ok", 4, "batch"), NOW, 600, "c1",
                            targets, {OLD, NEW}, min_results=10)
    assert thin.verdict == "inconclusive" and "pool batch: 4" in thin.reason, thin.reason
    both = rotation_verdict(old + pooled(NEW, "ok", 30, "general") + pooled(NEW, "ok", 30, "batch"), NOW, 600, "c1",
                            targets, {OLD, NEW}, min_results=10)
    assert both.verdict == "pass", both.reason
    # failures fail it on the evidence there is, whatever minResults asks
    bad = rotation_verdict(old + pooled(NEW, "fail", 4, "general") + pooled(NEW, "fail", 4, "batch"), NOW, 600, "c1",
                           targets, {OLD, NEW}, min_results=10)
    assert bad.verdict == "fail"
    # images that passed first light in an earlier stage: the first canary period's results, all clean, let it in
    few = old + pooled(NEW, "ok", 3, "general") + pooled(NEW, "ok", 3, "batch")
    assert rotation_verdict(few, NOW, 600, "c1", targets, {OLD, NEW}, min_results=10).verdict == "inconclusive"
    proven = rotation_verdict(few, NOW, 600, "c1", targets, {OLD, NEW}, min_results=10, proven=True)
    assert proven.verdict == "pass" and "earlier stage" in proven.arms[NEW].reason, proven
    # ... but not with a pool that has none yet, nor with a failure among them
    one_pool = rotation_verdict(old + pooled(NEW, "ok", 3, "general"), NOW, 600, "c1", targets, {OLD, NEW},
                                min_results=10, proven=True)
    assert one_pool.verdict == "inconclusive"
    failing = rotation_verdict(few + pooled(NEW, "fail", 1, "batch"), NOW, 600, "c1", targets, {OLD, NEW},
                               min_results=10, proven=True)
    assert failing.verdict != "pass"


@pytest.mark.parametrize(("batch", "verdict"), [(24, "inconclusive"), (25, "pass")])
def test_first_lights_min_results_a_pool_at_its_boundary(batch: int, verdict: str) -> None:
    """One result short of ``minResults`` in a pool waits; exactly ``minResults`` passes (the arm as a whole holds the
    judge's ``minSamples`` either way, so only the per-pool count decides)."""
    targets = {"general": NEW, "batch": NEW}
    old = pooled(OLD, "ok", 30, "general") + pooled(OLD, "ok", 30, "batch")
    judged = rotation_verdict(old + pooled(NEW, "ok", 30, "general") + pooled(NEW, "ok", batch, "batch"), NOW, 600,
                              "c1", targets, {OLD, NEW}, min_results=25)
    assert judged.verdict == verdict, judged.reason
    if verdict == "inconclusive":
        assert f"pool batch: {batch}" in judged.reason and "25 a pool's first light needs" in judged.reason
