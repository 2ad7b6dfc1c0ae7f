"""The stage's canary verdict over stored results: this window against the one before, or each image's arm
against a baseline image's (mid-rotation, the new image against the old); the rotation's canary gate; and the
soak's verdict, which the release pipeline asks before it promotes a candidate. All four are a ``Verdict``.
It judges; it runs nothing.

Arms are compared canary by canary (a Deployment's check time is not a node-pool pod's, and the mix of
canaries differs between images), and the canaries share the verdict's alpha (Bonferroni again), so
identical arms still fail at most ``alpha`` of the time however many canaries there are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from e2e_canary.definitions import IMAGE_ARM_KINDS
from e2e_canary.judge import JudgeConfig, Judgement, Word, arm_of, has_evidence, judge, judge_objectives
from e2e_canary.results import CanaryResult, results, streams_of, within
from platformctl.kernel.humanize import human_duration
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.state import StateStore

# What a verdict counted: an arm's results; each image's (``baseline`` and one per image); each canary's
# (``baseline`` and ``experiment``); a soak's image arm (the same two).
Counts = int | dict[str, int] | dict[str, dict[str, int]]


@dataclass(frozen=True)
class Failure:
    """A reason results were not ok, and how many said it."""

    reason: str
    count: int

    def to_dict(self) -> JSONObject:
        return {"reason": self.reason, "count": self.count}


@dataclass(frozen=True)
class Span:
    """The evidence window one canary was judged over, and against what."""

    seconds: float
    fixed: bool  # its definition's ``evidenceWindow``, not worked out from its evidence
    against: str  # the window before, or its objectives


@dataclass(frozen=True)
class CanaryVerdict:
    """One canary's verdict: the judge's, its commonest failures and (over its own evidence window) that window."""

    judged: Judgement
    failures: list[Failure]
    span: Span | None = None

    @property
    def verdict(self) -> Word:
        return self.judged.verdict

    @property
    def reason(self) -> str:
        return self.judged.reason

    def to_dict(self) -> JSONObject:
        span: JSONObject = {"window_seconds": self.span.seconds, "window": human_duration(self.span.seconds),
                      "window_fixed": self.span.fixed, "baseline": self.span.against} if self.span else {}
        return {**self.judged.to_dict(), **span, "failures": [f.to_dict() for f in self.failures]}


@dataclass
class ImageComparison:
    """The soak's new images against the images of the last good candidate they replace."""

    baseline: str | None  # the last good candidate
    replaced: dict[str, str]  # new image -> the image it replaces
    baseline_until: float  # the replaced images' results from before this
    arms: dict[str, Verdict] = field(default_factory=dict)
    not_compared: list[str] = field(default_factory=list)
    verdict: Word | None = None
    reason: str | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"baseline": self.baseline, "replaced": self.replaced, "baseline_until": self.baseline_until,
                     "arms": {image: arm.to_dict() for image, arm in self.arms.items()}}
        if self.not_compared:
            out["not_compared"] = self.not_compared
        if self.verdict is not None:
            out["verdict"] = self.verdict
        if self.reason is not None:
            out["reason"] = self.reason
        return out


