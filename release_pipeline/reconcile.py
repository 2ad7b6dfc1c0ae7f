"""``release tick``: the reconciler that carries candidates from stage to stage, one step per candidate per tick.

Each stage holds at most one candidate in flight. A candidate waits to enter a stage (freezes, approvals), is
deployed (the ``Deployer`` seam, through the application layer), rotated (the executor, canary-gated), soaked
(the gate reads the canary verdict until the soak's minimum, evidence and ``passFor`` are met, or it fails, or
the deadline passes), then promoted (the next stage may take it) or halted and rolled back as one unit (the stage
deployed and rotated back to its last good candidate; no later stage ever takes the halted one).

The reconciler acts only through ``StageOperations``, which the application layer implements with its own functions
(deploy a stage, rotate it, judge it): the pipeline calls what an operator would, never the command line. Every
side effect is an intent entry before and a done entry after, fenced by the tick's lease, so a tick killed at any
moment and run again finds the intent and finishes it: the deploy converges on the same images (no new launch
template version) and the rotation resumes its own journal (no node rotated twice).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from platformctl.kernel import failpoints
from platformctl.kernel.errors import PlatformError, is_transient
from platformctl.kernel.jsontypes import JSONMapping, JSONObject
from platformctl.kernel.state import LeaseLost
from platformctl.kernel.who import person_of
from release_pipeline.candidates import Candidate
from release_pipeline.fold import Entry, Intent, Kind, PipelineState, RollbackPhase, StageState, Step, WaitHeld, apply
from release_pipeline.gate_inputs import EntryInputs, RotationInputs, SoakInputs
from release_pipeline.gates import (
    Decision,
    entry_decision,
    freezes_in_force,
    override_applies,
    rotation_decision,
    soak_decision,
)
from release_pipeline.held import Drift
from release_pipeline.ledger import CHECKPOINT_EVERY, Ledger, StageLease, checkpoints
from release_pipeline.operations import StageOperations
from release_pipeline.pipeline import Pipeline
from release_pipeline.rotation_result import StageRotation

if TYPE_CHECKING:
    pass

# How long, on the stage's clock from when the rotation was last recorded blocked (its first block, a block after it
# moved on, a block after a freeze), nodes the planner leaves blocked (a budget that allows no disruption now,
# nothing failed) are planned again at the next tick before the rotation counts as not finished.
BLOCKED_PATIENCE = 3600.0
# Wall seconds a stage's step may keep meeting a transient fault (its region's API or clock not answering, throttling)
# before the tick calls the stage failing (exit 1): until then the stage is busy, tried again next tick. A transient
# fault never halts nor rolls back a candidate.
TRANSIENT_PATIENCE = 900.0


@contextmanager
def _no_lease(name: str) -> Iterator[bool]:
    yield True


@dataclass(frozen=True)
class StageFault:
    """A stage whose step raised this tick: the error (its type and the first line of its message), whether it was
    transient, and ``since``: the host's time the stage's run of transient faults began."""

    stage: str
    error: dict[str, str]  # {"type", "message"}
    transient: bool
    since: float

    def to_dict(self) -> JSONObject:
        return {"stage": self.stage, "error": self.error, "transient": self.transient, "since": self.since}


@dataclass
class TickReport:
    steps: list[Entry] = field(default_factory=list)  # the entries this tick wrote
    waiting: list[str] = field(default_factory=list)  # what held a step back without a decision (a rotation's lease)
    held: list[str] = field(default_factory=list)  # stages another tick holds: nothing done there
    errors: list[StageFault] = field(default_factory=list)  # stages whose step raised

    def failing(self, now: float) -> list[StageFault]:
        """The errors that need someone: not transient, or transient for ``TRANSIENT_PATIENCE`` and more."""
        return [e for e in self.errors if not e.transient or now - e.since >= TRANSIENT_PATIENCE]

    def to_dict(self) -> JSONObject:
        return {"steps": [e.to_dict() for e in self.steps], "waiting": self.waiting, "held": self.held,
                "errors": [e.to_dict() for e in self.errors]}


class Write(Protocol):
    """A step's entry written (fenced by the stage's lease), folded into the tick's state and reported."""

    def __call__(self, candidate: str | None, stage: str | None, decision: Kind, at: float, reason: str,
                 inputs: JSONMapping | None = None, salt: str = "") -> Entry: ...


