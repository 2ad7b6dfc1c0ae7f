"""``release tick``: the reconciler that carries candidates from stage to stage, one step per candidate per tick.

Each stage holds at most one candidate in flight. A candidate waits to enter a stage (freezes, approvals), is
deployed (the ``Deployer`` seam, through the application layer), rotated (the executor, canary-gated), soaked
(the gate reads the canary verdict until the soak's minimum, evidence and ``passFor`` are met, or it fails, or
the deadline passes), then promoted (the next stage may take it) or halted and rolled back as one unit (the stage
deployed and rotated back to its last good candidate; no later stage ever takes the halted one).

The reconciler acts only through ``StageActions``, which the application layer implements with its own functions
(deploy a stage, rotate it, judge it): the pipeline calls what an operator would, never the command line. Every
side effect is an intent entry before and a done entry after, fenced by the tick's lease, so a tick killed at any
moment and run again finds the intent and finishes it: the deploy converges on the same images (no new launch
template version) and the rotation resumes its own journal (no node rotated twice).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from platformctl import failpoints
from release_pipeline.candidates import Candidate
from release_pipeline.gates import entry_decision, freezes_in_force, rotation_decision, soak_decision
from release_pipeline.ledger import Ledger, PipelineState, StageState, apply
from release_pipeline.pipeline import Pipeline

# How long, on the stage's clock from the start of its rotation, nodes the planner leaves blocked (a budget that allows
# no disruption now, nothing failed) are planned again at the next tick before the rotation counts as not finished.
BLOCKED_PATIENCE = 3600.0


class StageActions(Protocol):
    """What the pipeline does to a stage, as the application layer does it."""

    def now(self, stage: str) -> float:
        """The stage's clock: wall time on a real account, the region's virtual clock locally."""
        ...

    def deploy(self, stage: str, candidate: Candidate) -> dict[str, Any]:
        """Point the stage's launch templates at ``candidate``'s images (idempotent: the same images change nothing)."""
        ...

    def rotate(self, stage: str, candidate: Candidate, rollback: bool = False) -> dict[str, Any]:
        """Rotate every cluster of the stage onto them (resuming a rotation a killed tick began):
        ``{"status": "finished" | "halted" | "busy", "reason"}``; ``busy``: a rotation of the stage holds its lease, so
        nothing was done and the next tick tries again. A ``rollback`` first ends the halted rotation it undoes and is
        not held by the canary gate: the canaries fail because of the image it takes away (Argo Rollouts' abort goes
        back to the stable version without analysis, too)."""
        ...

    def verdict(self, stage: str, candidate: Candidate, baseline: Candidate | None, since: float,
                window: int, entered: float | None = None) -> dict[str, Any]:
        """The stage's canary verdict JSON, with ``results``: how many canary results it judged since ``since``; with
        ``baseline`` (the last good candidate), its images' results from before ``entered`` are the new images'
        baseline."""
        ...


@dataclass
class TickReport:
    steps: list[dict[str, Any]] = field(default_factory=list)  # the entries this tick wrote
    waiting: list[str] = field(default_factory=list)  # what held a step back without a decision (a rotation's lease)

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "waiting": self.waiting}


def tick(pipeline: Pipeline, ledger: Ledger, actions: StageActions, by: str,
         say: Callable[[str], None] = lambda message: None, only: Sequence[str] = ()) -> TickReport:
    """Advance every candidate at most one step (in the stages ``only`` names, when given: each stage's own CronJob
    acts in its own region). The caller holds the tick's lease (``ledger.fence``)."""
    state = ledger.state()
    report = TickReport()
    moved: set[str] = set()

    def write(candidate: str | None, stage: str | None, decision: str, at: float, reason: str,
              inputs: dict[str, Any] | None = None, salt: str = "") -> dict[str, Any]:
        entry = ledger.append(candidate, stage, decision, at, reason, inputs, by, salt)
        apply(state, entry)
        report.steps.append(entry)
        say(f"{stage or '-'} {candidate or '-'}: {decision}: {reason}")
        failpoints.hit(f"release:{decision}")  # written, the checkpoint and anything after it not
        return entry

    for name in reversed(pipeline.names):  # the last stage first: a candidate promoted here is not entered next door
        if only and name not in only:
            continue
        _advance(pipeline, ledger, state, name, actions, write, moved, report.waiting.append)
    # The checkpoint is the ledger folded in its own order: what others wrote during the tick (an approval, a freeze, a
    # rollback by hand) lands where it was written, not after this tick's entries.
    ledger.checkpoint(ledger.state())
    return report


