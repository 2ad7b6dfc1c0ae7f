"""Node remediation: replace broken nodes through the rotation's own machinery, and stop when "a few" becomes "many".

``Remediator.run_once`` looks at one cluster (``health.assess``), decides (``health.decide``) and acts:
for each node it replaces it cordons the node; raises its auto scaling group's desired capacity by one
when the group has room, and waits for that replacement to be Ready (a full cluster has nowhere else
for the evicted pods to go: a surge, as the rotation's); drains it through the eviction API with the
rotation's drain loop (budgets honoured; the eviction API's own rule lets unready pods go while their
budget is whole); and terminates its instance, with a capacity decrement after a surge, else without
one so that the group launches the replacement, which it waits to see Ready. An instance that never
joined is terminated the same way. A surge that stands in for a node left cordoned (its drain failed)
or that recovered is kept, not scaled in: lowering the capacity would let the group choose which
instance goes. What it never does:

- act while the circuit breaker is open (more unhealthy nodes than ``maxUnhealthy`` in the cluster,
  a zone or a pool): it records an incident naming every unhealthy node and why, and exits 1;
- replace more than ``maxPerHour`` in any hour, counted in the state store, so separate runs (a
  CronJob every minute) share the limit;
- touch a node a rotation is handling (the rotation journal's open wave, what it cordoned, a step
  it started and never confirmed);
- delete a pod without the eviction API, except where the policy says so (``forceAfterSeconds``: the
  node's kubelet has been gone that long, so its pods are not running, and evictions stayed refused
  for ``drainTimeoutSeconds``).

Every decision is a record in the stream ``remediation/<cluster>`` (``remediate status`` reads it), and
every side effect is journalled before and after, so a run killed at any point and started again
finishes what it began (an instance is terminated again only if it is still in service) and gives
back what it holds (a node that recovered meanwhile is uncordoned).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from platformctl.kernel import failpoints
from platformctl.kernel.clock import Clock
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import Node
from platformctl.kernel.errors import ApiFault, NotFoundError, PlatformError
from platformctl.kernel.nodegroups import Member, NodeGroupError, NodeGroups
from platformctl.kernel.state import LeaseHeld, LeaseLost, Record, StateStore
from platformctl.kernel.state.lease import LeaseKeeper
from upgrade_service.journal.intents import IntentLog, settle_with_groups
from upgrade_service.journal.records import Drained
from upgrade_service.journal.remediation import (
    DRAINED,
    BreakerClosed,
    BreakerOpen,
    Open,
    RemediationFinished,
    RemediationStarted,
    RemediationState,
    Skipped,
    apply,
    read_state,
    rotation_holds,
    stream_of,
)
from upgrade_service.remediation.health import Assessment, Decision, Problem, assess, decide
from upgrade_service.remediation.policy import RemediationPolicy
from upgrade_service.running.pacing import MutationPacer
from upgrade_service.running.replacement import NodeReplacer
from upgrade_service.running.wave_drain import WaveDrain

HOUR = 3600.0
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_LEASE_HELD = 0, 1, 2, 3


class Log(IntentLog):
    """Appends this cluster's remediation records, stamped with the cluster's time (the drain writes here too); every
    intent names the remediation it belongs to."""

    def __init__(self, store: StateStore, cluster: str, clock: Clock, keeper: LeaseKeeper | None = None) -> None:
        self.store = store
        self.stream = stream_of(cluster)
        self.clock = clock
        self.keeper = keeper  # every record is written only while its lease is still the writer's
        self.state = read_state(store, cluster)
        self.remediation = ""  # the remediation the next intents belong to

    def refresh(self) -> RemediationState:
        for record in self.store.read(self.stream, after=self.state.last_seq):
            apply(self.state, record)
        return self.state

    def write(self, kind: str, **data: Any) -> Record:
        record = self.store.append(self.stream, {"kind": kind, "at": self.clock.now(), **data},
                                   fence=self.keeper.fence if self.keeper is not None else None)
        if record.seq != self.state.last_seq + 1:
            self.refresh()
        else:
            apply(self.state, record)
        failpoints.hit(f"remediation:{kind}")
        return record

    def context(self) -> dict[str, Any]:
        return {"remediation": self.remediation}


@dataclass
class Outcome:
    cluster: str
    status: str  # ok | breaker-open | failed | lease-held | lost-lease | dry-run
    exit_code: int
    reason: str
    decisions: list[dict[str, Any]] = field(default_factory=list)
    remediated: list[dict[str, Any]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    incident: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "status": self.status, "exit_code": self.exit_code, "reason": self.reason,
                "decisions": self.decisions, "remediated": self.remediated, "pending": self.pending,
                "incident": self.incident}


class Stop(Exception):
    pass


class Remediator:
    def __init__(self, name: str, cluster: Cluster, groups: NodeGroups, policy: RemediationPolicy, store: StateStore, *,
                 keeper: LeaseKeeper | None = None, poll_seconds: float = 5.0,
                 progress: Callable[[str], None] | None = None) -> None:
        self.name = name
        self.cluster = cluster
        self.groups = groups
        self.policy = policy
        self.store = store
        self.keeper = keeper
        self.poll = poll_seconds
        self.clock = cluster.clock
        self.log = Log(store, name, self.clock, keeper)
        self.pacer = MutationPacer(policy.max_mutations_per_minute, self.clock)
        self.progress = progress or (lambda message: None)
        self.replacer = NodeReplacer(cluster, groups, self.log, self.pacer, check=self._check, fence=self._check,
                                     poll_seconds=poll_seconds)

    # ---------------------------------------------------------------- reading

    def _check(self) -> None:
        if self.keeper is not None:
            self.keeper.check()

    def read(self) -> tuple[list[Node], dict[str, str], Assessment]:
        nodes = self.cluster.list_nodes()
        group_of = self.replacer.groups_of(nodes)
        names = set(group_of.values()) | set(self.groups.cluster_groups(self.name))
        members: dict[str, list[Member]] = {g: self.groups.members(g) for g in sorted(names)}
        return nodes, group_of, assess(nodes, members, group_of, self.clock.now(), self.policy)

    # ---------------------------------------------------------------- one pass

    def run_once(self, dry_run: bool = False) -> Outcome:
        try:
            return self._run_once(dry_run)
        finally:
            self.replacer.close()

    def _run_once(self, dry_run: bool) -> Outcome:
        state = self.log.refresh()
        if not dry_run and state.pending:
            self._settle_unconfirmed()
        nodes, group_of, seen = self.read()
        now = self.clock.now()
        failed: list[str] = []
        remediated: list[dict[str, Any]] = []
        if not dry_run:
            for rid, current in list(self.log.state.open.items()):
                result = self._resume(rid, current, seen)
                remediated.append(result)
                if result["result"] not in ("replaced", "recovered", "gone"):
                    failed.append(f"{result['subject']}: {result['detail']}")
            if remediated:
                nodes, group_of, seen = self.read()
                now = self.clock.now()
        window = [t for t in self.log.state.started_at if t > now - HOUR]
        next_slot = min(window) + HOUR if window else None
        holds = rotation_holds(self.store, self.name)
        decisions = decide(seen, under_rotation=holds, in_progress=set(), used_last_hour=len(window), next_slot=next_slot,
                           policy=self.policy)
        pending = [p.to_dict() for p in seen.pending]
        if dry_run:
            status = "breaker-open" if seen.breaker_open else "dry-run"
            return Outcome(self.name, status, EXIT_FAILED if seen.breaker_open else EXIT_OK,
                           _summary(seen, decisions), [d.to_dict() for d in decisions], [], pending,
                           {"scopes": seen.breaker} if seen.breaker_open else None)
        if seen.breaker_open:
            self._incident(seen)
            for d in decisions:
                self._skip(d)
            incident = self.log.state.incident.to_dict() if self.log.state.incident else None
            return Outcome(self.name, "breaker-open", EXIT_FAILED, "circuit breaker open, nothing remediated: "
                           + "; ".join(seen.breaker), [d.to_dict() for d in decisions], remediated, pending, incident)
        if self.log.state.incident is not None:
            self.log.append(BreakerClosed(len(seen.unhealthy), seen.total))
        for d in decisions:
            if d.action != "remediate":
                self._skip(d)
                continue
            result = self._remediate(d.problem, group_of)
            remediated.append(result)
            if result["result"] not in ("replaced", "recovered", "gone"):
                failed.append(f"{result['subject']}: {result['detail']}")
        if failed:
            return Outcome(self.name, "failed", EXIT_FAILED, "; ".join(failed), [d.to_dict() for d in decisions],
                           remediated, pending)
        return Outcome(self.name, "ok", EXIT_OK, _summary(seen, decisions), [d.to_dict() for d in decisions], remediated,
                       pending)

    def _incident(self, seen: Assessment) -> None:
        current = self.log.state.incident
        unhealthy = sorted(p.subject for p in seen.unhealthy)
        if current is not None and current.scopes == seen.breaker and current.subjects == unhealthy:
            return  # the same incident, still open: recorded once
        self.log.append(BreakerOpen(seen.breaker, unhealthy, seen.total,
                                    [{"subject": p.subject, "reason": p.reason, "zone": p.zone, "pool": p.pool,
                                      "since": p.since} for p in seen.unhealthy]))

    def _skip(self, d: Decision) -> None:
        code = _code(d.why)
        if self.log.state.last_skip.get(d.problem.subject) == code:
            return  # said already; said again only when the reason changes
        self.log.append(Skipped(d.problem.subject, code, d.why, d.problem.reason))

    # ---------------------------------------------------------------- acting

    def _op(self, op: str, action: Callable[[], Any], **args: Any) -> Any:
        return self.replacer.op(op, action, **args)

    def _settle_unconfirmed(self) -> None:
        """Side effects a killed run started and never confirmed: look at the world and record what happened."""
        for key, intent in list(self.log.state.pending.items()):
            if settle_with_groups(self.log, key, intent, self.groups):
                continue
            if intent["op"] == "cordon":
                try:
                    happened = self.cluster.get_node(intent["node"]).unschedulable
                except NotFoundError:
                    happened = False
                self.log.done(key, ok=happened, recovered=True)
            else:
                self.log.done(key, ok=False, recovered=True, result="interrupted; redone if still needed")

    def _remediate(self, problem: Problem, group_of: dict[str, str]) -> dict[str, Any]:
        rid = f"{self.name}-{uuid.uuid4().hex[:8]}"
        earlier = self.log.state.standing_in.get(problem.subject)
        if earlier is not None:  # an earlier surge stands in for it: that surge's node is its replacement
            members = tuple(earlier.members)
        else:
            members = self.groups.describe(problem.group or "").instances if problem.group else ()
        self.log.append(RemediationStarted(rid, problem.subject, problem.subject if problem.joined else None,
                                           problem.instance, problem.group, problem.pool, problem.zone, problem.reason,
                                           problem.since, list(members), problem.kubelet_gone_since, earlier is not None,
                                           int(self.policy.max_per_hour)))
        self.progress(f"{self.name}: remediating {problem.subject}: {problem.reason}")
        return self._carry_out(rid, self.log.state.open[rid])

    def _resume(self, rid: str, current: Open, seen: Assessment) -> dict[str, Any]:
        subject = current.started.subject
        still = any(p.subject == subject for p in seen.unhealthy + seen.pending)
        if not current.terminated and (not still or seen.breaker_open):
            why = "it recovered before it was replaced" if not still else "circuit breaker open: " + "; ".join(seen.breaker)
            self._give_back(rid, current)
            result = "recovered" if not still else "stopped"
            self.log.append(RemediationFinished(rid, subject, result, why))
            return {"subject": subject, "result": result, "detail": why, "id": rid}
        self.progress(f"{self.name}: resuming the remediation of {subject}")
        return self._carry_out(rid, current)

    def _give_back(self, rid: str, current: Open) -> None:
        node = current.started.node
        if current.cordoned and node:
            self.log.remediation = rid
            try:
                self._op("uncordon", lambda: self.cluster.cordon(node, False), node=node)
            except NotFoundError:
                pass

    def _carry_out(self, rid: str, current: Open) -> dict[str, Any]:
        info = current.started
        self.log.remediation = rid
        subject, node, instance, group = info.subject, info.node, info.instance, info.group

        def finish(result: str, detail: str, replacement: str | None = None) -> dict[str, Any]:
            self.log.append(RemediationFinished(rid, subject, result, detail, replacement))
            return {"subject": subject, "result": result, "detail": detail, "id": rid,
                    **({"replacement": replacement} if replacement else {})}

        if not current.terminated:
            if node:
                try:
                    live = self.cluster.get_node(node)
                except NotFoundError:
                    live = None
                if live is None and not (instance and self._in_service(instance)):
                    return finish("gone", "the node and its instance went away by themselves")
                if live is not None:
                    if not live.unschedulable and not current.cordoned:
                        self.replacer.cordon(node)
                    if not current.drained and not current.surged and group:
                        self._surge(current, group)
                    if not current.drained and current.surged:
                        self._wait_replacement(info)  # the evicted pods' new room; the drain goes on either way
                    if not current.drained:
                        held = self._drain(rid, node, info)
                        if held is not None:
                            return finish("drain-failed", held + "; left cordoned for a person to look at")
            if instance:
                self._terminate(instance, group, subject, decrement=current.surged)
        replacement = self._wait_replacement(info)
        if replacement is None:
            return finish("replacement-not-ready", f"its instance was terminated, but {group} had no new Ready node within "
                          f"nodeStartupTimeoutSeconds {self.policy.node_startup_timeout_seconds}")
        return finish("replaced", f"replaced by {replacement}", replacement=replacement)

    def _in_service(self, instance: str) -> bool:
        return self.replacer.in_service(instance)

    def _drain(self, rid: str, node: str, info: RemediationStarted) -> str | None:
        """Drain through the eviction API; returns what held the node when it could not, else None."""
        def unreachable(name: str) -> bool:
            try:
                ready = self.cluster.get_node(name).condition("Ready")
            except NotFoundError:
                return True
            return ready is not None and ready.status == "Unknown"

        kubelet_gone = unreachable(node)  # nothing on a node whose kubelet is gone can finish or settle: no protocol applies
        self.progress(f"{self.name}: draining {node}{' (its kubelet is gone: workload rules do not apply)' if kubelet_gone else ''}")
        drain = WaveDrain(self.cluster, self.policy.drain_policy(), self.log, self.pacer, wave=rid, poll_seconds=self.poll,
                          check=self._check, skip_wait_for_delete=unreachable, protocols=not kubelet_gone)
        outcome = drain.run([node], self.policy.drain_timeout_seconds)
        if not outcome.failed:
            return None
        why = outcome.failed[node]
        force = self.policy.force_after_seconds
        gone = self._kubelet_gone_since(node)
        if force is None or gone is None or self.clock.now() - gone < force:
            return why
        pods = [p for p in self.cluster.list_pods(node_name=node) if not (p.is_daemonset or p.is_mirror or p.is_finished)]
        names = [f"{p.namespace}/{p.name}" for p in pods]
        self.progress(f"{self.name}: {node}'s kubelet has been gone {self.clock.now() - gone:.0f} s: deleting {len(pods)} pods")

        def delete() -> None:
            for p in pods:
                try:
                    self.cluster.delete_pod(p.namespace, p.name, grace_seconds=0)
                except NotFoundError:
                    continue

        self._op("force-delete", delete, node=node, pods=names,
                 why=f"kubelet gone since {gone:.0f}, over forceAfterSeconds {force}; evictions refused: {why}")
        self.log.write(DRAINED, **Drained(rid, node, len(pods)).to_record())
        return None

    def _kubelet_gone_since(self, node: str) -> float | None:
        try:
            ready = self.cluster.get_node(node).condition("Ready")
        except NotFoundError:
            return None
        return ready.since if ready is not None and ready.status == "Unknown" else None

    def _surge(self, current: Open, group: str) -> None:
        """A replacement boots before the drain, as a surge rotation's does, when the group has room: a full
        cluster has nowhere else for the evicted pods to go. The termination then lowers the capacity again."""
        state = self.groups.describe(group)
        if state.room <= 0:
            return  # no room to surge: the drain goes ahead, and the group replaces the node after it
        self.progress(f"{self.name}: raising {group} from {state.desired} to {state.desired + 1} so the replacement boots first")
        self.replacer.add_capacity(group, state.desired + 1, state.desired)
        self.log.refresh()

    def _terminate(self, instance: str, group: str | None, subject: str, decrement: bool = False) -> None:
        def announce() -> None:
            self.progress(f"{self.name}: terminating {instance} ({subject})" + (
                "; the surged replacement takes its place" if decrement else f"; {group} launches its replacement"))

        self.replacer.terminate(subject, instance, group, decrement, announce)

    def _wait_replacement(self, info: RemediationStarted) -> str | None:
        group = info.group
        if not group:
            return None
        before = set(info.members) | {info.instance}
        self.progress(f"{self.name}: waiting for {group}'s replacement to be Ready")
        deadline = self.clock.now() + self.policy.node_startup_timeout_seconds
        return self.replacer.wait_replacement(group, {b for b in before if b}, deadline)

def _code(why: str) -> str:
    for prefix, code in (("circuit breaker", "breaker-open"), ("rate limit", "rate-limit"), ("a rotation", "under-rotation"),
                         ("in no auto scaling", "unmanaged"), ("a remediation", "in-progress")):
        if why.startswith(prefix):
            return code
    return "other"


def _summary(seen: Assessment, decisions: Sequence[Decision]) -> str:
    acts = Counter(d.action for d in decisions)
    if not seen.unhealthy:
        going = f"; {len(seen.pending)} going bad, not for long enough yet" if seen.pending else ""
        return f"all {seen.total} nodes healthy{going}"
    return (f"{len(seen.unhealthy)} of {seen.total} unhealthy: {acts['remediate']} to remediate, {acts['skip']} skipped"
            + (f"; {len(seen.pending)} going bad" if seen.pending else ""))


def run(name: str, cluster: Cluster, groups: NodeGroups, policy: RemediationPolicy, store: StateStore, holder: str,
        lease_ttl: float = 60.0, dry_run: bool = False, progress: Callable[[str], None] | None = None) -> Outcome:
    """One pass over one cluster under its remediation lease (exit 3 when another run holds it)."""
    if dry_run:
        return Remediator(name, cluster, groups, policy, store, progress=progress).run_once(dry_run=True)
    keeper = LeaseKeeper(store, stream_of(name), holder, lease_ttl)
    try:
        keeper.acquire()
    except LeaseHeld as held:
        return Outcome(name, "lease-held", EXIT_LEASE_HELD, f"another remediation of {name} is running (lease held by "
                       f"{held.lease.holder}): not starting a second one")
    try:
        return Remediator(name, cluster, groups, policy, store, keeper=keeper, progress=progress).run_once()
    except LeaseLost as exc:
        return Outcome(name, "lost-lease", EXIT_FAILED, f"stopped: {exc}")
    except (NodeGroupError, PlatformError, ApiFault) as exc:
        # An API that refuses mid-run is a fault to stop for, not a user's mistake: what was started stays
        # journalled and the next run finishes it.
        return Outcome(name, "failed", EXIT_FAILED, f"stopped by an error from "
                       f"{'AWS' if isinstance(exc, NodeGroupError) else 'the cluster'}: {exc}")
    finally:
        keeper.release()
