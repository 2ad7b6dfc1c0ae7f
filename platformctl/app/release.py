"""The release pipeline as operators drive it: record a candidate, read where every candidate is and what every
decision was, replay a decision, freeze and unfreeze stages, approve a candidate into a stage.

Everything is read and checked before anything is written: a mistake is one line, exit 2, and the ledger unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.settings import parse_settings
from platformctl.app.release_source import candidate_source, infra_revision
from platformctl.app.rotation import check_gate_windows
from platformctl.kernel.clock import WallClock
from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.errors import ApiFault, PlatformError
from platformctl.kernel.humanize import parse_duration
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.nodegroups import Booted, NodeGroupError, NodeGroups
from platformctl.kernel.state import StateStore, open_store
from platformctl.kernel.topology import load_stage, read_stack_config
from platformctl.kernel.who import who
from release_pipeline.candidates import Candidate, make_candidate, read_lock, stage_images
from release_pipeline.fold import PipelineState, reported
from release_pipeline.held import CandidateStatus
from release_pipeline.ledger import Ledger, stage_lease
from release_pipeline.pipeline import Pipeline, load_pipeline
from release_pipeline.replay import replay
from release_pipeline.rotation_result import ClusterRotation, FirstLightSaid, StageRotation

if TYPE_CHECKING:
    from e2e_canary.verdict import Verdict

DEFAULT_LEDGER = ".platformctl/release.db"


def ledger_of(pipeline: Pipeline, spec: str | None, existing: bool = True) -> Ledger:
    """The ledger's store: ``--ledger``, else the pipeline file's ``ledger``, else ``.platformctl/release.db`` in the
    checkout the pipeline file is in. ``existing`` (every command but ``release start``, which makes the first one):
    a ledger that is not there is exit 2, never a new empty one that a mistyped path would freeze or tick instead."""
    chosen = spec or pipeline.ledger
    if chosen is None:
        chosen = str(Path(pipeline.source).resolve().parent.parent / DEFAULT_LEDGER)
        if not existing:
            Path(chosen).parent.mkdir(parents=True, exist_ok=True)
    try:
        store: StateStore = open_store(chosen, existing)
    except PlatformError as exc:  # the ledger is named by --ledger or the pipeline file, not --state
        where = {"file": pipeline.source, "field": "ledger"} if spec is None and pipeline.ledger else {"field": "--ledger"}
        raise PlatformError(exc.detail, **where) from None
    return Ledger(store, pipeline.names)


def _default_lock(infra_dir: Path, relative: str) -> Path:
    """The lock file ``ami build`` writes: the local region's while one runs here, else the stack file's."""
    from platformctl.kernel import region_client

    info = region_client.running()
    return Path(info["image_lock"]) if info is not None else (infra_dir / relative).resolve()


@dataclass(frozen=True)
class StartRequest:
    pipeline_file: Path | None = None
    lock_file: Path | None = None
    note: str = ""
    ledger: str | None = None
    infra_dir: Path | None = None


@dataclass(frozen=True)
class Started:
    candidate: Candidate
    new: bool
    ledger: str


def start_candidate(request: StartRequest) -> Started:
    """Record the lock file's images, for every stage of the pipeline, as one immutable candidate."""
    pipeline = load_pipeline(request.pipeline_file)
    check_gate_windows(pipeline)  # a gate that could never pass: exit 2 before anything is touched
    stages = [load_stage(name, request.infra_dir) for name in pipeline.names]
    infra_dir = Path(stages[0].source).parent
    settings = {s.name: parse_settings(read_stack_config(Path(s.source)), s.name, s.source) for s in stages}
    lock_path = request.lock_file or _default_lock(infra_dir, settings[stages[0].name].image_lock)
    lock = read_lock(lock_path)
    images = [stage_images(s, settings[s.name], lock, str(lock_path)) for s in stages]
    revision = infra_revision(infra_dir, lock_path)  # checked before the ledger is opened: a refusal writes nothing
    ledger = ledger_of(pipeline, request.ledger, existing=False)  # the first start makes it
    at = AppStages(pipeline, request.infra_dir, Path.cwd()).now(pipeline.names[0])  # the first stage's clock
    candidate = make_candidate(images, revision, request.note, at, who())
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