def tick(pipeline: Pipeline, ledger: Ledger, actions: StageOperations, by: str,
         say: Callable[[str], None] = lambda message: None, only: Sequence[str] = (),
         lease: StageLease = _no_lease) -> TickReport:
    """Advance every candidate at most one step (in the stages ``only`` names, when given: each stage's own CronJob
    acts in its own region), each stage under its own lease (``lease``). A stage whose step raises (an API fault)
    records it as that stage's ``error`` and the others go on; a lease lost mid-step (``LeaseLost``) stops the tick."""
    report = TickReport()
    moved: set[str] = set()
    acted: list[str] = []  # the stages whose lease it held: their checkpoints are its to write
    behind = 0  # the most entries a stage's read folded past its checkpoint

    for name in reversed(pipeline.names):  # the last stage first: a candidate promoted here is not entered next door
        if only and name not in only:
            continue
        with lease(name) as held:
            if not held:
                report.held.append(name)
                continue
            acted.append(name)
            state = ledger.state(checkpoints(name))  # from its own checkpoints, read under the stage's lease: what
            # another stage's tick wrote is in it
            behind = max(behind, ledger.folded)

            def write(candidate: str | None, stage: str | None, decision: Kind, at: float, reason: str,
                      inputs: JSONMapping | None = None, salt: str = "", state: PipelineState = state) -> Entry:
                entry = ledger.append(candidate, stage, decision, at, reason, inputs, by, salt)
                apply(state, entry)
                report.steps.append(entry)
                say(f"{stage or '-'} {candidate or '-'}: {decision}: {reason}")
                failpoints.hit(f"release:{decision}")  # written, the checkpoint and anything after it not
                return entry

            step = state.stage(name).step
            try:
                _advance(pipeline, ledger, state, name, actions, write, moved, report.waiting.append)
            except LeaseLost:
                raise
            except Moved as moved:
                report.waiting.append(str(moved))
                continue
            except Exception as exc:  # this stage's fault, recorded as its decision: the other stages go on
                error = {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:500] if str(exc) else ""}
                fault = getattr(exc, "fault", None)  # what stays the same while its message moves on (a lock's age)
                if isinstance(fault, str) and fault:
                    error["fault"] = fault
                s = state.stage(name)
                transient = is_transient(exc)
                began = s.error if s.error is not None and s.error.transient else None
                since = (began.since or time.time()) if began is not None and transient else time.time()
                report.errors.append(StageFault(name, error, transient, since))
                if s.error is None or not _same_fault(s.error.error, error) or s.error.step != step:
                    busy = " (transient: tried again next tick)" if transient else ""
                    write(s.current, name, Kind.ERROR, actions_now(actions, name),
                          f"{step} raised {error['type']}: {error['message']}{busy}",
                          {"error": error, "step": str(step), "transient": transient, "since": since})
                continue
            s = state.stage(name)
            if s.error is not None:
                write(s.current, name, Kind.RECOVERED, actions.now(name), f"{name} went on after the error "
                      f"({(s.error.error or {}).get('type')})", {"error": s.error.to_dict()})
    # The checkpoint is the ledger folded in its own order: what others wrote during the tick (an approval, a freeze, a
    # rollback by hand) lands where it was written, not after this tick's entries. Written when the tick decided, and
    # every CHECKPOINT_EVERY entries others wrote (people read the last stage's: its tick keeps it near).
    if acted and (report.steps or behind >= CHECKPOINT_EVERY):
        ledger.checkpoint(ledger.state(checkpoints(acted[0])), acted)
    return report


def _same_fault(recorded: JSONMapping | None, error: dict[str, str]) -> bool:
    """Whether ``error`` is the fault the stage last recorded: the same type, and the same ``fault`` where the error
    names one (a locked stack's holder, whose message says an age that grows each tick), else the same message."""
    if recorded is None or recorded.get("type") != error["type"]:
        return False
    if "fault" in error:
        return recorded.get("fault") == error["fault"]
    return recorded.get("message") == error["message"] and "fault" not in recorded


