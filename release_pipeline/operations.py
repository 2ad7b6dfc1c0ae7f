"""The stage operations: what the release pipeline asks of a stage (its clock, a deploy, a rotation, what it runs, a
resume, the canaries' verdict), as one Protocol, and the typed values they answer. The application layer's
``platformctl.app.stage_operations.StageOperator`` implements it as an operator would act; ``release_pipeline.testing``
is the one configurable fake every reconciler test and benchmark uses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from platformctl.kernel.humanize import human_duration
from platformctl.kernel.jsontypes import JSONObject
from release_pipeline.candidates import Candidate
from release_pipeline.held import ManualFreeze
from release_pipeline.rotation_result import StageRotation

if TYPE_CHECKING:
    from e2e_canary.verdict import Verdict


@dataclass(frozen=True)
class ClearedLock:
    """A stack lock a killed tick's deploy left, which a later tick cleared before its own deploy."""

    lock: str  # who the lock named
    age_seconds: int  # how old it was, on the stage's clock
    left_by: str | None  # the lease holder of the tick whose deploy took it
    deploy_at: float  # when that deploy was recorded
    cleared_by: str | None  # the lease holder of the tick that cleared it

    def to_dict(self) -> JSONObject:
        return {"lock": self.lock, "age_seconds": self.age_seconds, "left_by": self.left_by, "deploy_at": self.deploy_at,
                "cleared_by": self.cleared_by}

    def said(self) -> str:
        """What a deploy's reason says of it."""
        return f"first cleared the stack lock a killed tick left {human_duration(self.age_seconds)} before ({self.lock})"


@dataclass(frozen=True)
class KeptVersion:
    """A rollback that keeps its control planes' newer Kubernetes version: EKS never takes one back."""

    kept: str
    wanted: str

    def said(self) -> str:
        return f"stays {self.kept}: EKS never takes a control plane back to {self.wanted}"


@dataclass(frozen=True)
class StageDeploy:
    """What a stage's deploy did, as a ledger entry's ``result`` keeps it."""

    images: dict[str, str]  # cluster/pool -> the image its launch template boots now
    summary: dict[str, int] = field(default_factory=dict)  # the resources changed, by action
    revision: str = ""  # the candidate's commit whose program deployed
    source: str = ""  # "the checkout", or "commit <12 hex>": where that program was read
    kept_version: KeptVersion | None = None
    cleared_lock: ClearedLock | None = None

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"summary": dict(self.summary), "images": dict(self.images)}
        if self.revision:
            out["revision"] = self.revision
        if self.source:
            out["source"] = self.source
        if self.kept_version is not None:
            out["kubernetes_version"] = self.kept_version.said()
        if self.cleared_lock is not None:
            out["cleared_lock"] = self.cleared_lock.to_dict()
        return out

    def said(self) -> str:
        """What the deploy's entry adds to its reason: the stack lock it cleared first, if any."""
        return f"; {self.cleared_lock.said()}" if self.cleared_lock is not None else ""


@dataclass(frozen=True)
class Launching:
    """One pool of a stage as AWS has it now: the image its auto scaling group launches a new node from (its launch
    template's version in force, read from EC2, not from the deployer's record), and the image family it boots."""

    cluster: str
    pool: str
    family: str
    image: str | None
    # The settings beyond the image its group launches otherwise than the pipeline's last deploy there left it (its
    # ``promoted/<stage>`` record's launches; none when that record does not say)
    settings: tuple[str, ...] = ()


class StageOperations(Protocol):
    """What the pipeline does to a stage, as the application layer does it."""

    def now(self, stage: str) -> float:
        """The stage's clock: wall time on a real account, the region's virtual clock locally."""
        ...

    def deploy(self, stage: str, candidate: Candidate, rollback: bool = False) -> StageDeploy:
        """Point the stage's launch templates at ``candidate``'s images, with its commit's program, Kubernetes version
        and components (idempotent: the same candidate changes nothing); a ``rollback`` keeps a control plane's newer
        Kubernetes version (EKS never takes one back)."""
        ...

    def rotate(self, stage: str, candidate: Candidate, rollback: bool = False,
               hold: Callable[[], str | None] | None = None) -> StageRotation:
        """Rotate every cluster of the stage onto them (resuming a rotation a killed tick began): its ``status``
        (``finished``, ``halted``, ``blocked``, ``busy``, ``frozen``), why, and the instances it saw booting;
        ``busy``: a rotation of the stage holds its lease, so nothing was done and the next tick tries again;
        ``frozen``: ``hold`` (asked while the rotation runs) said a freeze began, and the rotation paused at its next
        step. A ``rollback`` first ends the halted rotation it undoes and is not held by the canary gate: the canaries
        fail because of the image it takes away (Argo Rollouts' abort goes back to the stable version without
        analysis, too)."""
        ...

    def deployed(self, stage: str) -> dict[str, str]:
        """Each image family of the stage and the image its launch templates boot now: recorded with a candidate's
        deploy, what a rollback goes back to when the stage has no good candidate to go back to."""
        ...

    def launching(self, stage: str) -> list[Launching]:
        """Every pool of the stage and what its group launches now, read from AWS each time (a template changed by
        hand in EC2, or by a ``pulumi up`` from an older checkout, shows at once): what the tick compares with what the
        stage should run."""
        ...

    def hold_by_hand(self, stage: str, freezes: Sequence[ManualFreeze]) -> None:
        """Tell the stage's own jobs the freezes set by hand that bind it now or later (none: there are none), where they
        read them (the stage's state store): its scheduled rotation starts no wave while one holds. Writes only a
        change, after checking the tick still holds the stage's lease (the record is in another table, so the check
        is not a fenced write: a write that lands late is put right by the next tick, which compares)."""
        ...

    def resume(self, stage: str, reason: str) -> None:
        """Resume the stage's rotations a freeze paused."""
        ...

    def verdict(self, stage: str, candidate: Candidate, baseline: Candidate | None, since: float,
                window: int, entered: float | None = None) -> Verdict:
        """The stage's canary verdict, with ``results_since``: how many canary results it judged since ``since``; with
        ``baseline`` (the last good candidate), its images' results from before ``entered`` are the new images'
        baseline."""
        ...


def replaced_images(stage: str, candidate: Candidate, baseline: Candidate | None) -> dict[str, str]:
    """Each image of ``candidate`` in ``stage`` that differs from the last good candidate's for the same family, and the
    image it replaces: the arms a soak compares (an image both boot is no comparison)."""
    if baseline is None or stage not in baseline.stages or stage not in candidate.stages:
        return {}
    before = baseline.stages[stage].images
    return {image["id"]: before[family]["id"] for family, image in sorted(candidate.stages[stage].images.items())
            if family in before and before[family]["id"] != image["id"]}

