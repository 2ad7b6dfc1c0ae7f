"""The canaries' SLIs over time, as a chart wants them: pod startup latency p50/p99 and the success rate per image, in
time buckets, with the objectives they answer to. Aggregated here so that a month of results becomes a few hundred
points a line, not a row a pod.

It reads the results a caller hands it; it stores nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from e2e_canary.judge import JudgeConfig
from e2e_canary.results import CanaryResult, within
from platformctl.kernel.jsontypes import JSONObject

BUCKETS = 120  # points a line, whatever the window
COUNTED = ("ok", "fail", "timeout")  # the attempts the judge's failure rate counts (``judge.Arm.attempts``)


@dataclass(frozen=True)
class SliLine:
    """One image's line: per bucket its middle time, p50 and p99 pod startup, success rate and attempts."""

    image: str
    at: list[float]
    p50: list[float | None]
    p99: list[float | None]
    success_rate: list[float | None]
    attempts: list[int]
    samples: int

    def to_dict(self) -> JSONObject:
        return {"image": self.image, "at": self.at, "p50": self.p50, "p99": self.p99, "success_rate": self.success_rate,
                "attempts": self.attempts, "samples": self.samples}


def objectives(config: JudgeConfig | None = None) -> dict[str, float | None]:
    """The SLO lines: the p99 pod startup objective (seconds) and the success rate the failure budget leaves."""
    config = config or JudgeConfig()
    budget = config.failure_rate.budget
    return {"pod_startup_p99_seconds": config.rule("pod_startup_seconds").objective_p99,
            "success_rate": None if budget is None else 1.0 - budget}


def sli_series(rows: Sequence[CanaryResult], start: float, end: float, buckets: int = BUCKETS) -> list[SliLine]:
    """One line per image (results with no image: ``"(none)"``): per bucket its middle time, p50 and p99 pod startup
    (None where no pod started), success rate over the attempts the judge counts (ok, fail, timeout: a disruption is
    the platform's doing and an infra error the canary's own, neither the image's), and those attempts."""
    width = max((end - start) / buckets, 1.0)
    samples: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    attempts: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for row in within(rows, start, end):
        image = row.image or "(none)"
        bucket = min(int((row.at - start) // width), buckets - 1)
        if row.ok:
            samples[image][bucket] += row.samples("pod_startup_seconds")
        if row.outcome in COUNTED:
            counted = attempts[image][bucket]
            counted[0] += row.ok
            counted[1] += 1
    lines: list[SliLine] = []
    for image in sorted(set(samples) | set(attempts)):
        points = sorted(set(samples[image]) | set(attempts[image]))
        p50: list[float | None] = []
        p99: list[float | None] = []
        for b in points:
            values = np.asarray(samples[image].get(b, []), dtype=float)
            p50.append(float(np.percentile(values, 50)) if values.size else None)
            p99.append(float(np.percentile(values, 99)) if values.size else None)
        counts = [attempts[image].get(b, [0, 0]) for b in points]
        lines.append(SliLine(image, [start + (b + 0.5) * width for b in points], p50, p99,
                             [ok / n if n else None for ok, n in counts], [n for _, n in counts],
                             sum(len(samples[image].get(b, [])) for b in points)))
    return lines