@dataclass
class Verdict:
    """The one canary verdict: a stage's window, images against a baseline image, a rotation's gate, a soak. Its JSON
    (``to_dict``) holds what was set: ``verdict`` and ``reason`` always, then ``canaries`` (each canary's verdict),
    ``arms`` (each image's), the windows, what was counted and what it was judged against."""

    verdict: Word
    reason: str
    canaries: dict[str, CanaryVerdict] | None = None
    arms: dict[str, Verdict] | None = None
    window_seconds: float | None = None
    evidence_window_seconds: float | None = None
    results: Counts | None = None
    baseline: str | None = None  # the image (or what) the experiment was judged against
    experiment: str | None = None  # what the experiment was
    against: str | None = None  # a soak's image arm: the image it replaces
    baseline_results: int | None = None  # a rotation's gate: results of the images replaced
    images: ImageComparison | None = None  # a soak: the new images against the last good candidate's
    at: float | None = None  # when it was taken (the clusters' time)
    state: str | None = None  # the store it read
    stage: str | None = None
    results_since: int | None = None  # a soak: the results since its rotation ended

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"verdict": self.verdict, "reason": self.reason}
        for name in ("stage", "state", "at", "baseline", "experiment", "against", "window_seconds",
                     "evidence_window_seconds", "results", "baseline_results", "results_since"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.canaries is not None:
            out["canaries"] = {name: c.to_dict() for name, c in self.canaries.items()}
        if self.arms is not None:
            out["arms"] = {image: arm.to_dict() for image, arm in self.arms.items()}
        if self.images is not None:
            out["images"] = self.images.to_dict()
        return out


class Question(Protocol):
    """What the rotation's canary gate asks (``upgrade_service.running.gate.Question``)."""

    @property
    def cluster(self) -> str: ...
    @property
    def stage(self) -> str: ...
    @property
    def now(self) -> float: ...
    @property
    def targets(self) -> Mapping[str, str]: ...
    @property
    def present(self) -> Collection[str]: ...
    @property
    def min_results(self) -> int: ...
    @property
    def proven(self) -> bool: ...


ORDER = {"fail": 2, "inconclusive": 1, "pass": 0}
EVIDENCE_STEPS = 12  # a canary's evidence window is at most this many verdict windows (6 h of 30 m)


def failures(rows: Sequence[CanaryResult], limit: int = 3) -> list[Failure]:
    """The commonest reasons among the results that were not ok, with how many said each: what a person reads
    first under a failing verdict (the kubelet's ``CreateContainerError``, a CronJob that never fired)."""
    said = Counter(r.reason or r.outcome for r in rows if not r.ok)
    return [Failure(reason, count) for reason, count in said.most_common(limit)]


def _with_failures(reason: str, worst: str, canaries: Mapping[str, CanaryVerdict]) -> str:
    """A failing or inconclusive verdict's reason, with the commonest failed result: the worst canary's own, else
    the commonest of any canary's (a slower check beside pods that cannot start names the pods)."""
    mine = canaries[worst].failures
    if mine:
        return f"{reason}; its commonest failed result ({mine[0].count}x): {mine[0].reason}"
    other = max(((name, f) for name, c in canaries.items() for f in c.failures), key=lambda nf: nf[1].count, default=None)
    return f"{reason}; canary {other[0]}'s commonest failed result ({other[1].count}x): {other[1].reason}" \
        if other else reason


def _worst(verdicts: Mapping[str, CanaryVerdict | Verdict]) -> str:
    """The name of the worst of some verdicts (the first of the worst, in their order)."""
    return max(verdicts, key=lambda name: ORDER[verdicts[name].verdict])


def _of(rows: Sequence[CanaryResult], canary: str) -> list[CanaryResult]:
    return [r for r in rows if r.canary == canary]


def judge_canaries(baseline: Sequence[CanaryResult], experiment: Sequence[CanaryResult],
                   config: JudgeConfig | None = None, deciding: Collection[str] = ()) -> Verdict:
    """Each canary's results in one arm against its results in the other; the worst verdict, with its reason.

    With ``deciding`` (canary kinds), canaries of those kinds decide between pass and inconclusive, and any
    other canary can only fail the verdict: an image's arms are the node-pool canary's to measure (enough pods
    per window, by design), while a DaemonSet's one pod per node still fails an image it cannot start on.
    Without canaries of those kinds in the arms, every canary decides."""
    config = config or JudgeConfig()
    names = sorted({r.canary for r in (*baseline, *experiment)})
    if not names:
        return Verdict("inconclusive", "no canary results in either arm: nothing to judge, never a pass", canaries={})
    shared = config.model_copy(update={"alpha": config.alpha / len(names)})
    canaries = {name: CanaryVerdict(judge(arm_of(_of(baseline, name)), arm_of(_of(experiment, name)), shared),
                                    failures(_of(experiment, name))) for name in names}
    kinds = {r.canary: r.canary_kind for r in (*baseline, *experiment)}
    deciders = {n for n in names if kinds.get(n) in deciding} or set(names)
    counted = {n: v for n, v in canaries.items() if n in deciders or v.verdict == "fail"}
    worst_name = _worst(counted)
    worst = counted[worst_name]
    if worst.verdict == "pass":
        reason = f"no significant and material regression in {len(counted)} canar{'ies' if len(counted) > 1 else 'y'}"
        short = sorted(n for n in names if n not in counted and canaries[n].verdict == "inconclusive")
        if short:
            reason += f" ({', '.join(short)}: too little data to decide, none to fail it)"
    else:
        reason = _with_failures(f"canary {worst_name}: {worst.reason}", worst_name, canaries)
    return Verdict(worst.verdict, reason, canaries=canaries)


def evidence_window(rows: Sequence[CanaryResult], now: float, window: float, config: JudgeConfig,
                    fixed: float | None = None) -> float:
    """How far back one canary's verdict looks: the shortest whole number of ``window`` s whose newest span holds
    the canary's minimum evidence (``minAttempts``, ``minSamples``), up to ``EVIDENCE_STEPS`` of them; or what its
    definition fixes (``evidenceWindow``). A canary every 10 minutes on one cluster needs 200 minutes for 20
    attempts: judged over 30 minutes, it could never pass."""
    if fixed:
        return fixed
    for step in range(1, EVIDENCE_STEPS + 1):
        if has_evidence(arm_of(within(rows, now - step * window, now)), config):
            return step * window
    return EVIDENCE_STEPS * window


def canary_verdicts(rows: Sequence[CanaryResult], now: float, window: float,
                    config: JudgeConfig | None = None) -> Verdict:
    """Each canary over its own evidence window, against the same span before it when that span holds the minimum
    evidence too, else against its objectives alone (a fresh stage has no before); the worst verdict, with why.
    The canaries share the verdict's alpha. ``rows`` must reach back ``2 * EVIDENCE_STEPS * window``."""
    config = config or JudgeConfig()
    names = sorted({r.canary for r in within(rows, now - EVIDENCE_STEPS * window, now)})
    if not names:
        return Verdict("inconclusive", f"no canary result in the last {human_duration(EVIDENCE_STEPS * window)}: "
                       "nothing to judge, never a pass", canaries={}, window_seconds=window, results={})
    shared = config.model_copy(update={"alpha": config.alpha / len(names)})
    canaries: dict[str, CanaryVerdict] = {}
    counts: dict[str, dict[str, int]] = {}
    for name in names:
        mine = _of(rows, name)
        fixed = next((float(r.evidence_window) for r in reversed(mine) if r.evidence_window), None)
        span = evidence_window(mine, now, window, config, fixed)
        current = within(mine, now - span, now)
        before = within(mine, now - 2 * span, now - span, open_end=True)
        if has_evidence(arm_of(before), config):
            judged, against = judge(arm_of(before), arm_of(current), shared), "the window before"
        else:
            judged = judge_objectives(arm_of(current), shared)
            against = "its objectives (the window before holds too little to compare with)"
        canaries[name] = CanaryVerdict(judged, failures(current), Span(span, fixed is not None, against))
        counts[name] = {"baseline": len(before) if against == "the window before" else 0, "experiment": len(current)}
    worst_name = _worst(canaries)
    worst = canaries[worst_name]
    spans = {n: c.span for n, c in canaries.items() if c.span is not None}
    if worst.verdict == "pass":
        reason = f"no significant and material regression in {len(names)} canar{'ies' if len(names) > 1 else 'y'}, " + \
            ", ".join(f"{n} over {human_duration(s.seconds)}" for n, s in spans.items())
    else:
        reason = _with_failures(f"canary {worst_name} over {human_duration(spans[worst_name].seconds)} against "
                                f"{spans[worst_name].against}: {worst.reason}", worst_name, canaries)
    return Verdict(worst.verdict, reason, canaries=canaries, window_seconds=window,
                   evidence_window_seconds=max(s.seconds for s in spans.values()), results=counts)


def stage_verdict(rows: Sequence[CanaryResult], now: float, window: float, baseline: str | None = None,
                  config: JudgeConfig | None = None) -> Verdict:
    """The stage's verdict: each canary over its evidence window (``canary_verdicts``), or with ``baseline`` (an
    image) every other image's results in ``window`` judged against that image's, canary by canary."""
    if baseline is None:
        verdict = canary_verdicts(rows, now, window, config)
        verdict.baseline, verdict.experiment = "the window before, else the objectives", "each canary's evidence window"
        return verdict
    by_image: dict[str, list[CanaryResult]] = {}
    for r in within(rows, now - window, now):
        if r.image:
            by_image.setdefault(r.image, []).append(r)
    base = by_image.pop(baseline, [])
    if not by_image:
        return Verdict("inconclusive", f"no image other than {baseline} has results in the window", baseline=baseline,
                       arms={}, window_seconds=window)
    arms = {image: judge_canaries(base, rows_of, config, IMAGE_ARM_KINDS) for image, rows_of in sorted(by_image.items())}
    worst = _worst(arms)
    word = arms[worst].verdict
    reason = f"image {worst} against {baseline}: {arms[worst].reason}" if word != "pass" else \
        f"every image passes against {baseline}: " + "; ".join(f"{image}: {arm.reason}" for image, arm in arms.items())
    return Verdict(word, reason, baseline=baseline, arms=arms, window_seconds=window,
                   results={"baseline": len(base), **{image: len(r) for image, r in by_image.items()}})


def rotation_verdict(rows: Sequence[CanaryResult], now: float, window: float, cluster: str, targets: Mapping[str, str],
                     present: Collection[str], config: JudgeConfig | None = None, min_results: int = 0,
                     proven: bool = False) -> Verdict:
    """The canary health gate of one cluster's rotation, before its next wave: may more nodes boot the target images?

    ``rows``: the cluster's canary results; ``targets``: pool -> the image the rotation moves it onto;
    ``present``: the images nodes of the cluster boot now. Each target image that nodes already boot is
    judged, its node-pool arm against every other image's (the ones it replaces, side by side in the same
    pools), over the window. Before any node boots one (the first wave), the stage's canaries are checked
    against their failure budget instead. No results, or a target image on nodes with none of its own yet,
    is ``inconclusive``: a gate that cannot tell does not let a wave through. With ``min_results`` (first light), a
    target image with fewer results than that in any pool it targets is ``inconclusive`` unless they fail it already;
    with ``proven`` (images that passed first light in an earlier stage), an image whose every pool holds results and
    none of them failed passes on them, where the judge would want more to decide: one canary period will do.
    """
    current = within(rows, now - window, now)
    span = f"the last {human_duration(window)}"
    if not current:
        return Verdict("inconclusive", f"no canary result for {cluster} in {span}: is `platformctl canary run` running "
                       "for it, with the same state store?", arms={}, window_seconds=window)
    new = set(targets.values())
    tried = sorted(new & set(present))
    old = [r for r in current if r.image and r.image not in new]
    if not tried:
        alone = arm_of(current)
        rate = judge(arm_of([]), alone, config).metrics["failure_rate"]  # the experiment alone: its budget
        n, failed = alone.attempts, alone.failures  # what the rate was judged on
        if rate.verdict == "fail":
            return Verdict("fail", f"no node boots a target image yet, and {cluster}'s canaries fail already: "
                           f"{rate.reason}", arms={}, window_seconds=window)
        if n < (config or JudgeConfig()).min_attempts:
            return Verdict("inconclusive", f"no node boots a target image yet; {cluster}'s canaries have {rate.reason}",
                           arms={}, window_seconds=window)
        return Verdict("pass", f"no node boots a target image yet; {cluster}'s canaries are within their failure budget "
                       f"({failed}/{n} failed in {span})", arms={}, window_seconds=window)
    arms: dict[str, Verdict] = {}
    for image in tried:
        mine = [r for r in current if r.image == image]
        if not mine:
            arms[image] = Verdict("inconclusive", f"nodes boot {image} but no canary result of it in {span} yet")
            continue
        arm = arms[image] = judge_canaries(old, mine, config, IMAGE_ARM_KINDS)
        arm.results = len(mine)
        counts = {pool: sum(1 for r in mine if r.pool == pool) for pool, target in sorted(targets.items())
                  if target == image}
        if proven and arm.verdict == "inconclusive" and all(counts.values()) and all(r.ok for r in mine):
            arm.verdict, arm.reason = "pass", (f"passed first light in an earlier stage; here its first {len(mine)} "
                                               f"canary results in {len(counts)} pool(s) all succeeded")
        short = [f"pool {pool}: {n}" for pool, n in counts.items() if n < (1 if proven else min_results)]
        if short and arm.verdict == "pass":  # first light: each pool's node judged on its own results
            arm.verdict, arm.reason = "inconclusive", (f"fewer canary results of {image} in {span} than the "
                                                       f"{1 if proven else min_results} a pool's first light needs "
                                                       f"({', '.join(short)})")
    worst_image = _worst(arms)
    worst = arms[worst_image]
    if worst.verdict == "pass":
        reason = f"{', '.join(tried)} pass against the images they replace ({len(old)} results of those in {span})"
    else:
        reason = f"target image {worst_image} against the images it replaces: {worst.reason}"
    return Verdict(worst.verdict, reason, arms=arms, baseline_results=len(old), window_seconds=window)


def canary_gate(store: StateStore, window: float, config: JudgeConfig | None = None) -> Callable[[Question], Verdict]:
    """The rotation executor's canary health gate over ``store``: asked with a question (``cluster``, ``now``,
    ``targets``, ``present``), it reads that cluster's results and answers ``rotation_verdict``."""

    def ask(question: Question) -> Verdict:
        since = question.now - window
        stages = [question.stage] if question.stage else sorted({s.stage for s in streams_of(store)
                                                                  if s.cluster == question.cluster})
        rows = [r for stage in stages for r in results(store, stage, since, question.now, cluster=question.cluster)]
        return rotation_verdict(rows, question.now, window, question.cluster, question.targets, question.present, config,
                                question.min_results, question.proven)

    return ask


def soak_verdict(store: StateStore, stage: str, since: float, now: float, window: int,
                 replaced: Mapping[str, str] | None = None, baseline: str | None = None,
                 entered: float | None = None, config: JudgeConfig | None = None) -> Verdict:
    """The soak's canary verdict, by ``config`` (the stage's judge; else the judge's defaults): the stage's results
    since its rotation ended (``since``; not the rotation's own turbulence, pods waiting for surge nodes, which the
    rotation's gate judged wave by wave), each canary over its evidence window; and, with ``replaced`` (new image ->
    the last good candidate's image of the same family, ``baseline`` that candidate), each new image's results since
    then against the replaced image's from before the candidate entered the stage (``entered``, else ``since``),
    where the replaced image's hold the minimum evidence. The worse decides, the judge's ``alpha`` shared among
    them: a regression against the last good images fails a stage its own window would pass. Reads the days the
    windows cover only: its cost does not grow with the history."""
    replaced = dict(replaced or {})
    config = config or JudgeConfig()
    config = config.model_copy(update={"alpha": config.alpha / (1 + len(replaced))})
    reach = 2 * EVIDENCE_STEPS * window
    rows = results(store, stage, since=max(since, now - reach), until=now)
    verdict = canary_verdicts(rows, now, float(window), config)
    verdict.at, verdict.state, verdict.results_since = now, store.location, len(rows)
    if not replaced:
        return verdict
    end = since if entered is None else min(entered, since)
    before = [r for r in results(store, stage, since=end - reach, until=end) if r.at < end]
    compared = ImageComparison(baseline, replaced, end)
    for image, old in sorted(replaced.items()):
        mine, theirs = [r for r in rows if r.image == image], [r for r in before if r.image == old]
        deciding = [r for r in theirs if r.canary_kind in IMAGE_ARM_KINDS]
        if not has_evidence(arm_of(deciding), config):  # nothing to compare with; a new image short of results is not
            compared.not_compared.append(f"{image} ({len(mine)} results since the rotation; {old}: {len(deciding)} "
                                         "node-pool results before)")  # skipped: inconclusive, never a pass on too little
            continue
        arm = compared.arms[image] = judge_canaries(theirs, mine, config, IMAGE_ARM_KINDS)
        arm.against, arm.results = old, {"baseline": len(theirs), "experiment": len(mine)}
    verdict.images = compared
    if not compared.arms:
        compared.reason = ("no new image could be compared with the image it replaces (too few results of that image "
                           "from before the candidate entered): the stage's window alone decides")
        return verdict
    image = _worst(compared.arms)
    worst = compared.arms[image]
    compared.verdict, compared.reason = worst.verdict, f"image {image} against {worst.against} of {baseline}: {worst.reason}"
    if ORDER[worst.verdict] > ORDER[verdict.verdict]:
        verdict.verdict, verdict.reason = worst.verdict, compared.reason
    elif verdict.verdict == "pass":  # both pass: say both
        verdict.reason = f"{verdict.reason}; every new image compared passes against the last good candidate {baseline}'s"
    return verdict
