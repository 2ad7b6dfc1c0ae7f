"""The stage's canary verdict over stored results: this window against the one before, or each image's arm
against a baseline image's (mid-rotation, the new image against the old). It judges; it runs nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from e2e_canary.judge import JudgeConfig, judge
from e2e_canary.runner import arm_of

ORDER = {"fail": 2, "inconclusive": 1, "pass": 0}


def stage_verdict(rows: Sequence[dict[str, Any]], now: float, window: float, baseline: str | None = None,
                  config: JudgeConfig | None = None) -> dict[str, Any]:
    current = [r for r in rows if now - window <= float(r["at"]) <= now]
    if baseline is None:
        before = [r for r in rows if now - 2 * window <= float(r["at"]) < now - window]
        result = judge(arm_of(before), arm_of(current), config).to_dict()
        return {**result, "baseline": "the window before", "experiment": "this window", "window_seconds": window,
                "results": {"baseline": len(before), "experiment": len(current)}}
    by_image: dict[str, list[dict[str, Any]]] = {}
    for r in current:
        if r.get("image"):
            by_image.setdefault(r["image"], []).append(r)
    base = by_image.pop(baseline, [])
    if not by_image:
        return {"verdict": "inconclusive", "reason": f"no image other than {baseline} has results in the window",
                "baseline": baseline, "arms": {}, "window_seconds": window}
    arms = {image: judge(arm_of(base), arm_of(rows_of), config).to_dict() for image, rows_of in sorted(by_image.items())}
    worst = max(arms.items(), key=lambda kv: ORDER[kv[1]["verdict"]])
    verdict = worst[1]["verdict"]
    reason = f"image {worst[0]} against {baseline}: {worst[1]['reason']}" if verdict != "pass" else \
        f"every image passes against {baseline}"
    return {"verdict": verdict, "reason": reason, "baseline": baseline, "arms": arms, "window_seconds": window,
            "results": {"baseline": len(base), **{image: len(r) for image, r in by_image.items()}}}
