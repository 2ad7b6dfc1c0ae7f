"""The release pipeline as operators drive it: record a candidate, read where every candidate is and what every
decision was, replay a decision, freeze and unfreeze stages, approve a candidate into a stage.

Everything is read and checked before anything is written: a mistake is one line, exit 2, and the ledger unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.settings import parse_settings
from platformctl.app.platform import Platform
from platformctl.app.release_source import infra_revision
from platformctl.app.rotation import check_gate_windows
from platformctl.app.stage_operations import StageOperator, booted_instances
from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.humanize import parse_duration
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.nodegroups import NodeGroups
from platformctl.kernel.state import StateStore, open_store
from platformctl.kernel.who import who
from release_pipeline.candidates import Candidate, make_candidate, read_lock, stage_images
from release_pipeline.fold import Entry, PipelineState, reported
from release_pipeline.held import CandidateStatus
from release_pipeline.ledger import Ledger, stage_lease
from release_pipeline.pipeline import Pipeline, load_pipeline
from release_pipeline.replay import replay

if TYPE_CHECKING:
    from release_pipeline.reconcile import TickReport

DEFAULT_LEDGER = ".platformctl/release.db"


def ledger_of(platform: Platform, pipeline: Pipeline, spec: str | None, existing: bool = True) -> Ledger:
    """The ledger's store: ``--ledger``, else the pipeline file's ``ledger``, else ``.platformctl/release.db`` in the
    checkout the pipeline file is in. ``existing`` (every command but ``release start``, which makes the first one):
    a ledger that is not there is exit 2, never a new empty one that a mistyped path would freeze or tick instead."""
    chosen = spec or pipeline.ledger
    if chosen is None:
        chosen = str(Path(pipeline.source).resolve().parent.parent / DEFAULT_LEDGER)
        if not existing:
            Path(chosen).parent.mkdir(parents=True, exist_ok=True)
    try:
        store: StateStore = open_store(chosen, existing, target=platform.environment.aws)
    except PlatformError as exc:  # the ledger is named by --ledger or the pipeline file, not --state
        where = {"file": pipeline.source, "field": "ledger"} if spec is None and pipeline.ledger else {"field": "--ledger"}
        raise PlatformError(exc.detail, **where) from None
    return Ledger(store, pipeline.names)


def _default_lock(platform: Platform, relative: str) -> Path:
    """The lock file ``ami build`` writes: the local region's while one runs here, else the stack file's."""
    region = platform.region
    return region.image_lock if region is not None else (platform.infra_dir / relative).resolve()


@dataclass(frozen=True)
class StartRequest:
    pipeline_file: Path | None = None
    lock_file: Path | None = None
    note: str = ""
    ledger: str | None = None


@dataclass(frozen=True)
class Started:
    candidate: Candidate
    new: bool
    ledger: str


def start_candidate(platform: Platform, request: StartRequest) -> Started:
    """Record the lock file's images, for every stage of the pipeline, as one immutable candidate."""
    pipeline = load_pipeline(request.pipeline_file)
    check_gate_windows(pipeline)  # a gate that could never pass: exit 2 before anything is touched
    stages = [platform.stage(name) for name in pipeline.names]
    settings = {s.name: parse_settings(dict(platform.stack_config(s.name)), s.name, s.source) for s in stages}
    lock_path = request.lock_file or _default_lock(platform, settings[stages[0].name].image_lock)
    lock = read_lock(lock_path)
    images = [stage_images(s, settings[s.name], lock, str(lock_path)) for s in stages]
    revision = infra_revision(platform.infra_dir, lock_path)  # checked before the ledger is opened: a refusal writes nothing
    ledger = ledger_of(platform, pipeline, request.ledger, existing=False)  # the first start makes it
    at = platform.now(pipeline.names[0])  # the first stage's clock
    candidate = make_candidate(images, revision, request.note, at, who(platform.aws))
    new = ledger.add_candidate(candidate)
    if new:  # keyed by the candidate: two starts of the same content at once make one entry (and the fold one candidate)
        ledger.append(candidate.id, None, "start", at, request.note or "started", {"ready_in": [pipeline.names[0]],
                      "lock_file": str(lock_path), "pipeline": pipeline.digest}, candidate.created_by,
                      key=f"start-{candidate.id}")
    return Started(ledger.candidate(candidate.id) or candidate, new, ledger.store.location)


