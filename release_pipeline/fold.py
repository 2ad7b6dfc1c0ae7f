"""The release pipeline's state machine: the entries the ledger holds (``Kind``, ``Entry``), the state they fold into
(``PipelineState``, a ``StageState`` per stage) and the fold (``apply``), the one place the meaning of each decision
lives. ``release_pipeline.ledger`` reads the entries from the store and folds them with ``apply``; nothing here reads
or writes a store.

An entry from a stage's tick (``Entry.writer``: the stage whose ledger partition holds it) is admitted only where that
tick may decide (``admitted``): its own stage, the tick's own kinds; the fold passes over any other and keeps its id
(``PipelineState.refused``), so a stage's tick that writes into its partition an approval, a freeze or another stage's
step changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from platformctl.kernel.jsontypes import (
    JSONMapping,
    JSONObject,
    array,
    mapping,
    number,
    optional_float,
    optional_number,
    optional_str,
    strings,
    to_int,
)
from release_pipeline.held import (
    Approval,
    CandidateStatus,
    Drift,
    FreezeInForce,
    ManualFreeze,
    Override,
    StepError,
    VerdictChange,
)


class Step(StrEnum):
    """Where a stage is: idle, or a candidate in flight at one step."""

    IDLE = "idle"
    WAITING = "waiting"
    DEPLOYING = "deploying"
    ROTATING = "rotating"
    SOAKING = "soaking"
    ROLLING_BACK = "rolling-back"


class RollbackPhase(StrEnum):
    """Where a stage's rollback is: pointing the stage back (``deploy``), then rotating onto it (``rotate``, tried again
    after a rotation that did not finish)."""

    DEPLOY = "deploy"
    ROTATE = "rotate"


class Kind(StrEnum):
    """Every entry the ledger holds."""

    START = "start"  # a candidate recorded: ready for the first stage
    SUPERSEDED = "superseded"  # a newer candidate goes instead: never eligible again anywhere
    FORCE = "force"  # an operator sends a candidate to a stage by hand (``release promote``), older or not
    FREEZE = "freeze"
    UNFREEZE = "unfreeze"
    OVERRIDE = "override"  # a freeze in force overridden for one candidate, until that freeze ends
    APPROVE = "approve"
    WAIT = "wait"
    ENTER = "enter"
    DEPLOY = "deploy"
    DEPLOYED = "deployed"
    ROTATE = "rotate"
    BLOCKED = "blocked"  # the rotation left nodes behind a budget: the patience counts from here
    ROTATED = "rotated"
    VERDICT = "verdict"
    SOAK = "soak"
    PROMOTE = "promote"
    HALT = "halt"
    ROLLBACK_DEPLOY = "rollback-deploy"
    ROLLBACK_DEPLOYED = "rollback-deployed"
    ROLLBACK_ROTATE = "rollback-rotate"
    ROLLBACK_FAILED = "rollback-failed"  # the rollback's rotation did not finish: the stage stays closed, retried
    ROLLED_BACK = "rolled-back"
    PAUSED = "paused"  # a freeze began while the stage rotated: the rotation paused at its next step
    RESUMED = "resumed"  # the freeze ended: the paused rotation goes on
    ERROR = "error"  # a stage's step raised (an API fault): recorded, the other stages go on
    RECOVERED = "recovered"  # the stage's step that raised went through again
    DRIFT = "drift"  # what the stage's launch templates boot differs from what the pipeline says it runs ([]: no more)


KINDS = frozenset(k.value for k in Kind)
INTENDED = (Kind.DEPLOY, Kind.ROTATE, Kind.ROLLBACK_DEPLOY, Kind.ROLLBACK_ROTATE)  # side effects begun under an intent


@dataclass(frozen=True)
class Intent:
    """A side effect a stage began and is not known to have finished: a deploy or a rotation (or a rollback's) of one
    candidate. The tick that finds it does the effect again (each is idempotent) rather than record it again."""

    action: Kind  # one of INTENDED
    candidate: str

    @classmethod
    def from_dict(cls, data: JSONMapping) -> Intent:
        return cls(Kind(str(data["action"])), str(data["candidate"]))


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger entry: a step or decision of the pipeline, with who (``by``), when, why (``reason``, for people only)
    and the inputs the fold and ``release replay`` read. ``decision`` is a ``Kind``, or the word of a decision a newer
    version wrote: the fold passes over it, never guesses at it."""

    id: str
    candidate: str | None
    stage: str | None
    decision: Kind | str
    at: float
    reason: str
    inputs: JSONMapping = field(default_factory=dict)
    by: str = ""
    writer: str | None = None  # the stage whose tick's partition holds it (None: the people's): where, not what

    def to_dict(self) -> JSONObject:
        """Its JSON, as ``Ledger.append`` writes it."""
        return {"id": self.id, "candidate": self.candidate, "stage": self.stage, "decision": str(self.decision),
                "at": self.at, "reason": self.reason, "inputs": dict(self.inputs), "by": self.by}

    def as_stored(self) -> JSONObject:
        """Its JSON as a store gives it back (every store writes its JSON with the keys sorted, and an entry read from
        one holds its inputs so): what ``release history`` prints."""
        return dict(sorted(self.to_dict().items()))

    @classmethod
    def from_dict(cls, data: JSONMapping) -> Entry:
        """An entry as the ledger keeps it, whichever version wrote it: its values as they were written."""
        return cls(str(data["id"]), optional_str(data.get("candidate")), optional_str(data.get("stage")),
                   decision_of(str(data["decision"])), number(data["at"]), str(data.get("reason", "")),
                   mapping(data.get("inputs")), str(data.get("by", "")))


def decision_of(word: str) -> Kind | str:
    """The ``Kind`` a decision's word names, else the word (a newer version's decision)."""
    return Kind(word) if word in KINDS else word


# The state machine: the step a stage must be in, with the entry's candidate in flight, for a step's entry to count.
# A tick that read the state before an operator's rollback may write a step the rollback has made moot (a rotation
# finished, a promotion): the fold keeps the ledger's order and passes over it, so the rollback stands.
STEP_OF: dict[Kind, tuple[Step, ...]] = {
    Kind.WAIT: (Step.IDLE, Step.WAITING), Kind.ENTER: (Step.IDLE, Step.WAITING),
    Kind.DEPLOY: (Step.DEPLOYING,), Kind.DEPLOYED: (Step.DEPLOYING,),
    Kind.ROTATE: (Step.ROTATING,), Kind.BLOCKED: (Step.ROTATING,), Kind.ROTATED: (Step.ROTATING,),
    Kind.PAUSED: (Step.ROTATING,), Kind.RESUMED: (Step.ROTATING,),
    Kind.VERDICT: (Step.SOAKING,), Kind.SOAK: (Step.SOAKING,), Kind.PROMOTE: (Step.SOAKING,),
    Kind.ROLLBACK_DEPLOY: (Step.ROLLING_BACK,), Kind.ROLLBACK_DEPLOYED: (Step.ROLLING_BACK,),
    Kind.ROLLBACK_ROTATE: (Step.ROLLING_BACK,), Kind.ROLLBACK_FAILED: (Step.ROLLING_BACK,),
    Kind.ROLLED_BACK: (Step.ROLLING_BACK,),
}


@dataclass(frozen=True)
class WaitHeld:
    """What holds a closed entry gate, whatever its words: the unmet conditions' codes, when it can open, who has
    approved, and the freeze windows in force. A tick records a new ``wait`` only when this changes."""

    unmet: tuple[str, ...] = ()
    opens_at: float | None = None
    approved_by: tuple[str, ...] = ()
    frozen: tuple[str, ...] = ()  # each window's key

    @classmethod
    def of(cls, inputs: JSONMapping) -> WaitHeld:
        """From the entry gate's inputs as the ledger keeps them (``gate_inputs.EntryInputs``)."""
        decision = mapping(inputs.get("decision"))
        return cls(tuple(sorted(strings(decision.get("unmet")))), optional_number(decision.get("opens_at")),
                   tuple(sorted(Approval.from_dict(mapping(a)).by for a in array(inputs.get("approvals")))),
                   tuple(sorted(FreezeInForce.from_dict(mapping(f)).key for f in array(inputs.get("freezes")))))

    @classmethod
    def from_dict(cls, data: JSONMapping) -> WaitHeld:
        return cls(tuple(strings(data.get("unmet"))), optional_number(data.get("opens_at")),
                   tuple(strings(data.get("approved_by"))), tuple(strings(data.get("frozen"))))


@dataclass
class StageState:
    current: str | None = None  # the candidate in flight here
    last_good: str | None = None  # the last candidate that passed here
    step: Step = Step.IDLE
    since: float = 0.0  # when the step began
    waiting_for: str | None = None  # what the step waits for, in words (for people: nothing branches on it)
    wait: WaitHeld | None = None  # what held the entry gate at the last ``wait``, as codes
    opens_at: float | None = None
    rotated_at: float | None = None  # the soak's start: the stage's last cluster finished rotating
    entered_at: float | None = None  # when the current candidate entered: the last good images' results end there
    verdicts: list[VerdictChange] = field(default_factory=list)  # the verdict's changes during the soak
    results: int = 0
    ready: list[str] = field(default_factory=list)  # candidates that may enter, oldest first
    rollback_to: str | None = None
    override: Override | None = None  # a freeze override (the windows it covers)
    good: list[str] = field(default_factory=list)  # the candidates that passed here, oldest first (the last GOOD_KEPT)
    intent: Intent | None = None  # a side effect begun and not known finished
    newest: int = -1  # the start order of the newest candidate that entered: an older one never enters (unless forced)
    forced: str | None = None  # a candidate an operator sent here by hand: it goes next, older or not
    rollback_phase: RollbackPhase | None = None  # deploy, then rotate (retried after a failure until it finishes)
    rollback_failures: int = 0  # the rollback's rotations that did not finish
    blocked_since: float | None = None  # when the rotation was last seen blocked after moving (the patience counts from it)
    blocked_booted: int = 0  # the instances it had seen booting then: more at a later block is progress
    soak_short: list[str] = field(default_factory=list)  # the soak's unmet conditions, as codes
    error: StepError | None = None  # the last step that raised here and has not gone through since
    before: dict[str, str] | None = None  # what the stage ran before the pipeline's first deploy there (recorded then)
    paused: bool = False  # its rotation paused for a freeze (the tick resumes it when the freeze ends)
    drift: list[Drift] = field(default_factory=list)  # pools that launch another image than the stage should run

    @classmethod
    def from_dict(cls, data: JSONMapping) -> StageState:
        """A stage as a checkpoint keeps it, its values as they were written: a field an older checkpoint of this
        version did not hold takes its default, one it does not know is passed over."""
        get = data.get
        override, error, before = get("override"), get("error"), get("before")
        return cls(
            current=optional_str(get("current")), last_good=optional_str(get("last_good")), step=Step(str(get("step", Step.IDLE))),
            since=number(get("since", 0.0)), waiting_for=optional_str(get("waiting_for")),
            opens_at=optional_number(get("opens_at")), rotated_at=optional_number(get("rotated_at")),
            entered_at=optional_number(get("entered_at")),
            verdicts=[VerdictChange.from_dict(mapping(v)) for v in array(get("verdicts"))], results=to_int(get("results", 0)),
            ready=strings(get("ready")), rollback_to=optional_str(get("rollback_to")),
            override=Override.from_dict(override) if isinstance(override, Mapping) and override else None,
            good=strings(get("good")), intent=Intent.from_dict(mapping(get("intent"))) if get("intent") else None,
            newest=to_int(get("newest", -1)), forced=optional_str(get("forced")),
            rollback_phase=RollbackPhase(str(get("rollback_phase"))) if get("rollback_phase") else None,
            rollback_failures=to_int(get("rollback_failures", 0)), blocked_since=optional_number(get("blocked_since")),
            blocked_booted=to_int(get("blocked_booted", 0)),
            soak_short=strings(get("soak_short")),
            error=StepError.from_dict(error) if isinstance(error, Mapping) and error else None,
            before={k: str(v) for k, v in before.items()} if isinstance(before, Mapping) else None,
            paused=bool(get("paused", False)),
            wait=WaitHeld.from_dict(mapping(get("wait"))) if get("wait") else None,
            drift=[Drift.from_dict(mapping(d)) for d in array(get("drift"))])


GOOD_KEPT = 20  # a stage's good candidates kept in the state: rollbacks by hand go back one at a time
# A soak's verdict changes kept in the state (and in each soak entry's inputs): the gate reads the last one only (how
# long it has held), so a verdict that flaps through a 36-hour soak costs no more than one that never changes.
VERDICTS_KEPT = 10


@dataclass
class PipelineState:
    stages: dict[str, StageState] = field(default_factory=dict)
    candidates: dict[str, CandidateStatus] = field(default_factory=dict)  # id -> where it is
    freezes: list[ManualFreeze] = field(default_factory=list)  # set by hand
    approvals: dict[str, list[Approval]] = field(default_factory=dict)  # "<candidate>/<stage>" -> approvals
    position: int = 0  # the ledger's sequence number this state covers
    started: int = 0  # candidates started so far: the next one's start order
    refused: list[str] = field(default_factory=list)  # the newest entries of a tick the fold did not admit (ids)

    def stage(self, name: str) -> StageState:
        return self.stages.setdefault(name, StageState())

    def candidate(self, cid: str) -> CandidateStatus:
        return self.candidates.setdefault(cid, CandidateStatus())

    def order(self, cid: str | None) -> int:
        found = self.candidates.get(str(cid))
        return found.order if found is not None else -1

    def to_dict(self) -> JSONObject:
        """Its JSON as a checkpoint keeps it: every field is JSON, or a record of JSON fields (a dict there)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JSONMapping) -> PipelineState:
        return cls({k: StageState.from_dict(mapping(v)) for k, v in mapping(data["stages"]).items()},
                   {k: CandidateStatus.from_dict(mapping(v)) for k, v in mapping(data["candidates"]).items()},
                   [ManualFreeze.from_dict(mapping(f)) for f in array(data["freezes"])],
                   {k: [Approval.from_dict(mapping(a)) for a in array(v)] for k, v in mapping(data["approvals"]).items()},
                   to_int(data["position"]), to_int(data.get("started", 0)), strings(data.get("refused")))


# 3: start orders, rollback phases, boots in their own streams; 4: ``before`` kept from the first deploy; 5: an intent
# as a record of its action and candidate; 6: the ledger in partitions, a tick's entries admitted by ``admitted``
CHECKPOINT_VERSION = 7  # 7: each stage's drift


def entry_id(candidate: str | None, stage: str | None, decision: str, at: float, salt: str = "") -> str:
    text = json.dumps([candidate, stage, decision, round(at, 6), salt])
    return "d-" + hashlib.sha256(text.encode()).hexdigest()[:12]



REASON_KEPT = 1000  # characters of a candidate's last reason the state keeps (the ledger keeps every word)
CANDIDATES_KEPT = 20  # candidates kept whole in the state; older finished ones keep their status and order only
FINISHED = ("superseded", "halted", "released")


def _short(reason: str) -> str:
    return reason if len(reason) <= REASON_KEPT else reason[:REASON_KEPT - 1] + "…"


def reported(state: PipelineState) -> set[str]:
    """The candidates whose boots ``release status`` and the dashboard count: one a stage runs, has in flight or rolls
    back to, one not finished, and one halted after the oldest a stage runs (the others' are in the ledger's boots
    streams): after 100 releases as few as after one."""
    held = {c for s in state.stages.values() for c in (s.current, s.last_good, s.rollback_to) if c}
    oldest = min((state.order(s.last_good) for s in state.stages.values() if s.last_good), default=-1)
    return {c for c, v in state.candidates.items()
            if c in held or v.status not in FINISHED or (v.status == "halted" and v.order > oldest)}


def compact(state: PipelineState) -> PipelineState:
    """The state as a checkpoint keeps it: its size does not grow with history (a finished candidate older than the
    newest ``CANDIDATES_KEPT`` leaves it: nothing can move it again but ``release promote``, which reads the ledger;
    the ledger keeps every word of it; approvals of halted ones and of the ones it lets go, go)."""
    ordered = sorted(state.candidates, key=state.order)
    for c in ordered[:-CANDIDATES_KEPT]:
        if state.candidates[c].status in FINISHED and not any(  # (a good one may be a stage's last good again)
                c in (s.current, s.last_good, s.forced, s.rollback_to) or c in s.ready or c in s.good
                for s in state.stages.values()):
            del state.candidates[c]
    # approvals of the ones that can never enter again go (a superseded or released one can, sent by hand: its stay,
    # or the state would differ with where its checkpoints fell)
    done = {c for c, v in state.candidates.items() if v.status == "halted"}
    state.approvals = {k: v for k, v in state.approvals.items()
                       if k.rsplit("/", 1)[0] in state.candidates and k.rsplit("/", 1)[0] not in done}
    return state



def _lapsed(freeze: ManualFreeze, stage: str | None, at: float) -> bool:
    """A freeze by hand whose end an entry of its stage (any stage's, for one of every stage) has passed: no decision
    reads it again, and the state lets it go (the ledger keeps it)."""
    return freeze.until is not None and freeze.until <= at and freeze.stage in ("*", stage)


# What only people decide (``release start``, ``promote``, ``freeze``, ``approve``): never admitted from a tick.
PEOPLE_KINDS = frozenset({Kind.START, Kind.FORCE, Kind.FREEZE, Kind.UNFREEZE, Kind.OVERRIDE, Kind.APPROVE})
REFUSED_KEPT = 20


def admitted(state: PipelineState, entry: Entry) -> bool:
    """Whether a tick's entry is one its tick may decide: of its own stage, not one of ``PEOPLE_KINDS``; a halt only of
    the candidate in flight there (the gate's: a halt by hand, which reaches the stages it passed, is people's); a
    candidate superseded only from the stage's own queue. IAM keeps a tick to its own partition; this keeps it to its
    own stage's decisions."""
    stage = entry.writer
    if stage is None:
        return True
    if entry.stage != stage or entry.decision in PEOPLE_KINDS:
        return False
    mine = state.stages.get(stage, StageState())
    if entry.decision is Kind.HALT:
        return entry.candidate is not None and entry.candidate == mine.current
    if entry.decision is Kind.SUPERSEDED:
        return entry.candidate in mine.ready
    return True


def apply(state: PipelineState, entry: Entry) -> None:
    """Fold one ledger entry into ``state``: the one place the meaning of each decision lives."""
    decision = entry.decision
    if not isinstance(decision, Kind):  # written by a newer version: passed over, never guessed at
        return
    if not admitted(state, entry):
        state.refused = (state.refused + [entry.id])[-REFUSED_KEPT:]
        return
    name, at = entry.stage, float(entry.at)
    cid = str(entry.candidate)
    inputs = entry.inputs
    if any(_lapsed(f, name, at) for f in state.freezes):
        state.freezes = [f for f in state.freezes if not _lapsed(f, name, at)]
    stage = state.stage(name) if name else None
    if decision is Kind.START:
        if cid in state.candidates:  # the same content started twice (at once): one candidate
            return
        state.candidates[cid] = CandidateStatus("queued", None, at, state.started, _short(entry.reason))
        state.started += 1
        for first in strings(inputs.get("ready_in")):
            state.stage(first).ready.append(cid)
    elif decision is Kind.SUPERSEDED:
        _moved(state.candidate(cid), "superseded", name, at, _short(entry.reason))
        state.candidate(cid).by_candidate = optional_str(inputs.get("by_candidate"))
        for s in state.stages.values():
            s.ready = [c for c in s.ready if c != cid]
            if s.forced == cid:
                s.forced = None
    elif decision is Kind.FORCE:
        assert stage is not None
        if cid in state.candidates and state.candidates[cid].status == "halted":
            return  # halted after ``release promote`` read the state: it goes nowhere
        stage.ready = [cid] + [c for c in stage.ready if c != cid]
        stage.forced = cid
        state.candidate(cid).status, state.candidate(cid).at = "queued", at
    elif decision is Kind.FREEZE:
        state.freezes.append(ManualFreeze(name or "*", entry.reason, at, optional_float(inputs.get("until")), entry.by))
    elif decision is Kind.UNFREEZE:
        state.freezes = [f for f in state.freezes if f.stage != name] if name else []  # one stage's, or all
    elif decision is Kind.OVERRIDE:
        assert stage is not None
        covers = inputs.get("covers")
        stage.override = Override(entry.candidate, entry.by, entry.reason, at, None if covers is None else strings(covers))
    elif decision is Kind.APPROVE:
        state.approvals.setdefault(f"{cid}/{name}", []).append(Approval(entry.by, at, entry.reason))
    elif decision is Kind.ERROR:
        if stage is not None:
            stage.error = StepError.from_dict({**inputs, "at": at, "candidate": entry.candidate})
    elif decision is Kind.RECOVERED:
        if stage is not None:
            stage.error = None
    elif decision is Kind.DRIFT:
        if stage is not None:
            stage.drift = [Drift.from_dict(mapping(d)) for d in array(inputs.get("drift"))]
    elif stage is not None:
        _apply_step(state, stage, decision, cid, str(name), at, entry)


def _moved(candidate: CandidateStatus, status: str, stage: str | None, at: float, reason: str | None = None) -> None:
    candidate.status, candidate.stage, candidate.at = status, stage, at
    if reason is not None:
        candidate.reason = reason


def _roll_back_stage(stage: StageState, cid: str, at: float, target: str | None) -> None:
    stage.paused, stage.drift = False, []  # what it runs is the rollback's to say now: the next tick reads it again
    stage.current, stage.step, stage.since, stage.rollback_to = cid, Step.ROLLING_BACK, at, target
    stage.waiting_for, stage.intent, stage.rollback_phase, stage.rollback_failures = None, None, RollbackPhase.DEPLOY, 0
    stage.blocked_since = None


def _apply_halt(state: PipelineState, stage: StageState, cid: str, name: str, at: float, entry: Entry) -> None:
    """A halt: the candidate in flight here (the gate's, or by hand), or by hand the stage's last good one. The stage
    rolls back to ``rollback_to``; the candidate leaves every queue and every stage: one it is in flight in rolls back
    to its last good, one that passed it rolls back to the good one before it (if nothing newer replaced it there)."""
    target = optional_str(entry.inputs.get("rollback_to"))
    _moved(state.candidate(cid), "halted", name, at, _short(entry.reason))
    passed = [c for c in stage.good if c != cid and getattr(state.candidates.get(c), "status", None) != "halted"]
    if target is not None and target not in passed:  # the writer read the stage before another halt took its target
        target = passed[-1] if passed else None  # away: the newest good one left
    for s in state.stages.values():
        s.ready = [c for c in s.ready if c != cid]
        if s.forced == cid:
            s.forced = None
    if cid != stage.current:  # by hand: the last good one (nothing of it in flight here)
        stage.good = [c for c in stage.good if c != cid]
        if stage.last_good == cid:
            stage.last_good = target
        if stage.step in (Step.DEPLOYING, Step.ROTATING, Step.SOAKING):  # another entered after the rollback read the
            return  # stage: it carries on (it replaces the halted one's images anyway), and rolls back to ``target`` if it fails
        if stage.step == Step.WAITING and stage.current is not None and stage.current not in stage.ready:
            stage.ready.insert(0, stage.current)  # the one waiting to enter waits again, after the rollback
    _roll_back_stage(stage, cid, at, target)
    for other in state.stages.values():
        if other is stage:
            continue
        if other.step == Step.ROLLING_BACK and other.rollback_to == cid:  # it rolls back *to* the halted one: to the good
            other.good = [c for c in other.good if c != cid]  # one before it instead, its deploy done again
            other.last_good = other.good[-1] if other.good else None
            _roll_back_stage(other, str(other.current), at, other.last_good)
        elif other.current == cid and other.step == Step.WAITING:
            other.current, other.step, other.waiting_for = None, Step.IDLE, None
        elif other.current == cid and other.step in (Step.DEPLOYING, Step.ROTATING, Step.SOAKING):  # a later stage it
            _roll_back_stage(other, cid, at, other.last_good)  # already entered: back too
        elif cid in other.good:  # a later stage it passed: back to what that stage ran before it
            was_last = other.last_good == cid
            other.good = [c for c in other.good if c != cid]
            if was_last:
                other.last_good = other.good[-1] if other.good else None
                if other.step in (Step.IDLE, Step.WAITING):
                    if other.step == Step.WAITING and other.current is not None and other.current not in other.ready:
                        other.ready.insert(0, other.current)
                    _roll_back_stage(other, cid, at, other.last_good)


def _apply_step(state: PipelineState, stage: StageState, decision: Kind, cid: str, name: str, at: float,
                entry: Entry) -> None:
    inputs = entry.inputs
    allowed = STEP_OF.get(decision)
    if allowed is not None and stage.step not in allowed:
        return
    if decision not in (Kind.WAIT, Kind.ENTER) and allowed is not None and stage.current != cid:
        return
    if decision is Kind.HALT and stage.step == Step.ROLLING_BACK:
        return
    if STEP_OF.get(decision) == (Step.ROLLING_BACK,) and "rollback_to" in inputs and \
            inputs["rollback_to"] != stage.rollback_to:
        return  # a step of a rollback to a target a halt has since changed: its rollback starts again
    if decision in (Kind.WAIT, Kind.ENTER) and state.candidate(cid).status in ("halted", "superseded"):
        return  # halted (or given way) after the tick read the state: it enters nothing, whatever the tick thought
    if decision is Kind.ENTER and stage.forced != cid and state.order(cid) <= stage.newest:
        return  # older than one the stage already ran, and not sent by hand: a stage only moves forward
    if decision is Kind.WAIT:
        stage.current, stage.step, stage.waiting_for = cid, Step.WAITING, entry.reason
        stage.wait = WaitHeld.of(inputs)
        stage.opens_at = optional_number(mapping(inputs.get("decision")).get("opens_at"))
    elif decision is Kind.ENTER:
        stage.current, stage.step, stage.since, stage.waiting_for = cid, Step.DEPLOYING, at, None
        stage.ready = [c for c in stage.ready if c != cid]
        stage.forced = None if stage.forced == cid else stage.forced
        stage.newest = max(stage.newest, state.order(cid))
        if stage.override is not None and not stage.override.for_candidate(cid):
            stage.override = None  # another candidate's: the one entering keeps its own through its deploy
        stage.verdicts, stage.results, stage.rotated_at, stage.entered_at = [], 0, None, at
        stage.blocked_since, stage.soak_short = None, []
        _moved(state.candidate(cid), "in flight", name, at)
    elif decision in INTENDED:
        stage.intent = Intent(decision, cid)
        before = inputs.get("before")
        if decision is Kind.DEPLOY and stage.before is None and isinstance(before, Mapping):
            stage.before = {family: str(image) for family, image in before.items()}
    elif decision is Kind.DEPLOYED:
        stage.intent, stage.step, stage.since = None, Step.ROTATING, at
    elif decision is Kind.BLOCKED:  # written at a first block, and at a block after the rotation moved on: from now
        stage.blocked_since, stage.blocked_booted = at, to_int(inputs.get("booted", 0))
        stage.waiting_for = entry.reason
    elif decision is Kind.PAUSED:  # a freeze is not a budget's block: the patience starts again after it
        stage.paused, stage.waiting_for, stage.blocked_since = True, entry.reason, None
    elif decision is Kind.RESUMED:
        stage.paused, stage.blocked_since = False, None
    elif decision is Kind.ROTATED:
        stage.paused = False
        stage.intent, stage.step, stage.since, stage.rotated_at = None, Step.SOAKING, at, at
        stage.waiting_for, stage.blocked_since = "the soak", None
    elif decision is Kind.VERDICT:
        said = mapping(inputs["verdict"])
        change = VerdictChange(at, str(said["verdict"]), _short(str(said["reason"])))
        stage.verdicts = (stage.verdicts + [change])[-VERDICTS_KEPT:]
        stage.results = to_int(inputs.get("results", stage.results))
    elif decision is Kind.SOAK:
        gate = mapping(inputs.get("decision"))
        stage.waiting_for, stage.opens_at = entry.reason, optional_number(gate.get("opens_at"))
        stage.soak_short = strings(gate.get("unmet"))
        stage.results = to_int(inputs.get("results", stage.results))
    elif decision is Kind.PROMOTE:
        stage.good = (stage.good + [cid])[-GOOD_KEPT:]
        stage.last_good, stage.current, stage.step, stage.since, stage.waiting_for = cid, None, Step.IDLE, at, None
        stage.verdicts, stage.soak_short, stage.override = [], [], None
        _moved(state.candidate(cid), "passed", name, at, _short(entry.reason))
        for nxt in strings(inputs.get("ready_in")):
            state.stage(nxt).ready.append(cid)
        if not inputs.get("ready_in"):
            state.candidates[cid].status = "released"
    elif decision is Kind.HALT:
        _apply_halt(state, stage, cid, name, at, entry)
    elif decision is Kind.ROLLBACK_DEPLOYED:
        stage.intent, stage.rollback_phase = None, RollbackPhase.ROTATE
        stage.waiting_for = "the rollback's rotation"
    elif decision is Kind.ROLLBACK_FAILED:
        stage.intent = None
        stage.rollback_failures += 1
        stage.waiting_for = f"the rollback's rotation did not finish ({stage.rollback_failures} time(s)): retried"
    elif decision is Kind.ROLLED_BACK:
        stage.intent, stage.current, stage.step, stage.since, stage.rollback_to = None, None, Step.IDLE, at, None
        stage.waiting_for, stage.rollback_phase, stage.rollback_failures, stage.verdicts = None, None, 0, []
