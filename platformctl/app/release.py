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
from platformctl.app.release_status import PipelineStatus, status_of
from platformctl.app.rotation import check_gate_windows
from platformctl.app.stage_operations import StageOperator
from platformctl.kernel.errors import PlatformError, Unavailable
from platformctl.kernel.humanize import parse_duration
from platformctl.kernel.state import StateStore, open_store
from platformctl.kernel.who import who
from release_pipeline.candidates import Candidate, make_candidate, read_lock, stage_images
from release_pipeline.fold import Entry
from release_pipeline.held import CandidateStatus
from release_pipeline.ledger import Ledger
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
    candidate = make_candidate(images, revision, request.note, at, who(platform.identity_target))
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


def pipeline_status(platform: Platform, request: LedgerRequest, aws: bool = True) -> PipelineStatus:
    """Where every candidate is (``release status``); ``aws`` False: the instances each candidate booted from the ledger
    alone."""
    pipeline, ledger = open_pipeline(platform, request, existing=True)
    return status_of(pipeline, ledger, platform.aws if aws else None)


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
        seconds: float | None = float(parse_duration(text))
    except ValueError:
        seconds = None
    if seconds is not None:
        if seconds <= 0:
            raise PlatformError(f"{text!r} is no time: a freeze lasts a while (4h), or until unfrozen (leave --until out)",
                                field="--until")
        return "after", seconds
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
                         who(platform.identity_target))


def tell_stages(platform: Platform, request: FreezeRequest) -> list[str]:
    """After a ``freeze`` or ``unfreeze``: write the freezes by hand that now bind each stage it names to the stage's own
    store (``frozen/<stage>``) at once, as the stage's next tick would, so the stage's scheduled rotation sees them even
    when no tick runs there. Best effort: a store that does not answer is said (one line each), and its tick writes
    the record within a minute."""
    from platformctl.app.stores import store_for
    from platformctl.kernel.state.frozen import HandFreeze, record_frozen

    pipeline, ledger = open_pipeline(platform, LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    state = ledger.state()
    said = []
    for name in [request.stage] if request.stage is not None else list(pipeline.names):
        now = platform.now(name)
        freezes = [HandFreeze(f.reason, f.at, f.until, f.by) for f in state.freezes
                   if f.stage in ("*", name) and (f.until is None or f.until > now)]
        try:
            store = store_for(platform, None, stage=name)
            try:
                record_frozen(store, name, freezes, now)
            finally:
                store.close()
        except (PlatformError, Unavailable) as exc:
            said.append(f"{name}: its own store did not take the freeze ({exc}); its next tick writes it there")
    return said


def unfreeze(platform: Platform, request: FreezeRequest) -> Entry:
    pipeline, ledger = open_pipeline(platform, LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    return ledger.append(None, request.stage, "unfreeze", platform.now(request.stage or pipeline.names[0]), request.reason or "unfrozen",
                         {}, who(platform.identity_target))


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

    by, caller = approver(platform.identity_target, pipeline, ledger)  # who, before anything else is read
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
                         {"pipeline": pipeline.digest, "newest_ran": stage.newest}, who(platform.identity_target))


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
                         who(platform.identity_target))


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
    report = tick(pipeline, ledger, actions, who(platform.identity_target), say, request.stages, hold)
    acting = [n for n in pipeline.names if not request.stages or n in request.stages]
    if acting and set(report.held) == set(acting):
        raise EveryStageHeld("another tick holds the lease of every stage this one would act in ("
                             + ", ".join(f"{n}: {holders.get(n, '?')}" for n in acting) + "): nothing done")
    return Ticked(ledger.store.location, report, holders, [e.stage for e in report.failing(time.time())])