@dataclass(frozen=True)
class LedgerRequest:
    pipeline_file: Path | None = None
    ledger: str | None = None
    stage: str | None = None


def open_pipeline(platform: Platform, request: LedgerRequest, existing: bool = True) -> tuple[Pipeline, Ledger]:
    """The pipeline file and its ledger, which must exist (only ``release start`` makes one)."""
    pipeline = load_pipeline(request.pipeline_file)
    if request.stage is not None:
        pipeline.stage(request.stage)  # an unknown stage is exit 2 before anything is read
    return pipeline, ledger_of(platform, pipeline, request.ledger, existing)


def pipeline_status(platform: Platform, request: LedgerRequest, aws: bool = True) -> dict[str, Any]:
    """Where every candidate is: per stage the one in flight, the last good one, the step and what it waits for;
    ``aws`` False: the instances each candidate booted from the ledger alone (``candidate_report``)."""
    pipeline, ledger = open_pipeline(platform, request, existing=True)
    state = ledger.state()
    stages: dict[str, JSONObject] = {}
    for name in pipeline.names:
        s = state.stage(name)
        lease = ledger.store.lease(stage_lease(name))
        stages[name] = {"current": s.current, "last_good": s.last_good, "step": s.step, "waiting_for": s.waiting_for,
                        "opens_at": s.opens_at, "since": s.since, "soak_started": s.rotated_at, "ready": s.ready,
                        "rollback": {"to": s.rollback_to, "phase": s.rollback_phase, "failures": s.rollback_failures,
                                     "left": s.waiting_for,
                                     # no good candidate here: back to the images it ran before the halted one's deploy
                                     "before": s.before if s.rollback_to is None else None}
                        if s.step == "rolling-back" else None,
                        "error": s.error.to_dict() if s.error else None, "blocked_since": s.blocked_since,
                        "tick_lease": {"holder": lease.holder, "expires": lease.expires,
                                       "live": not lease.expired(time.time())} if lease else None}
    return {"ledger": ledger.store.location, "pipeline": pipeline.source, "stages": stages,
            "candidates": candidate_report(ledger, state, platform.aws if aws else None), "freezes": [f.to_dict() for f in state.freezes],
            "refused": state.refused}


def candidate_report(ledger: Ledger, state: PipelineState, target: AwsTarget | None) -> dict[str, Any]:
    """Each candidate: where it is, why, and how many instances ever booted its new images (asking EC2 in ``target``
    too; None: from what the ledger recorded alone)."""
    out = {}
    seen: set[str] = set()  # the images of every earlier candidate
    aws = target is not None
    aws_reachable = aws
    seams: dict[str, NodeGroups] = {}  # one per region for the whole report, not three clients per candidate
    counted = reported(state)
    for c in sorted(ledger.recorded(state.candidates).values(), key=lambda c: (state.order(c.id), c.created_at)):
        where = state.candidates.get(c.id) or CandidateStatus("finished")
        new = {n: sorted(s.image_ids - seen) for n, s in c.stages.items()}
        seen |= c.image_ids()
        said: dict[str, Any] = {"status": where.status, "stage": where.stage, "reason": where.reason or None,
                "superseded_by": where.by_candidate, "note": c.note, "created_at": c.created_at,
                "created_by": c.created_by, "infra_revision": c.infra_revision,
                "images": {n: s.images for n, s in c.stages.items()}, "new_images": new}
        if c.id not in counted:  # finished, and no stage runs it: its boots stay in the ledger, not counted again
            out[c.id] = {**said, "instances_booted": None, "instances_booted_by_stage": {},
                         "instances_booted_first_light": None, "instances_booted_first_light_by_stage": {},
                         "instances_booted_in_waves_by_stage": {}, "image_builders_booted_by_stage": {},
                         "instances_booted_from": "not counted: finished, and no stage runs it"}
            continue
        recorded, lit = ledger.boots_and_first_light(c.id)
        builders: dict[str, int] = {}
        asked = booted_instances(c, new, target, builders=builders, seams=seams) if target and aws_reachable else None
        aws_reachable = aws_reachable and asked is not None  # one failure: the rest of the report from the ledger only
        # What AWS still shows, and what the ledger saw booting the new images at the end of each rotation.
        booted = {n: sorted(set((asked or {}).get(n, [])) | {r.split("/")[1] for r in recorded.get(n, set())
                                                             if r.split("/")[0] in new[n]}) for n in new}
        first = {n: len(set(ids) & {r.split("/")[1] for r in lit.get(n, set())}) for n, ids in booted.items()}
        out[c.id] = {**said, "instances_booted": sum(len(ids) for ids in booted.values()),
                     "instances_booted_by_stage": {n: len(ids) for n, ids in booted.items()},
                     # of which first light's (one a pool, judged before any workload moved) and the waves'
                     "instances_booted_first_light": sum(first.values()),
                     "instances_booted_first_light_by_stage": first,
                     "instances_booted_in_waves_by_stage": {n: len(ids) - first[n] for n, ids in booted.items()},
                     "image_builders_booted_by_stage": {n: builders.get(n, 0) for n in new},
                     "instances_booted_from": "ec2 and the ledger" if asked is not None else "the ledger (AWS not reachable)"
                     if aws else "the ledger"}
    return out


