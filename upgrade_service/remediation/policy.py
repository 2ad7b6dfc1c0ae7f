"""The remediation policy: when a node counts as broken, what replacing it may do, and when to stop.

Parsed once, at the edge, into a frozen ``RemediationPolicy``; every mistake (an unknown condition
type, a negative threshold, a percentage over 100%) is a ``PlatformError`` naming the file and the key.

```yaml
conditions:                     # how long each condition must be bad before the node is unhealthy
  - {type: Ready, unhealthyAfterSeconds: 300}          # Ready False or Unknown
  - {type: DiskPressure, unhealthyAfterSeconds: 300}   # any other: True
customConditionTypes: [GPUUnhealthy]   # conditions your own detectors set, beyond the known ones
nodeStartupTimeoutSeconds: 600  # an instance with no Ready node this long after launch is unhealthy
drainTimeoutSeconds: 600        # evictions refused this long: the node stays cordoned and is reported
forceAfterSeconds: null         # set: pods of a node whose kubelet is gone this long may be deleted
maxPerHour: 3                   # remediations per cluster per hour, across runs
maxUnhealthy: 20%               # more unhealthy nodes than this in the cluster: remediate nothing
maxUnhealthyPerZone: 30%        # ... in one zone (an AZ event, not a node problem)
maxUnhealthyPerPool: null       # ... in one pool
intervalSeconds: 60             # how often `remediate --watch` looks
workloadRules: []               # as in a rotation policy: one-at-a-time, wait-for-completion, skip
```

A count or a percentage of the scope's nodes (rounded down, never below one node: a lone broken node
is always a node problem). Defaults follow Cluster API's MachineHealthCheck where it has one.

``workloadRules`` are a rotation policy's, parsed by the same code, and a node whose kubelet still
answers is drained by them as a rotation drains it (a wait-for-completion job finishes first, a
one-at-a-time workload moves a pod at a time). A node whose kubelet is gone runs nothing anyone can
wait for: its pods are evicted as their budgets allow, whatever the rules or annotations say.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from platformctl.kernel.cluster.model import LABEL_NODEGROUP
from platformctl.kernel.cluster.selectors import LabelSelector
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.yamlfile import read_yaml, validate
from upgrade_service.planning.policy import RotationPolicy, WorkloadRule, parse_workload_rules

# The kubelet's, the CNI's, and those node-problem-detector's stock configurations set (kernel-monitor,
# docker-monitor, systemd-monitor, health-checker, custom-plugin-monitor's ntp).
KNOWN_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable",
                    "KernelDeadlock", "ReadonlyFilesystem", "CorruptDockerOverlay2", "FrequentKubeletRestart",
                    "FrequentDockerRestart", "FrequentContainerdRestart", "KubeletUnhealthy",
                    "ContainerRuntimeUnhealthy", "NTPProblem")
HEALTH_ANNOTATION = "platformctl.io/health"
HEALTHY_VALUES = ("", "ok", "healthy")
_PERCENT = re.compile(r"^([0-9]+)%$")

Seconds = Annotated[int, Field(ge=0)]


class _Value(BaseModel):
    # A field's docstring is its description: docs/policy-reference.md is generated from them.
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
                              use_attribute_docstrings=True)


class ConditionRule(_Value):
    type: Annotated[str, Field(min_length=1)]
    """A node condition type: a known one, or one named in ``customConditionTypes``."""
    unhealthy_after_seconds: Seconds = 300
    """How long it must be bad (Ready False or Unknown; any other True) before the node is unhealthy."""


DEFAULT_CONDITIONS = tuple(ConditionRule(type=t) for t in
                           ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"))


def _limit(value: Any) -> int | str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("a count of nodes or a percentage such as '20%'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a count of nodes cannot be negative")
        return value
    if isinstance(value, str):
        match = _PERCENT.match(value.strip())
        if match is None:
            raise ValueError(f"{value!r} is neither a count of nodes nor a percentage such as '20%'")
        if int(match.group(1)) > 100:
            raise ValueError("a percentage cannot be over 100%")
        return value.strip()
    raise ValueError("a count of nodes or a percentage such as '20%'")


class RemediationPolicy(_Value):
    cluster: str | None = None
    """The cluster it is for; a stage's remediation needs none."""
    pool_label: str = LABEL_NODEGROUP
    """The node label that names a node's pool."""
    conditions: tuple[ConditionRule, ...] = DEFAULT_CONDITIONS
    """The conditions that make a node unhealthy, each with how long (default: Ready and the kubelet's pressures,
    300 s each)."""
    custom_condition_types: tuple[str, ...] = ()
    """Conditions your own detectors set, beyond the known ones."""
    health_annotation: bool = True
    """A ``platformctl.io/health`` annotation naming a problem makes the node unhealthy at once."""
    node_startup_timeout_seconds: Annotated[int, Field(ge=1)] = 600
    """An instance with no Ready node this long after launch is unhealthy."""
    drain_timeout_seconds: Annotated[int, Field(ge=1)] = 600
    """Evictions refused this long: the node stays cordoned and is reported."""
    force_after_seconds: Seconds | None = None
    """Set: the pods of a node whose kubelet has been gone this long may be deleted."""
    max_per_hour: Seconds = 3
    """Remediations per cluster per hour, across runs."""
    max_unhealthy: int | str | None = "20%"
    """More unhealthy nodes than this (a count or a percentage) in the cluster: remediate nothing."""
    max_unhealthy_per_zone: int | str | None = "30%"
    """... in one zone (an AZ event, not a node problem)."""
    max_unhealthy_per_pool: int | str | None = None
    """... in one pool."""
    interval_seconds: Annotated[int, Field(ge=1)] = 60
    """How often ``remediate --watch`` looks."""
    max_mutations_per_minute: Annotated[int, Field(ge=1)] = 1000
    """The platform's SLO for mutating pod operations: evictions are paced under it."""
    workload_rules: tuple[WorkloadRule, ...] = ()
    """As in a rotation policy, applied while a node's kubelet still answers."""

    source: str = Field(default="policy", exclude=True)
    selectors: tuple[LabelSelector, ...] = Field(default=(), exclude=True)

    @field_validator("max_unhealthy", "max_unhealthy_per_zone", "max_unhealthy_per_pool", mode="before")
    @classmethod
    def _check_limit(cls, value: Any) -> int | str | None:
        return _limit(value)

    def drain_policy(self) -> RotationPolicy:
        """What a drain of remediation reads: its workload rules (and pool label), as a rotation policy has them."""
        return RotationPolicy(pool_label=self.pool_label, workload_rules=self.workload_rules, selectors=self.selectors,
                              source=self.source)

    def rule(self, type_: str) -> ConditionRule | None:
        for rule in self.conditions:
            if rule.type == type_:
                return rule
        return None


