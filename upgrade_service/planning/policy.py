"""The rotation policy: the YAML an operator writes to say what rotates, how fast, and how carefully.

Parsed once, at the edge, into a frozen ``RotationPolicy``; the planner never sees the YAML. Every
mistake (an unknown field, a negative limit, a cycle in ``poolOrder``, a per-pool limit for a pool
the policy does not rotate, a malformed selector) is a ``PlatformError`` naming the policy file and
the key path. Applications may declare their own protocol with pod annotations
(``platformctl.io/rotation``, ``platformctl.io/settle-seconds``, ``platformctl.io/max-wait-seconds``);
an operator's ``workloadRules`` entry that matches a pod takes precedence over them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from platformctl.kernel.cluster.model import IMAGE_LABELS, LABEL_NODEGROUP, Node, Pod, image_of
from platformctl.kernel.cluster.selectors import LabelSelector
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.humanize import parse_duration
from platformctl.kernel.windows import Schedule, Window
from platformctl.kernel.yamlfile import read_yaml, validate

Mode = Literal["one-at-a-time", "wait-for-completion", "skip"]
MODES: tuple[str, ...] = ("one-at-a-time", "wait-for-completion", "skip")

DEFAULT_BOOT_SECONDS = 300


class Due(StrEnum):
    """Why a node is rotated (``RotationPolicy.due``)."""

    IMAGE = "image"  # it boots another image than its pool's target
    MAX_NODE_AGE = "max-node-age"  # it is older than maxNodeAge
    LAUNCH_TEMPLATE = "launch-template"  # its group launches the same image with other settings than it was launched with
DEFAULT_MAX_WAIT_SECONDS = 3600

Seconds = Annotated[int, Field(ge=0)]
Limit = Annotated[int, Field(ge=1)]


class _Value(BaseModel):
    # A field's docstring is its description: docs/policy-reference.md is generated from them.
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
                              use_attribute_docstrings=True)


class Durations(_Value):
    node_boot_seconds: Seconds | dict[str, Seconds] = DEFAULT_BOOT_SECONDS
    """Launch to Ready: one number for every pool, or a pool -> seconds map whose ``default`` covers the rest."""
    pod_start_seconds: Seconds = 60
    """An evicted pod's start elsewhere, when the cluster has shown none to measure."""

    def boot_seconds(self, pool: str) -> int:
        boot = self.node_boot_seconds
        if isinstance(boot, int):
            return boot
        return boot.get(pool, boot.get("default", DEFAULT_BOOT_SECONDS))


class WorkloadRule(_Value):
    selector: dict[str, Any]
    """The pods it applies to: ``matchLabels`` and/or ``matchExpressions``, as in Kubernetes; never empty."""
    namespaces: tuple[str, ...] = ()
    """Where it applies; empty: every namespace."""
    mode: Mode
    """``one-at-a-time`` (one pod of the workload moves at a time, each Ready and settled before the next),
    ``wait-for-completion`` (the pod finishes where it runs, up to ``maxWaitSeconds``) or ``skip`` (its node is
    left alone)."""
    settle_seconds: Seconds | None = None
    """one-at-a-time: how long after a moved pod is Ready again before the next may go."""
    scope: Literal["workload", "namespace"] = "workload"
    """one-at-a-time: what moves one pod at a time. ``workload``: each controller the selector matches (a
    StatefulSet, a ReplicaSet) on its own, as the pod annotation does; ``namespace``: every pod the rule selects
    in a namespace together, for an application made of several controllers (a ring of one StatefulSet per rack)."""
    max_wait_seconds: Seconds | None = None
    """wait-for-completion: how long to wait before the pod is evicted anyway (default 3600)."""


