"""The stage's canary verdict over stored results: this window against the one before, or each image's arm
against a baseline image's (mid-rotation, the new image against the old); the rotation's canary gate; and the
soak's verdict, which the release pipeline asks before it promotes a candidate.
It judges; it runs nothing.

Arms are compared canary by canary (a Deployment's check time is not a node-pool pod's, and the mix of
canaries differs between images), and the canaries share the verdict's alpha (Bonferroni again), so
identical arms still fail at most ``alpha`` of the time however many canaries there are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from e2e_canary.judge import JudgeConfig, has_evidence, judge, judge_objectives
from e2e_canary.runner import arm_of, results, streams_of
from platformctl.kernel.humanize import human_duration
from platformctl.kernel.state import StateStore

ORDER = {"fail": 2, "inconclusive": 1, "pass": 0}
EVIDENCE_STEPS = 12  # a canary's evidence window is at most this many verdict windows (6 h of 30 m)
IMAGE_ARMS = ("node-pool",)  # the canaries that measure images side by side: they decide an image's pass


def failures(rows: Sequence[dict[str, Any]], limit: int = 3) -> list[dict[str, Any]]:
    """The commonest reasons among the results that were not ok, with how many said each: what a person reads
    first under a failing verdict (the kubelet's ``CreateContainerError``, a CronJob that never fired)."""
    said = Counter(str(r.get("reason") or r["outcome"]) for r in rows if r["outcome"] != "ok")
    return [{"reason": reason, "count": count} for reason, count in said.most_common(limit)]


def _with_failures(reason: str, worst: str, canaries: Mapping[str, Mapping[str, Any]]) -> str:
    """A failing or inconclusive verdict's reason, with the commonest failed result: the worst canary's own, else
    the commonest of any canary's (a slower check beside pods that cannot start names the pods)."""
    mine = list(canaries[worst].get("failures") or [])
    if mine:
        return f"{reason}; its commonest failed result ({mine[0]['count']}x): {mine[0]['reason']}"
    other = max(((name, f) for name, c in canaries.items() for f in c.get("failures") or []),
                key=lambda nf: nf[1]["count"], default=None)
    return f"{reason}; canary {other[0]}'s commonest failed result ({other[1]['count']}x): {other[1]['reason']}" \
        if other else reason


def judge_canaries(baseline: Sequence[dict[str, Any]], experiment: Sequence[dict[str, Any]],
                   config: JudgeConfig | None = None, deciding: Collection[str] = ()) -> dict[str, Any]:
    """Each canary's results in one arm against its results in the other; the worst verdict, with its reason.

    With ``deciding`` (canary kinds), canaries of those kinds decide between pass and inconclusive, and any
    other canary can only fail the verdict: an image's arms are the node-pool canary's to measure (enough pods
    per window, by design), while a DaemonSet's one pod per node still fails an image it cannot start on.
    Without canaries of those kinds in the arms, every canary decides."""
    config = config or JudgeConfig()
    names = sorted({r["canary"] for r in (*baseline, *experiment)})
    if not names:
        return {"verdict": "inconclusive", "reason": "no canary results in either arm: nothing to judge, never a pass",
                "canaries": {}}
    shared = config.model_copy(update={"alpha": config.alpha / len(names)})
    canaries = {name: {**judge(arm_of([r for r in baseline if r["canary"] == name]),
                               arm_of([r for r in experiment if r["canary"] == name]), shared).to_dict(),
                       "failures": failures([r for r in experiment if r["canary"] == name])} for name in names}
    kinds = {r["canary"]: r.get("canary_kind") for r in (*baseline, *experiment)}
    deciders = {n for n in names if kinds.get(n) in deciding} or set(names)
    counted = {n: v for n, v in canaries.items() if n in deciders or v["verdict"] == "fail"}
    worst_name, worst = max(counted.items(), key=lambda kv: ORDER[kv[1]["verdict"]])
    if worst["verdict"] == "pass":
        reason = f"no significant and material regression in {len(counted)} canar{'ies' if len(counted) > 1 else 'y'}"
        short = sorted(n for n in names if n not in counted and canaries[n]["verdict"] == "inconclusive")
        if short:
            reason += f" ({', '.join(short)}: too little data to decide, none to fail it)"
    else:
        reason = _with_failures(f"canary {worst_name}: {worst['reason']}", worst_name, canaries)
    return {"verdict": worst["verdict"], "reason": reason, "canaries": canaries}


def evidence_window(rows: Sequence[dict[str, Any]], now: float, window: float, config: JudgeConfig,
                    fixed: float | None = None) -> float:
    """How far back one canary's verdict looks: the shortest whole number of ``window`` s whose newest span holds
    the canary's minimum evidence (``minAttempts``, ``minSamples``), up to ``EVIDENCE_STEPS`` of them; or what its
    definition fixes (``evidenceWindow``). A canary every 10 minutes on one cluster needs 200 minutes for 20
    attempts: judged over 30 minutes, it could never pass."""
    if fixed:
        return fixed
    for step in range(1, EVIDENCE_STEPS + 1):
        if has_evidence(arm_of([r for r in rows if now - step * window <= float(r["at"]) <= now]), config):
            return step * window
    return EVIDENCE_STEPS * window


def canary_verdicts(rows: Sequence[dict[str, Any]], now: float, window: float,
                    config: JudgeConfig | None = None) -> dict[str, Any]:
    """Each canary over its own evidence window, against the same span before it when that span holds the minimum
    evidence too, else against its objectives alone (a fresh stage has no before); the worst verdict, with why.
    The canaries share the verdict's alpha. ``rows`` must reach back ``2 * EVIDENCE_STEPS * window``."""
    config = config or JudgeConfig()
    names = sorted({r["canary"] for r in rows if now - EVIDENCE_STEPS * window <= float(r["at"]) <= now})
    if not names:
        return {"verdict": "inconclusive", "reason": f"no canary result in the last {human_duration(EVIDENCE_STEPS * window)}:"
                " nothing to judge, never a pass", "canaries": {}, "window_seconds": window, "results": {}}
    shared = config.model_copy(update={"alpha": config.alpha / len(names)})
    canaries: dict[str, dict[str, Any]] = {}
    counts: dict[str, dict[str, int]] = {}
    for name in names:
        mine = [r for r in rows if r["canary"] == name]
        fixed = next((float(r["evidence_window"]) for r in reversed(mine) if r.get("evidence_window")), None)
        span = evidence_window(mine, now, window, config, fixed)
        current = [r for r in mine if now - span <= float(r["at"]) <= now]
        before = [r for r in mine if now - 2 * span <= float(r["at"]) < now - span]
        if has_evidence(arm_of(before), config):
            judged, against = judge(arm_of(before), arm_of(current), shared), "the window before"
        else:
            judged = judge_objectives(arm_of(current), shared)
            against = "its objectives (the window before holds too little to compare with)"
        canaries[name] = {**judged.to_dict(), "window_seconds": span, "window": human_duration(span),
                          "window_fixed": fixed is not None, "baseline": against, "failures": failures(current)}
        counts[name] = {"baseline": len(before) if against == "the window before" else 0, "experiment": len(current)}
    worst_name, worst = max(canaries.items(), key=lambda kv: ORDER[kv[1]["verdict"]])
    if worst["verdict"] == "pass":
        reason = f"no significant and material regression in {len(names)} canar{'ies' if len(names) > 1 else 'y'}, " + \
            ", ".join(f"{n} over {c['window']}" for n, c in canaries.items())
    else:
        reason = _with_failures(f"canary {worst_name} over {worst['window']} against {worst['baseline']}: "
                                f"{worst['reason']}", worst_name, canaries)
    return {"verdict": worst["verdict"], "reason": reason, "canaries": canaries, "window_seconds": window,
            "evidence_window_seconds": max(c["window_seconds"] for c in canaries.values()), "results": counts}


def stage_verdict(rows: Sequence[dict[str, Any]], now: float, window: float, baseline: str | None = None,
                  config: JudgeConfig | None = None) -> dict[str, Any]:
    """The stage's verdict: each canary over its evidence window (``canary_verdicts``), or with ``baseline`` (an
    image) every other image's results in ``window`` judged against that image's, canary by canary."""
    if baseline is None:
        return {**canary_verdicts(rows, now, window, config), "baseline": "the window before, else the objectives",
                "experiment": "each canary's evidence window"}
    current = [r for r in rows if now - window <= float(r["at"]) <= now]
    by_image: dict[str, list[dict[str, Any]]] = {}
    for r in current:
        if r.get("image"):
            by_image.setdefault(r["image"], []).append(r)
    base = by_image.pop(baseline, [])
    if not by_image:
        return {"verdict": "inconclusive", "reason": f"no image other than {baseline} has results in the window",
                "baseline": baseline, "arms": {}, "window_seconds": window}
    arms = {image: judge_canaries(base, rows_of, config, IMAGE_ARMS) for image, rows_of in sorted(by_image.items())}
    worst = max(arms.items(), key=lambda kv: ORDER[kv[1]["verdict"]])
    verdict = worst[1]["verdict"]
    reason = f"image {worst[0]} against {baseline}: {worst[1]['reason']}" if verdict != "pass" else \
        f"every image passes against {baseline}: " + "; ".join(f"{image}: {arm['reason']}" for image, arm in arms.items())
    return {"verdict": verdict, "reason": reason, "baseline": baseline, "arms": arms, "window_seconds": window,
            "results": {"baseline": len(base), **{image: len(r) for image, r in by_image.items()}}}


def rotation_verdict(rows: Sequence[dict[str, Any]], now: float, window: float, cluster: str, targets: Mapping[str, str],
                     present: Collection[str], config: JudgeConfig | None = None, min_results: int = 0,
                     proven: bool = False) -> dict[str, Any]:
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
    current = [r for r in rows if now - window <= float(r["at"]) <= now]
    span = f"the last {human_duration(window)}"
    if not current:
        return {"verdict": "inconclusive", "reason": f"no canary result for {cluster} in {span}: is `platformctl canary run` "
                "running for it, with the same state store?", "arms": {}, "window_seconds": window}
    new = set(targets.values())
    tried = sorted(new & set(present))
    old = [r for r in current if r.get("image") and r["image"] not in new]
    if not tried:
        verdict = judge(arm_of([]), arm_of(current), config)  # the experiment alone: its failure budget
        rate = verdict.metrics["failure_rate"]
        if rate.verdict == "fail":
            return {"verdict": "fail", "reason": f"no node boots a target image yet, and {cluster}'s canaries fail already: "
                    f"{rate.reason}", "arms": {}, "window_seconds": window}
        if rate.experiment["n"] < (config or JudgeConfig()).min_attempts:
            return {"verdict": "inconclusive", "reason": f"no node boots a target image yet; {cluster}'s canaries have "
                    f"{rate.reason}", "arms": {}, "window_seconds": window}
        return {"verdict": "pass", "reason": f"no node boots a target image yet; {cluster}'s canaries are within their "
                f"failure budget ({rate.experiment['events']}/{rate.experiment['n']} failed in {span})", "arms": {},
                "window_seconds": window}
    arms: dict[str, dict[str, Any]] = {}
    for image in tried:
        mine = [r for r in current if r.get("image") == image]
        if not mine:
            arms[image] = {"verdict": "inconclusive", "reason": f"nodes boot {image} but no canary result of it in {span} yet"}
            continue
        arms[image] = judge_canaries(old, mine, config, IMAGE_ARMS)
        arms[image]["results"] = len(mine)
        counts = {pool: sum(1 for r in mine if r.get("pool") == pool) for pool, target in sorted(targets.items())
                  if target == image}
        if proven and arms[image]["verdict"] == "inconclusive" and all(counts.values()) \
                and all(r["outcome"] == "ok" for r in mine):
            arms[image].update(verdict="pass", reason=f"passed first light in an earlier stage; here its first "
                               f"{len(mine)} canary results in {len(counts)} pool(s) all succeeded")
        short = [f"pool {pool}: {n}" for pool, n in counts.items() if n < (1 if proven else min_results)]
        if short and arms[image]["verdict"] == "pass":  # first light: each pool's node judged on its own results
            arms[image].update(verdict="inconclusive", reason=f"fewer canary results of {image} in {span} than the "
                               f"{1 if proven else min_results} a pool's first light needs ({', '.join(short)})")
    worst_image, worst = max(arms.items(), key=lambda kv: ORDER[kv[1]["verdict"]])
    if worst["verdict"] == "pass":
        reason = f"{', '.join(tried)} pass against the images they replace ({len(old)} results of those in {span})"
    else:
        reason = f"target image {worst_image} against the images it replaces: {worst['reason']}"
    return {"verdict": worst["verdict"], "reason": reason, "arms": arms, "baseline_results": len(old), "window_seconds": window}


def canary_gate(store: Any, window: float, config: JudgeConfig | None = None) -> Callable[[Any], dict[str, Any]]:
    """The rotation executor's canary health gate over ``store``: asked with a question (``cluster``, ``now``,
    ``targets``, ``present``), it reads that cluster's results and answers ``rotation_verdict``'s JSON."""

    def ask(question: Any) -> dict[str, Any]:
        since = question.now - window
        stages = [question.stage] if question.stage else sorted({s.stage for s in streams_of(store)
                                                                  if s.cluster == question.cluster})
        rows = [r for stage in stages for r in results(store, stage, since, question.now, cluster=question.cluster)]
        return rotation_verdict(rows, question.now, window, question.cluster, question.targets, question.present, config,
                                getattr(question, "min_results", 0), getattr(question, "proven", False))

    return ask


def soak_verdict(store: StateStore, stage: str, since: float, now: float, window: int,
                 replaced: Mapping[str, str] | None = None, baseline: str | None = None,
                 entered: float | None = None, config: JudgeConfig | None = None) -> dict[str, Any]:
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
    verdict = {**canary_verdicts(rows, now, float(window), config), "at": now, "state": store.location,
               "results_since": len(rows)}
    if not replaced:
        return verdict
    end = since if entered is None else min(entered, since)
    before = [r for r in results(store, stage, since=end - reach, until=end) if float(r["at"]) < end]
    arms: dict[str, dict[str, Any]] = {}
    thin: list[str] = []
    for image, old in sorted(replaced.items()):
        mine, theirs = [r for r in rows if r.get("image") == image], [r for r in before if r.get("image") == old]
        deciding = [r for r in theirs if r.get("canary_kind") in IMAGE_ARMS]
        if not has_evidence(arm_of(deciding), config):  # nothing to compare with; a new image short of results is not
            thin.append(f"{image} ({len(mine)} results since the rotation; {old}: {len(deciding)} node-pool results "
                        "before)")  # skipped: the judge says inconclusive, never a pass on too little
            continue
        arms[image] = {**judge_canaries(theirs, mine, config, IMAGE_ARMS), "against": old,
                       "results": {"baseline": len(theirs), "experiment": len(mine)}}
    compared: dict[str, Any] = {"baseline": baseline, "replaced": replaced, "baseline_until": end, "arms": arms}
    if thin:
        compared["not_compared"] = thin
    if not arms:
        compared["reason"] = ("no new image could be compared with the image it replaces (too few results of that image "
                              "from before the candidate entered): the stage's window alone decides")
        return {**verdict, "images": compared}
    image, worst = max(arms.items(), key=lambda kv: ORDER[kv[1]["verdict"]])
    compared.update(verdict=worst["verdict"], reason=f"image {image} against {worst['against']} of {baseline}: {worst['reason']}")
    if ORDER[worst["verdict"]] > ORDER[verdict["verdict"]]:
        return {**verdict, "verdict": worst["verdict"], "reason": compared["reason"], "images": compared}
    if verdict["verdict"] == "pass":  # both pass: say both
        return {**verdict, "reason": f"{verdict['reason']}; every new image compared passes against the last good "
                f"candidate {baseline}'s", "images": compared}
    return {**verdict, "images": compared}