def pipeline_history(platform: Platform, request: LedgerRequest) -> list[dict[str, Any]]:
    """Every entry of the ledger, oldest first (of one stage, when given)."""
    _, ledger = open_pipeline(platform, request, existing=True)
    return [e.as_stored() for _, e in ledger.entries() if request.stage is None or e.stage == request.stage]


def replay_decision(platform: Platform, request: LedgerRequest, decision_id: str) -> dict[str, Any]:
    _, ledger = open_pipeline(platform, request, existing=True)
    entry = ledger.entry(decision_id)
    if entry is None:
        raise PlatformError(f"no decision {decision_id!r} in the ledger {ledger.store.location}", field="DECISION")
    return replay(entry)


@dataclass(frozen=True)
class FreezeRequest:
    stage: str | None  # None: every stage
    reason: str
    until: str | None = None  # a duration from now (4h) or an ISO time
    pipeline_file: Path | None = None
    ledger: str | None = None


def _until(text: str | None) -> tuple[str, float] | None:
    """``--until`` read: ("after", seconds) for a duration from now, ("at", instant) for a time with its offset."""
    if text is None:
        return None
    try:
        return "after", float(parse_duration(text))
    except ValueError:
        pass
    from datetime import datetime

    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise PlatformError(f"{text!r} is neither a duration (4h) nor an ISO time (2026-12-24T18:00+01:00)",
                            field="--until") from None
    if instant.tzinfo is None:
        raise PlatformError(f"{text!r} has no offset: say which zone (2026-12-24T18:00+01:00, or Z)", field="--until")
    return "at", instant.timestamp()


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def freeze(platform: Platform, request: FreezeRequest) -> Entry:
    if not request.reason.strip():
        raise PlatformError("say why", field="--reason")
    until = _until(request.until)  # read before anything is opened or written
    pipeline, ledger = open_pipeline(platform, LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    now = platform.now(request.stage or pipeline.names[0])
    if until is not None and until[0] == "at" and until[1] <= now:
        raise PlatformError(f"{request.until} is in the past (the stage's clock says {_iso(now)})", field="--until")
    end = None if until is None else until[1] if until[0] == "at" else now + until[1]
    return ledger.append(None, request.stage, "freeze", now, request.reason, {"until": end, "pipeline": pipeline.digest},
                         who(platform.aws))


def unfreeze(platform: Platform, request: FreezeRequest) -> Entry:
    pipeline, ledger = open_pipeline(platform, LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    return ledger.append(None, request.stage, "unfreeze", platform.now(request.stage or pipeline.names[0]), request.reason or "unfrozen",
                         {}, who(platform.aws))


@dataclass(frozen=True)
class ApproveRequest:
    candidate: str
    stage: str
    reason: str = ""
    pipeline_file: Path | None = None
    ledger: str | None = None
    override_freeze: str | None = None  # why the candidate may enter during a freeze (recorded)


@dataclass(frozen=True)
class Approved:
    """An approval, and the override of the freeze in force that came with it."""

    approval: Entry
    override: Entry | None = None

    def to_dict(self) -> dict[str, Any]:
        """As ``release approve -o json`` prints it: the approval's entry, with the override's under ``override``."""
        return {**self.approval.to_dict(), **({"override": self.override.to_dict()} if self.override else {})}


def approve(platform: Platform, request: ApproveRequest) -> Approved:
    """Approve a candidate into a stage: only one that may still enter it (waiting there, or ready and not about to
    give way to a newer one). With ``override_freeze``, let it enter during the freeze in force now, until that ends."""
    from release_pipeline.gates import freezes_in_force
    from release_pipeline.reconcile import eligible

    pipeline, ledger = open_pipeline(platform, LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    if request.override_freeze is not None and not request.override_freeze.strip():
        raise PlatformError("say why the freeze is overridden", field="--override-freeze")
    from platformctl.app.approvers import approver

    by, caller = approver(platform.aws, pipeline, ledger)  # who, before anything else is read
    state = ledger.state()
    stage = state.stage(request.stage)
    if ledger.candidate(request.candidate) is None:
        raise PlatformError(f"no candidate {request.candidate!r} in the ledger {ledger.store.location}", field="CANDIDATE")
    where = state.candidates.get(request.candidate) or CandidateStatus("recorded")
    if where.status == "superseded":
        raise PlatformError(f"{request.candidate} was superseded by {where.by_candidate} (in {where.stage}): "
                            f"approve {where.by_candidate} instead, or send it by hand (`release promote`)",
                            field="CANDIDATE")
    waiting = request.candidate in stage.ready or (stage.step == "waiting" and stage.current == request.candidate)
    if not waiting:
        raise PlatformError(f"{request.candidate} is not waiting to enter {request.stage} (it is "
                            f"{where.status})", field="CANDIDATE")
    _, gone = eligible(pipeline, state, request.stage)
    newer = dict(gone).get(request.candidate)
    if newer is not None:
        raise PlatformError(f"{request.candidate} gives way to the newer {newer} in {request.stage} (onNewer: "
                            f"{pipeline.on_newer}; a stage only moves forward): approve {newer} instead", field="CANDIDATE")
    now = platform.now(request.stage or pipeline.names[0])
    covers: list[str] = []
    if request.override_freeze is not None:
        frozen = freezes_in_force(pipeline.freezes, state.freezes, request.stage, now)
        if not frozen:
            raise PlatformError(f"no freeze holds {request.stage} now ({_iso(now)}): nothing to override (an override "
                                "applies to the freeze in force when it is given, and ends with it)", field="--override-freeze")
        covers = [f.key for f in frozen]
    approval = ledger.append(request.candidate, request.stage, "approve", now, request.reason or "approved",
                             {"pipeline": pipeline.digest, "caller": caller}, by, salt=by)
    if request.override_freeze is None:
        return Approved(approval)
    override = ledger.append(request.candidate, request.stage, "override", now, request.override_freeze,
                             {"pipeline": pipeline.digest, "freezes": [f.to_dict() for f in state.freezes], "covers": covers,
                              "caller": caller}, by, salt=by)
    return Approved(approval, override)


@dataclass(frozen=True)
class PromoteRequest:
    candidate: str
    stage: str
    reason: str
    pipeline_file: Path | None = None
    ledger: str | None = None


def promote(platform: Platform, request: PromoteRequest) -> Entry:
    """Send a candidate to a stage by hand, older than what the stage ran or superseded: it enters next (under the
    stage's freezes and approvals as any other), recorded with who and why. A halted one is refused."""
    if not request.reason.strip():
        raise PlatformError("say why", field="--reason")
    pipeline, ledger = open_pipeline(platform, LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    if ledger.candidate(request.candidate) is None:
        raise PlatformError(f"no candidate {request.candidate!r} in the ledger {ledger.store.location}", field="CANDIDATE")
    state = ledger.state()
    where = state.candidates.get(request.candidate) or CandidateStatus("recorded")
    if where.status == "halted":
        raise PlatformError(f"{request.candidate} was halted in {where.stage}: it goes nowhere (start the change "
                            "again as a new candidate)", field="CANDIDATE")
    stage = state.stage(request.stage)
    if stage.current == request.candidate and stage.step not in ("idle", "waiting"):
        raise PlatformError(f"{request.candidate} is in flight in {request.stage} already ({stage.step})", field="CANDIDATE")
    now = platform.now(request.stage)
    return ledger.append(request.candidate, request.stage, "force", now, f"sent to {request.stage} by hand: {request.reason}",
                         {"pipeline": pipeline.digest, "newest_ran": stage.newest}, who(platform.aws))


@dataclass(frozen=True)
class RollbackRequest:
    stage: str
    reason: str
    pipeline_file: Path | None = None
    ledger: str | None = None


def rollback(platform: Platform, request: RollbackRequest) -> Entry:
    """Halt a stage's candidate by hand and roll the stage back as one unit: the one in flight there (back to the last
    good one), else the last good one (back to the good one before it). The next tick deploys and rotates back; the
    halted candidate never enters a later stage."""
    if not request.reason.strip():
        raise PlatformError("say why", field="--reason")
    pipeline, ledger = open_pipeline(platform, LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    from release_pipeline.reconcile import rollback_by_hand

    stage = ledger.state().stage(request.stage)
    cid, target = rollback_by_hand(stage, request.stage)
    now = platform.now(request.stage)
    return ledger.append(cid, request.stage, "halt", now, f"rolled back by hand: {request.reason}",
                         {"manual": True, "rollback_to": target, "step": stage.step, "pipeline": pipeline.digest},
                         who(platform.aws))


# ---------------------------------------------------------------------------------------------- the tick


@dataclass(frozen=True)
class TickRequest:
    pipeline_file: Path | None = None
    ledger: str | None = None
    lease_ttl: float = 60.0
    stages: tuple[str, ...] = ()  # only these stages (default: every stage)
    kubeconfig: str | None = None  # the clusters' contexts (default: the local region's, or $KUBECONFIG)


class EveryStageHeld(PlatformError):
    """Every stage the tick would act in is held by another tick: nothing was done."""


@dataclass(frozen=True)
class Ticked:
    """What a tick did: its report (the entries it wrote, what waited, the stages other ticks held, each stage's fault),
    the holders of the stages it could not take, and the stages whose fault needs someone (``failing``)."""

    ledger: str
    report: TickReport
    holders: dict[str, str]
    failing: list[str]

    def to_dict(self) -> dict[str, Any]:
        """As ``release tick -o json`` prints it."""
        return {"ledger": self.ledger, **self.report.to_dict(), "holders": self.holders, "failing": self.failing}


def release_tick(platform: Platform, request: TickRequest, say: Any = lambda message: None) -> Ticked:
    """Advance every candidate at most one step, each stage under its own lease (``EveryStageHeld`` when other ticks
    hold every stage this one would act in)."""
    from platformctl.kernel.state.lease import holder_id
    from release_pipeline.reconcile import tick

    pipeline = load_pipeline(request.pipeline_file)
    check_gate_windows(pipeline)  # a gate that could never pass: exit 2 before anything is touched
    for name in request.stages:
        pipeline.stage(name)  # a stage the pipeline does not hold is exit 2 before any lease is taken
    ledger = ledger_of(platform, pipeline, request.ledger)
    holders: dict[str, str] = {}
    holder = holder_id()
    hold = ledger.stage_leases(holder, request.lease_ttl, holders)
    work = platform.home / "candidates"  # the lock files deploys read: $PLATFORMCTL_HOME, else the checkout's .platformctl
    actions = StageOperator(platform, pipeline, work, request.lease_ttl, request.kubeconfig, ledger, holder)
    report = tick(pipeline, ledger, actions, who(platform.aws), say, request.stages, hold)
    acting = [n for n in pipeline.names if not request.stages or n in request.stages]
    if acting and set(report.held) == set(acting):
        raise EveryStageHeld("another tick holds the lease of every stage this one would act in ("
                             + ", ".join(f"{n}: {holders.get(n, '?')}" for n in acting) + "): nothing done")
    return Ticked(ledger.store.location, report, holders, [e.stage for e in report.failing(time.time())])
