"""Rotating nodes, as an operator or a scheduled job asks for it: plan, run, dry-run, status, pause/resume/abort.

Each function takes what the command parsed (typed requests) and returns a typed result the command renders; the
release pipeline calls the same functions. Inputs are checked before anything is touched: a user's mistake is a
``PlatformError`` (one line, exit 2) and nothing has changed.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platformctl.app.clusters import connect, groups_of, launch_template_targets
from platformctl.app.deploy import held_to, stage_store
from platformctl.app.platform import Platform
from platformctl.app.stores import store_for
from platformctl.kernel.cluster.model import Node, Snapshot, format_time, load_snapshot
from platformctl.kernel.errors import ApiFault, ApiRefused, PlatformError, Unavailable
from platformctl.kernel.humanize import human_duration
from platformctl.kernel.nodegroups import NodeGroupError
from platformctl.kernel.state import StateStore
from platformctl.kernel.state.frozen import HandFreeze, frozen_in
from platformctl.kernel.state.lease import holder_id
from platformctl.kernel.state.promoted import promoted_in
from platformctl.kernel.topology import HostCluster, Stage
from platformctl.kernel.who import who
from release_pipeline.pipeline import Pipeline
from upgrade_service.journal.records import ControlAction
from upgrade_service.journal.rotation import control, read_state, stream_of
from upgrade_service.planning.fit import pool_capacity
from upgrade_service.planning.order import ClusterPlace, cluster_steps
from upgrade_service.planning.plan import RegionPlan, RotationPlan, plan_cluster, plan_region
from upgrade_service.planning.policy import MaintenanceWindow, RotationPolicy, load_policy
from upgrade_service.planning.targets import check_pools, resolve
from upgrade_service.running.execute import Executor
from upgrade_service.running.gate import check_gate_exists
from upgrade_service.running.launches import as_deployed
from upgrade_service.running.pods_back import API_PROBE_SECONDS
from upgrade_service.running.report import RunReport, build_report
from upgrade_service.running.run_types import EXIT_HALTED, EXIT_INTERRUPTED, EXIT_LEASE_HELD, EXIT_PAUSED, Options, Outcome, Progress, Target
from upgrade_service.running.runs import AbortOutcome, abort_cluster, run_cluster, run_stage


@dataclass(frozen=True)
class Scope:
    """The clusters a command acts on: one kubeconfig context, or every cluster of a stage (in the stage's order)."""

    names: list[str]
    stage: Stage | None = None

    @property
    def where(self) -> str:
        return f"stage {self.stage.name}" if self.stage else f"cluster {self.names[0]}"


def scope_of(platform: Platform, context: str | None, stage_name: str | None, command: str) -> Scope:
    """One context or one stage, never both nor neither (``command`` names the command in the error)."""
    if (context is None) == (stage_name is None):
        raise PlatformError("give exactly one of --context NAME or --stage NAME", field=command)
    if context is not None:
        return Scope([context])
    stage = platform.stage(stage_name or "")
    return Scope([c.name for c in stage.clusters()], stage)


def store_of(platform: Platform, spec: str | None, scope: Scope, existing: bool = False) -> StateStore:
    """The store these clusters journal in: ``spec``, else the stage's own (``platformctl.app.stores``)."""
    return store_for(platform, spec, stage=scope.stage.name if scope.stage else None,
                     cluster=scope.names[0] if scope.names else None, existing=existing)


def places_of(stage: Stage) -> list[ClusterPlace]:
    """A stage's clusters as the stage plan orders them: the host cluster, then each zone's members."""
    return [ClusterPlace(c.name, None if isinstance(c, HostCluster) else c.zones[0]) for c in stage.clusters()]


# ---------------------------------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class PlanRequest:
    """Plan the rotation of one cluster (from a snapshot file or a live context) or of a whole stage."""

    policy_file: Path
    snapshot: Path | None = None
    context: str | None = None
    stage: str | None = None
    snapshot_dir: Path | None = None  # with ``stage``: <cluster>.json files instead of the live contexts
    kubeconfig: str | None = None


def snapshot_time(snapshot: Snapshot) -> float:
    """The newest instant a snapshot records: plans from one file are reproducible."""
    stamps = [n.created for n in snapshot.nodes] + [p.created for p in snapshot.pods]
    stamps += [p.started for p in snapshot.pods if p.started is not None]
    return max(stamps, default=0.0)


def live_snapshot(platform: Platform, kubeconfig: str | None, context: str | None) -> tuple[Snapshot, str, float]:
    """A live cluster as the planner reads it: its nodes, pods and budgets, its name and its clock."""
    from platformctl.kernel.cluster.live import LiveCluster

    live = LiveCluster.from_kubeconfig(platform.kubeconfig(kubeconfig), context)
    snap = Snapshot(tuple(live.list_nodes()), tuple(live.list_pods()), tuple(live.list_pdbs()),
                    source=f"context {live.name}")
    return snap, live.name, live.clock.now()


def check_plan_request(request: PlanRequest) -> None:
    """The request's sources, checked before anything is read."""
    given = (request.snapshot and "--snapshot", request.context and "--context", request.stage and "--stage")
    sources = [s for s in given if s]
    if len(sources) != 1:
        raise PlatformError("give exactly one of --snapshot FILE, --context NAME or --stage NAME"
                            + (f" (got {', '.join(sources)})" if sources else ""), field="rotate plan")
    if request.snapshot_dir is not None and request.stage is None:
        raise PlatformError("--snapshot-dir goes with --stage", field="--snapshot-dir")


def plan_rotation(platform: Platform, request: PlanRequest) -> RotationPlan | RegionPlan:
    """The plan of a cluster or a stage onto the images its policy targets (or what its launch templates boot, read
    from AWS, when it names none). Changes nothing."""
    check_plan_request(request)
    policy = load_policy(request.policy_file)
    if policy.targets is None and request.snapshot is not None:
        raise PlatformError("names no targets, so every pool follows its launch template, which a snapshot does not "
                            "show: name targets, or plan the live cluster (--context or --stage)", file=policy.source,
                            field="targets")
    if request.stage is not None:
        return _plan_stage(platform, request, policy)
    return _plan_one(platform, request, policy)


def _plan_stage(platform: Platform, request: PlanRequest, policy: RotationPolicy) -> RegionPlan:
    if policy.cluster is not None:
        raise PlatformError(f"names cluster {policy.cluster!r}, but a stage plan applies the policy to every cluster "
                            "of the stage: remove `cluster`", file=policy.source, field="cluster")
    stage = platform.stage(request.stage or "")
    places = places_of(stage)
    snapshots: dict[str, Snapshot] = {}
    now = 0.0
    for place in places:
        if request.snapshot_dir is not None:
            snapshots[place.name] = load_snapshot(request.snapshot_dir / f"{place.name}.json")
            now = max(now, snapshot_time(snapshots[place.name]))
        else:
            snapshots[place.name], _, now = live_snapshot(platform, request.kubeconfig, place.name)
    # What the pipeline promoted there (what a run rotates onto) and, for a live stage, its freezes by hand: one read
    record, freezes = held_to(platform, stage.name) if policy.targets is None or request.snapshot_dir is None else (None, [])
    if policy.targets is None:
        targets: dict[str, str] = {}
        drift: dict[str, str] = {}
        for cluster_name, snap in snapshots.items():
            found, drifted = launch_template_targets(platform, snap, cluster_name, policy, stage.region, record)
            targets.update(found)
            drift.update(drifted)
        policy = policy.with_targets(targets).with_launch_drift(drift)
    if request.snapshot_dir is None:  # a live stage: its freezes by hand bind its rotations (``prepare``)
        policy = policy.with_exclusions(hand_freeze_windows(freezes))
    result = plan_region(stage.name, stage.region, places, snapshots, policy, now)
    present = {n.labels[policy.pool_label] for s in snapshots.values() for n in s.nodes if policy.pool_label in n.labels}
    check_pools(policy, present, f"stage {stage.name}")
    return result


def _plan_one(platform: Platform, request: PlanRequest, policy: RotationPolicy) -> RotationPlan:
    notes: list[str] = []
    capacity = None  # a snapshot shows no group: new nodes are read from the pool's nodes, their room unknown
    if request.snapshot is not None:
        snap = load_snapshot(request.snapshot)
        name, now = policy.cluster or request.snapshot.stem, snapshot_time(snap)
    else:
        snap, name, now = live_snapshot(platform, request.kubeconfig, request.context)
        try:
            group_of, described, drift = groups_of(platform, snap, name, None)
        except (NodeGroupError, PlatformError, ApiFault) as exc:
            if policy.targets is None:
                raise
            group_of, described, drift = {}, {}, {}  # the plan goes on as from a snapshot: each pool's room unknown
            notes.append(f"the auto scaling groups could not be read ({str(exc).splitlines()[0]}): each pool's room to surge is unknown")
        held = platform.stage_of(name)  # a cluster of a stage the pipeline drives: only what it promoted, as a run
        promoted = None
        if held is not None:
            try:
                record, freezes = held_to(platform, held.name)
                if record is not None:  # only the settings its own last deploy there made are rolled out
                    promoted, drift = record.image_ids, as_deployed(drift, group_of, described, record.launches)
                policy = policy.with_exclusions(hand_freeze_windows(freezes))
            except (PlatformError, Unavailable) as exc:  # a plan reads: it says what it could not, and goes on
                notes.append(f"{held.name}'s own store could not be read ({str(exc).splitlines()[0]}): neither what the "
                             "release pipeline promoted there nor its freezes by hand are in this plan")
        if policy.targets is None:
            policy = policy.with_targets(resolve(policy, list(snap.nodes), group_of, {g: d.image for g, d in described.items()},
                                                 promoted).images)
        policy = policy.with_launch_drift(drift)
        capacity = pool_capacity(snap, policy, group_of, described)
    result = plan_cluster(snap, policy, now, cluster=name, capacity=capacity)
    result.warnings.extend(notes)
    check_pools(policy, result.view.pools_present, f"cluster {result.cluster}")
    return result


# ---------------------------------------------------------------------------------------------------- running


@dataclass(frozen=True)
class ActRequest:
    """What a job that acts on clusters under a policy is given: the policy, the clusters (one ``context`` or a whole
    ``stage``), how to reach them and their groups, the store it journals in and its lease's time to live."""

    policy_file: Path
    context: str | None = None
    stage: str | None = None
    kubeconfig: str | None = None
    state: str | None = None
    region: str | None = None
    lease_ttl: float = 60.0


@dataclass(frozen=True)
class RunRequest(ActRequest):
    """Carry a rotation out on one cluster (``context``) or a whole stage, at most ``max_waves`` waves."""

    max_waves: int | None = None
    by_pipeline: bool = False  # the release tick's own: its freezes are the ledger's, not the stage's frozen record


@dataclass
class Rotation:
    """A rotation made ready: its policy, clusters, store and options, every input checked and every API reached."""

    policy: RotationPolicy
    scope: Scope
    store: StateStore
    targets: dict[str, Target]
    options: Options


@dataclass
class RotationResult:
    """What a rotation did, cluster by cluster, and the exit code that sums it up."""

    outcomes: list[Outcome]

    @property
    def exit_code(self) -> int:
        codes = [o.exit_code for o in self.outcomes]
        for code in (EXIT_LEASE_HELD, EXIT_HALTED, EXIT_INTERRUPTED, EXIT_PAUSED):
            if code in codes:
                return code
        return 0

    def to_dict(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "clusters": [o.to_dict() for o in self.outcomes]}


def canary_config(policy: RotationPolicy) -> Any:
    """The judge configuration a canary gate names, read before anything is touched (relative to the policy)."""
    gate = policy.health_gate.canary if policy.health_gate is not None else None
    if gate is None or gate.config is None:
        return None
    from e2e_canary.judge import load_config

    path = Path(gate.config)
    if not path.is_absolute():
        path = Path(policy.source).parent / path
    if not path.is_file():
        raise PlatformError(f"names a judge configuration {str(path)!r} that does not exist", file=policy.source,
                            field="healthGate.canary.config")
    return load_config(path)


def check_gate_window(policy: RotationPolicy, config: Any = None, canaries: Path | None = None) -> None:
    """A canary gate whose window cannot hold what a pass needs, at the rate the stage's canaries give an image's arm
    (``e2e_canary.definitions.arm_results_within``), would stay inconclusive until it halts: said before anything is
    touched, naming the window and what it falls short of (the judge's ``minSamples`` and ``minAttempts``, first
    light's ``minResults``). The canaries are the checkout's (``canaries``, else ``e2e_canary/canaries`` of the current
    directory's checkout, what the program deploys in every cluster); none found (a job's container): not checked.
    ``config``: the gate's judge configuration when it was read already (``canary_config``)."""
    gate = policy.health_gate.canary if policy.health_gate is not None else None
    if gate is None:
        return
    from e2e_canary.definitions import arm_results_within, default_canary_dir, load_canaries
    from e2e_canary.judge import JudgeConfig

    try:
        folder = canaries or default_canary_dir()
    except PlatformError:
        return
    judge = config or canary_config(policy) or JudgeConfig()
    where = judge.source if gate.config else "the judge's defaults"
    found = arm_results_within(load_canaries(folder), gate.window)
    if found is None:
        raise PlatformError(f"a canary gate judges an image by the node-pool canary's arm, and {folder} defines no "
                            "node-pool canary: every judgement would be inconclusive", file=policy.source,
                            field="healthGate.canary")
    canary, most = found
    needs = {f"minSamples ({where})": judge.min_samples, f"minAttempts ({where})": judge.min_attempts}
    if policy.first_light is not None:
        needs["firstLight.minResults"] = policy.first_light.min_results
    short = [f"{name} {n}" for name, n in needs.items() if n > most]
    if short:
        raise PlatformError(f"window {human_duration(gate.window)} holds {most} results of an image's arm at the "
                            f"{canary.name} canary's pace ({canary.pods_per_arm} pods an arm every {canary.longest_period} s, "
                            f"{canary.source}), fewer than {', '.join(short)} asks: every judgement would be "
                            "inconclusive; widen the window or ask for fewer", file=policy.source,
                            field="healthGate.canary.window")


def check_gate_windows(pipeline: Pipeline) -> None:
    """Each stage's rotation policy whose canary gate could never pass at the canaries' pace is the pipeline's mistake,
    said before a candidate starts or a tick acts."""
    for name in pipeline.names:
        path = pipeline.policy_path(name)
        if path is not None:
            check_gate_window(load_policy(path))


def prepare(platform: Platform, request: RunRequest, stop: threading.Event | None = None) -> Rotation:
    """Read and check everything a rotation needs and reach its clusters and their groups; change nothing."""
    policy = load_policy(request.policy_file)
    scope = scope_of(platform, request.context, request.stage, "rotate run")
    if scope.stage is not None and policy.cluster is not None:
        raise PlatformError(f"names cluster {policy.cluster!r}, but a stage rotation applies the policy to every cluster "
                            "of the stage: remove `cluster`", file=policy.source, field="cluster")
    config = None
    if policy.health_gate is not None:
        check_gate_exists(policy.health_gate, policy.source)
        config = canary_config(policy)
        check_gate_window(policy, config)
    targets = connect(platform, scope.names, request.kubeconfig,
                      request.region or (scope.stage.region if scope.stage else None))
    if policy.targets:  # pools the policy names must exist (a policy that follows the launch templates names none)
        nodes = {name: _nodes_when_answered(t, policy) for name, t in targets.items()}
        check_pools(policy, {n.labels[policy.pool_label] for ns in nodes.values() for n in ns if policy.pool_label in n.labels},
                    scope.where)
        for name, t in targets.items():
            _check_targets_launch(policy, t, nodes[name])
    # The stage's own store, for what the pipeline promoted there and its freezes by hand (below), read before a store
    # ``--state`` names is made: one that cannot be read stops the run before anything.
    held = scope.stage or platform.stage_of(scope.names[0])
    own = stage_store(platform, held.name) if held is not None and request.state is not None else None
    store = store_of(platform, request.state, scope)  # made (a new SQLite file) once every input is checked
    own = store if held is not None and request.state is None else own
    canary = None
    if policy.health_gate is not None and policy.health_gate.canary is not None:
        from e2e_canary.verdict import canary_gate

        canary = canary_gate(store, policy.health_gate.canary.window, config)
    # What the pipeline promoted to the stage, and its freezes by hand, bind every rotation of its clusters (a stage's
    # or one of its clusters'); the freezes not the tick's own (the ledger holds that one), and read again before each
    # wave: a freeze set while the run goes on stops it at its next wave. Read from the stage's own store, whatever
    # store ``--state`` journals the run in: another store does not escape them.
    promoted = promoted_in(own, held.name) if held is not None and own is not None else None
    freezes = HandFreezes(own, held.name) if held is not None and own is not None and not request.by_pipeline else None
    options = Options(lease_ttl=request.lease_ttl, stage=scope.stage.name if scope.stage else None,
                      max_waves=request.max_waves, canary=canary, stop=stop, environment=platform.environment,
                      promoted=promoted.image_ids if promoted is not None else None,
                      deployed=promoted.launches if promoted is not None else None, exclusions=freezes)
    return Rotation(policy, scope, store, targets, options)


class HandFreezes:
    """A stage's freezes set by hand as exclusions, read from its store each time a wave may start (the last answer
    kept while the store does not answer: one missed read never lets a wave through a freeze already seen)."""

    def __init__(self, store: StateStore, stage: str) -> None:
        self.store, self.stage = store, stage
        self.last: list[MaintenanceWindow] = []

    def __call__(self) -> list[MaintenanceWindow]:
        try:
            self.last = hand_freeze_windows(frozen_in(self.store, self.stage))
        except Unavailable:
            pass
        return self.last


FOREVER = datetime(9000, 1, 1)  # a freeze by hand with no end: until someone unfreezes it


def hand_freeze_windows(freezes: Sequence[HandFreeze]) -> list[MaintenanceWindow]:
    """The freezes set by hand on a stage (``release freeze``, as its tick last recorded them) as exclusions of its
    rotations outside the pipeline: no wave starts while one holds."""
    out = []
    for f in freezes:
        if f.until is not None and f.until <= f.at:
            continue  # over as it began (``--until 0``): holds nothing
        until = f"until {format_time(f.until)}" if f.until is not None else "until unfrozen by hand"
        out.append(MaintenanceWindow(name=f"freeze by hand ({f.by or 'someone'}: {f.reason}; {until})", timezone="UTC",
                                     start=datetime.fromtimestamp(f.at, UTC).replace(tzinfo=None),
                                     end=datetime.fromtimestamp(f.until, UTC).replace(tzinfo=None) if f.until is not None
                                     else FOREVER))
    return out


def _check_targets_launch(policy: RotationPolicy, target: Target, nodes: list[Node]) -> None:
    """A pinned target its pool's auto scaling groups do not launch is the user's mistake (point the launch template at
    it first), found before the store is opened or made: the executor's first read says the same, later."""
    found = target.groups.instances([n.instance_id for n in nodes if n.instance_id])
    group_of = {n.name: found[n.instance_id].group for n in nodes if n.instance_id in found}
    launched = {g: target.groups.describe(g).image for g in sorted(set(group_of.values()))}
    for pool, message in resolve(policy, nodes, group_of, launched).mismatches.items():
        raise PlatformError(message, file=policy.source, field=f"targets.{pool}")


def _nodes_when_answered(target: Target, policy: RotationPolicy) -> list[Node]:
    """The cluster's nodes; an API that answers but not now (an outage, after the call's own retries) is asked again
    every ``API_PROBE_SECONDS`` of its clock within the policy's ``apiPatienceSeconds``, as a run waits for it."""
    clock = target.cluster.clock
    began = clock.now()
    while True:
        try:
            return list(target.cluster.list_nodes())
        except ApiRefused as exc:
            if not exc.transient or clock.now() - began >= policy.api_patience_seconds:
                raise
            clock.sleep(min(API_PROBE_SECONDS, began + policy.api_patience_seconds - clock.now()))


def rotate(rotation: Rotation, progress: Callable[[Progress], None] | None = None) -> RotationResult:
    """Carry the rotation out: a cluster under its lease, or a stage's clusters in the stage plan's order."""
    names = rotation.scope.names
    if rotation.scope.stage is not None:
        steps, _ = cluster_steps(places_of(rotation.scope.stage), rotation.policy.host_cluster)
        outcomes = run_stage([[rotation.targets[n] for n in step] for step in steps], rotation.policy, rotation.store,
                             rotation.options, holder_id(), progress)
    else:
        outcomes = [run_cluster(rotation.targets[names[0]], rotation.policy, rotation.store, rotation.options, holder_id(),
                                progress)]
    return RotationResult(outcomes)


@dataclass
class DryRun:
    """What a run would do on one cluster: the targets it resolved, the journal's state, and the plan."""

    cluster: str
    targets: dict[str, str]
    run: str
    paused: bool
    unmanaged: list[str]
    warnings: list[str]
    plan: RotationPlan

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "targets": self.targets, "run": self.run, "paused": self.paused,
                "unmanaged": self.unmanaged, "warnings": self.warnings, "plan": self.plan.to_dict()}


