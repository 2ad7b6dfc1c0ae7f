"""Where every candidate is, as ``release status`` shows it: typed values built from the ledger's fold (and, for the
instances a candidate's images booted, from EC2 through the node-group seam), which the command renders as a table or
as JSON (``to_dict``: the shape ``release status -o json`` prints), the dashboard and the demo read."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from platformctl.app.stage_operations import booted_instances
from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.nodegroups import NodeGroups
from release_pipeline.fold import PipelineState, StageState, reported
from release_pipeline.held import CandidateStatus, Drift, ManualFreeze, StepError
from release_pipeline.ledger import Boot, Ledger, stage_lease
from release_pipeline.pipeline import Pipeline


@dataclass(frozen=True)
class RollbackStatus:
    """A stage rolling back: to which candidate (None: to what it ran before the pipeline's first deploy there, which
    ``before`` names), the phase, how many of its rotations failed, and what it waits for."""

    to: str | None
    phase: str | None
    failures: int
    left: str | None
    before: dict[str, str] | None

    def to_dict(self) -> JSONObject:
        return {"to": self.to, "phase": self.phase, "failures": self.failures, "left": self.left, "before": self.before}


@dataclass(frozen=True)
class TickLease:
    holder: str
    expires: float
    live: bool

    def to_dict(self) -> JSONObject:
        return {"holder": self.holder, "expires": self.expires, "live": self.live}


@dataclass(frozen=True)
class StageStatus:
    """One stage: the candidate in flight, the last good one, the step, what it waits for, and its faults."""

    current: str | None
    last_good: str | None
    step: str
    waiting_for: str | None
    opens_at: float | None
    since: float
    soak_started: float | None
    ready: list[str]
    rollback: RollbackStatus | None
    error: StepError | None
    blocked_since: float | None
    tick_lease: TickLease | None
    drift: list[Drift] = field(default_factory=list)  # pools launching another image than the stage should run

    @classmethod
    def of(cls, s: StageState, lease: TickLease | None) -> StageStatus:
        rollback = RollbackStatus(s.rollback_to, s.rollback_phase, s.rollback_failures, s.waiting_for,
                                  # no good candidate here: back to the images it ran before the halted one's deploy
                                  s.before if s.rollback_to is None else None) if s.step == "rolling-back" else None
        return cls(s.current, s.last_good, s.step, s.waiting_for, s.opens_at, s.since, s.rotated_at, list(s.ready),
                   rollback, s.error, s.blocked_since, lease, list(s.drift))

    def to_dict(self) -> JSONObject:
        return {"current": self.current, "last_good": self.last_good, "step": self.step, "waiting_for": self.waiting_for,
                "opens_at": self.opens_at, "since": self.since, "soak_started": self.soak_started, "ready": self.ready,
                "rollback": self.rollback.to_dict() if self.rollback else None,
                "error": self.error.to_dict() if self.error else None, "blocked_since": self.blocked_since,
                "tick_lease": self.tick_lease.to_dict() if self.tick_lease else None,
                "drift": [d.to_dict() for d in self.drift]}


NOT_COUNTED = "not counted: finished, and no stage runs it"


@dataclass(frozen=True)
class BootCounts:
    """How many instances booted a candidate's new images, per stage: first light's (one a pool, judged before any
    workload moved) and the waves', and the image builders that booted them to bake a child (no node); ``total`` None:
    not counted (a finished candidate no stage runs: its boots stay in the ledger)."""

    total: int | None = None
    by_stage: dict[str, int] = field(default_factory=dict)
    first_light: int | None = None
    first_light_by_stage: dict[str, int] = field(default_factory=dict)
    in_waves_by_stage: dict[str, int] = field(default_factory=dict)
    builders_by_stage: dict[str, int] = field(default_factory=dict)
    source: str = NOT_COUNTED  # where the counts come from: EC2 and the ledger, or the ledger alone

    def to_dict(self) -> JSONObject:
        return {"instances_booted": self.total, "instances_booted_by_stage": self.by_stage,
                "instances_booted_first_light": self.first_light,
                "instances_booted_first_light_by_stage": self.first_light_by_stage,
                "instances_booted_in_waves_by_stage": self.in_waves_by_stage,
                "image_builders_booted_by_stage": self.builders_by_stage, "instances_booted_from": self.source}


@dataclass(frozen=True)
class CandidateReport:
    """A candidate: where it is and why, what it is, and how far its new images reached."""

    status: str
    stage: str | None
    reason: str | None
    superseded_by: str | None
    note: str
    created_at: float
    created_by: str
    infra_revision: str
    images: dict[str, dict[str, dict[str, str]]]  # stage -> family -> {"version", "id"}
    new_images: dict[str, list[str]]
    boots: BootCounts

    def to_dict(self) -> JSONObject:
        return {"status": self.status, "stage": self.stage, "reason": self.reason, "superseded_by": self.superseded_by,
                "note": self.note, "created_at": self.created_at, "created_by": self.created_by,
                "infra_revision": self.infra_revision, "images": self.images, "new_images": self.new_images,
                **self.boots.to_dict()}


@dataclass(frozen=True)
class PipelineStatus:
    """Every stage and every candidate, the freezes recorded, and the entries the fold did not admit."""

    ledger: str
    pipeline: str
    stages: dict[str, StageStatus]
    candidates: dict[str, CandidateReport]
    freezes: list[ManualFreeze]
    refused: list[str]

    def to_dict(self) -> JSONObject:
        """As ``release status -o json`` prints it."""
        return {"ledger": self.ledger, "pipeline": self.pipeline,
                "stages": {n: s.to_dict() for n, s in self.stages.items()},
                "candidates": {c: r.to_dict() for c, r in self.candidates.items()},
                "freezes": [f.to_dict() for f in self.freezes], "refused": self.refused}


def status_of(pipeline: Pipeline, ledger: Ledger, target: AwsTarget | None) -> PipelineStatus:
    """Where every candidate is: per stage the one in flight, the last good one, the step and what it waits for;
    ``target`` None: the instances each candidate booted from the ledger alone (``candidate_report``)."""
    state = ledger.state()
    stages: dict[str, StageStatus] = {}
    for name in pipeline.names:
        lease = ledger.store.lease(stage_lease(name))
        held = TickLease(lease.holder, lease.expires, not lease.expired(time.time())) if lease else None
        stages[name] = StageStatus.of(state.stage(name), held)
    return PipelineStatus(ledger.store.location, pipeline.source, stages, candidate_report(ledger, state, target),
                          list(state.freezes), list(state.refused))


def candidate_report(ledger: Ledger, state: PipelineState, target: AwsTarget | None) -> dict[str, CandidateReport]:
    """Each candidate: where it is, why, and how many instances ever booted its new images (asking EC2 in ``target``
    too; None: from what the ledger recorded alone)."""
    out = {}
    seen: set[str] = set()  # the images of every earlier candidate
    aws_reachable = target is not None
    seams: dict[str, NodeGroups] = {}  # one per region for the whole report, not three clients per candidate
    counted = reported(state)
    for c in sorted(ledger.recorded(state.candidates).values(), key=lambda c: (state.order(c.id), c.created_at)):
        where = state.candidates.get(c.id) or CandidateStatus("finished")
        new = {n: sorted(s.image_ids - seen) for n, s in c.stages.items()}
        seen |= c.image_ids()
        boots = BootCounts()  # finished, and no stage runs it: its boots stay in the ledger, not counted again
        if c.id in counted:
            recorded, lit = ledger.boots_and_first_light(c.id)
            builders: dict[str, int] = {}
            asked = booted_instances(c, new, target, builders=builders, seams=seams) if target and aws_reachable else None
            aws_reachable = aws_reachable and asked is not None  # one failure: the rest of the report from the ledger only
            # What AWS still shows, and what the ledger saw booting the new images at the end of each rotation.
            rows = {n: [Boot.parse(r) for r in found] for n, found in recorded.items()}
            booted = {n: sorted(set((asked or {}).get(n, [])) | {b.instance for b in rows.get(n, []) if b.image in new[n]})
                      for n in new}
            first = {n: len(set(ids) & {Boot.parse(r).instance for r in lit.get(n, set())}) for n, ids in booted.items()}
            boots = BootCounts(sum(len(ids) for ids in booted.values()), {n: len(ids) for n, ids in booted.items()},
                               sum(first.values()), first, {n: len(ids) - first[n] for n, ids in booted.items()},
                               {n: builders.get(n, 0) for n in new},
                               "ec2 and the ledger" if asked is not None else "the ledger (AWS not reachable)"
                               if target is not None else "the ledger")
        out[c.id] = CandidateReport(where.status, where.stage, where.reason or None, where.by_candidate, c.note,
                                    c.created_at, c.created_by, c.infra_revision,
                                    {n: s.images for n, s in c.stages.items()}, new, boots)
    return out