def actions_now(actions: StageOperations, name: str) -> float:
    """The stage's clock, or the host's when the stage's clock cannot be read (the fault being recorded may be that)."""
    try:
        return actions.now(name)
    except Exception:
        return time.time()


def proven(pipeline: Pipeline, state: PipelineState, name: str) -> list[str]:
    """The candidates ready in ``name`` that passed the stage before it (any, in the first stage): a promotion
    another stage's tick wrote naming a stage further on moves nothing past the stages between."""
    index = pipeline.names.index(name)
    if index == 0:
        return list(state.stage(name).ready)
    before = state.stage(pipeline.names[index - 1])
    return [c for c in state.stage(name).ready if c in before.good]


def eligible(pipeline: Pipeline, state: PipelineState, name: str) -> tuple[str | None, list[tuple[str, str]]]:
    """The candidate that enters ``name`` next, and the ready ones that never will (each with the newer one it gives
    way to): never one older than the newest the stage already ran (by start order), unless sent by hand; under
    ``supersede`` only the newest ready, under ``queue`` the oldest ready."""
    stage = state.stage(name)
    if stage.forced is not None and stage.forced in stage.ready:
        return stage.forced, []
    ready = sorted(proven(pipeline, state, name), key=state.order)
    ran = next((c for c, v in state.candidates.items() if v.order == stage.newest), None)
    gone = [(c, str(ran)) for c in ready if state.order(c) <= stage.newest]
    ahead = [c for c in ready if state.order(c) > stage.newest]
    if not ahead:
        return None, gone
    if pipeline.on_newer == "queue":
        return ahead[0], gone
    return ahead[-1], gone + [(c, ahead[-1]) for c in ahead[:-1]]


def expected_images(ledger: Ledger, stage: StageState, name: str) -> dict[str, str] | None:
    """Each image family of ``name`` and the image the ledger says its launch templates boot now: the candidate in
    flight once it is deployed (rotating, soaking), else the last good one, else what the stage ran before the
    pipeline's first deploy there. None while the stage is between two (deploying, rolling back) or when the pipeline
    never deployed it."""
    if stage.step in (Step.ROTATING, Step.SOAKING):
        cid = stage.current
    elif stage.step in (Step.IDLE, Step.WAITING):
        if stage.last_good is None:
            return dict(stage.before) if stage.before else None
        cid = stage.last_good
    else:
        return None
    candidate = ledger.candidate(cid) if cid is not None else None
    if candidate is None or name not in candidate.stages:
        return None
    return {family: image["id"] for family, image in candidate.stages[name].images.items()}


def _drifted(ledger: Ledger, stage: StageState, name: str, actions: StageOperations, write: Write, now: float) -> bool:
    """Compare what every pool of the stage launches (read from AWS) with what the ledger says it runs (and with the
    settings the pipeline's last deploy there left its launch templates launching); record a
    ``drift`` entry when that changes (one naming each drifted pool, or an empty one when none is left). A drifted stage
    takes no step: no candidate enters it, its rotation does not rotate onto the drifted image, its soak does not
    promote; someone puts the template back (docs/release.md: drift)."""
    expected = expected_images(ledger, stage, name)
    if expected is None:
        return False
    # settings are named only with the image expected: another image labels its nodes otherwise in the user data too
    drift = [Drift(pool.cluster, pool.pool, pool.family, pool.image, expected[pool.family],
                   () if pool.image != expected[pool.family] else pool.settings)
             for pool in actions.launching(name)
             if pool.family in expected and (pool.image != expected[pool.family] or pool.settings)]
    if drift != stage.drift:
        reason = (f"{name} drifted from what the pipeline says it runs: " + "; ".join(d.said() for d in drift)
                  if drift else f"{name} launches what the pipeline says it runs again")
        write(stage.current, name, Kind.DRIFT, now, reason, {"drift": [d.to_dict() for d in drift], "expected": expected})
    return bool(drift)


