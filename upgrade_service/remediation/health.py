"""Which nodes are broken, whether replacing them is safe, and which to replace now. It plans; it acts on nothing.

``assess`` reads nodes and their groups' instances as they are and says, with a reason a person can
read, which are unhealthy (bad for at least their condition's ``unhealthyAfterSeconds``, or with no
Ready node ``nodeStartupTimeoutSeconds`` after launch), which are going bad but not for long enough
yet, and whether the circuit breaker is open: more unhealthy nodes than ``maxUnhealthy`` in the
cluster, a zone or a pool means the problem is not the nodes (a bad image, a partition, an AZ event),
and replacing nodes would make it worse. ``decide`` then says what to do with each unhealthy node:
replace it, or skip it and why (the breaker, a rotation handling it, the hourly limit, a remediation
already under way).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from platformctl.kernel.cluster.model import Node
from platformctl.kernel.humanize import hms
from platformctl.kernel.nodegroups import Member
from upgrade_service.remediation.policy import HEALTH_ANNOTATION, HEALTHY_VALUES, RemediationPolicy, allowed

FIRST_STATUS_SECONDS = 10.0


@dataclass(frozen=True)
class Problem:
    subject: str  # the node, or for an instance that never joined, the instance id
    instance: str | None
    group: str | None
    pool: str | None
    zone: str | None
    reason: str
    since: float  # when it went bad
    due: float  # when it counts as unhealthy
    joined: bool = True  # False: an instance with no node
    kubelet_gone_since: float | None = None  # Ready Unknown since then: its pods are no longer running

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Assessment:
    unhealthy: list[Problem] = field(default_factory=list)
    pending: list[Problem] = field(default_factory=list)  # bad, not yet for long enough
    total: int = 0
    breaker: list[str] = field(default_factory=list)  # each scope over its limit, said in a line

    @property
    def breaker_open(self) -> bool:
        return bool(self.breaker)


def _node_problem(node: Node, policy: RemediationPolicy, now: float) -> tuple[str, float, float, float | None] | None:
    """(reason, since, due, kubelet gone since) of the node's worst problem, or None."""
    found: list[tuple[float, str, float, float | None]] = []
    ready = node.condition("Ready")
    assert ready is not None
    if ready.status != "True":
        # Ready's last transition right at registration (within a kubelet's first status update): never Ready yet.
        own = any(c.type == "Ready" for c in node.conditions) and ready.since > node.created + FIRST_STATUS_SECONDS
        gone = ready.since if ready.status == "Unknown" else None
        if not own:  # never Ready since it registered: still booting, or never will
            due = node.created + policy.node_startup_timeout_seconds
            found.append((due, f"not Ready {hms(now - node.created)} after it registered (nodeStartupTimeoutSeconds "
                          f"{policy.node_startup_timeout_seconds})", node.created, gone))
        elif (rule := policy.rule("Ready")) is not None:
            said = f" ({ready.reason}: {ready.message})" if ready.reason else ""
            found.append((ready.since + rule.unhealthy_after_seconds, f"Ready {ready.status}{said} for "
                          f"{hms(now - ready.since)} (unhealthyAfterSeconds {rule.unhealthy_after_seconds})", ready.since, gone))
    for c in node.all_conditions():
        if c.type == "Ready" or c.status != "True":
            continue
        rule = policy.rule(c.type)
        if rule is None:
            continue
        said = f" ({c.reason}{': ' + c.message if c.message else ''})" if c.reason else ""
        found.append((c.since + rule.unhealthy_after_seconds, f"{c.type} True{said} for {hms(now - c.since)} "
                      f"(unhealthyAfterSeconds {rule.unhealthy_after_seconds})", c.since, None))
    value = node.annotations.get(HEALTH_ANNOTATION)
    if policy.health_annotation and value is not None and value.strip().lower() not in HEALTHY_VALUES:
        found.append((now, f"annotation {HEALTH_ANNOTATION}={value!r}", now, None))
    if not found:
        return None
    due, reason, since, gone = min(found)
    return reason, since, due, gone