def open_pipeline(request: LedgerRequest, existing: bool = True) -> tuple[Pipeline, Ledger]:
    """The pipeline file and its ledger, which must exist (only ``release start`` makes one)."""
    pipeline = load_pipeline(request.pipeline_file)
    if request.stage is not None:
        pipeline.stage(request.stage)  # an unknown stage is exit 2 before anything is read
    return pipeline, ledger_of(pipeline, request.ledger, existing)


def pipeline_status(request: LedgerRequest, aws: bool = True) -> dict[str, Any]:
    """Where every candidate is: per stage the one in flight, the last good one, the step and what it waits for;
    ``aws`` False: the instances each candidate booted from the ledger alone (``candidate_report``)."""
    pipeline, ledger = open_pipeline(request, existing=True)
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
            "candidates": candidate_report(ledger, state, aws), "freezes": [f.to_dict() for f in state.freezes],
            "refused": state.refused}


def candidate_report(ledger: Ledger, state: PipelineState, aws: bool = True) -> dict[str, Any]:
    """Each candidate: where it is, why, and how many instances ever booted its new images (asking EC2 too, unless
    ``aws`` is False: then from what the ledger recorded alone)."""
    out = {}
    seen: set[str] = set()  # the images of every earlier candidate
    aws_reachable = aws
    seams: dict[str, NodeGroups] = {}  # one per region for the whole report, not three clients per candidate
    from platformctl.kernel import region_client

    target = region_client.aws_target() if aws else None  # asked once (a local region's status is a request)
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
        asked = booted_instances(c, new, builders=builders, seams=seams, target=target) if aws_reachable else None
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


def booted_instances(candidate: Candidate, images: dict[str, list[str]], by_image: bool = False,
                     builders: dict[str, int] | None = None,
                     seams: dict[str, NodeGroups] | None = None, target: AwsTarget | None = None) -> dict[str, Any] | None:
    """Per stage, the instances (in any state, terminated ones too) that booted ``images`` in the stage's region as
    nodes (``by_image``: per image id), asked of the node-group seam; None when AWS cannot be asked (no credentials,
    nothing reachable, a refusal).

    An image build's builder boots the parent image to bake a child from it: no workload ever ran there, so it is no
    node the image reached; ``builders`` (stage -> count) hears of them. ``seams`` (region -> node groups) keeps the
    seams made here for the caller's next question; ``target`` the AWS they reach (default: ``aws_target()``)."""
    from platformctl.kernel import region_client
    from platformctl.kernel.nodegroups.aws import AutoScalingNodeGroups

    target = target or region_client.aws_target()
    if not target.configured:
        return None
    out: dict[str, Any] = {}
    seams = {} if seams is None else seams
    try:
        for name, ids in images.items():
            region = candidate.stages[name].region
            if ids and region not in seams:
                seams[region] = AutoScalingNodeGroups(region, quick=True, target=target)
            booted = seams[region].booted(ids) if ids else Booted()
            if builders is not None and booted.builders:
                builders[name] = builders.get(name, 0) + booted.builders
            out[name] = {k: list(v) for k, v in booted.by_image.items()} if by_image else booted.instances
    except (NodeGroupError, PlatformError, ApiFault):
        return None
    return out


def pipeline_history(request: LedgerRequest) -> list[dict[str, Any]]:
    """Every entry of the ledger, oldest first (of one stage, when given)."""
    _, ledger = open_pipeline(request, existing=True)
    return [e.as_stored() for _, e in ledger.entries() if request.stage is None or e.stage == request.stage]


def replay_decision(request: LedgerRequest, decision_id: str) -> dict[str, Any]:
    _, ledger = open_pipeline(request, existing=True)
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


def _stage_now(pipeline: Pipeline, stage: str | None, infra_dir: Path | None = None) -> float:
    """The clock a record about ``stage`` is stamped on (every stage's: the first's): the stage's own, as the tick's."""
    return AppStages(pipeline, infra_dir, Path.cwd()).now(stage or pipeline.names[0])