def _advance(pipeline: Pipeline, ledger: Ledger, state: PipelineState, name: str, actions: StageActions,
             write: Callable[..., dict[str, Any]], moved: set[str], held: Callable[[str], None]) -> None:
    stage = state.stage(name)
    policy = pipeline.stage(name)
    now = actions.now(name)
    if stage.step in ("idle", "waiting"):
        cid = _next_ready(pipeline, state, stage, name, now, write)
        if cid is None or cid in moved:
            return
        frozen = freezes_in_force(pipeline.freezes, state.freezes, name, now)
        approvals = state.approvals.get(f"{cid}/{name}", [])
        override = stage.override if stage.override and stage.override.get("candidate") in (None, cid) else None
        decision = entry_decision(policy, now, frozen, approvals, override)
        inputs = {"decision": decision.to_dict(), "freezes": frozen, "approvals": approvals, "override": override,
                  "thresholds": {"approvals": policy.approvals}, "pipeline": pipeline.digest,
                  "freeze_definitions": [f.model_dump(mode="json", by_alias=True) for f in pipeline.freezes
                                         if f.applies_to(name)], "manual_freezes": state.freezes}
        if decision.decision == "wait":
            if stage.step != "waiting" or stage.waiting_for != decision.reason or stage.current != cid:
                write(cid, name, "wait", now, decision.reason, inputs)
            return
        write(cid, name, "enter", now, decision.reason, inputs)
        moved.add(cid)
        return
    cid = stage.current
    if cid is None or cid in moved:
        return
    candidate = ledger.candidate(cid)
    assert candidate is not None, cid
    moved.add(cid)
    if stage.step == "deploying":
        if stage.intent != f"deploy:{cid}":
            write(cid, name, "deploy", now, f"pointing {name}'s launch templates at {cid}'s images",
                  {"images": candidate.stages[name].images if name in candidate.stages else {}})
        result = actions.deploy(name, candidate)
        failpoints.hit("release:call:deploy")  # deployed, not yet recorded
        write(cid, name, "deployed", actions.now(name), f"{name} deployed with {cid}'s images", {"result": result})
    elif stage.step == "rotating":
        if stage.intent != f"rotate:{cid}":
            write(cid, name, "rotate", now, f"rotating every cluster of {name} onto {cid}'s images")
        result = actions.rotate(name, candidate)
        failpoints.hit("release:call:rotate")  # rotated, not yet recorded
        at = actions.now(name)
        if result.get("status") == "busy":  # a rotation of the stage holds its lease (a killed tick's, until it lapses)
            held(f"{name} {cid}: {result.get('reason')}")  # nothing written: the next tick tries again
            return
        if result.get("status") == "blocked" and at - stage.since < BLOCKED_PATIENCE:
            # nothing failed; some nodes wait for a budget that allows no disruption now: planned again next tick
            held(f"{name} {cid}: waiting: {result.get('reason')} (halts {BLOCKED_PATIENCE / 60:.0f} min into the "
                 "rotation if it stays so)")
            return
        if result.get("status") == "finished":
            write(cid, name, "rotated", at, f"{name}'s last cluster finished rotating: the soak begins", {"result": result})
        else:
            decision = rotation_decision(result)
            _halt(pipeline, state, name, cid, at, decision.reason, {"result": result, "decision": decision.to_dict()}, write)
    elif stage.step == "soaking":
        _soak(pipeline, ledger, state, stage, name, candidate, actions, write)
    elif stage.step == "rolling-back":
        _roll_back(ledger, stage, name, cid, actions, write, held)


