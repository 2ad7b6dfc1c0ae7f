"""The rotation executor: carries a rotation out, wave by wave, durably. It acts; the planner plans.

``Executor.run`` rotates one cluster. Each turn it reads the cluster, resolves what every pool should run (the policy's
``targets``, or with none what each node's auto scaling group's launch template boots now), plans what is left with
``plan_cluster`` (reality drifts: nodes fail, pods move, budgets change), asks the health gate, paces itself under
``maxMutationsPerMinute``, and carries out the first wave of that plan:

1. cordon every node of the wave (evicted pods never land on a node about to go); outdated nodes also carry a
   ``PreferNoSchedule`` taint from the start of the run, so evicted pods prefer current nodes;
2. ``surge``: raise each group's desired capacity by its share of the wave (within its max) and wait until that many
   new nodes are Ready on the target image;
3. drain through the eviction API only (``WaveDrain``);
4. terminate the drained nodes' instances: the surged share with a capacity decrement, the rest without, so the group
   launches their replacements from its current template (``replace`` is all of the latter);
5. wait until the replacements are Ready, the evicted pods' workloads are Ready again, and for the one-at-a-time
   workloads' settle time.

Steps 1 to 4 are a wave's head, step 5 its tail: the next wave's head may run beside earlier waves' tails when every
limit holds at that instant (``upgrade_service.running.overlap``); else the open waves' pods come back, or one ends.

Every side effect is journalled before and after (``upgrade_service.journal.rotation``); a run killed at any moment and
started again folds the journal, settles the side effects it never confirmed by looking at the world (an instance is
terminated again only if it is still in service), and finishes the waves it left open. It starts no new wave — and
says why — when new nodes do not turn Ready, when more than ``maxFailedNodes`` nodes failed, when evicted pods do not
come back, or when the gate says stop; it paces instead of failing when the next wave would break the mutation SLO.
``rotate pause``, ``resume`` and ``abort`` reach it through the journal.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial

from platformctl.kernel.clock import past
from platformctl.kernel.cluster.drain import drain_blocks_on
from platformctl.kernel.cluster.informer import Informer, InformerStats
from platformctl.kernel.cluster.model import Node, Snapshot
from platformctl.kernel.errors import ApiFault, ApiRefused, NotFoundError, PlatformError
from platformctl.kernel.nodegroups import NodeGroupError
from platformctl.kernel.state import LeaseLost, StateStore
from platformctl.kernel.state.lease import LeaseKeeper
from upgrade_service.journal import rotation as j
from upgrade_service.journal.intents import settle_eviction, settle_with_groups
from upgrade_service.journal.records import (
    Finished,
    Gate,
    GroupShare,
    Halted,
    NodeFailed,
    OwnerWait,
    Paused,
    Phase,
    PlanRecord,
    RunContinued,
    RunStarted,
    WaveFinished,
    WaveStarted,
)
from upgrade_service.journal.remediation import remediation_holds
from upgrade_service.journal.rotation import OUTSIDE_WINDOW, Journal, RunState, WaveState
from upgrade_service.planning.disruption import view_cluster
from upgrade_service.planning.fit import PoolCapacity, pool_capacity
from upgrade_service.planning.plan import RotationPlan, Wave, plan_cluster
from upgrade_service.planning.policy import RotationPolicy
from upgrade_service.planning.targets import resolve as resolve_targets
from upgrade_service.running.abort import put_back
from upgrade_service.running.first_light import FirstLight
from upgrade_service.running.gate import Question, ask
from upgrade_service.running.overlap import carried, out_of_service, why_wait
from upgrade_service.running.pacing import MutationPacer
from upgrade_service.running.pods_back import ApiBack, BudgetsBack, WorkloadsBack
from upgrade_service.running.replacement import Missing, NodeReplacer
from upgrade_service.running.report import build_report
from upgrade_service.running.run_types import (
    EXIT_DONE,
    EXIT_HALTED,
    EXIT_INTERRUPTED,
    EXIT_PAUSED,
    TAINT,
    Aborted,
    ClusterRead,
    Halt,
    Interrupted,
    Options,
    Outcome,
    Progress,
    RunStatus,
    Target,
)
from upgrade_service.running.unstick import Unstick
from upgrade_service.running.wave_drain import DrainStatus, WaveDrain

SCALABLE = ("ReplicaSet", "StatefulSet")


class Executor:
    def __init__(self, target: Target, policy: RotationPolicy, store: StateStore, options: Options,
                 keeper: LeaseKeeper | None = None, progress: Callable[[Progress], None] | None = None) -> None:
        self.target = target
        self.cluster = target.cluster
        self.groups = target.groups
        self.policy = policy
        self.store = store
        self.options = options
        self.keeper = keeper
        self.clock = target.cluster.clock
        self.journal = Journal(store, target.name, self.clock, keeper)
        self.pacer = MutationPacer(policy.max_mutations_per_minute, self.clock)
        self._plan: RotationPlan | None = None
        self._plan_targets: dict[str, str] = {}
        self._next_wave = 0  # the cached plan's waves before this one have been carried out
        self._started = 0  # waves this process started (what --max-waves counts)
        # The cluster as its watch tells it: listed once, then kept current; every wait wakes when its thing happens.
        self.nodes_watch: Informer = target.cluster.informer("nodes")
        self.pods_watch: Informer = target.cluster.informer("pods")
        self.pdbs_watch: Informer = target.cluster.informer("pdbs")
        self._progress = progress
        self.api_back = ApiBack(self.journal, self.clock, policy.api_patience_seconds, self._show)
        self._api_fault_transient = False  # only an outage is waited for: a 403 or a 409 stops the run at once
        self.view = Progress(target.name)
        self.replacer = NodeReplacer(self.cluster, self.groups, self.journal, self.pacer, check=self._check,
                                     fence=keeper.check if keeper is not None else None,
                                     poll_seconds=options.poll_seconds, nodes=self.nodes_watch)
        self.unstick = Unstick(self.replacer, self.groups, self.nodes_watch, policy.node_ready_timeout_seconds,
                               lambda message: self._show("drain", message))
        self.first_light = FirstLight(target.name, self.cluster, self.groups, self.journal, self.replacer, policy, options,
                                      self.nodes_watch, self.pods_watch, self.pdbs_watch, self._show)
        self.budgets_back = BudgetsBack(self.pods_watch, self.pdbs_watch, self.replacer, self.journal, options.poll_seconds,
                                        policy.stuck_seconds, policy.durations.pod_start_seconds,
                                        lambda message: self._show("waiting", message))

    # ---------------------------------------------------------------- small helpers

    @property
    def state(self) -> RunState:
        return self.journal.state

    def _show(self, phase: str | None = None, message: str | None = None, drain: DrainStatus | None = None) -> None:
        if phase is not None:
            self.view.phase = phase
        if message is not None:
            self.view.message = message
        self.view.drain = drain
        if self._progress is not None:
            self._progress(self.view)

    def _check(self) -> None:
        """Before every side effect: still ours to act on, not asked to stop, and not aborted."""
        if self.keeper is not None:
            self.keeper.check()
        if self.options.stop is not None and self.options.stop.is_set():
            raise Interrupted()
        state = self.journal.refresh()
        if state.abort is not None:
            raise Aborted()

    # ---------------------------------------------------------------- reading the cluster

    def read(self, first: bool = False) -> ClusterRead:
        """The cluster for planning: the nodes this run still has to deal with, and what each pool should run."""
        state = self.state
        policy = self.policy
        self.nodes_watch.sync()
        self.pods_watch.sync()
        nodes = self.nodes_watch.nodes()
        gone = state.terminated
        nodes = [n for n in nodes if n.instance_id not in gone and n.name not in state.failed]
        pods = self.pods_watch.items()
        self.pdbs_watch.sync()
        pdbs = self.pdbs_watch.items()
        group_of = self.replacer.groups_of(nodes)
        described = {g: self.groups.describe(g) for g in sorted(set(group_of.values()))}
        images = {g: d.image for g, d in described.items()}
        policy = policy.with_launch_drift(drift := self.replacer.launch_drift(nodes, group_of, described, self.options.as_deployed))
        resolved = resolve_targets(policy, nodes, group_of, images, self.options.promoted)
        for mismatched, message in resolved.mismatches.items():
            if first:
                raise PlatformError(message, file=policy.source, field=f"targets.{mismatched}")
            raise Halt("target-mismatch", message)
        targets, warnings = resolved.images, list(resolved.warnings)
        unmanaged: list[str] = []
        keep: list[Node] = []
        outdated: set[str] = set()
        held = remediation_holds(self.store, self.target.name)
        for node in nodes:
            if node.name in held:  # its replacement boots the launch template's image: the target, too
                warnings.append(f"{node.name} is left to remediation: {held[node.name]}")
                continue
            pool = node.labels.get(policy.pool_label)
            if pool in targets and policy.due(node, targets[pool], self.clock.now()) is not None:
                if node.name not in group_of:
                    unmanaged.append(node.name)
                    continue
                outdated.add(node.name)
            keep.append(node)
        # Every pod matters to the plan: where the evicted ones can go depends on what runs everywhere else.
        kept = {n.name for n in keep}
        snapshot = Snapshot(tuple(keep), tuple(p for p in pods if p.node_name is None or p.node_name in kept), tuple(pdbs),
                            source=f"cluster {self.target.name}")
        return ClusterRead(keep, pods, snapshot, targets, group_of, unmanaged, warnings, outdated, described, resolved.drifted, drift)

    def capacity(self, read: ClusterRead, policy: RotationPolicy) -> PoolCapacity:
        """What new nodes each pool gets and how many its groups may add above their desired capacity now."""
        return pool_capacity(read.snapshot, policy, read.group_of, read.described)

    def plan(self, read: ClusterRead) -> RotationPlan:
        policy = self.policy.with_targets(read.targets).with_launch_drift(read.launch_drift)
        return plan_cluster(read.snapshot, policy, self.clock.now(), cluster=self.target.name,
                            capacity=self.capacity(read, policy))

    def _plan_for(self, read: ClusterRead) -> tuple[RotationPlan, list[Wave]]:
        """The plan for what is left, and its waves still to go. The cluster was just read again; the plan is
        made again whenever it no longer holds — a node came or went, a target changed, or the next wave's
        nodes cannot be drained now — and once more before the run ends, so nothing blocked earlier is
        forgotten. While it holds, its next wave is taken: planning a 3,000-node cluster costs seconds, and a
        plan that still fits the cluster would come out the same."""
        cached = self._plan
        if cached is not None and read.targets == self._plan_targets:
            left = cached.waves[self._next_wave:]
            expected = {n for w in left for n in w.nodes} | {b.node for b in cached.blocked}
            if left and expected == read.outdated and not self._blocked_now(left[0], read):
                return cached, left
        plan = self.plan(read)
        self._plan, self._plan_targets, self._next_wave = plan, dict(read.targets), 0
        self._record_plan(plan, read)
        return plan, list(plan.waves)

    def _blocked_now(self, wave: Wave, read: ClusterRead) -> bool:
        nodes = set(wave.nodes)
        snapshot = Snapshot(tuple(n for n in read.nodes if n.name in nodes),
                            tuple(p for p in read.snapshot.pods if p.node_name in nodes), read.snapshot.pdbs)
        view = view_cluster(snapshot, self.policy.with_targets(read.targets).with_launch_drift(read.launch_drift), self.clock.now())
        # A budget at its floor while its pods come back (as they do while an earlier wave's tail runs) is no reason to
        # plan again: the drain waits for it on 429 as it would for any budget.
        return any(n.blocked and not n.recovering for n in view.nodes) or {n.name for n in view.nodes} != nodes

    # ---------------------------------------------------------------- the run

    def run(self) -> Outcome:
        try:
            try:
                outcome = self._run()
            except ApiRefused as exc:  # its first read: an API that answers, but not now (an outage), is waited for
                if not exc.transient:  # (one that does not answer at all may be a wrong kubeconfig: said at once)
                    raise
                self._api_fault_transient = True
                outcome = Outcome(self.target.name, RunStatus.API_ERROR, EXIT_HALTED, f"stopped by an API error: {exc}")
            while outcome.status == RunStatus.API_ERROR and self._api_fault_transient and self.api_back.wait(outcome.reason):
                try:
                    outcome = self._run()  # the open run goes on from its journal, as the next `rotate run` would
                except (NodeGroupError, PlatformError, ApiFault) as exc:  # its first read failed: still down
                    self._api_fault_transient = bool(getattr(exc, "transient", False))
                    outcome = Outcome(self.target.name, RunStatus.API_ERROR, EXIT_HALTED, f"stopped by an API error: {exc}")
            return outcome
        except LeaseLost as exc:  # lost while writing what stopped it: nothing more is written
            return Outcome(self.target.name, RunStatus.LOST_LEASE, EXIT_HALTED, f"stopped: {exc}")
        finally:
            for informer in (self.nodes_watch, self.pods_watch, self.pdbs_watch):
                informer.close()

    @property
    def reads(self) -> InformerStats:
        """What this run read from the API: list and watch requests, objects listed and watch events."""
        total = InformerStats()
        for informer in (self.nodes_watch, self.pods_watch, self.pdbs_watch):
            total.add(informer.stats)
        return total

    def _run(self) -> Outcome:
        state = self.journal.refresh()
        if state.paused is not None:
            p = state.paused
            return self._outcome(RunStatus.PAUSED, EXIT_PAUSED, f"rotations of {self.target.name} are paused by {p.by}"
                                 f"{': ' + p.reason if p.reason else ''}; `platformctl rotate resume` lets them go on")
        holder = self.keeper.holder if self.keeper else "local"
        if state.open and state.abort is not None:
            return self._abort()
        if (closed := self.options.closed(self.policy, self.clock.now())) is not None and not state.open_waves:
            return self._outcome(RunStatus.OUTSIDE_WINDOW, EXIT_DONE, closed)  # nothing in flight: nothing is written
        first = not state.open
        read: ClusterRead | None = self.read(first=True)  # a policy that cannot work fails here, before anything is touched
        if first:  # capacity an earlier run added and never gave back (aborted, a node failed) is spent first
            inherited = {g: n for g, n in state.capacity.items() if n > 0}
            self.journal.append(RunStarted(holder, inherited, self.policy.source, self.policy.strategy,
                                           (read.targets if read is not None else None) or None,
                                           self.policy.follows_launch_templates, self.options.stage,
                                           run=f"{self.target.name}-{int(self.clock.now())}"))
        else:
            self.journal.append(RunContinued(holder, state.status))
        try:
            if self.state.pending:
                self._settle_unconfirmed()
                read = None  # what it settles (an instance found terminated) changes what is left
            self._started = 0
            for wave in self.state.open_waves:  # the newest may be mid-drain; earlier ones wait for what they left
                self._show("resuming", f"resuming wave {wave.number}")
                self._head(wave)
                read = None
            while True:
                self._check()
                if self.state.paused is not None:
                    self._finish_open()
                    self.journal.append(Paused(self.state.paused.by))
                    return self._outcome(RunStatus.PAUSED, EXIT_PAUSED, f"paused by {self.state.paused.by} after wave "
                                         f"{len(self.state.waves)}; `platformctl rotate resume` lets it go on")
                if len(self.state.failed) > self.policy.max_failed_nodes:
                    raise Halt("circuit-breaker", f"{len(self.state.failed)} nodes failed, more than maxFailedNodes "
                               f"{self.policy.max_failed_nodes}: " + "; ".join(f"{n}: {r}" for n, r in sorted(self.state.failed.items())[:3]))
                read = read or self.read()  # the first turn plans from the read above when nothing changed since
                plan, waves = self._plan_for(read)
                self._taint_outdated(plan)
                if not waves:
                    if not self.budgets_back.wait(plan):  # nodes whose budgets' pods are on their way back: plan again
                        if not self.state.open_waves:
                            return self._finish(self.budgets_back.given_up(plan), read)
                        self._tail(self.state.open_waves[0])  # what the open waves bring back may be what the rest needs
                    read = None
                    continue
                if (closed := self.options.closed(self.policy, self.clock.now())) is not None:  # no wave nor first light
                    return self._stop(OUTSIDE_WINDOW, RunStatus.OUTSIDE_WINDOW, closed, closed)
                if self.first_light.due(read):  # before wave 1: the new images on one node a pool, judged
                    self.first_light.run(read, plan)
                    read = None
                    continue
                self.view.waves = len(self.state.waves) + len(waves)
                for open_wave in self.state.open_waves:  # a wave whose tail is over ends now, not when it is needed
                    if j.TERMINATED not in open_wave.phases or not self._tail(open_wave, wait=False):
                        break
                why = self._why_wait(waves[0], read)
                if why is not None:
                    oldest = next((w for w in self.state.open_waves if not w.back), self.state.open_waves[0])  # pods back may do
                    self._show("overlap", f"waiting for wave {oldest.number}'s {'end' if oldest.back else 'pods'}: {why}")
                    self._tail(oldest, settle=oldest.back)
                    read = None
                    continue
                if self.options.max_waves is not None and self._started >= self.options.max_waves:
                    started = f"{self._started} wave{'s' if self._started != 1 else ''}"
                    return self._stop("max-waves", RunStatus.PARTIAL, f"started {started} (--max-waves)",
                                      f"stopped after {started} as --max-waves asked; {len(waves)} to go: the next "
                                      "`rotate run` goes on")
                self._started += 1
                if (closed := self._gate_and_pace(waves[0], read)) is not None:  # the gate may hold past the window
                    return self._stop(OUTSIDE_WINDOW, RunStatus.OUTSIDE_WINDOW, closed, closed)
                self._next_wave += 1
                self._head(self._start_wave(waves[0], plan, read))  # its tail runs beside the next waves' heads
                read = None
        except Halt as halt:
            self.journal.append(Halted(halt.reason, halt.detail))
            self._show("halted", halt.detail)
            return self._outcome(RunStatus.HALTED, EXIT_HALTED, halt.detail)
        except Aborted:
            return self._abort()
        except Interrupted:
            detail = f"interrupted after wave {len(self.state.waves)}: stopped before its next step; `rotate run` goes on"
            self.journal.append(Halted("interrupted", detail))
            self._show("interrupted", detail)
            return self._outcome(RunStatus.INTERRUPTED, EXIT_INTERRUPTED, detail)
        except LeaseLost as exc:
            return Outcome(self.target.name, RunStatus.LOST_LEASE, EXIT_HALTED, f"stopped: {exc}")
        except (NodeGroupError, PlatformError, ApiFault) as exc:
            # Mid-run, an API that refuses or stops answering is a fault to stop for, not a user's mistake:
            # halted, journalled, resumable. The call it was making stays unconfirmed and is settled on resume.
            detail = f"stopped by an error from {'AWS' if isinstance(exc, NodeGroupError) else 'the cluster'}: {exc}"
            self._api_fault_transient = bool(getattr(exc, "transient", False))
            self.journal.append(Halted("api-error", detail))
            self._show("halted", detail)
            # its own status: an API that would not answer (after the seams' retries) is no verdict on the rotation
            return self._outcome(RunStatus.API_ERROR, EXIT_HALTED, detail)

    def _gate_and_pace(self, wave: Wave, read: ClusterRead) -> str | None:
        """The health gate and the pace before a wave, which may take a while: then whether a window is still open."""
        self._gate(read)
        self._pace(wave, read)
        return self.options.closed(self.policy, self.clock.now())

    def _stop(self, code: str, status: RunStatus, detail: str, reason: str) -> Outcome:
        """Stop before the next wave, not as a fault (the next run goes on): the open waves finish first."""
        self._finish_open()
        self.journal.append(Halted(code, detail))
        self._show(code, reason)
        return self._outcome(status, EXIT_DONE, reason)

    def _outcome(self, status: RunStatus, code: int, reason: str) -> Outcome:
        return Outcome(self.target.name, status, code, reason, build_report(self.journal.refresh()))

    def _record_plan(self, plan: RotationPlan, read: ClusterRead) -> None:
        self.journal.append(PlanRecord(len(plan.waves), sum(len(w.nodes) for w in plan.waves), plan.estimated_seconds,
                                       read.targets, list(plan.waves[0].nodes) if plan.waves else [],
                                       [b.to_dict() for b in plan.blocked[:100]], read.unmanaged[:100],
                                       (read.warnings + plan.warnings)[:20]))

    def _settle_unconfirmed(self) -> None:
        """Side effects a killed run started but never confirmed: look at the world and record what happened."""
        for key, intent in list(self.state.pending.items()):
            if not settle_with_groups(self.journal, key, intent, self.groups) and \
                    not settle_eviction(self.journal, key, intent, self.cluster):
                # Cordons, taints, capacity changes and evictions are redone (or found done) by the steps that
                # follow; closing the intent keeps the journal's pairs whole.
                self.journal.done(key, ok=False, recovered=True, result="interrupted; the step is redone if still needed")

    def _taint_outdated(self, plan: RotationPlan) -> None:
        outdated = {n for w in plan.waves for n in w.nodes} | {b.node for b in plan.blocked}
        for name in sorted(outdated - self.state.tainted):
            node = self.nodes_watch.get(name)
            if node is None:
                continue
            if TAINT in node.taints:
                continue
            self.pacer.take()
            self.replacer.op("taint", partial(self.cluster.taint, name, TAINT), node=name)

    # ---------------------------------------------------------------- gate and pacing

    def _gate(self, read: ClusterRead) -> None:
        if (gate := self.policy.health_gate) is None:
            return
        number = len(self.state.waves) + 1
        context = {"cluster": self.target.name, "wave": str(number), "stage": self.options.stage or ""}
        present = frozenset(n.image for n in read.nodes if n.image)
        deadline = self.clock.now() + self.policy.gate_timeout_seconds
        self._show("gate", f"asking the health gate before wave {number}")
        said = None
        while True:
            self._check()
            late = past(self.clock, deadline)  # asked before the gate: an answer from before the deadline is asked again
            question = Question(self.target.name, self.options.stage or "", number, self.clock.now(), dict(read.targets), present)
            verdict = ask(gate, context, self.options.canary, question, self.options.environment)
            if (verdict.verdict, verdict.reason) != said:
                said = (verdict.verdict, verdict.reason)
                self.journal.append(Gate(number, verdict.verdict, verdict.reason))
            if verdict.verdict == "pass":
                return
            if verdict.verdict == "fail":
                raise Halt("gate-fail", f"the health gate says fail before wave {number}: {verdict.reason}")
            if late:
                raise Halt("gate-inconclusive", f"the health gate stayed inconclusive for gateTimeoutSeconds "
                           f"{self.policy.gate_timeout_seconds} before wave {number}: {verdict.reason}")
            self._show("gate", f"health gate inconclusive ({verdict.reason}); asking every "
                       f"{self.options.gate_poll_seconds:.0f} s for up to {self.policy.gate_timeout_seconds} s")
            self.clock.sleep(min(self.options.gate_poll_seconds, max(deadline - self.clock.now(), 0.0)))

    def _pace(self, wave: Wave, read: ClusterRead) -> None:
        nodes = set(wave.nodes)
        evictions = sum(1 for p in read.pods if p.node_name in nodes and drain_blocks_on(p))
        calls = evictions + 2 * len(nodes)  # evictions, cordons, and their eventual untaint or uncordon
        waited = self.pacer.wait_for(calls)
        if waited > 0:
            self._show("pacing", f"waited {waited:.0f} s so that wave's ~{calls} mutating calls stay under "
                       f"maxMutationsPerMinute {self.policy.max_mutations_per_minute}")

    # ---------------------------------------------------------------- one wave

    def _start_wave(self, wave: Wave, plan: RotationPlan, read: ClusterRead) -> WaveState:
        number = len(self.state.waves) + 1
        nodes = list(wave.nodes)
        by_name = {n.name: n for n in read.nodes}
        groups: dict[str, GroupShare] = {}
        decrement: dict[str, bool] = {}
        for g in sorted({read.group_of[n] for n in nodes}):
            gs = self.groups.describe(g)
            members = [n for n in nodes if read.group_of[n] == g]
            # Capacity added earlier and not given back stands in for this wave's nodes first, except what
            # stands in for nodes of this run that failed to drain (they still hold their slot, cordoned).
            standing_in = sum(1 for w in self.state.waves.values() for n in w.failed
                              if n in w.started.decrement and g in w.started.groups and n in w.started.groups[g].nodes)
            absorb = min(max(self.state.capacity.get(g, 0) - standing_in, 0), len(members))
            pool = by_name[members[0]].labels.get(self.policy.pool_label, "")
            # surge: a new node for each of the wave's nodes, as far as the group has room; replace: the surge the plan
            # gave a wave whose pods have nowhere else to go (its pool's share that falls to this group).
            wanted = len(members) - absorb if self.policy.strategy == "surge" else \
                min(wave.surge.get(pool, 0) if wave.planned_surge else 0, len(members) - absorb)
            surge = min(wanted, gs.room)
            groups[g] = GroupShare(gs.desired, gs.max_size, tuple(gs.instances), tuple(members), surge, absorb,
                                   read.targets.get(pool), self._ahead(wave, plan, read, g, gs.room - surge))
            for i, n in enumerate(members):
                decrement[n] = i < surge + absorb
        # Each evicted pod's workload must be as Ready after the wave as before it.
        owners: dict[str, OwnerWait] = {}
        moving = [p for p in read.pods if p.node_name in set(nodes) and drain_blocks_on(p) and p.owner is not None
                  and p.owner.kind in SCALABLE]
        uids = {p.owner.uid for p in moving if p.owner}
        ready = Counter(p.owner.uid for p in read.pods if p.owner is not None and p.owner.uid in uids and p.ready
                        and not p.terminating)
        for p in moving:
            assert p.owner is not None
            owners[p.owner.uid] = OwnerWait(p.namespace, f"{p.owner.kind} {p.namespace}/{p.owner.name}", ready[p.owner.uid])
        started = WaveStarted(number, tuple(nodes), {n: by_name[n].instance_id or "" for n in nodes}, groups, decrement, owners,
                              estimated_seconds=wave.estimated_seconds, estimate=wave.to_dict()["estimate"],
                              zone=wave.segment.zone or None, pools=tuple(wave.segment.pools),
                              reasons=tuple(wave.reasons[:6]), waiting=tuple(wave.waiting[:20]), stuck=wave.stuck)
        self.journal.write(j.WAVE_STARTED, **started.to_record())  # a WaveStarted: its number is its own
        return self.state.waves[number]

    def _ahead(self, wave: Wave, plan: RotationPlan, read: ClusterRead, group: str, room: int) -> int:
        """Under ``surge``, the next planned wave's share of ``group``, raised with this wave's surge so that it boots
        while this wave drains (the next wave absorbs it): once a wave of these pools has finished (a pool's first wave
        proves its image alone), and when the next wave may overlap this one."""
        if self.policy.strategy != "surge" or not self.policy.overlap_waves or room <= 0 or wave.index >= len(plan.waves) \
                or (self.options.max_waves is not None and self._started >= self.options.max_waves):
            return 0
        after, pools = plan.waves[wave.index], frozenset(wave.segment.pools)
        if frozenset(after.segment.pools) != pools or not self.state.proven(pools):
            return 0
        return min(sum(1 for n in after.nodes if read.group_of.get(n) == group), room)

    def _why_wait(self, wave: Wave, read: ClusterRead) -> str | None:
        """Why ``wave`` may not start beside the open waves now (``upgrade_service.running.overlap``); None: it may."""
        if not self.state.open_waves:
            return None
        if not self.policy.overlap_waves:
            return "overlapWaves is off"
        nodes = self.nodes_watch.nodes()
        group_of = self.replacer.groups_of(nodes)
        described = {g: read.described[g] if g in read.described else self.groups.describe(g)
                     for g in sorted(set(group_of.values()))}  # the turn's read described them: no second call
        out = out_of_service(nodes, self.state.cordoned, group_of, described, self.state.capacity, self.policy.pool_label)
        return why_wait(wave, self.state, out, self.policy, read.nodes)

    def _finish_open(self) -> None:
        for wave in self.state.open_waves:
            self._tail(wave)

    def _head(self, wave: WaveState) -> None:
        """Cordon, surge, drain and terminate: what the next wave may not overlap."""
        number = wave.number
        info = wave.started
        nodes: list[str] = list(info.nodes)
        self.view.wave = number
        self.view.in_flight = nodes
        # 1. cordon
        self._show("cordon", f"wave {number}: cordoning {len(nodes)} nodes")
        for name in nodes:
            if name in wave.cordoned or info.instances[name] in wave.terminated or name in wave.failed:
                continue
            self.replacer.cordon(name, wave=number)  # False: the node went away by itself, its instance too
        # 2. surge
        groups = info.groups
        if j.SURGED not in wave.phases:
            for g, gi in groups.items():
                if gi.surge or gi.ahead:
                    want = gi.desired + gi.surge + gi.ahead
                    current = self.groups.describe(g).desired
                    if current < want:
                        self._show("surge", f"wave {number}: raising {g} from {current} to {want}")
                        self.replacer.add_capacity(g, want, current, wave=number)
            self.journal.append(Phase(number, j.SURGED))
        if any(gi.surge or gi.absorb for gi in groups.values()) and j.NEW_NODES_READY not in wave.phases:
            missing = self._wait_new_nodes(wave, {g: gi.surge for g, gi in groups.items() if gi.surge or gi.absorb})
            if missing:
                for name in nodes:  # nothing was drained: give the nodes back until the run goes on
                    if name in wave.cordoned:
                        self.replacer.uncordon(name, wave=number)
                raise Halt(missing.code, f"wave {number}: {missing}")
            self.journal.append(Phase(number, j.NEW_NODES_READY))
        # 3. drain
        if j.DRAIN_DONE not in wave.phases:
            self._show("drain", f"wave {number}: draining {len(nodes)} nodes")
            drain = WaveDrain(self.cluster, self.policy, self.journal, self.pacer, wave=number,
                              poll_seconds=self.options.poll_seconds, check=self._check, pods=self.pods_watch,
                              budgets=self.pdbs_watch,
                              resume=carried(w for w in self.state.open_waves if w.number <= number),
                              progress=lambda status: self._show(drain=status),
                              on_drained=lambda name: self._terminate_drained(wave, name),
                              on_stuck=lambda stuck: self.unstick(wave, stuck))
            todo = [n for n in nodes if n not in wave.drained and n not in wave.failed
                    and info.instances[n] not in wave.terminated]
            outcome = drain.run(todo, self.policy.drain_timeout_seconds)
            for name, why in outcome.failed.items():
                self.journal.append(NodeFailed(number, name, why))
            self.journal.append(Phase(number, j.DRAIN_DONE, outcome.settle_seconds,
                                      list(outcome.status.lowest_headroom) if outcome.status.lowest_headroom else None))
        # 4. terminate
        self._show("terminate", f"wave {number}: terminating drained nodes")
        for name in nodes:
            self._terminate_drained(wave, name)
        if j.TERMINATED not in wave.phases:
            self.journal.append(Phase(number, j.TERMINATED))

    def _tail(self, wave: WaveState, wait: bool = True, settle: bool = True) -> bool:
        """Its replacements, then its evicted pods, then its settle time: what the next wave's head may overlap. Without
        ``wait``, only what is done already is recorded: False when something is still to come, or without ``settle``
        its settle time."""
        number = wave.number
        patience = None if wait else 0.0
        info = wave.started
        nodes: list[str] = list(info.nodes)
        groups = info.groups
        # 5. replacements, then the evicted pods, then settle
        expected = {}
        for g, gi in groups.items():
            replaced = sum(1 for n in gi.nodes if info.instances[n] in wave.terminated and not wave.decrements(n))
            added = gi.surge + sum(1 for h in wave.extra_surge.values() if h == g)
            if added + replaced:
                expected[g] = added + replaced
        if expected and j.REPLACEMENTS_READY not in wave.phases:
            missing = self._wait_new_nodes(wave, expected, patience)
            if missing and not wait:
                return False
            if missing:
                raise Halt(missing.code, f"wave {number}: {missing}")
            self.journal.append(Phase(number, j.REPLACEMENTS_READY))
        lingering = self._wait_gone([n for n in nodes if info.instances[n] in wave.terminated], patience)
        if lingering and not wait:
            return False
        if j.PODS_READY not in wave.phases:
            # A workload with pods still on a node that failed to drain cannot be whole while that node is held.
            held = set()
            for name in wave.failed:
                held |= {p.owner.uid for p in self.pods_watch.pods_on(name) if p.owner is not None}
            late = self._wait_pods_ready({uid: o for uid, o in info.owners.items() if uid not in held}, patience)
            if late and not wait:
                return False
            if late:
                raise Halt("pods-not-ready", f"wave {number}: evicted pods were not Ready again within "
                           f"podReadyTimeoutSeconds {self.policy.pod_ready_timeout_seconds}: {late}")
            self.journal.append(Phase(number, j.PODS_READY))
        drained_at = wave.phases.get(j.DRAIN_DONE)
        if j.SETTLED not in wave.phases:
            seconds = int(drained_at.settle or 0) if drained_at else 0
            remaining = seconds - (self.clock.now() - (drained_at.at if drained_at else self.clock.now()))
            # A workload that came back in a run that then died settles until when that run journalled.
            remaining = max([remaining, *(until - self.clock.now() for until in wave.settling.values())])
            if remaining > 0 and not (wait and settle):
                return False
            if remaining > 0:
                self._show("settle", f"wave {number}: letting one-at-a-time workloads settle for {remaining:.0f} s")
                self.clock.sleep(remaining)
            self.journal.append(Phase(number, j.SETTLED))
        self.journal.append(WaveFinished(number, self.clock.now() - info.at, info.estimated_seconds, wave.evictions,
                                         wave.refused, dict(wave.failed), drained_at.lowest_headroom if drained_at else None,
                                         lingering))
        return True

    def _terminate_drained(self, wave: WaveState, name: str) -> None:
        """Terminate a drained node of the wave (once): as soon as it is drained, so its replacement boots while the
        rest drain, and pods that had nowhere to go get somewhere sooner."""
        info = wave.started
        instance = info.instances[name]
        if name not in wave.drained or instance in wave.terminated or name in wave.failed:
            return
        group = info.group_of(name)
        self.replacer.terminate(name, instance, group, wave.decrements(name), wave=wave.number)

    def _wait_new_nodes(self, wave: WaveState, expected: dict[str, int], timeout: float | None = None) -> Missing | None:
        """Wait until each group has ``expected`` Ready nodes on its target image that were not its members when the
        wave started, and the nodes an earlier wave raised ahead for it (absorbed) are Ready too: counted as new since
        that wave began, with its own. Returns what is missing after ``nodeReadyTimeoutSeconds``, or None."""
        self._show("boot", f"wave {wave.number}: waiting for " + ", ".join(f"{n} new node(s) in {g}" for g, n in expected.items()))
        wanted = {}
        for g, n in expected.items():
            share = wave.started.groups[g]
            before = max((w for w in self.state.waves.values() if w.number < wave.number and g in w.started.groups),
                         key=lambda w: w.number, default=None) if share.absorb else None
            since = before.started.groups[g] if before is not None else None
            if since is not None and since.ahead:  # the wave before raised nodes ahead for this one
                wanted[g] = (frozenset(since.members), share.image, since.surge + since.ahead + n)
            elif n:
                wanted[g] = (frozenset(share.members), share.image, n)
        return self.replacer.wait_new_nodes(wanted, self.policy.image_of,
                                            self.policy.node_ready_timeout_seconds if timeout is None else timeout,
                                            since=wave.started.at or None)

    def _wait_gone(self, names: list[str], timeout: float | None = None) -> list[str]:
        return self.replacer.wait_gone(names, self.policy.node_ready_timeout_seconds if timeout is None else timeout,
                                       lambda n: self._show("deregister", f"waiting for {n} terminated node(s) to leave the cluster"))

    def _wait_pods_ready(self, owners: dict[str, OwnerWait], timeout: float | None = None) -> str | None:
        back = WorkloadsBack(self.cluster, self.nodes_watch, self.pods_watch, self.replacer, self.options.poll_seconds,
                             lambda message: self._show("pods", message))
        return back.wait(owners, self.policy.pod_ready_timeout_seconds if timeout is None else timeout)

    # ---------------------------------------------------------------- ending

    def _untaint_all(self) -> None:
        for name in sorted(self.state.tainted):
            self.pacer.take()
            try:
                self.replacer.op("untaint", partial(self.cluster.untaint, name, TAINT.key), node=name)
            except NotFoundError:
                continue

    def _finish(self, plan: RotationPlan, read: ClusterRead) -> Outcome:
        if plan is not self._plan:  # what the run gave up waiting for: the report's blocked nodes say so
            self._record_plan(plan, read)
        self._untaint_all()
        left = len(plan.blocked) + len(read.unmanaged) + len(self.state.failed)
        status = RunStatus.DONE if left == 0 else RunStatus.INCOMPLETE
        reason = ("every outdated node was rotated" if left == 0 else (
            f"{left} outdated node(s) were not rotated: {len(plan.blocked)} blocked, {len(self.state.failed)} failed, "
            f"{len(read.unmanaged)} in no auto scaling group")) + read.drift_said
        self.journal.append(Finished(status, reason))
        report = build_report(self.journal.refresh())
        self._show("done", reason)
        return Outcome(self.target.name, status, EXIT_DONE if left == 0 else EXIT_HALTED, reason, report)

    def _abort(self) -> Outcome:
        self._show("abort", "aborting: uncordoning and untainting what this run touched")
        reason, held = put_back(self.journal, self.cluster, self.groups)
        return self._outcome(RunStatus.ABORTED, EXIT_HALTED, reason + (f"; still held: {', '.join(held)}" if held else ""))
