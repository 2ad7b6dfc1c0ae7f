"""The canary judge: is the experiment arm worse than the baseline, by enough to matter, and do we know?

Two arms (a baseline and an experiment: the old image and the new, or the last window and this one)
each hold samples per metric (``pod_startup_seconds``, SIG-scalability's pod startup latency;
``check_seconds``, a whole check) and counts of outcomes. Per metric the judge says ``pass``, ``fail``
or ``inconclusive`` with the numbers behind it, and the verdict is the worst of them. Where Kayenta's
judge, Kuberhealthy and ClusterLoader2 fall short, this one does not:

- **fail needs a regression that is both significant and material.** Mann-Whitney U (scipy, one-sided
  in the metric's bad direction) says whether the experiment is shifted; the Hodges-Lehmann estimate
  (the median of all pairwise differences) says by how much, with its distribution-free confidence
  interval, which must not hold no change; the shift must also exceed the metric's material threshold
  (``max(relative x baseline median, absolute)``). On 10,000 samples a 2% shift is significant and still a pass.
- **no data is never a pass.** An empty arm, or fewer than ``minSamples``, is ``inconclusive``.
- **failures and disruptions are compared as rates**, with Fisher's exact test and a Newcombe
  confidence interval of the difference, the same significant-and-material rule, and the failure rate
  checked against its budget (an exact binomial test). Disrupted attempts (the platform evicted or
  preempted the canary's pod) are not failures and not latency samples: their rate is its own metric.
- **the SLO**: the experiment's p99 startup latency within its objective (5 s, SIG-scalability's).
- **one alpha for the whole verdict**: the tests share ``alpha`` (Bonferroni), so identical arms fail
  at most ``alpha`` of the time, however many metrics there are.
- **no baseline, then the objectives**: an arm with nothing to compare against (a fresh stage) is judged
  against what it promises alone (``judge_objectives``): its failure rate against the budget, its p99
  against the objective, with the same minimum evidence for a pass.

``judge`` is pure: arms in, a ``Judgement`` out (the stage's, rotation's and soak's ``e2e_canary.verdict.Verdict``
is built from judgements). The configuration is YAML parsed once at the edge.
"""

from __future__ import annotations

import importlib
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from types import ModuleType
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from e2e_canary.results import JUDGED, OUTCOMES, CanaryResult
from platformctl.kernel.errors import TOO_DEEP, PlatformError
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.yamlfile import read_yaml, validate

EXACT_PAIRS = 2_000_000  # up to this many pairwise differences the Hodges-Lehmann numbers are computed directly


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class MetricRule(_Value):
    direction: Literal["increase", "decrease"] = "increase"  # which way is worse
    material_relative: Annotated[float, Field(ge=0.0)] = 0.10  # of the baseline's median
    material_absolute: Annotated[float, Field(ge=0.0)] = 0.0  # in the metric's unit
    objective_p99: Annotated[float, Field(gt=0.0)] | None = None  # the SLO on the experiment's p99


class RateRule(_Value):
    material_increase: Fraction = 0.02  # in absolute rate: 0.02 is two percentage points
    budget: Fraction | None = None  # the SLO on the experiment's rate


DEFAULT_METRICS = {
    "pod_startup_seconds": MetricRule(material_relative=0.10, material_absolute=0.25, objective_p99=5.0),
    # a whole check, as a client polling every few seconds sees it: a quarter slower, and more than two polls
    "check_seconds": MetricRule(material_relative=0.25, material_absolute=5.0),
}


class JudgeConfig(_Value):
    alpha: Annotated[float, Field(gt=0.0, lt=0.5)] = 0.01  # for the whole verdict, shared by its tests
    confidence: Annotated[float, Field(gt=0.5, lt=1.0)] = 0.95  # of the shift's interval
    min_samples: Annotated[int, Field(ge=2)] = 20  # per arm, per metric
    min_attempts: Annotated[int, Field(ge=1)] = 20  # per arm, for the rates
    metrics: dict[str, MetricRule] = Field(default_factory=dict)  # merged over DEFAULT_METRICS
    default_metric: MetricRule = MetricRule()  # for a metric named nowhere
    failure_rate: RateRule = RateRule(material_increase=0.02, budget=0.01)
    disruption_rate: RateRule = RateRule(material_increase=0.05)

    source: str = Field(default="defaults", exclude=True)

    def rule(self, metric: str) -> MetricRule:
        return self.metrics.get(metric) or DEFAULT_METRICS.get(metric) or self.default_metric