def _advance(pipeline: Pipeline, ledger: Ledger, state: PipelineState, name: str, actions: StageOperations,
             write: Write, moved: set[str], held: Callable[[str], None]) -> None:
    stage = state.stage(name)
    policy = pipeline.stage(name)
    now = actions.now(name)
    try:  # the freezes by hand, where the stage's scheduled rotation reads them (it cannot read the ledger)
        actions.hold_by_hand(name, [f for f in state.freezes if f.stage in ("*", name) and (f.until is None or f.until > now)])
    except (LeaseLost, Moved):
        raise
    except Exception as exc:  # the store did not answer: the step goes on, the next tick writes again
        held(f"{name}: its freezes by hand could not be written where its scheduled rotation reads them "
             f"({type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''})")
    try:
        drifted = _drifted(ledger, stage, name, actions, write, now)
    except (LeaseLost, Moved):
        raise
    except Exception as exc:  # AWS did not say what the groups launch: the step goes on, the next tick reads again
        drifted = False
        held(f"{name}: what its groups launch could not be read this tick ({type(exc).__name__}: "
             f"{str(exc).splitlines()[0] if str(exc) else ''}): drift not judged")
    if drifted:
        held(f"{name}: drifted ({len(stage.drift)} pool(s)): no step until its launch templates boot what the "
             "pipeline says it runs (`platformctl release status`)")
        return
    if stage.step in (Step.IDLE, Step.WAITING):
        cid, gone = eligible(pipeline, state, name)
        for older, newer in gone:
            write(older, name, Kind.SUPERSEDED, now, f"{newer} is newer: {older} never enters {name} or any stage "
                  f"(onNewer: {pipeline.on_newer}; a stage only moves forward)", {"by_candidate": newer})
        if cid is None or cid in moved:
            return
        frozen = freezes_in_force(pipeline.freezes, state.freezes, name, now)
        approvals = state.approvals.get(f"{cid}/{name}", [])
        given = stage.override if stage.override and stage.override.for_candidate(cid) else None
        override = given if override_applies(given, frozen) else None
        created = ledger.candidate(cid)
        creator = created.created_by if created is not None else ""
        creator = person_of(creator, pipeline.approvers.identity_roles) or creator  # as approvals name people
        decision = entry_decision(policy, now, frozen, approvals, override, creator)
        inputs = EntryInputs(decision, tuple(frozen), tuple(approvals), override, creator, stage.forced == cid,
                             policy.approvals, policy.approvers_other_than_creator, pipeline.digest,
                             tuple(f for f in pipeline.freezes if f.applies_to(name)),
                             tuple(f for f in state.freezes if f.until is None or f.until > now)).to_dict()
        if decision.decision == "wait":  # written again only when what holds it changes, never its words
            if stage.step != Step.WAITING or stage.current != cid or stage.wait != WaitHeld.of(inputs):
                write(cid, name, Kind.WAIT, now, decision.reason, inputs)
            return
        write(cid, name, Kind.ENTER, now, decision.reason, inputs)
        moved.add(cid)
        return
    cid = stage.current
    if cid is None or cid in moved:
        return
    candidate = ledger.candidate(cid)
    assert candidate is not None, cid
    moved.add(cid)
    if stage.step in (Step.DEPLOYING, Step.ROTATING) and stage.intent is None:
        # A freeze that began after the candidate entered stops what has not started: no deploy, no new rotation
        # (a rotation already begun carries on; a rollback is a remedy, never held).
        frozen = freezes_in_force(pipeline.freezes, state.freezes, name, now)
        given = stage.override if stage.override and stage.override.for_candidate(cid) else None
        if frozen and not override_applies(given, frozen):
            held(f"{name} {cid}: frozen before its {stage.step[:-3]}: " + "; ".join(f.reason for f in frozen))
            return
    if stage.step == Step.DEPLOYING:
        if stage.intent != Intent(Kind.DEPLOY, cid):
            write(cid, name, Kind.DEPLOY, now, f"pointing {name}'s launch templates at {cid}'s images",
                  {"images": candidate.stages[name].images if name in candidate.stages else {},
                   "before": actions.deployed(name)})
        still(ledger, name, stage)
        result = actions.deploy(name, candidate)
        failpoints.hit("release:call:deploy")  # deployed, not yet recorded
        write(cid, name, Kind.DEPLOYED, actions.now(name), f"{name} deployed with {cid}'s images" + result.said(),
              {"result": result.to_dict()})
    elif stage.step == Step.ROTATING:
        _rotate(ledger, state, stage, name, candidate, actions, write, held, pipeline)
    elif stage.step == Step.SOAKING:
        _soak(pipeline, ledger, state, stage, name, candidate, actions, write)
    elif stage.step == Step.ROLLING_BACK:
        _roll_back(ledger, stage, name, cid, actions, write, held)


