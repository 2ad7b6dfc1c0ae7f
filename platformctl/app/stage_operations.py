"""The stage operations the release pipeline calls (``release_pipeline.operations.StageOperations``), as an operator
would act: ``deploy_stage`` with a candidate's commit and images, the rotation's ``prepare`` and ``rotate`` under the
stage's rotation policy, and the canary verdict over the stage's own store, each on the stage's clock. Each answers a
typed value (``StageDeploy``, ``StageRotation``) built from the application layer's own typed results."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platformctl.app.platform import Platform
from platformctl.kernel.clock import WallClock
from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.errors import ApiFault, PlatformError
from platformctl.kernel.jsontypes import number, optional_str
from platformctl.kernel.nodegroups import Booted, NodeGroupError, NodeGroups
from release_pipeline.candidates import Candidate
from release_pipeline.held import ManualFreeze
from release_pipeline.ledger import Ledger
from release_pipeline.operations import ClearedLock, KeptVersion, Launching, StageDeploy, replaced_images
from release_pipeline.pipeline import Pipeline
from release_pipeline.rotation_result import ClusterRotation, FirstLightSaid, StageRotation, Status
from upgrade_service.running.run_types import Outcome, RunStatus

if TYPE_CHECKING:
    from e2e_canary.verdict import Verdict
    from platformctl.app.rotation import RotationResult
    from platformctl.kernel.deployer import DeployResult
    from platformctl.kernel.state.promoted import Promoted

# A cluster's run that was held back, not failed: a killed tick's lease, a pause by hand, an API that would not answer
# (the next tick tries again).
HELD = (RunStatus.LEASE_HELD, RunStatus.LOST_LEASE, RunStatus.PAUSED, RunStatus.API_ERROR, RunStatus.OUTSIDE_WINDOW)


def minor_version(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor.split(".")[0] or 0)


class StageOperator:
    """``StageOperations`` as an operator would act on the stages of ``pipeline``: a tick's (``ledger``, the lease
    holder) records each deploy before it begins and clears the stack locks killed ticks left."""

    def __init__(self, platform: Platform, pipeline: Pipeline, work_dir: Path, lease_ttl: float = 60.0,
                 kubeconfig: str | None = None, ledger: Ledger | None = None, lease_holder: str | None = None) -> None:
        self.platform = platform
        self.pipeline = pipeline
        self.work_dir = work_dir
        self.lease_ttl = lease_ttl  # the rotation's leases last as long as the tick's
        self.kubeconfig = kubeconfig
        self.ledger = ledger  # a tick's: its deploys are recorded there before they begin, and stale locks cleared
        self.lease_holder = lease_holder  # the tick's lease holder (``holder_id``)

    def now(self, stage: str) -> float:
        return self.platform.now(stage)

    # ------------------------------------------------------------------------------------------------ deploy

    def deploy(self, stage: str, candidate: Candidate, rollback: bool = False) -> StageDeploy:
        from platformctl.app.deploy import deploy_stage, deployed_now, record_launches_now
        from platformctl.app.release_source import candidate_source

        lock = self.work_dir / f"{candidate.id}.lock.json"
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            lock.write_text(json.dumps(candidate.lock(), indent=2, sort_keys=True))
        except OSError as exc:
            raise PlatformError(f"cannot write the candidate's lock file {lock}: {exc.strerror}", field="PLATFORMCTL_HOME") from None
        # The candidate's own commit (its program, stack file, Kubernetes version and components) with its images: never
        # the checkout the tick runs in.
        checkout = self.platform.infra_dir
        source = candidate_source(candidate, checkout, self.work_dir, self.pipeline.repository)
        # EKS never takes a control plane back: a rollback past a version bump keeps the version the clusters have
        wanted = candidate.stages[stage].kubernetes_version if stage in candidate.stages else None
        have = max(deployed_now(self.platform, stage)[1].values(), key=minor_version, default=None) if rollback else None
        keep = KeptVersion(have, wanted) if wanted and have and minor_version(have) > minor_version(wanted) else None
        promoted = self._promoted(stage, candidate, rollback, keep.kept if keep else wanted)
        done, cleared = self._deploy_clearing_stale_lock(
            stage, candidate.id, promoted,
            lambda: deploy_stage(self.platform.with_infra_dir(source) if source != checkout else self.platform, stage, lock,
                                 over_pins=True, kubernetes_version=keep.kept if keep else None, kubeconfig=self.kubeconfig))
        if promoted is not None:  # fenced: a tick that may have lost the stage's lease records nothing
            record_launches_now(self.platform, stage, promoted, lambda: self.ledger.fence if self.ledger is not None else None)
        return StageDeploy(dict(done.images), done.summary(), candidate.infra_revision,
                           "the checkout" if source == checkout else f"commit {candidate.infra_revision[:12]}", keep, cleared)

    def _promoted(self, stage: str, candidate: Candidate, rollback: bool, kubernetes: str | None) -> Promoted | None:
        """What the stage runs from this deploy on: the candidate's images, its commit and the control planes' version,
        recorded where the stage's own jobs read it (``platformctl.kernel.state.promoted``)."""
        from platformctl.kernel.state.promoted import Promoted

        if stage not in candidate.stages:
            return None
        images = {family: image["id"] for family, image in candidate.stages[stage].images.items()}
        return Promoted(stage, images, candidate.id, self.now(stage), self.lease_holder or "", rollback,
                        candidate.infra_revision, kubernetes or "")

    def _promote(self, promoted: Promoted | None) -> None:
        from platformctl.app.stores import store_for
        from platformctl.kernel.state.promoted import promote

        if promoted is None:
            return
        store = store_for(self.platform, None, stage=promoted.stage)
        try:
            promote(store, promoted)
        finally:
            store.close()

    def _deploy_clearing_stale_lock(self, stage: str, candidate: str, promoted: Promoted | None,
                                    deploy: Callable[[], DeployResult]) -> tuple[DeployResult, ClearedLock | None]:
        """``deploy()``, recorded in the ledger (the lock holder its stack lock will name) before it begins. A stack
        lock that a tick's deploy took, by a lease that is not this tick's (the stage's lease is this tick's now: that
        tick's is gone) and older than ``STALE_LOCK_SECONDS`` (past the deploy's own limit: its update is over) is
        cleared, recorded, and the deploy made; any other lock is the stage's busy fault (``DeployLocked``)."""
        from platformctl.app.deploy import stage_deployer
        from platformctl.kernel.deployer import STALE_LOCK_SECONDS, DeployLocked

        if self.ledger is None:
            self._promote(promoted)
            return deploy(), None
        deployer, spec = stage_deployer(self.platform, stage)
        self.ledger.add_deploy(stage, {"lock_holder": deployer.lock_holder(), "lease_holder": self.lease_holder,
                                       "at": self.now(stage), "candidate": candidate})  # fenced by the stage's lease
        self._promote(promoted)  # right after: a tick that lost its lease stopped at the line above
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
            cleared = ClearedLock(locked.holder, round(now - locked.since), optional_str(left.get("lease_holder")), number(left["at"]),
                                  self.lease_holder)
            self.ledger.add_deploy(stage, {"cleared": cleared.to_dict(), "at": now})  # fenced: this tick still holds the stage
            deployer.cancel(spec)
        return deploy(), cleared

    def deployed(self, stage: str) -> dict[str, str]:
        from platformctl.app.deploy import deployed_now

        return deployed_now(self.platform, stage)[0]

    def launching(self, stage: str) -> list[Launching]:
        """Each pool's group as EC2 and Auto Scaling have it now (the program names a pool's group ``<cluster>-<pool>``),
        through the node-group seam: a version made by hand whose user data labels another image still says the image
        it boots; and the settings beyond the image it launches otherwise than the pipeline's last deploy there left it
        (read from the stage's ``promoted/<stage>`` record: a version made by hand with the same image and other user
        data)."""
        from platformctl.app.deploy import pool_groups, promoted_to
        from upgrade_service.running.launches import not_as_deployed

        record = promoted_to(self.platform, stage)
        found: list[Launching] = []
        for cluster, pool, family, state, image in pool_groups(self.platform, stage):
            other: list[str] = []
            # settings are compared only on the record's own image: another image is the image's drift, or another record's
            if record is not None and state is not None and image is not None and record.images.get(family) == image:
                other = not_as_deployed(record.launches, state.name, state.launch) or []
            found.append(Launching(cluster, pool, family, image, tuple(other)))
        return found

    def hold_by_hand(self, stage: str, freezes: Sequence[ManualFreeze]) -> None:
        """``frozen/<stage>`` in the stage's own store (``platformctl.kernel.state.frozen``), after the lease check the
        tick's own writes make (a tick that may have lost the stage's lease writes nothing new)."""
        from platformctl.app.stores import store_for
        from platformctl.kernel.state.frozen import HandFreeze, record_frozen

        if self.ledger is not None:
            self.ledger.fence  # noqa: B018 - raises LeaseLost when the stage's lease may be gone
        store = store_for(self.platform, None, stage=stage)
        try:
            record_frozen(store, stage, [HandFreeze(f.reason, f.at, f.until, f.by) for f in freezes], self.now(stage))
        finally:
            store.close()

    # ---------------------------------------------------------------------------------------------- rotate

    def resume(self, stage: str, reason: str) -> None:
        from platformctl.app.rotation import ControlAction, ControlRequest, control_rotations

        try:
            control_rotations(self.platform, ControlRequest(ControlAction.RESUME, stage=stage, reason=reason))
        except (PlatformError, ApiFault):  # nothing paused (a rotation that ended on its own): nothing to resume
            pass

    def _pause_when(self, stage: str, hold: Callable[[], str | None], done: threading.Event,
                    clock: Any) -> tuple[threading.Thread, list[str]]:
        """A watcher that, while the rotation runs, asks ``hold`` every few seconds of the clusters' clock (a minute of
        a local region's, whose time runs faster than the wall's) and, the moment a freeze holds the stage, journals a
        pause of its rotations (each stops at its next step, as ``rotate pause`` stops it)."""
        from platformctl.app.rotation import ControlAction, ControlRequest, control_rotations

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
                    control_rotations(self.platform, ControlRequest(ControlAction.PAUSE, stage=stage,
                                                                    reason=f"the release pipeline's freeze: {why}"))
                    said.append(why)
                    return

        thread = threading.Thread(target=watch, name=f"freeze watch {stage}", daemon=True)
        thread.start()
        return thread, said

    def rotate(self, stage: str, candidate: Candidate, rollback: bool = False,
               hold: Callable[[], str | None] | None = None) -> StageRotation:
        from platformctl.app.rotation import RunRequest, prepare, rotate

        policy = self.pipeline.policy_path(stage)
        if policy is None:
            raise PlatformError("names no rotationPolicy: the tick cannot rotate the stage", file=self.pipeline.source,
                                field=f"stages[{self.pipeline.names.index(stage)}].rotationPolicy")
        if rollback:
            self._end_halted(stage, candidate)
        rotation = prepare(self.platform, RunRequest(policy, stage=stage, kubeconfig=self.kubeconfig, lease_ttl=self.lease_ttl,
                                                        by_pipeline=True))
        if rollback:  # back to what passed: not held by the canaries the taken-away image fails, nor by its windows
            rotation.policy = rotation.policy.model_copy(update={"health_gate": None, "first_light": None,
                                                                 "maintenance_windows": (), "exclusions": ()})
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
        booted = (booted_instances(candidate, {stage: sorted(candidate.image_ids(stage))}, self.platform.aws,
                                   by_image=True) or {}).get(stage, {})
        if frozen:
            if any(o.status == RunStatus.PAUSED for o in result.outcomes):
                return StageRotation(Status.FROZEN, frozen[0], booted)
            # the rotation ended before the pause reached it: no pause may wait in the journal for the next run
            self.resume(stage, "the rotation ended before the freeze's pause reached it")
        return stage_rotation(result, booted)

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
        from platformctl.app.rotation import ControlAction, ControlRequest, abort_rotations, scope_of, store_of
        from upgrade_service.journal.rotation import read_state

        scope = scope_of(self.platform, None, stage, "release rollback")
        store = store_of(self.platform, None, scope)
        for name in scope.names:
            run = read_state(store, name)
            if run.status == "halted" or (run.status == "running" and run.paused is not None):
                abort_rotations(self.platform, ControlRequest(ControlAction.ABORT, context=name,
                                                              reason=f"the release pipeline rolls {stage} back to {target.id}"),
                                self.kubeconfig, wait=False)

    # ---------------------------------------------------------------------------------------------- judge

    def verdict(self, stage: str, candidate: Candidate, baseline: Candidate | None, since: float,
                window: int, entered: float | None = None) -> Verdict:
        from e2e_canary.judge import load_config
        from e2e_canary.verdict import soak_verdict  # its judge's imports only when a soak is judged
        from platformctl.app.stores import store_for

        return soak_verdict(store_for(self.platform, None, stage=stage), stage, since, self.now(stage), window,
                            replaced_images(stage, candidate, baseline), baseline.id if baseline else None, entered,
                            load_config(self.pipeline.judge_path(stage)))