def dry_run(rotation: Rotation) -> list[DryRun]:
    """Read, resolve targets and plan each cluster as the run would; change nothing and take no lease."""
    out = []
    for name, target in rotation.targets.items():
        executor = Executor(target, rotation.policy, rotation.store, rotation.options)
        read = executor.read(first=True)
        plan = executor.plan(read)
        state = executor.state
        out.append(DryRun(name, read.targets, state.status, state.paused is not None, read.unmanaged, read.warnings, plan))
    return out


# ---------------------------------------------------------------------------------------------------- the store's view


def rotation_status(platform: Platform, context: str | None, stage_name: str | None,
                    state: str | None) -> tuple[StateStore, list[RunReport]]:
    """What the rotations of a cluster or stage are doing, from the state store alone: each cluster's report and lease."""
    scope = scope_of(platform, context, stage_name, "rotate status")
    store = store_of(platform, state, scope, existing=True)
    clusters = []
    for name in scope.names:
        report = build_report(read_state(store, name))
        lease = store.lease(stream_of(name))
        live = lease is not None and not lease.expired(time.time())
        report["lease"] = {"holder": lease.holder, "expires": lease.expires, "live": live} if lease else None
        clusters.append(report)
    return store, clusters


@dataclass(frozen=True)
class ControlRequest:
    """Pause, resume or abort the rotations of one cluster or a stage."""

    action: ControlAction
    context: str | None = None
    stage: str | None = None
    state: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Controlled:
    cluster: str
    action: ControlAction
    by: str

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "action": self.action, "by": self.by}