def _next_ready(pipeline: Pipeline, state: PipelineState, stage: StageState, name: str, now: float,
                write: Callable[..., dict[str, Any]]) -> str | None:
    """The candidate that enters ``name`` next: the one waiting there, else the oldest ready (``queue``) or the newest
    (``supersede``: every older one ready here is superseded, recorded)."""
    if stage.step == "waiting" and stage.current in stage.ready:
        if pipeline.on_newer == "supersede" and stage.ready[-1] != stage.current:
            pass  # a newer one arrived while this one waited: it goes instead
        else:
            return stage.current
    if not stage.ready:
        return None
    if pipeline.on_newer == "queue":
        return stage.ready[0]
    newest = stage.ready[-1]
    for older in stage.ready[:-1]:
        if state.candidates.get(older, {}).get("stage") is None:  # not yet past any stage: superseded everywhere
            write(older, name, "superseded", now, f"superseded by {newest} (onNewer: supersede)", {"by_candidate": newest})
        else:
            stage.ready = [c for c in stage.ready if c != older]
    return newest


def _soak(pipeline: Pipeline, ledger: Ledger, state: PipelineState, stage: StageState, name: str, candidate: Candidate,
          actions: StageActions, write: Callable[..., dict[str, Any]]) -> None:
    policy = pipeline.stage(name)
    assert stage.rotated_at is not None
    baseline = ledger.candidate(stage.last_good) if stage.last_good else None
    now = actions.now(name)
    verdict = actions.verdict(name, candidate, baseline, stage.rotated_at, policy.verdict_window, stage.entered_at)
    results = int(verdict.get("results_since", 0))  # canary results stored since the soak began
    if not stage.verdicts or stage.verdicts[-1]["verdict"] != verdict["verdict"]:
        write(candidate.id, name, "verdict", now, f"the canary verdict is {verdict['verdict']}: {verdict['reason']}",
              {"verdict": verdict, "results": results})
    decision = soak_decision(policy, stage.rotated_at, now, stage.verdicts, results)
    inputs = {"decision": decision.to_dict(), "rotated_at": stage.rotated_at, "verdicts": stage.verdicts, "results": results,
              "verdict": verdict, "thresholds": policy.model_dump(mode="json", by_alias=True), "pipeline": pipeline.digest}
    if decision.decision == "pass":
        nxt = pipeline.next_stage(name)
        write(candidate.id, name, "promote", now, decision.reason, {**inputs, "ready_in": [nxt] if nxt else []})
    elif decision.decision == "halt":
        _halt(pipeline, state, name, candidate.id, now, decision.reason, inputs, write)
    elif stage.waiting_for != decision.reason:
        write(candidate.id, name, "soak", now, decision.reason, inputs)


def _halt(pipeline: Pipeline, state: PipelineState, name: str, cid: str, at: float, reason: str, inputs: dict[str, Any],
          write: Callable[..., dict[str, Any]]) -> None:
    last_good = state.stage(name).last_good
    write(cid, name, "halt", at, reason, {**inputs, "rollback_to": last_good, "pipeline": pipeline.digest})


def _roll_back(ledger: Ledger, stage: StageState, name: str, cid: str, actions: StageActions,
               write: Callable[..., dict[str, Any]], held: Callable[[str], None]) -> None:
    """Deploy the stage's last good candidate again, then rotate every cluster back onto it: one unit."""
    target = ledger.candidate(stage.rollback_to) if stage.rollback_to else None
    now = actions.now(name)
    if target is None:
        write(cid, name, "rolled-back", now, f"nothing to roll back to: {name} had no good candidate before {cid}; its "
              "pools stay as the halted rotation left them", {"rollback_to": None})
        return
    if stage.waiting_for != "the rollback's rotation":  # not yet deployed back
        if stage.intent != f"rollback-deploy:{cid}":
            write(cid, name, "rollback-deploy", now, f"pointing {name} back at {target.id}'s images")
        result = actions.deploy(name, target)
        failpoints.hit("release:call:rollback-deploy")
        write(cid, name, "rollback-deployed", actions.now(name), f"{name} deployed with {target.id}'s images again",
              {"result": result, "rollback_to": target.id})
        return
    if stage.intent != f"rollback-rotate:{cid}":
        write(cid, name, "rollback-rotate", now, f"rotating every cluster of {name} back onto {target.id}'s images")
    result = actions.rotate(name, target, rollback=True)
    failpoints.hit("release:call:rollback-rotate")
    if result.get("status") == "busy":
        held(f"{name} {cid}: {result.get('reason')}")
        return
    write(cid, name, "rolled-back", actions.now(name), f"{name} is back on {target.id} ({result.get('status')})",
          {"result": result, "rollback_to": target.id})