def freeze(request: FreezeRequest) -> dict[str, Any]:
    if not request.reason.strip():
        raise PlatformError("say why", field="--reason")
    until = _until(request.until)  # read before anything is opened or written
    pipeline, ledger = open_pipeline(LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    now = _stage_now(pipeline, request.stage)
    if until is not None and until[0] == "at" and until[1] <= now:
        raise PlatformError(f"{request.until} is in the past (the stage's clock says {_iso(now)})", field="--until")
    end = None if until is None else until[1] if until[0] == "at" else now + until[1]
    return ledger.append(None, request.stage, "freeze", now, request.reason, {"until": end, "pipeline": pipeline.digest},
                         who()).to_dict()


def unfreeze(request: FreezeRequest) -> dict[str, Any]:
    pipeline, ledger = open_pipeline(LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    return ledger.append(None, request.stage, "unfreeze", _stage_now(pipeline, request.stage), request.reason or "unfrozen",
                         {}, who()).to_dict()


@dataclass(frozen=True)
class ApproveRequest:
    candidate: str
    stage: str
    reason: str = ""
    pipeline_file: Path | None = None
    ledger: str | None = None
    override_freeze: str | None = None  # why the candidate may enter during a freeze (recorded)


def approve(request: ApproveRequest) -> dict[str, Any]:
    """Approve a candidate into a stage: only one that may still enter it (waiting there, or ready and not about to
    give way to a newer one). With ``override_freeze``, let it enter during the freeze in force now, until that ends."""
    from release_pipeline.gates import freezes_in_force
    from release_pipeline.reconcile import eligible

    pipeline, ledger = open_pipeline(LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    if request.override_freeze is not None and not request.override_freeze.strip():
        raise PlatformError("say why the freeze is overridden", field="--override-freeze")
    from platformctl.app.approvers import approver

    by, caller = approver(pipeline, ledger)  # who, before anything else is read
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
    now = _stage_now(pipeline, request.stage)
    covers: list[str] = []
    if request.override_freeze is not None:
        frozen = freezes_in_force(pipeline.freezes, state.freezes, request.stage, now)
        if not frozen:
            raise PlatformError(f"no freeze holds {request.stage} now ({_iso(now)}): nothing to override (an override "
                                "applies to the freeze in force when it is given, and ends with it)", field="--override-freeze")
        covers = [f.key for f in frozen]
    approval = ledger.append(request.candidate, request.stage, "approve", now, request.reason or "approved",
                             {"pipeline": pipeline.digest, "caller": caller}, by, salt=by).to_dict()
    if request.override_freeze is None:
        return approval
    override = ledger.append(request.candidate, request.stage, "override", now, request.override_freeze,
                             {"pipeline": pipeline.digest, "freezes": [f.to_dict() for f in state.freezes], "covers": covers,
                              "caller": caller}, by, salt=by).to_dict()
    return {**approval, "override": override}


@dataclass(frozen=True)
class PromoteRequest:
    candidate: str
    stage: str
    reason: str
    pipeline_file: Path | None = None
    ledger: str | None = None
    infra_dir: Path | None = None


def promote(request: PromoteRequest) -> dict[str, Any]:
    """Send a candidate to a stage by hand, older than what the stage ran or superseded: it enters next (under the
    stage's freezes and approvals as any other), recorded with who and why. A halted one is refused."""
    if not request.reason.strip():
        raise PlatformError("say why", field="--reason")
    pipeline, ledger = open_pipeline(LedgerRequest(request.pipeline_file, request.ledger, request.stage))
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
    now = AppStages(pipeline, request.infra_dir, Path.cwd()).now(request.stage)
    return ledger.append(request.candidate, request.stage, "force", now, f"sent to {request.stage} by hand: {request.reason}",
                         {"pipeline": pipeline.digest, "newest_ran": stage.newest}, who()).to_dict()


@dataclass(frozen=True)
class RollbackRequest:
    stage: str
    reason: str
    pipeline_file: Path | None = None
    ledger: str | None = None
    infra_dir: Path | None = None


def rollback(request: RollbackRequest) -> dict[str, Any]:
    """Halt a stage's candidate by hand and roll the stage back as one unit: the one in flight there (back to the last
    good one), else the last good one (back to the good one before it). The next tick deploys and rotates back; the
    halted candidate never enters a later stage."""
    if not request.reason.strip():
        raise PlatformError("say why", field="--reason")
    pipeline, ledger = open_pipeline(LedgerRequest(request.pipeline_file, request.ledger, request.stage))
    from release_pipeline.reconcile import rollback_by_hand

    stage = ledger.state().stage(request.stage)
    cid, target = rollback_by_hand(stage, request.stage)
    now = AppStages(pipeline, request.infra_dir, Path.cwd()).now(request.stage)
    return ledger.append(cid, request.stage, "halt", now, f"rolled back by hand: {request.reason}",
                         {"manual": True, "rollback_to": target, "step": stage.step, "pipeline": pipeline.digest},
                         who()).to_dict()


# ---------------------------------------------------------------------------------------------- the tick


def _first_light_said(lit: dict[str, Any] | None) -> FirstLightSaid | None:
    """A cluster's first light as a ledger entry keeps it: the verdict, its evidence and how many nodes it lit."""
    if not lit:
        return None
    return FirstLightSaid(lit.get("verdict"), lit.get("reason"), len(lit.get("nodes") or {}), sorted(lit.get("pools") or {}),
                          dict(lit.get("skipped") or {}), lit.get("seconds"))


class AppStages:
    """``StageActions`` as an operator would act: ``deploy_stage``, the rotation's ``prepare`` and ``rotate`` under
    the stage's rotation policy, and the canary verdict over the stage's own store, each on the stage's clock."""

    def __init__(self, pipeline: Pipeline, infra_dir: Path | None, work_dir: Path, lease_ttl: float = 60.0,
                 kubeconfig: str | None = None, ledger: Ledger | None = None, lease_holder: str | None = None) -> None:
        self.pipeline = pipeline
        self.infra_dir = infra_dir
        self.work_dir = work_dir
        self.lease_ttl = lease_ttl  # the rotation's leases last as long as the tick's
        self.kubeconfig = kubeconfig
        self.ledger = ledger  # a tick's: its deploys are recorded there before they begin, and stale locks cleared
        self.lease_holder = lease_holder  # the tick's lease holder (``holder_id``)

    def now(self, stage: str) -> float:
        from platformctl.kernel import region_client

        info = region_client.for_stage(region_client.running(), stage)
        if info is not None:
            return region_client.ServerClock(f"{info['kubernetes_endpoint']}/platformctl/v1/time").sync()
        return time.time()

    def deploy(self, stage: str, candidate: Candidate, rollback: bool = False) -> dict[str, Any]:
        import json

        from platformctl.app.deploy import deploy_stage, deployed_now

        lock = self.work_dir / f"{candidate.id}.lock.json"
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            lock.write_text(json.dumps(candidate.lock(), indent=2, sort_keys=True))
        except OSError as exc:
            raise PlatformError(f"cannot write the candidate's lock file {lock}: {exc.strerror}", field="PLATFORMCTL_HOME") from None
        # The candidate's own commit (its program, stack file, Kubernetes version and components) with its images: never
        # the checkout the tick runs in.
        from platformctl.kernel.topology import load_stage

        checkout = Path(load_stage(stage, self.infra_dir).source).parent
        source = candidate_source(candidate, checkout, self.work_dir, self.pipeline.repository)
        # EKS never takes a control plane back: a rollback past a version bump keeps the version the clusters have
        wanted = candidate.stages[stage].kubernetes_version if stage in candidate.stages else None
        have = max(deployed_now(stage, self.infra_dir)[1].values(), key=minor_version, default=None) if rollback else None
        keep = have if wanted and have and minor_version(have) > minor_version(wanted) else None
        said, cleared = self._deploy_clearing_stale_lock(
            stage, candidate.id, lambda: deploy_stage(stage, lock, source, over_pins=True, kubernetes_version=keep).to_dict())
        return {"summary": said["summary"], "images": said["images"], "revision": candidate.infra_revision,
                "source": "the checkout" if source == checkout else f"commit {candidate.infra_revision[:12]}",
                **({"kubernetes_version": f"stays {keep}: EKS never takes a control plane back to {wanted}"} if keep else {}),
                **({"cleared_lock": cleared} if cleared else {})}

    def _deploy_clearing_stale_lock(self, stage: str, candidate: str,
                                    deploy: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], JSONObject | None]:
        """``deploy()``, recorded in the ledger (the lock holder its stack lock will name) before it begins. A stack
        lock that a tick's deploy took, by a lease that is not this tick's (the stage's lease is this tick's now: that
        tick's is gone) and older than ``STALE_LOCK_SECONDS`` (past the deploy's own limit: its update is over) is
        cleared, recorded, and the deploy made; any other lock is the stage's busy fault (``DeployLocked``)."""
        from platformctl.app.deploy import stage_deployer
        from platformctl.kernel.deployer import STALE_LOCK_SECONDS, DeployLocked

        if self.ledger is None:
            return deploy(), None
        deployer, spec = stage_deployer(stage, self.infra_dir)
        self.ledger.add_deploy(stage, {"lock_holder": deployer.lock_holder(), "lease_holder": self.lease_holder,
                                       "at": self.now(stage), "candidate": candidate})
        try:
            return deploy(), None
        except DeployLocked as locked:
            now = self.now(stage)
            if locked.since is None or now - locked.since < STALE_LOCK_SECONDS:
                raise
            left = next((d for d in self.ledger.deploys_before_lock(stage, locked.since)
                         if d.get("lease_holder") != self.lease_holder and locked.taken_by(str(d["lock_holder"]))), None)
            if left is None:
                raise  # not a tick's lock: a person's update, for them to end
            cleared: JSONObject = {"lock": locked.holder, "age_seconds": round(now - locked.since), "left_by": left["lease_holder"],
                       "deploy_at": left["at"], "cleared_by": self.lease_holder}
            self.ledger.add_deploy(stage, {"cleared": cleared, "at": now})  # fenced: this tick still holds the stage
            deployer.cancel(spec)
        return deploy(), cleared

    def deployed(self, stage: str) -> dict[str, str]:
        from platformctl.app.deploy import deployed_now

        return deployed_now(stage, self.infra_dir)[0]

    def resume(self, stage: str, reason: str) -> None:
        from platformctl.app.rotation import ControlRequest, control_rotations

        try:
            control_rotations(ControlRequest("resume", stage=stage, infra_dir=self.infra_dir, reason=reason))
        except (PlatformError, ApiFault):  # nothing paused (a rotation that ended on its own): nothing to resume
            pass

    def _pause_when(self, stage: str, hold: Any, done: Any, clock: Any) -> tuple[Any, list[str]]:
        """A watcher that, while the rotation runs, asks ``hold`` every few seconds of the clusters' clock (a minute of
        a local region's, whose time runs faster than the wall's) and, the moment a freeze holds the stage, journals a
        pause of its rotations (each stops at its next step, as ``rotate pause`` stops it)."""
        import threading

        from platformctl.app.rotation import ControlRequest, control_rotations

        said: list[str] = []
        beat = 60.0 if getattr(clock, "speed", 1.0) > 1 else 3.0

        def watch() -> None:
            while not done.is_set():
                clock.sleep(beat)
                if done.is_set():
                    return
                try:
                    why = hold()
                except Exception:  # the ledger unreachable for a moment: asked again at the next beat
                    continue
                if why is not None:
                    control_rotations(ControlRequest("pause", stage=stage, infra_dir=self.infra_dir,
                                                     reason=f"the release pipeline's freeze: {why}"))
                    said.append(why)
                    return

        thread = threading.Thread(target=watch, name=f"freeze watch {stage}", daemon=True)
        thread.start()
        return thread, said

    def rotate(self, stage: str, candidate: Candidate, rollback: bool = False, hold: Any = None) -> StageRotation:
        import threading
        from dataclasses import replace

        from platformctl.app.rotation import RunRequest, prepare, rotate

        policy = self.pipeline.policy_path(stage)
        if policy is None:
            raise PlatformError("names no rotationPolicy: the tick cannot rotate the stage", file=self.pipeline.source,
                                field=f"stages[{self.pipeline.names.index(stage)}].rotationPolicy")
        if rollback:
            self._end_halted(stage, candidate)
        rotation = prepare(RunRequest(policy, stage=stage, kubeconfig=self.kubeconfig, infra_dir=self.infra_dir,
                                      lease_ttl=self.lease_ttl))
        if rollback:  # back to what passed: not held by the canaries the taken-away image fails
            rotation.policy = rotation.policy.model_copy(update={"health_gate": None, "first_light": None})
            rotation.options = replace(rotation.options, canary=None)
        elif self._proven(stage):  # its first light passed in the first stage: one canary period here will do
            rotation.options = replace(rotation.options, first_light_proven=True)
        done = threading.Event()
        clock = next(iter(rotation.targets.values())).cluster.clock if rotation.targets else WallClock()
        watcher, frozen = self._pause_when(stage, hold, done, clock) if hold is not None and not rollback else (None, [])
        try:
            result = rotate(rotation)
        finally:
            done.set()
            if watcher is not None:
                watcher.join(timeout=30)
        said = result.to_dict()
        booted = booted_instances(candidate, {stage: sorted(candidate.image_ids(stage))}, by_image=True)
        if frozen:
            if any(c.get("status") == "paused" for c in said["clusters"]):
                return StageRotation("frozen", frozen[0], (booted or {}).get(stage, {}))
            # the rotation ended before the pause reached it: no pause may wait in the journal for the next run
            self.resume(stage, "the rotation ended before the freeze's pause reached it")
        # held back, not failed: a killed tick's lease, a pause by hand, an API that would not answer (retried next tick)
        held = ("lease-held", "lost-lease", "paused", "api-error")
        failed = [c for c in said["clusters"] if c.get("exit_code") and c.get("status") not in held]
        busy = [c for c in said["clusters"] if c.get("status") in held]
        if busy and not failed:  # a killed tick's rotation until its lease lapses (the next tick resumes its journal), or paused by hand
            return StageRotation("busy", "; ".join(str(c.get("reason")) for c in busy))
        reasons = [f"{c['cluster']}: {c.get('status')}: {c.get('reason')}" for c in failed or said["clusters"] if c.get("exit_code")]
        # Nodes the planner left because a budget allows no disruption now (a Deployment whose pods are still starting)
        # and nothing failed: the next tick plans again, for a while (release_pipeline.reconcile.BLOCKED_PATIENCE).
        report = {id(c): c.get("report") or {} for c in said["clusters"]}  # a cluster the run never reached has none
        blocked = bool(failed) and all(c.get("status") == "incomplete" and report[id(c)].get("nodes_blocked")
                                       and not report[id(c)].get("nodes_failed") for c in failed)
        # Each cluster's waves by size: how far a rotation went before it finished or halted (its first wave is the
        # most a bad image can reach when the canary gate stops it), and how long the health gate held each wave.
        clusters = [ClusterRotation(str(c.get("cluster")), c.get("status"), c.get("reason"),
                                    (r.get("halted") or {}).get("reason"),
                                    [len(w.get("nodes", [])) for w in r.get("waves", [])],
                                    [w.get("gate_seconds", 0.0) for w in r.get("waves", [])],
                                    _first_light_said(r.get("first_light")), r.get("evictions", 0),
                                    len(r.get("planned_first_wave") or []))
                    for c in said["clusters"] for r in (report[id(c)],)]
        # The instances first light booted (image -> ids): the ledger tells them from the waves'.
        lit: dict[str, list[str]] = {}
        for first in (r.get("first_light") or {} for r in report.values()):
            for pool, instance in (first.get("instances") or {}).items():
                lit.setdefault(first["images"].get(pool, ""), []).append(instance)
        return StageRotation("finished" if result.exit_code == 0 else "blocked" if blocked else "halted", "; ".join(reasons),
                             (booted or {}).get(stage, {}), lit, result.exit_code, clusters)

    def _proven(self, stage: str) -> bool:
        """Whether a candidate rotating ``stage`` passed first light in the pipeline's first stage: every candidate here
        came through it (stages only move forward), and the first stage's policy lights images."""
        first = self.pipeline.names[0]
        if stage == first:
            return False
        from upgrade_service.planning.policy import load_policy

        path = self.pipeline.policy_path(first)
        return path is not None and load_policy(path).first_light is not None

    def _end_halted(self, stage: str, target: Candidate) -> None:
        """Abort the stage's halted rotations (the one a failing gate stopped) and the ones a freeze paused (a rollback
        by hand during the freeze): a new run rotates every node back, where continuing the halted one would wait again
        for the pods the bad image cannot start, and a paused one would only answer ``paused``. A rotation still
        running (a killed tick's, whose lease has not lapsed) is left to be resumed."""
        from platformctl.app.rotation import ControlRequest, abort_rotations, scope_of, store_of
        from upgrade_service.journal.rotation import read_state

        scope = scope_of(None, stage, self.infra_dir, "release rollback")
        store = store_of(None, scope, self.infra_dir)
        for name in scope.names:
            run = read_state(store, name)
            if run.status == "halted" or (run.status == "running" and run.paused is not None):
                abort_rotations(ControlRequest("abort", context=name, infra_dir=self.infra_dir,
                                               reason=f"the release pipeline rolls {stage} back to {target.id}"),
                                self.kubeconfig, wait=False)

    def verdict(self, stage: str, candidate: Candidate, baseline: Candidate | None, since: float,
                window: int, entered: float | None = None) -> Verdict:
        from e2e_canary.judge import load_config
        from e2e_canary.verdict import soak_verdict  # its judge's imports only when a soak is judged
        from platformctl.app.stores import store_for

        return soak_verdict(store_for(None, stage=stage, infra_dir=self.infra_dir), stage, since, self.now(stage), window,
                            replaced_images(stage, candidate, baseline), baseline.id if baseline else None, entered,
                            load_config(self.pipeline.judge_path(stage)))


def minor_version(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor.split(".")[0] or 0)


def replaced_images(stage: str, candidate: Candidate, baseline: Candidate | None) -> dict[str, str]:
    """Each image of ``candidate`` in ``stage`` that differs from the last good candidate's for the same family, and the
    image it replaces: the arms a soak compares (an image both boot is no comparison)."""
    if baseline is None or stage not in baseline.stages or stage not in candidate.stages:
        return {}
    before = baseline.stages[stage].images
    return {image["id"]: before[family]["id"] for family, image in sorted(candidate.stages[stage].images.items())
            if family in before and before[family]["id"] != image["id"]}


@dataclass(frozen=True)
class TickRequest:
    pipeline_file: Path | None = None
    ledger: str | None = None
    infra_dir: Path | None = None
    lease_ttl: float = 60.0
    stages: tuple[str, ...] = ()  # only these stages (default: every stage)
    kubeconfig: str | None = None  # the clusters' contexts (default: the local region's, or $KUBECONFIG)


class EveryStageHeld(PlatformError):
    """Every stage the tick would act in is held by another tick: nothing was done."""


def release_tick(request: TickRequest, say: Any = lambda message: None) -> dict[str, Any]:
    """Advance every candidate at most one step, each stage under its own lease (``EveryStageHeld`` when other ticks
    hold every stage this one would act in)."""
    from platformctl.kernel.state.lease import holder_id
    from release_pipeline.reconcile import tick

    pipeline = load_pipeline(request.pipeline_file)
    check_gate_windows(pipeline)  # a gate that could never pass: exit 2 before anything is touched
    for name in request.stages:
        pipeline.stage(name)  # a stage the pipeline does not hold is exit 2 before any lease is taken
    ledger = ledger_of(pipeline, request.ledger)
    holders: dict[str, str] = {}
    holder = holder_id()
    hold = ledger.stage_leases(holder, request.lease_ttl, holders)

    from platformctl.kernel.region_client import home

    work = home() / "candidates"  # the lock files deploys read: $PLATFORMCTL_HOME, else the checkout's .platformctl
    actions = AppStages(pipeline, request.infra_dir, work, request.lease_ttl, request.kubeconfig, ledger, holder)
    report = tick(pipeline, ledger, actions, who(), say, request.stages, hold)
    acting = [n for n in pipeline.names if not request.stages or n in request.stages]
    if acting and set(report.held) == set(acting):
        raise EveryStageHeld("another tick holds the lease of every stage this one would act in ("
                             + ", ".join(f"{n}: {holders.get(n, '?')}" for n in acting) + "): nothing done")
    return {"ledger": ledger.store.location, **report.to_dict(), "holders": holders,
            "failing": [e.stage for e in report.failing(time.time())]}