def control_rotations(platform: Platform, request: ControlRequest) -> tuple[StateStore, list[Controlled]]:
    """Journal the request for every cluster it applies to (a running rotation reads it at its next step)."""
    action = request.action
    scope = scope_of(platform, request.context, request.stage, f"rotate {action}")
    store = store_of(platform, request.state, scope, existing=True)
    states = {name: read_state(store, name) for name in scope.names}
    if action is ControlAction.RESUME and not any(s.paused for s in states.values()):
        raise PlatformError(f"nothing is paused ({', '.join(scope.names)})", field="rotate resume")
    if action is ControlAction.ABORT and not any(s.open for s in states.values()):
        raise PlatformError(f"no rotation is in progress to abort ({', '.join(scope.names)})", field="rotate abort")
    by = who(platform.identity_target)
    done = []
    for name, run in states.items():
        if (action is ControlAction.RESUME and not run.paused) or (action is ControlAction.ABORT and not run.open):
            continue
        control(store, name, action, by, request.reason, time.time())
        done.append(Controlled(name, action, by))
    return store, done


@dataclass
class Abort:
    controlled: Controlled
    outcome: AbortOutcome

    def to_dict(self) -> dict[str, Any]:
        return {**self.controlled.to_dict(), **self.outcome.to_dict()}


def abort_rotations(platform: Platform, request: ControlRequest, kubeconfig: str | None, wait: bool = True,
                    say: Callable[[str], None] | None = None) -> list[Abort]:
    """End the rotations: a running one puts back at its next step; a dead one's lease is waited out (unless not
    ``wait``) and this puts back what it held, after settling what it left unconfirmed."""
    store, done = control_rotations(platform, replace(request, action=ControlAction.ABORT))

    def reach(name: str) -> Target:
        return connect(platform, [name], kubeconfig, None)[name]

    return [Abort(d, abort_cluster(store, d.cluster, functools.partial(reach, d.cluster), holder_id(), wait=wait, say=say))
            for d in done]