class Moved(Exception):
    """The ledger no longer holds what the tick read: someone wrote in between (a halt, a rollback by hand)."""


def still(ledger: Ledger, name: str, read: StageState) -> None:
    """Right before a side effect: the ledger, folded again, still has the stage where the tick read it (the same
    candidate at the same step with the same intent, a rollback to the same target). A write that landed between the
    tick's read and its intent (a halt of the candidate, of a rollback's target) made the intent moot, and the fold
    passed over it: nothing is done, and the next tick plans from what the ledger holds (``Moved``)."""
    now = ledger.state(checkpoints(name)).stage(name)
    if (now.step, now.current, now.intent, now.rollback_to) != (read.step, read.current, read.intent, read.rollback_to):
        raise Moved(f"{name} {read.current}: the ledger moved on since this tick read it ({read.step} -> {now.step}, "
                    f"{now.current or 'nothing'} in flight): nothing done, the next tick plans again")


def _boots(ledger: Ledger, cid: str, name: str, result: StageRotation) -> JSONObject:
    """The rotation's result as an entry keeps it: the instances it saw booting go to their own stream, the entry
    keeps how many (an entry never grows with the fleet)."""
    said = {k: v for k, v in result.to_dict().items() if k not in ("booted", "first_light")}
    counted = ledger.add_boots(cid, name, result.booted, result.first_light) if result.booted or result.first_light else 0
    return {**said, "booted_count": counted, "first_light_count": sum(len(ids) for ids in result.first_light.values())}


def frozen_now(pipeline: Pipeline, ledger: Ledger, name: str, cid: str, now: float) -> str | None:
    """What freezes ``name`` at ``now`` for ``cid`` (read from the ledger as it is now: a freeze set by hand during a
    rotation counts), in words; None when nothing does or an override given in this freeze lets the candidate go."""
    state = ledger.state(checkpoints(name))
    frozen = freezes_in_force(pipeline.freezes, state.freezes, name, now)
    stage = state.stage(name)
    given = stage.override if stage.override and stage.override.for_candidate(cid) else None
    if not frozen or override_applies(given, frozen):
        return None
    return "; ".join(f.reason for f in frozen)


def _rotate(ledger: Ledger, state: PipelineState, stage: StageState, name: str, candidate: Candidate,
            actions: StageOperations, write: Write, held: Callable[[str], None], pipeline: Pipeline) -> None:
    cid = candidate.id
    if stage.paused:  # paused for a freeze: resumed when it ends
        reason = frozen_now(pipeline, ledger, name, cid, actions.now(name))
        if reason is not None:
            held(f"{name} {cid}: the rotation is paused for a freeze: {reason}")
            return
        actions.resume(name, f"the freeze ended: {cid}'s rotation goes on")
        write(cid, name, Kind.RESUMED, actions.now(name), "the freeze ended: the rotation goes on")
    if stage.intent != Intent(Kind.ROTATE, cid):
        write(cid, name, Kind.ROTATE, actions.now(name), f"rotating every cluster of {name} onto {cid}'s images")
    still(ledger, name, stage)
    result = actions.rotate(name, candidate, hold=lambda: frozen_now(pipeline, ledger, name, cid, actions.now(name)))
    failpoints.hit("release:call:rotate")  # rotated, not yet recorded
    at = actions.now(name)
    status = result.status
    if status == "frozen":
        write(cid, name, Kind.PAUSED, at, f"a freeze began: the rotation paused at its next step ({result.reason})",
              {"result": _boots(ledger, cid, name, result)})
        return
    if status == "busy":  # a rotation of the stage holds its lease (a killed tick's, until it lapses)
        held(f"{name} {cid}: {result.reason}")  # nothing written: the next tick tries again
        return
    if status == "blocked":
        # nothing failed; some nodes wait for a budget that allows no disruption now: planned again next tick, for
        # BLOCKED_PATIENCE from when the rotation was last seen blocked having moved on (more instances booting its
        # images than at the last block: a rotation that keeps moving is not stuck)
        booted = len({i for ids in result.booted.values() for i in ids})
        if stage.blocked_since is None or booted > stage.blocked_booted:
            write(cid, name, Kind.BLOCKED, at, f"waiting: {result.reason}",
                  {"result": _boots(ledger, cid, name, result), "booted": booted})
        assert stage.blocked_since is not None
        if at - stage.blocked_since < BLOCKED_PATIENCE:
            held(f"{name} {cid}: waiting: {result.reason} (halts {BLOCKED_PATIENCE / 60:.0f} min after it was "
                 "blocked if it stays so without moving)")
            return
    if status == "finished" and _drifted(ledger, stage, name, actions, write, at):
        # a template changed while it rotated: its pools were passed over, so the stage did not finish; the next
        # tick holds it until the template is put back, and its rotation then finishes them
        held(f"{name} {cid}: drifted while it rotated: not finished until its launch templates are put back")
        return
    if status == "finished":
        write(cid, name, Kind.ROTATED, at, f"{name}'s last cluster finished rotating: the soak begins",
              {"result": _boots(ledger, cid, name, result)})
    else:
        decision = rotation_decision(result)
        _halt(state, name, cid, at, decision.reason,
              RotationInputs(decision, _boots(ledger, cid, name, result), stage.blocked_since).to_dict(), write, pipeline)