def booted_instances(candidate: Candidate, images: dict[str, list[str]], target: AwsTarget, by_image: bool = False,
                     builders: dict[str, int] | None = None,
                     seams: dict[str, NodeGroups] | None = None) -> dict[str, Any] | None:
    """Per stage, the instances (in any state, terminated ones too) that booted ``images`` in the stage's region as
    nodes (``by_image``: per image id), asked of the node-group seam; None when AWS cannot be asked (no credentials,
    nothing reachable, a refusal).

    An image build's builder boots the parent image to bake a child from it: no workload ever ran there, so it is no
    node the image reached; ``builders`` (stage -> count) hears of them. ``seams`` (region -> node groups) keeps the
    seams made here for the caller's next question; ``target`` the AWS they reach (the command's)."""
    from platformctl.app.nodegroups import node_groups

    if not target.configured:
        return None
    out: dict[str, Any] = {}
    seams = {} if seams is None else seams
    try:
        for name, ids in images.items():
            region = candidate.stages[name].region
            if ids and region not in seams:
                seams[region] = node_groups(region, quick=True, target=target)
            booted = seams[region].booted(ids) if ids else Booted()
            if builders is not None and booted.builders:
                builders[name] = builders.get(name, 0) + booted.builders
            out[name] = {k: list(v) for k, v in booted.by_image.items()} if by_image else booted.instances
    except (NodeGroupError, PlatformError, ApiFault):
        return None
    return out