def assess(nodes: Sequence[Node], members: Mapping[str, Sequence[Member]], group_of: Mapping[str, str],
           now: float, policy: RemediationPolicy) -> Assessment:
    """``members``: each of the cluster's groups -> its instances; ``group_of``: node -> its group."""
    out = Assessment()
    by_instance = {n.instance_id for n in nodes if n.instance_id}
    group_pool: dict[str, str] = {}
    for node in nodes:
        pool = node.labels.get(policy.pool_label)
        if pool is not None and node.name in group_of:
            group_pool.setdefault(group_of[node.name], pool)
    seen: list[tuple[str | None, str | None]] = []  # (zone, pool) of everything counted
    for node in nodes:
        pool = node.labels.get(policy.pool_label)
        seen.append((node.zone, pool))
        found = _node_problem(node, policy, now)
        if found is None:
            continue
        reason, since, due, gone = found
        problem = Problem(node.name, node.instance_id, group_of.get(node.name), pool, node.zone, reason, since, due,
                          True, gone)
        (out.unhealthy if now >= due else out.pending).append(problem)
    for group, instances in sorted(members.items()):
        pool = group_pool.get(group, group)
        for m in instances:
            if m.instance_id in by_instance or m.lifecycle.startswith(("Terminat", "Detach")):
                continue
            seen.append((m.zone, pool))
            due = m.launched + policy.node_startup_timeout_seconds
            problem = Problem(m.instance_id, m.instance_id, group, pool, m.zone,
                              f"instance {m.instance_id} of {group} has registered no node {hms(max(now - m.launched, 0))} "
                              f"after launch (nodeStartupTimeoutSeconds {policy.node_startup_timeout_seconds})",
                              m.launched, due, joined=False)
            (out.unhealthy if now >= due else out.pending).append(problem)
    out.total = len(seen)
    out.breaker = _breaker(out.unhealthy, seen, policy)
    return out


def _breaker(unhealthy: list[Problem], seen: list[tuple[str | None, str | None]], policy: RemediationPolicy) -> list[str]:
    lines = []

    def check(scope: str, bad: int, total: int, limit: int | str | None, key: str) -> None:
        most = allowed(limit, total)
        if most is not None and bad > most:
            lines.append(f"{scope}: {bad} of {total} nodes unhealthy, more than {key} {limit} ({most})")

    check("cluster", len(unhealthy), len(seen), policy.max_unhealthy, "maxUnhealthy")
    zones, pools = Counter(z for z, _ in seen), Counter(p for _, p in seen)
    bad_zones, bad_pools = Counter(p.zone for p in unhealthy), Counter(p.pool for p in unhealthy)
    for zone, bad in sorted(bad_zones.items(), key=lambda kv: str(kv[0])):
        check(f"zone {zone}", bad, zones[zone], policy.max_unhealthy_per_zone, "maxUnhealthyPerZone")
    for pool, bad in sorted(bad_pools.items(), key=lambda kv: str(kv[0])):
        check(f"pool {pool}", bad, pools[pool], policy.max_unhealthy_per_pool, "maxUnhealthyPerPool")
    return lines


@dataclass(frozen=True)
class Decision:
    problem: Problem
    action: str  # remediate | skip
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.problem.subject, "action": self.action, "why": self.why, "problem": self.problem.to_dict()}


def decide(assessment: Assessment, *, under_rotation: Mapping[str, str], in_progress: set[str], used_last_hour: int,
           next_slot: float | None, policy: RemediationPolicy) -> list[Decision]:
    """What to do with each unhealthy node, oldest problem first. ``under_rotation``: node -> what the rotation
    is doing with it; ``in_progress``: subjects a remediation is already handling."""
    out: list[Decision] = []
    budget = max(policy.max_per_hour - used_last_hour, 0)
    for problem in sorted(assessment.unhealthy, key=lambda p: (p.due, p.subject)):
        if problem.subject in in_progress:
            out.append(Decision(problem, "skip", "a remediation of it is already under way"))
        elif assessment.breaker_open:
            out.append(Decision(problem, "skip", "circuit breaker open: " + "; ".join(assessment.breaker)))
        elif problem.subject in under_rotation:
            out.append(Decision(problem, "skip", f"a rotation is handling it ({under_rotation[problem.subject]})"))
        elif problem.group is None:
            out.append(Decision(problem, "skip", "in no auto scaling group: nothing can replace it"))
        elif budget <= 0:
            when = f"; the next slot opens at {_iso(next_slot)}" if next_slot is not None else ""
            out.append(Decision(problem, "skip", f"rate limit: {used_last_hour} remediations in the last hour, "
                                f"maxPerHour {policy.max_per_hour}{when}"))
        else:
            budget -= 1
            out.append(Decision(problem, "remediate", problem.reason))
    return out


def _iso(epoch: float) -> str:
    from platformctl.kernel.cluster.model import format_time

    return format_time(epoch)