class CanaryGate(_Value):
    """The stage's canaries, judged natively: the rotation's target images against the images they replace."""

    window: Annotated[int, Field(ge=60)] = 1800
    """Seconds of results judged (``30m``, ``1h`` or a number). It must hold what a pass needs (the judge's
    ``minSamples`` and ``minAttempts``, first light's ``minResults``) at the node-pool canary's pace, or the policy is
    refused (exit 2): the shipped canary gives an image's arm 40 results in 30 minutes."""
    config: str | None = None
    """A judge configuration file (``canary judge --config``); the judge's defaults without one."""

    @field_validator("window", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int:
        return parse_duration(value)


class FirstLight(_Value):
    """Before a rotation's first wave, one node of each pool on the new image, tainted so that only the canaries'
    pods land on it, judged by the health gate before any workload moves."""

    pools: Literal["all"] | tuple[str, ...] = "all"
    """The pools that get a first-light node: ``all`` (every pool whose image changes) or a list of pool names."""
    min_results: Annotated[int, Field(ge=1)] = 10
    """Canary results of the new image a pool's first-light node must hold before the gate's pass counts."""
    timeout: Annotated[int, Field(ge=60)] = 1800
    """Seconds (``30m``) from the first-light nodes Ready until an inconclusive judgement halts the run."""
    proven: bool = False
    """The images were lit and judged in an earlier stage (the release pipeline's first): one canary period of
    results on each first-light node, every one a success, lets it in; this stage's hardware is still tried, not
    soaked again. The pipeline's rotations of a later stage are proven either way."""

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int:
        return parse_duration(value)

    def names(self, pool: str) -> bool:
        return self.pools == "all" or pool in self.pools


class HealthGate(_Value):
    """What the executor asks before every wave: the canary verdict (``canary: {window: 30m}``), or a command or
    a URL that answers JSON ``{"verdict": "pass" | "fail" | "inconclusive", "reason": "..."}``."""

    canary: CanaryGate | None = None
    """The stage's canary verdict over the state store."""
    command: Annotated[tuple[str, ...], Field(min_length=1)] | None = None
    """A program and its arguments that prints the verdict as JSON."""
    url: Annotated[str, Field(pattern=r"^https?://")] | None = None
    """A URL whose GET answers the verdict as JSON."""


class MaintenanceWindow(Window):
    NOUN: ClassVar[str] = "maintenance window"

    name: str = ""
    """What it is called where a run or a plan names it."""


class RotationPolicy(_Value):
    cluster: str | None = None
    """Names the plan; a stage plan needs none."""
    pool_label: str = LABEL_NODEGROUP
    """The node label that names a node's pool."""
    image_label: str | None = None
    """The node label that names the image a node booted. Left out: ``platformctl.io/image`` (the Pulumi program
    writes it into each launch template version's user data), else ``eks.amazonaws.com/nodegroup-image`` (which EKS
    sets on managed node groups' nodes only)."""
    targets: dict[str, str] | None = None
    """Pool -> image; only these pools rotate. Left out: every pool rotates onto what its auto scaling group's launch
    template boots now (a plan from a snapshot needs targets)."""
    pool_order: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Pool -> the pools that must be done first: every node replaced and its pods back (their one-at-a-time
    workloads may still be settling, which holds only those workloads' next pods). A DAG; a cycle is refused."""
    strategy: Literal["replace", "surge"] = "surge"
    """``surge``: new nodes boot before old ones drain (as GKE and EKS managed node groups do); ``replace``: old
    nodes go first, under ``minZoneCapacityPercent``."""
    max_in_flight: Limit = 10
    """Nodes being rotated at once, whole cluster."""
    max_in_flight_per_pool: dict[str, Limit] = Field(default_factory=dict)
    """Pool -> nodes being rotated at once in that pool (only pools in targets)."""
    overlap_waves: bool = True
    """The next wave may drain while earlier waves' replacements boot, their pods start and their one-at-a-time
    workloads settle, as long as every limit holds (``upgrade_service.planning.schedule``); false: each wave ends
    before the next starts."""
    zone_at_a_time: bool = True
    """Never two zones in one wave."""
    min_zone_capacity_percent: Annotated[int, Field(ge=0, le=100)] = 90
    """replace only: the share of each zone's nodes that stays out of flight."""
    durations: Durations = Durations()
    """What the estimate assumes where the cluster has shown nothing to measure."""
    workload_rules: tuple[WorkloadRule, ...] = ()
    """Tried in order; the first that matches a pod applies, over the pod's own annotations."""
    host_cluster: Literal["first", "last"] = "last"
    """Where a stage plan puts the host cluster."""
    node_ready_timeout_seconds: Annotated[int, Field(ge=1)] = 900
    """New nodes must be Ready on the target image within this, or the run halts."""
    drain_timeout_seconds: Annotated[int, Field(ge=1)] = 3600
    """A drain that makes no progress this long fails its node (counted from the last eviction that went through)."""
    stuck_seconds: Annotated[int, Field(ge=1)] = 30
    """A drain waiting on a pod the scheduler cannot place, this long: make room (a surge node) or halt. Nodes waiting for
    a budget whose pods are on their way back wait this long past those pods' start without a change, then are blocked."""
    pod_ready_timeout_seconds: Annotated[int, Field(ge=1)] = 900
    """Evicted pods must be Ready again elsewhere within this."""
    max_failed_nodes: Annotated[int, Field(ge=0)] = 0
    """More failed nodes than this halts the run."""
    api_patience_seconds: Annotated[int, Field(ge=0)] = 600
    """An API (the cluster's, AWS's) that still fails after each call's own retries: the run waits for it this long
    (shown as waiting in ``rotate status``), asking again every 30 s, then stops as ``api-error`` (the next run goes on)."""
    max_mutations_per_minute: Limit = 1000
    """The platform's SLO for mutating pod operations: evictions are paced under it, not failed."""
    health_gate: HealthGate | None = None
    """Asked before every wave: exactly one of ``canary``, ``command`` or ``url``."""
    gate_timeout_seconds: Annotated[int, Field(ge=0)] = 900
    """How long an inconclusive gate is waited for before the run halts."""
    first_light: FirstLight | None = None
    """Before wave 1: one node per pool on its new image, only the canaries' pods on it, until the health gate
    judges the image (``pass``: it joins its pool and wave 1 starts; ``fail``: it is terminated and the run halts).
    Needs ``healthGate``. Left out: no first light."""
    maintenance_windows: tuple[MaintenanceWindow, ...] = ()
    """When a wave may start: windows of wall time in their IANA zones, each recurring (``cron`` or ``rrule``, with a
    ``duration``) or one-off (``start``, ``end``), as the pipeline's freezes are written. A wave started inside one
    runs to its end; at a window's end the run stops as ``outside-window`` (not a halt, exit 0) and the next run, in
    the next window, goes on. Left out: at any time."""
    exclusions: tuple[MaintenanceWindow, ...] = ()
    """When no wave may start, even inside a maintenance window (a launch, the year's end): windows as above."""
    max_node_age: Annotated[int, Field(ge=3600)] | None = None
    """A node older than this (``30d``, ``720h``; from its creation) is rotated too, onto its pool's target, under the
    same budgets and gates, as Karpenter's ``expireAfter`` retires one. Left out: a node's age never rotates it."""

    # Set by ``load_policy``: where the policy came from, and its rules' selectors, parsed.
    source: str = Field(default="policy", exclude=True)
    selectors: tuple[LabelSelector, ...] = Field(default=(), exclude=True)
    # Set by whoever read the node groups (``with_launch_drift``): node -> how its group's launch template now differs
    # from the version it was launched with, for a node on its pool's image (a new instance type, user data: labels,
    # taints, kubelet flags).
    launch_drift: dict[str, str] = Field(default_factory=dict, exclude=True)

    @field_validator("max_node_age", mode="before")
    @classmethod
    def _age(cls, value: object) -> object:
        return parse_duration(value) if isinstance(value, str) else value

    @field_validator("targets")
    @classmethod
    def _targets_named(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("an empty targets rotates nothing: name pool -> image, or leave targets out to rotate "
                             "every pool onto what its launch template boots")
        for pool, image in value.items():
            if not pool or not image:
                raise ValueError("every target needs a pool name and an image")
        return value

    @property
    def follows_launch_templates(self) -> bool:
        return self.targets is None

    @property
    def schedule(self) -> Schedule:
        """When a wave may start (``maintenanceWindows`` less ``exclusions``)."""
        return Schedule(self.maintenance_windows, self.exclusions)

    def with_targets(self, targets: dict[str, str]) -> RotationPolicy:
        """This policy rotating exactly ``targets`` (the executor resolves them from launch templates)."""
        return self.model_copy(update={"targets": dict(targets)})

    def with_exclusions(self, more: Sequence[MaintenanceWindow]) -> RotationPolicy:
        """This policy with ``more`` exclusions (a stage's freezes set by hand) after its own."""
        return self.model_copy(update={"exclusions": (*self.exclusions, *more)}) if more else self

    def with_launch_drift(self, drift: Mapping[str, str]) -> RotationPolicy:
        """This policy knowing which nodes their group would launch otherwise now (``Due.LAUNCH_TEMPLATE``)."""
        return self.model_copy(update={"launch_drift": dict(drift)}) if drift or self.launch_drift else self

    @property
    def image_labels(self) -> tuple[str, ...]:
        """Where a node's image is read, first found wins."""
        return (self.image_label,) if self.image_label else IMAGE_LABELS

    def image_of(self, labels: Mapping[str, str]) -> str | None:
        """The image a node booted, by its labels."""
        return image_of(labels, self.image_labels)

    def target_for(self, pool: str) -> str | None:
        return (self.targets or {}).get(pool)

    def due(self, node: Node, target: str, now: float) -> Due | None:
        """Why ``node`` of a pool whose target is ``target`` is rotated: ``image`` (it boots another),
        ``launch-template`` (its group launches the image with other settings now), ``max-node-age`` (older than
        ``maxNodeAge``); None: it stays."""
        if self.image_of(node.labels) != target:
            return Due.IMAGE
        if node.name in self.launch_drift:
            return Due.LAUNCH_TEMPLATE
        if self.max_node_age is not None and now - node.created >= self.max_node_age:
            return Due.MAX_NODE_AGE
        return None

    def boot_seconds(self, pool: str) -> int:
        return self.durations.boot_seconds(pool)

    def pool_graph(self) -> nx.DiGraph:
        """Pools as a DAG: an edge ``a -> b`` means every wave of ``a`` comes before ``b``'s first."""
        graph = nx.DiGraph()
        graph.add_nodes_from(self.targets or ())
        for pool, before in self.pool_order.items():
            graph.add_node(pool)
            for dep in before:
                graph.add_edge(dep, pool)
        return graph

    def rule_for(self, pod: Pod) -> tuple[int, WorkloadRule] | None:
        """The first workload rule that matches ``pod`` (rules are tried in order)."""
        for i, (rule, selector) in enumerate(zip(self.workload_rules, self.selectors, strict=True)):
            if rule.namespaces and pod.namespace not in rule.namespaces:
                continue
            if selector.matches(pod.labels):
                return i, rule
        return None


def parse_policy(document: Any, source: str) -> RotationPolicy:
    """A ``RotationPolicy`` from its parsed YAML; every mistake names ``source`` and the key."""
    policy = validate(RotationPolicy, document, source, "rotation policy")

    def fail(field: str, message: str) -> PlatformError:
        return PlatformError(message, file=source, field=field)

    rotating = policy.targets
    for pool in policy.max_in_flight_per_pool:
        if rotating is not None and pool not in rotating:
            raise fail(f"maxInFlightPerPool.{pool}",
                       f"pool {pool!r} is not one this policy rotates (targets: {', '.join(rotating)})")
    for pool, before in policy.pool_order.items():
        if pool in before:
            raise fail(f"poolOrder.{pool}", f"pool {pool!r} cannot wait for itself")
    graph = policy.pool_graph()
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        cycle = []
    if cycle:
        path = " -> ".join([cycle[0][0], *(b for _, b in cycle)])
        raise fail("poolOrder", f"pool order has a cycle: {path} (each pool must wait only for pools that finish first)")
    boot = policy.durations.node_boot_seconds
    if isinstance(boot, dict):
        for pool in boot:
            if pool != "default" and rotating is not None and pool not in rotating:
                raise fail(f"durations.nodeBootSeconds.{pool}",
                           f"pool {pool!r} is not one this policy rotates (targets: {', '.join(rotating)})")
    selectors = parse_workload_rules(policy.workload_rules, source)
    gate = policy.health_gate
    if gate is not None and sum(x is not None for x in (gate.canary, gate.command, gate.url)) != 1:
        raise fail("healthGate", "give exactly one of canary ({window: 30m}), command (a list: program and arguments) or url")
    if policy.first_light is not None and gate is None:
        raise fail("firstLight", "first light is judged by the health gate: give healthGate too (canary: {window: 30m})")
    if policy.first_light is not None and policy.first_light.pools != "all" and rotating is not None:
        for pool in policy.first_light.pools:
            if pool not in rotating:
                raise fail("firstLight.pools", f"pool {pool!r} is not one this policy rotates (targets: {', '.join(rotating)})")
    return policy.model_copy(update={"source": source, "selectors": selectors})


def parse_workload_rules(rules: tuple[WorkloadRule, ...], source: str) -> tuple[LabelSelector, ...]:
    """The rules' selectors, parsed; a rule that cannot work names ``source`` and its key. Rotation and remediation
    policies both take ``workloadRules`` and both check them here."""
    selectors = []
    for i, rule in enumerate(rules):
        where = f"workloadRules[{i}].selector"
        unknown = set(rule.selector) - {"matchLabels", "matchExpressions"}
        if unknown:
            raise PlatformError("unknown field (a selector has matchLabels and matchExpressions)", file=source,
                                field=f"{where}.{sorted(unknown)[0]}")
        selector = LabelSelector.parse(rule.selector, where, source)
        if selector.empty:
            raise PlatformError("an empty selector would match every pod; name the workload's labels", file=source, field=where)
        if rule.settle_seconds is not None and rule.mode != "one-at-a-time":
            raise PlatformError("settleSeconds applies to one-at-a-time workloads only", file=source,
                                field=f"workloadRules[{i}].settleSeconds")
        if rule.max_wait_seconds is not None and rule.mode != "wait-for-completion":
            raise PlatformError("maxWaitSeconds applies to wait-for-completion workloads only", file=source,
                                field=f"workloadRules[{i}].maxWaitSeconds")
        selectors.append(selector)
    return tuple(selectors)


def load_policy(path: str | Path) -> RotationPolicy:
    path = Path(path)
    return parse_policy(read_yaml(path, "rotation policy"), str(path))