def _soak(pipeline: Pipeline, ledger: Ledger, state: PipelineState, stage: StageState, name: str, candidate: Candidate,
          actions: StageOperations, write: Write) -> None:
    policy = pipeline.stage(name)
    assert stage.rotated_at is not None
    baseline = ledger.candidate(stage.last_good) if stage.last_good else None
    now = actions.now(name)
    verdict = actions.verdict(name, candidate, baseline, stage.rotated_at, policy.verdict_window, stage.entered_at)
    results = verdict.results_since or 0  # canary results stored since the soak began
    said = verdict.to_dict()  # as the ledger keeps it
    if not stage.verdicts or stage.verdicts[-1].verdict != verdict.verdict:
        write(candidate.id, name, Kind.VERDICT, now, f"the canary verdict is {verdict.verdict}: {verdict.reason}",
              {"verdict": said, "results": results})
    decision = soak_decision(policy, stage.rotated_at, now, stage.verdicts, results)
    inputs = SoakInputs(decision, stage.rotated_at, tuple(stage.verdicts), results, said,
                        policy.model_dump(mode="json", by_alias=True), pipeline.digest).to_dict()
    if decision.decision == "pass":
        nxt = pipeline.next_stage(name)
        write(candidate.id, name, Kind.PROMOTE, now, decision.reason, {**inputs, "ready_in": [nxt] if nxt else []})
    elif decision.decision == "halt":
        _halt(state, name, candidate.id, now, decision.reason, inputs, write, pipeline)
    elif sorted(stage.soak_short) != sorted(decision.unmet):
        write(candidate.id, name, Kind.SOAK, now, decision.reason, inputs)  # only when what holds the soak changes


def rollback_by_hand(stage: StageState, name: str) -> tuple[str, str | None]:
    """What ``release rollback`` of stage ``name`` halts and what the stage goes back to: the candidate in flight there
    (back to the last good one), else the last good one (back to the good one before it). A stage rolling back
    already, or with nothing to go back to, is refused (``PlatformError`` naming ``--stage``)."""
    if stage.step == Step.ROLLING_BACK:
        raise PlatformError(f"{name} is rolling back already ({stage.current} to {stage.rollback_to or 'what it ran before'})",
                            field="--stage")
    if stage.step in (Step.DEPLOYING, Step.ROTATING, Step.SOAKING):
        assert stage.current is not None
        return stage.current, stage.last_good
    if stage.last_good is None:
        raise PlatformError(f"the pipeline has deployed nothing to {name}: nothing to roll back", field="--stage")
    earlier = [c for c in stage.good if c != stage.last_good]
    if not earlier:
        raise PlatformError(f"{stage.last_good} is the first candidate that passed {name}: no earlier one to roll back to",
                            field="--stage")
    return stage.last_good, earlier[-1]