def allowed(limit: int | str | None, total: int) -> int | None:
    """How many unhealthy nodes of ``total`` a limit lets remediation go on with (None: no limit)."""
    if limit is None:
        return None
    if isinstance(limit, int):
        return limit
    percent = int(limit.rstrip("%"))
    return max(math.floor(total * percent / 100), 1)


def parse_remediation_policy(document: Any, source: str) -> RemediationPolicy:
    policy = validate(RemediationPolicy, document, source, "remediation policy", empty=True)
    known = set(KNOWN_CONDITIONS) | set(policy.custom_condition_types)
    seen: set[str] = set()
    for i, rule in enumerate(policy.conditions):
        if rule.type not in known:
            import difflib

            guess = difflib.get_close_matches(rule.type, sorted(known), n=1)
            raise PlatformError(f"unknown condition type {rule.type!r}" + (f" (did you mean {guess[0]}?)" if guess else "")
                                + "; a condition your own detector sets goes in customConditionTypes first",
                                file=source, field=f"conditions[{i}].type")
        if rule.type in seen:
            raise PlatformError(f"condition type {rule.type!r} is listed twice", file=source, field=f"conditions[{i}].type")
        seen.add(rule.type)
    for i, name in enumerate(policy.custom_condition_types):
        if not re.match(r"^[A-Za-z][A-Za-z0-9]*$", name):
            raise PlatformError(f"{name!r} is not a condition type (CamelCase letters and digits)", file=source,
                                field=f"customConditionTypes[{i}]")
    return policy.model_copy(update={"source": source, "selectors": parse_workload_rules(policy.workload_rules, source)})


def load_remediation_policy(path: str | Path) -> RemediationPolicy:
    path = Path(path)
    return parse_remediation_policy(read_yaml(path, "remediation policy"), str(path))
