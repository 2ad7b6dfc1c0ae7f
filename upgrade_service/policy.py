"""The rotation policy: the YAML an operator writes to say what rotates, how fast, and how carefully.

Parsed once, at the edge, into a frozen ``RotationPolicy``; the planner never sees the YAML. Every
mistake (an unknown field, a negative limit, a cycle in ``poolOrder``, a per-pool limit for a pool
the policy does not rotate, a malformed selector) is a ``PlatformError`` naming the policy file and
the key path. Applications may declare their own protocol with pod annotations
(``platformctl.io/rotation``, ``platformctl.io/settle-seconds``, ``platformctl.io/max-wait-seconds``);
an operator's ``workloadRules`` entry that matches a pod takes precedence over them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from platformctl.cluster.model import LABEL_NODEGROUP, LABEL_NODEGROUP_IMAGE, Pod
from platformctl.cluster.selectors import LabelSelector
from platformctl.errors import PlatformError
from platformctl.humanize import parse_duration
from platformctl.yamlfile import read_yaml, validate

Mode = Literal["one-at-a-time", "wait-for-completion", "skip"]
MODES: tuple[str, ...] = ("one-at-a-time", "wait-for-completion", "skip")

DEFAULT_BOOT_SECONDS = 300
DEFAULT_MAX_WAIT_SECONDS = 3600

Seconds = Annotated[int, Field(ge=0)]
Limit = Annotated[int, Field(ge=1)]


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class Durations(_Value):
    # One number for every pool, or a pool -> seconds map; ``default`` in the map covers the rest.
    node_boot_seconds: Seconds | dict[str, Seconds] = DEFAULT_BOOT_SECONDS
    pod_start_seconds: Seconds = 60

    def boot_seconds(self, pool: str) -> int:
        boot = self.node_boot_seconds
        if isinstance(boot, int):
            return boot
        return boot.get(pool, boot.get("default", DEFAULT_BOOT_SECONDS))


class WorkloadRule(_Value):
    selector: dict[str, Any]
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    mode: Mode
    settle_seconds: Seconds | None = None
    max_wait_seconds: Seconds | None = None


class CanaryGate(_Value):
    """The stage's canaries, judged natively: the rotation's target images against the images they replace."""

    window: Annotated[int, Field(ge=60)] = 1800  # seconds of results judged (``30m``, ``1h`` or a number)
    config: str | None = None  # a judge configuration file (e2e_canary.judge); the judge's defaults without one

    @field_validator("window", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int:
        return parse_duration(value)


class HealthGate(_Value):
    """What the executor asks before every wave: the canary verdict (``canary: {window: 30m}``), or a command or
    a URL that answers JSON ``{"verdict": "pass" | "fail" | "inconclusive", "reason": "..."}``."""

    canary: CanaryGate | None = None
    command: Annotated[tuple[str, ...], Field(min_length=1)] | None = None
    url: Annotated[str, Field(pattern=r"^https?://")] | None = None


class RotationPolicy(_Value):
    cluster: str | None = None
    pool_label: str = LABEL_NODEGROUP
    image_label: str = LABEL_NODEGROUP_IMAGE
    # Pool -> image. None: every pool rotates onto what its auto scaling group's launch template boots now.
    targets: dict[str, str] | None = None
    pool_order: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    # surge (new nodes boot before old ones drain) is the default, as in GKE and EKS managed node groups.
    strategy: Literal["replace", "surge"] = "surge"
    max_in_flight: Limit = 10
    max_in_flight_per_pool: dict[str, Limit] = Field(default_factory=dict)
    zone_at_a_time: bool = True
    min_zone_capacity_percent: Annotated[int, Field(ge=0, le=100)] = 90
    durations: Durations = Durations()
    workload_rules: tuple[WorkloadRule, ...] = ()
    host_cluster: Literal["first", "last"] = "last"  # where a region plan puts the host cluster

    # What the executor (``rotate run``) stops for: it starts no new wave past any of these.
    node_ready_timeout_seconds: Annotated[int, Field(ge=1)] = 900  # new nodes Ready on the target image
    drain_timeout_seconds: Annotated[int, Field(ge=1)] = 3600  # evictions refused this long: the node fails
    # A drain that waits on a budget whose evicted pod the scheduler cannot place, this long: recover or halt.
    stuck_seconds: Annotated[int, Field(ge=1)] = 30
    pod_ready_timeout_seconds: Annotated[int, Field(ge=1)] = 900  # evicted pods Ready again elsewhere
    max_failed_nodes: Annotated[int, Field(ge=0)] = 0  # more failed nodes than this halts the run
    max_mutations_per_minute: Limit = 1000  # the platform's SLO for mutating pod operations: paced, not failed
    health_gate: HealthGate | None = None
    gate_timeout_seconds: Annotated[int, Field(ge=0)] = 900  # how long an inconclusive gate is waited for

    # Set by ``load_policy``: where the policy came from, and its rules' selectors, parsed.
    source: str = Field(default="policy", exclude=True)
    selectors: tuple[LabelSelector, ...] = Field(default=(), exclude=True)

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

    def with_targets(self, targets: dict[str, str]) -> RotationPolicy:
        """This policy rotating exactly ``targets`` (the executor resolves them from launch templates)."""
        return self.model_copy(update={"targets": dict(targets)})

    def target_for(self, pool: str) -> str | None:
        return (self.targets or {}).get(pool)

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
    selectors = []
    for i, rule in enumerate(policy.workload_rules):
        where = f"workloadRules[{i}].selector"
        unknown = set(rule.selector) - {"matchLabels", "matchExpressions"}
        if unknown:
            raise fail(f"{where}.{sorted(unknown)[0]}", "unknown field (a selector has matchLabels and matchExpressions)")
        selector = LabelSelector.parse(rule.selector, where, source)
        if selector.empty:
            raise fail(where, "an empty selector would match every pod; name the workload's labels")
        if rule.settle_seconds is not None and rule.mode != "one-at-a-time":
            raise fail(f"workloadRules[{i}].settleSeconds", "settleSeconds applies to one-at-a-time workloads only")
        if rule.max_wait_seconds is not None and rule.mode != "wait-for-completion":
            raise fail(f"workloadRules[{i}].maxWaitSeconds", "maxWaitSeconds applies to wait-for-completion workloads only")
        selectors.append(selector)
    gate = policy.health_gate
    if gate is not None and sum(x is not None for x in (gate.canary, gate.command, gate.url)) != 1:
        raise fail("healthGate", "give exactly one of canary ({window: 30m}), command (a list: program and arguments) or url")
    return policy.model_copy(update={"source": source, "selectors": tuple(selectors)})


def load_policy(path: str | Path) -> RotationPolicy:
    path = Path(path)
    return parse_policy(read_yaml(path, "rotation policy"), str(path))