def _halt(state: PipelineState, name: str, cid: str, at: float, reason: str, inputs: JSONMapping, write: Write,
          pipeline: Pipeline) -> None:
    last_good = state.stage(name).last_good
    write(cid, name, Kind.HALT, at, reason, {**inputs, "rollback_to": last_good, "pipeline": pipeline.digest})


def _roll_back(ledger: Ledger, stage: StageState, name: str, cid: str, actions: StageOperations, write: Write,
               held: Callable[[str], None]) -> None:
    """Deploy the stage's last good candidate again, then rotate every cluster back onto it: one unit. Done only when
    the rotation finished (every node on the last good images); else recorded as failed, the stage kept closed, and
    tried again next tick."""
    target = ledger.candidate(stage.rollback_to) if stage.rollback_to else _before(ledger, stage, name, cid)
    now = actions.now(name)
    if target is None:
        write(cid, name, Kind.ROLLED_BACK, now, f"nothing to roll back to: {name} had no good candidate before {cid} and "
              "no record of what it ran before; its pools stay as the halted rotation left them",
              {"rollback_to": None, "done": False})
        return
    to = "the images it ran before" if target.id == _before_id(cid) else f"{target.id}'s images"
    if stage.rollback_phase in (None, RollbackPhase.DEPLOY):
        if stage.intent != Intent(Kind.ROLLBACK_DEPLOY, cid):
            write(cid, name, Kind.ROLLBACK_DEPLOY, now, f"pointing {name} back at {to}", {"rollback_to": stage.rollback_to})
        still(ledger, name, stage)
        deployed = actions.deploy(name, target, rollback=True)
        failpoints.hit("release:call:rollback-deploy")
        write(cid, name, Kind.ROLLBACK_DEPLOYED, actions.now(name), f"{name} deployed with {to} again" + deployed.said(),
              {"result": deployed.to_dict(), "rollback_to": stage.rollback_to})
        return
    if stage.intent != Intent(Kind.ROLLBACK_ROTATE, cid):
        write(cid, name, Kind.ROLLBACK_ROTATE, now, f"rotating every cluster of {name} back onto {to}",
              {"rollback_to": stage.rollback_to})
    still(ledger, name, stage)
    result = actions.rotate(name, target, rollback=True)
    failpoints.hit("release:call:rollback-rotate")
    status = result.status
    if status == "busy":
        held(f"{name} {cid}: {result.reason}")
        return
    if status != "finished":
        write(cid, name, Kind.ROLLBACK_FAILED, actions.now(name), f"the rollback of {name} to {to} did not finish "
              f"({status}: {result.reason}): {name} stays closed and the next tick tries again",
              {"result": _boots(ledger, cid, name, result), "rollback_to": stage.rollback_to,
               "failures": stage.rollback_failures + 1})
        return
    write(cid, name, Kind.ROLLED_BACK, actions.now(name), f"{name} is back on {to}: every cluster finished rotating",
          {"result": _boots(ledger, cid, name, result), "rollback_to": stage.rollback_to, "done": True,
           **({"before": stage.before} if stage.rollback_to is None else {})})


def _before_id(cid: str) -> str:
    return f"{cid}~before"


def _before(ledger: Ledger, stage: StageState, name: str, cid: str) -> Candidate | None:
    """What the stage ran before the pipeline's first deploy there (recorded with that deploy: never a candidate's,
    so never a halted one's), as a candidate of that stage alone: its images, with ``cid``'s commit, Kubernetes
    version and components (no earlier commit to restore them from). None when nothing was recorded (a deploy that
    never began)."""
    halted = ledger.candidate(cid)
    if not stage.before or halted is None or name not in halted.stages:
        return None
    own = halted.stages[name]
    images = {family: {"version": "0.0.0-before", "id": image} for family, image in sorted(stage.before.items())}
    return Candidate(_before_id(cid), {name: replace(own, images=images)}, halted.infra_revision,
                     f"what {name} ran before {cid}", halted.created_at, halted.created_by)


__all__ = ["BLOCKED_PATIENCE", "Decision", "StageOperations", "StageFault", "StageLease", "TickReport", "eligible",
           "rollback_by_hand", "tick"]