def stage_rotation(result: RotationResult, booted: dict[str, list[str]]) -> StageRotation:
    """A stage's rotation as the pipeline weighs it, from each cluster's run: finished, busy (held back, not failed: the
    next tick resumes it), blocked (only nodes a budget holds, nothing failed: planned again next tick, for a while,
    ``release_pipeline.reconcile.BLOCKED_PATIENCE``) or halted; each cluster's waves by size (how far it went before it
    finished or halted: its first wave is the most a bad image reaches when the canary gate stops it) and how long the
    health gate held each, first light's word, and the instances first light booted (image -> ids: the ledger tells
    them from the waves')."""
    failed = [o for o in result.outcomes if o.exit_code and o.status not in HELD]
    busy = [o for o in result.outcomes if o.status in HELD]
    if busy and not failed:  # a killed tick's rotation until its lease lapses (the next tick resumes its journal), or paused by hand
        return StageRotation(Status.BUSY, "; ".join(o.reason for o in busy))
    reasons = [f"{o.cluster}: {o.status}: {o.reason}" for o in failed or result.outcomes if o.exit_code]
    blocked = bool(failed) and all(o.status == RunStatus.INCOMPLETE and o.report and o.report.get("nodes_blocked")
                                   and not o.report.get("nodes_failed") for o in failed)
    lit: dict[str, list[str]] = {}
    for outcome in result.outcomes:
        first: dict[str, Any] = (outcome.report.get("first_light") if outcome.report else None) or {}
        for pool, instance in (first.get("instances") or {}).items():
            lit.setdefault(first["images"].get(pool, ""), []).append(instance)
    status = Status.FINISHED if result.exit_code == 0 else Status.BLOCKED if blocked else Status.HALTED
    return StageRotation(status, "; ".join(reasons), booted, lit, result.exit_code,
                         [_cluster_rotation(o) for o in result.outcomes])


def _cluster_rotation(outcome: Outcome) -> ClusterRotation:
    """One cluster's run as the ledger keeps it (a cluster the run never reached has no report)."""
    report = outcome.report
    if report is None:
        return ClusterRotation(outcome.cluster, outcome.status, outcome.reason)
    waves = report.get("waves", [])
    lit = report.get("first_light")
    first_light = FirstLightSaid(lit.get("verdict"), lit.get("reason"), len(lit.get("nodes") or {}),
                                 sorted(lit.get("pools") or {}), dict(lit.get("skipped") or {}), lit.get("seconds")) if lit else None
    return ClusterRotation(outcome.cluster, outcome.status, outcome.reason, (report.get("halted") or {}).get("reason"),
                           [len(w["nodes"]) for w in waves], [w.get("gate_seconds", 0.0) for w in waves], first_light,
                           report.get("evictions", 0), len(report.get("planned_first_wave") or []))