def parse_config(document: object, source: str) -> JudgeConfig:
    config = validate(JudgeConfig, document, source, "judge configuration", empty=True)
    return config.model_copy(update={"source": source})


def load_config(path: str | Path | None) -> JudgeConfig:
    if path is None:
        return JudgeConfig()
    path = Path(path)
    return parse_config(read_yaml(path, "judge configuration"), str(path))


# ---------------------------------------------------------------------------------------------- arms


@dataclass(frozen=True)
class Arm:
    samples: Mapping[str, Sequence[float]] = field(default_factory=dict)
    outcomes: Mapping[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> int:
        return int(self.outcomes.get(outcome, 0))

    @property
    def failures(self) -> int:
        return self.count("fail") + self.count("timeout")

    @property
    def attempts(self) -> int:
        """Attempts that tell about the platform: neither disrupted (retried) nor the canary's own infra error."""
        return self.count("ok") + self.failures

    def to_file(self) -> JSONObject:
        return {"samples": {k: list(v) for k, v in self.samples.items()},
                "outcomes": {k: self.count(k) for k in OUTCOMES}}


def arm_of(rows: Iterable[CanaryResult]) -> Arm:
    """The arm of some canary results: the samples of the ok ones (``JUDGED``), and every outcome."""
    samples: dict[str, list[float]] = {metric: [] for metric in JUDGED}
    outcomes: Counter[str] = Counter()
    for r in rows:
        outcomes[r.outcome] += 1
        if r.ok:
            for metric in JUDGED:
                samples[metric] += r.samples(metric)
    return Arm(samples, dict(outcomes))


def parse_arm(document: object, source: str) -> Arm:
    """An arm from the documented shape ``{"samples": {metric: [numbers]}, "outcomes": {outcome: n}}``."""
    if not isinstance(document, dict):
        raise PlatformError('expected {"samples": {...}, "outcomes": {...}}', file=source)
    unknown = set(document) - {"samples", "outcomes"}
    if unknown:
        raise PlatformError("unknown field (a sample file has samples and outcomes)", file=source, field=sorted(unknown)[0])
    samples = document.get("samples", {})
    if not isinstance(samples, dict):
        raise PlatformError("must map each metric to a list of numbers", file=source, field="samples")
    out: dict[str, list[float]] = {}
    for metric, values in samples.items():
        if not isinstance(values, list):
            raise PlatformError("must be a list of numbers", file=source, field=f"samples.{metric}")
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise PlatformError(f"{v!r} is not a finite number", file=source, field=f"samples.{metric}[{i}]")
        out[str(metric)] = [float(v) for v in values]
    outcomes = document.get("outcomes", {})
    if not isinstance(outcomes, dict):
        raise PlatformError(f"must map outcomes ({', '.join(OUTCOMES)}) to counts", file=source, field="outcomes")
    counts: dict[str, int] = {}
    for key, n in outcomes.items():
        if key not in OUTCOMES:
            raise PlatformError(f"unknown outcome (outcomes: {', '.join(OUTCOMES)})", file=source, field=f"outcomes.{key}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise PlatformError(f"{n!r} is not a count", file=source, field=f"outcomes.{key}")
        counts[key] = n
    return Arm(out, counts)


def load_arm(path: str | Path) -> Arm:
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise PlatformError("sample file not found", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlatformError(f"cannot read the sample file ({type(exc).__name__})", file=str(path)) from None
    except ValueError as exc:
        raise PlatformError(f"not valid JSON ({exc})", file=str(path)) from None
    except RecursionError:
        raise PlatformError(TOO_DEEP, file=str(path)) from None
    try:
        return parse_arm(document, str(path))
    except RecursionError:
        raise PlatformError(TOO_DEEP, file=str(path)) from None


# ---------------------------------------------------------------------------------------------- statistics


def _kth_difference(x_sorted: np.ndarray, y: np.ndarray, k: int) -> float:
    """The k-th smallest (1-based) of the m x n differences ``y_j - x_i``, without making them: bisection on
    the value, counting the differences at or below it with a binary search per ``y_j``."""
    m = len(x_sorted)
    lo = float(y.min() - x_sorted[-1])
    hi = float(y.max() - x_sorted[0])
    for _ in range(200):
        if hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi)):
            break
        mid = (lo + hi) / 2
        at_or_below = int((m - np.searchsorted(x_sorted, y - mid, side="left")).sum())
        if at_or_below >= k:
            hi = mid
        else:
            lo = mid
    return hi


def hodges_lehmann(baseline: Sequence[float], experiment: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """The Hodges-Lehmann shift of ``experiment`` over ``baseline`` (the median of all pairwise differences) and
    its distribution-free confidence interval (the order statistics of the differences that Mann-Whitney's
    distribution picks, normal approximation, as in Hollander & Wolfe)."""
    x = np.sort(np.asarray(baseline, dtype=float))
    y = np.asarray(experiment, dtype=float)
    m, n = len(x), len(y)
    total = m * n
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    c = int(math.floor(total / 2 - z * math.sqrt(total * (m + n + 1) / 12)))
    c = min(max(c, 1), total)
    ranks = [c, total - c + 1, (total + 1) // 2, total // 2 + 1]
    if total <= EXACT_PAIRS:
        diffs = np.subtract.outer(y, x).ravel()
        picked = np.partition(diffs, sorted({r - 1 for r in ranks}))
        lower, upper, mid_a, mid_b = (float(picked[r - 1]) for r in ranks)
    else:
        lower, upper, mid_a, mid_b = (_kth_difference(x, y, r) for r in ranks)
    return (mid_a + mid_b) / 2, lower, upper


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def newcombe(k_e: int, n_e: int, k_b: int, n_b: int, confidence: float) -> tuple[float, float]:
    """Newcombe's hybrid score interval for ``p_e - p_b`` (method 10 of Newcombe 1998), from Wilson intervals."""
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p_e, p_b = k_e / n_e, k_b / n_b
    l_e, u_e = _wilson(k_e, n_e, z)
    l_b, u_b = _wilson(k_b, n_b, z)
    d = p_e - p_b
    return (d - math.sqrt((p_e - l_e) ** 2 + (u_b - p_b) ** 2), d + math.sqrt((u_e - p_e) ** 2 + (p_b - l_b) ** 2))


# ---------------------------------------------------------------------------------------------- the judge


Word = Literal["pass", "fail", "inconclusive"]  # a verdict, of a metric, an arm, a canary, a stage


@dataclass(frozen=True)
class SampleSummary:
    """An arm's samples of a metric, as a verdict shows them: how many, their median and p99 (None when none)."""

    n: int
    median: float | None = None
    p99: float | None = None

    def to_dict(self) -> JSONObject:
        return {"n": self.n, "median": self.median, "p99": self.p99}


@dataclass(frozen=True)
class RateSummary:
    """An arm's attempts for a rate (failures, disruptions), as a verdict shows them: how many, how many of them were
    the event, and its rate (None without attempts)."""

    n: int
    events: int
    rate: float | None

    def to_dict(self) -> JSONObject:
        return {"n": self.n, "events": self.events, "rate": self.rate}


Summary = SampleSummary | RateSummary


@dataclass
class MetricVerdict:
    name: str
    verdict: Word
    reason: str
    baseline: Summary | None  # None: judged against its objectives alone (``{}`` in its JSON)
    experiment: Summary
    u_statistic: float | None = None
    p_value: float | None = None
    shift: float | None = None
    shift_ci: list[float] | None = None
    threshold: dict[str, float | str | None] = field(default_factory=dict)  # the rule, alpha, the minimum, the material

    def to_dict(self) -> JSONObject:
        return {"verdict": self.verdict, "reason": self.reason,
                "baseline": self.baseline.to_dict() if self.baseline is not None else {},
                "experiment": self.experiment.to_dict(), "u_statistic": self.u_statistic, "p_value": self.p_value,
                "shift": self.shift, "shift_ci": self.shift_ci, "threshold": self.threshold}

    @property
    def medians(self) -> tuple[float, float] | None:
        """The baseline's median and the experiment's, when both arms hold samples of the metric."""
        b, e = self.baseline, self.experiment
        if isinstance(b, SampleSummary) and isinstance(e, SampleSummary) and b.median is not None and e.median is not None:
            return b.median, e.median
        return None


@dataclass
class Judgement:
    verdict: Word
    reason: str
    metrics: dict[str, MetricVerdict]
    alpha_per_test: float

    def to_dict(self) -> JSONObject:
        return {"verdict": self.verdict, "reason": self.reason, "alpha_per_test": self.alpha_per_test,
                "metrics": {name: m.to_dict() for name, m in self.metrics.items()}}


def _summary(values: Sequence[float]) -> SampleSummary:
    if not len(values):
        return SampleSummary(0)
    a = np.asarray(values, dtype=float)
    return SampleSummary(int(a.size), float(np.median(a)), float(np.percentile(a, 99)))


def _rate(events: int, n: int) -> RateSummary:
    return RateSummary(n, events, events / n if n else None)


def _number(x: float) -> str:
    return f"{x:.3g}"


def _too_little(b: Summary, e: Summary, minimum: int, what: str, key: str) -> str:
    """Why the arms hold too little to judge ("" when they hold enough)."""
    short = [f"{arm} has {s.n}" for arm, s in (("baseline", b), ("experiment", e)) if s.n < minimum]
    return f"too little data: {', '.join(short)} {what}, fewer than {key} {minimum}" if short else ""


def _judge_metric(name: str, baseline: Sequence[float], experiment: Sequence[float], config: JudgeConfig,
                  alpha: float) -> MetricVerdict:
    rule = config.rule(name)
    b, e = _summary(baseline), _summary(experiment)
    out = MetricVerdict(name, "inconclusive", "", b, e,
                        threshold={"direction": rule.direction, "material_relative": rule.material_relative,
                                   "material_absolute": rule.material_absolute, "objective_p99": rule.objective_p99,
                                   "alpha": alpha, "min_samples": config.min_samples})
    empty = [arm for arm, s in (("baseline", b), ("experiment", e)) if s.n == 0]
    if empty:
        out.reason = f"no data in the {' and '.join(empty)} arm{'s' if len(empty) > 1 else ''}: nothing to judge, never a pass"
        return out
    assert b.median is not None and e.p99 is not None  # both arms hold samples
    out.reason = _too_little(b, e, config.min_samples, "samples", "minSamples")
    if out.reason:
        return out
    worse = "greater" if rule.direction == "increase" else "less"
    test = _stats().mannwhitneyu(experiment, baseline, alternative=worse)
    shift, lower, upper = hodges_lehmann(baseline, experiment, config.confidence)
    material = max(rule.material_relative * abs(b.median), rule.material_absolute)
    signed = shift if rule.direction == "increase" else -shift
    out.u_statistic, out.p_value = float(test.statistic), float(test.pvalue)
    out.shift, out.shift_ci = shift, [lower, upper]
    out.threshold["material"] = material
    # A regression must show in the shift's interval as well as in the rank test: with ties (durations in whole
    # seconds, as the API's timestamps are) the test can be significant while the interval still holds no change,
    # as Kayenta's Mann-Whitney classifier, which calls a metric high only once the interval's lower bound clears it.
    clear = lower > 0 if rule.direction == "increase" else upper < 0
    significant = out.p_value < alpha and clear
    said = (f"shift {_number(shift)} ({int(config.confidence * 100)}% CI {_number(lower)} to {_number(upper)}), "
            f"p={out.p_value:.2g}")
    objective = rule.objective_p99
    if objective is not None and e.p99 > objective:
        out.verdict = "fail"
        out.reason = f"the experiment's p99 {_number(e.p99)} is over its objective {_number(objective)}; {said}"
    elif significant and signed > material:
        out.verdict = "fail"
        out.reason = (f"worse by {_number(abs(shift))}, significant (p={out.p_value:.2g} < {alpha:.2g}) and material "
                      f"(over {_number(material)}); {int(config.confidence * 100)}% CI {_number(lower)} to {_number(upper)}")
    elif significant:
        out.verdict = "pass"
        out.reason = f"a significant shift of {_number(shift)}, but under the material {_number(material)}: {said}"
    elif out.p_value < alpha:
        out.verdict = "pass"
        out.reason = (f"no {rule.direction} the interval is sure of: {said} < alpha {alpha:.2g}, but the interval "
                      f"holds no change")
    else:
        out.verdict = "pass"
        out.reason = f"no significant {rule.direction} ({said}; alpha {alpha:.2g})"
    return out


def _judge_rate(name: str, k_b: int, n_b: int, k_e: int, n_e: int, rule: RateRule, config: JudgeConfig,
                alpha: float) -> MetricVerdict:
    b, e = _rate(k_b, n_b), _rate(k_e, n_e)
    out = MetricVerdict(name, "inconclusive", "", b, e, threshold={"material_increase": rule.material_increase,
                                                                   "budget": rule.budget, "alpha": alpha,
                                                                   "min_attempts": config.min_attempts})
    short = _too_little(b, e, config.min_attempts, "attempts", "minAttempts")
    if n_e == 0:
        out.reason = short
        return out
    # Fisher's and the binomial test are exact at any size: a significant regression on few attempts is a
    # fail (a broken image is caught on its first attempts), but a pass needs minAttempts in each arm.
    said = f"{k_e}/{n_e} against the baseline's {k_b}/{n_b}"
    if n_b:
        test = _stats().fisher_exact([[k_e, n_e - k_e], [k_b, n_b - k_b]], alternative="greater")
        shift = k_e / n_e - k_b / n_b
        lower, upper = newcombe(k_e, n_e, k_b, n_b, config.confidence)
        out.u_statistic, out.p_value = None, float(test.pvalue)
        out.shift, out.shift_ci = shift, [lower, upper]
        said = f"{k_e}/{n_e} against {k_b}/{n_b}, difference {shift:+.2%} ({int(config.confidence * 100)}% CI {lower:+.2%} to {upper:+.2%})"
    if rule.budget is not None:
        over = _stats().binomtest(k_e, n_e, rule.budget, alternative="greater")
        out.threshold["budget_p_value"] = float(over.pvalue)
        if over.pvalue < alpha:
            out.verdict = "fail"
            out.reason = f"{k_e / n_e:.2%} is significantly over its budget {rule.budget:.2%} (p={over.pvalue:.2g}); {said}"
            return out
    if out.p_value is None:
        out.reason = short
    elif out.p_value < alpha and (out.shift or 0.0) > rule.material_increase:
        out.verdict = "fail"
        out.reason = f"significantly higher (Fisher p={out.p_value:.2g}) by more than {rule.material_increase:.2%}: {said}"
    elif short:
        out.reason = f"{short} ({said})"
    elif out.p_value < alpha:
        out.verdict = "pass"
        out.reason = f"significantly higher (p={out.p_value:.2g}) but under the material {rule.material_increase:.2%}: {said}"
    else:
        out.verdict = "pass"
        out.reason = f"not significantly higher (p={out.p_value:.2g}): {said}"
    return out


def judge(baseline: Arm, experiment: Arm, config: JudgeConfig | None = None) -> Judgement:
    config = config or JudgeConfig()
    names = sorted(set(baseline.samples) | set(experiment.samples) | {"pod_startup_seconds"})
    tests = len(names) + 2 + (config.failure_rate.budget is not None)
    alpha = config.alpha / tests  # Bonferroni: the whole verdict's false-fail rate stays under alpha
    metrics = {name: _judge_metric(name, baseline.samples.get(name, ()), experiment.samples.get(name, ()), config, alpha)
               for name in names}
    metrics["failure_rate"] = _judge_rate("failure_rate", baseline.failures, baseline.attempts, experiment.failures,
                                          experiment.attempts, config.failure_rate, config, alpha)
    disrupted_b, disrupted_e = baseline.count("disrupted"), experiment.count("disrupted")
    metrics["disruption_rate"] = _judge_rate("disruption_rate", disrupted_b, baseline.attempts + disrupted_b, disrupted_e,
                                             experiment.attempts + disrupted_e, config.disruption_rate, config, alpha)
    failed = [m for m in metrics.values() if m.verdict == "fail"]
    unsure = [m for m in metrics.values() if m.verdict == "inconclusive"]
    verdict: Word
    if failed:
        verdict, reason = "fail", "; ".join(f"{m.name}: {m.reason}" for m in failed)
    elif unsure:
        verdict, reason = "inconclusive", "; ".join(f"{m.name}: {m.reason}" for m in unsure)
    else:
        verdict, reason = "pass", f"no significant and material regression in {len(metrics)} metrics"
    return Judgement(verdict, reason, metrics, alpha)


def has_evidence(arm: Arm, config: JudgeConfig) -> bool:
    """Whether ``arm`` holds what a pass needs: ``minAttempts`` attempts and ``minSamples`` of every metric it has."""
    return arm.attempts >= config.min_attempts and bool(arm.samples) and \
        all(len(values) >= config.min_samples for values in arm.samples.values())


def judge_objectives(experiment: Arm, config: JudgeConfig | None = None) -> Judgement:
    """One arm against its objectives alone, for when there is no baseline to compare with: the failure rate against
    its budget (an exact binomial test) and each metric's p99 against its objective. A metric with neither is not
    judged (and said so); a pass still needs the minimum evidence, a fail does not (a significant overrun of the
    budget on few attempts is a fail)."""
    config = config or JudgeConfig()
    names = sorted(set(experiment.samples) | {"pod_startup_seconds"})
    objectives = [n for n in names if config.rule(n).objective_p99 is not None]
    budget = config.failure_rate.budget
    alpha = config.alpha / max(1, len(objectives) + (budget is not None))
    metrics: dict[str, MetricVerdict] = {}
    for name in objectives:
        objective = float(config.rule(name).objective_p99 or 0.0)
        e = _summary(experiment.samples.get(name, ()))
        out = MetricVerdict(name, "inconclusive", "", None, e, threshold={"objective_p99": objective,
                                                                           "min_samples": config.min_samples})
        if e.n < config.min_samples or e.p99 is None:
            out.reason = f"too little data: {e.n} samples, fewer than minSamples {config.min_samples}"
        elif e.p99 > objective:
            out.verdict, out.reason = "fail", f"p99 {_number(e.p99)} is over its objective {_number(objective)}"
        else:
            out.verdict, out.reason = "pass", f"p99 {_number(e.p99)} within its objective {_number(objective)}"
        metrics[name] = out
    if budget is not None:
        k, n = experiment.failures, experiment.attempts
        out = MetricVerdict("failure_rate", "inconclusive", "", None, _rate(k, n),
                            threshold={"budget": budget, "alpha": alpha, "min_attempts": config.min_attempts})
        if n == 0:
            out.reason = "no attempts: nothing to judge, never a pass"
        else:
            over = _stats().binomtest(k, n, budget, alternative="greater")
            out.p_value = float(over.pvalue)
            if over.pvalue < alpha:
                out.verdict = "fail"
                out.reason = f"{k}/{n} failed, significantly over its budget {budget:.2%} (p={over.pvalue:.2g})"
            elif n < config.min_attempts:
                out.reason = f"too little data: {n} attempts, fewer than minAttempts {config.min_attempts} ({k} failed)"
            else:
                out.verdict = "pass"
                out.reason = f"{k}/{n} failed, within its budget {budget:.2%} (p={over.pvalue:.2g})"
        metrics["failure_rate"] = out
    if not metrics:
        return Judgement("inconclusive", "no objective and no budget configured: nothing to judge one arm by, never a pass",
                       metrics, alpha)
    failed = [m for m in metrics.values() if m.verdict == "fail"]
    unsure = [m for m in metrics.values() if m.verdict == "inconclusive"]
    if failed:
        return Judgement("fail", "; ".join(f"{m.name}: {m.reason}" for m in failed), metrics, alpha)
    if unsure:
        return Judgement("inconclusive", "; ".join(f"{m.name}: {m.reason}" for m in unsure), metrics, alpha)
    return Judgement("pass", "within its objectives: " + "; ".join(f"{m.name}: {m.reason}" for m in metrics.values()),
                   metrics, alpha)


def _stats() -> ModuleType:
    """scipy.stats, imported when a judgement needs it: a second or more of every process's start otherwise (a tick or
    a status that judges nothing)."""
    return importlib.import_module("scipy.stats")
