"""Canary results as a test writes them: what the runner would have kept, with the fields a test cares about."""

from __future__ import annotations

from e2e_canary.results import CanaryResult, Metrics, Outcome


def result(canary: str = "node-pool", outcome: Outcome = "ok", at: float = 0.0, *, image: str | None = None,
           pool: str | None = None, zone: str | None = None, metrics: Metrics | None = None, reason: str = "",
           canary_kind: str | None = None, cluster: str = "c1", stage: str = "dev",
           evidence_window: int | None = None) -> CanaryResult:
    return CanaryResult(canary, canary_kind if canary_kind is not None else canary, "a1", stage, cluster, zone, pool, image,
                        outcome, reason, dict(metrics or {}), at, evidence_window)
