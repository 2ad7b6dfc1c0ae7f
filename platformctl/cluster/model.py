"""Typed values for what the toolkit reads from a cluster: nodes, pods and PodDisruptionBudgets.

Cluster snapshots (exactly what ``kubectl get nodes,pods,pdb -A -o json`` prints, a ``v1 List``)
and live API responses are parsed here, once, into frozen dataclasses; everything above works on
these values and never on raw dicts. ``to_kube()`` turns each value back into its API form, so a
snapshot saved by the simulator reads like one kubectl printed. Malformed input raises
``PlatformError`` naming the file and the field (``items[12].spec.containers[0]...``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from platformctl.cluster.constraints import NO_CONSTRAINTS, InterPodConstraints, parse_constraints
from platformctl.cluster.selectors import (
    NODE_OPERATORS,
    IntOrPercent,
    LabelSelector,
    NodeSelectorTerm,
    parse_requirement,
)
from platformctl.errors import TOO_DEEP, PlatformError

# Well-known labels, as EKS sets them.
LABEL_NODEGROUP = "eks.amazonaws.com/nodegroup"
LABEL_NODEGROUP_IMAGE = "eks.amazonaws.com/nodegroup-image"
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_NODE_TYPE = "platformctl.io/node-type"
ANNOTATION_MIRROR = "kubernetes.io/config.mirror"
RESOURCE_GPU = "nvidia.com/gpu"

# How a simulated pod behaves; kept in annotations so they survive a snapshot round trip.
ANNOTATION_START_SECONDS = "sim.platformctl.io/start-seconds"
ANNOTATION_RUN_SECONDS = "sim.platformctl.io/run-seconds"

# How an application asks to be rotated (read by the rotation planner, set by applications).
ANNOTATION_ROTATION = "platformctl.io/rotation"
ANNOTATION_SETTLE = "platformctl.io/settle-seconds"
ANNOTATION_MAX_WAIT = "platformctl.io/max-wait-seconds"

EMPTY: Mapping[str, str] = MappingProxyType({})


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(raw: Any, where: str, file: str | None) -> float:
    if not isinstance(raw, str):
        raise PlatformError("must be an RFC 3339 timestamp", file=file, field=where)
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise PlatformError(f"{raw!r} is not an RFC 3339 timestamp", file=file, field=where) from None


@lru_cache(maxsize=4096)
def _quantity(raw: str) -> Decimal | None:
    from kubernetes.utils.quantity import parse_quantity

    try:
        return parse_quantity(raw)
    except ValueError:
        return None


def parse_quantity(raw: Any, where: str, file: str | None) -> Decimal:
    q = _quantity(str(raw)) if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else None
    if q is None:
        raise PlatformError(f"{raw!r} is not a Kubernetes quantity", file=file, field=where)
    return q


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_memory(n: int) -> str:
    for suffix, size in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


@dataclass(frozen=True, slots=True)
class Resources:
    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millis + other.cpu_millis,
            self.memory_bytes + other.memory_bytes,
            self.gpus + other.gpus,
        )

    def to_kube(self) -> dict[str, str]:
        out = {"cpu": format_cpu(self.cpu_millis), "memory": format_memory(self.memory_bytes)}
        if self.gpus:
            out[RESOURCE_GPU] = str(self.gpus)
        return out


def _resources(raw: Any, where: str, file: str | None) -> Resources:
    if raw is None:
        return Resources()
    if not isinstance(raw, dict):
        raise PlatformError("must be an object", file=file, field=where)
    cpu = raw.get("cpu")
    mem = raw.get("memory")
    gpu = raw.get(RESOURCE_GPU)
    return Resources(
        math.ceil(parse_quantity(cpu, f"{where}.cpu", file) * 1000) if cpu is not None else 0,
        int(parse_quantity(mem, f"{where}.memory", file)) if mem is not None else 0,
        int(parse_quantity(gpu, f"{where}.{RESOURCE_GPU}", file)) if gpu is not None else 0,
    )


def _requests(resources: Any, where: str, file: str | None) -> Resources:
    """A container's requests; as the API defaults them, a limit stands in for a missing request."""
    if resources is None:
        return Resources()
    if not isinstance(resources, dict):
        raise PlatformError("must be an object", file=file, field=where)
    requests = _resources(resources.get("requests"), f"{where}.requests", file)
    limits = _resources(resources.get("limits"), f"{where}.limits", file)
    return Resources(
        requests.cpu_millis or limits.cpu_millis,
        requests.memory_bytes or limits.memory_bytes,
        requests.gpus or limits.gpus,
    )


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def to_kube(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value

    def to_kube(self) -> dict[str, str]:
        out = {"operator": self.operator}
        for name in ("key", "value", "effect"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True, slots=True)
class OwnerReference:
    api_version: str
    kind: str
    name: str
    uid: str

    def to_kube(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass(frozen=True, slots=True)
class Container:
    name: str
    image: str
    requests: Resources

    def to_kube(self) -> dict[str, Any]:
        return {"name": self.name, "image": self.image, "resources": {"requests": self.requests.to_kube()}}


# The conditions a kubelet always reports besides Ready; a node shows them False while all is well.
KUBELET_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure")
_HEALTHY_REASONS = {"MemoryPressure": ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    "DiskPressure": ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    "PIDPressure": ("KubeletHasSufficientPID", "kubelet has sufficient PID available")}


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One entry of a node's ``status.conditions``: Ready, the kubelet's pressures, or a node-problem-detector's."""

    type: str
    status: str  # True | False | Unknown
    reason: str = ""
    message: str = ""
    since: float = 0.0  # lastTransitionTime
    heartbeat: float | None = None  # lastHeartbeatTime; None: the same as ``since``

    def to_kube(self) -> dict[str, Any]:
        return {"type": self.type, "status": self.status, "reason": self.reason, "message": self.message,
                "lastHeartbeatTime": format_time(self.since if self.heartbeat is None else self.heartbeat),
                "lastTransitionTime": format_time(self.since)}


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    uid: str
    labels: Mapping[str, str]
    provider_id: str
    allocatable: Resources
    max_pods: int
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()
    created: float = 0.0
    resource_version: int = 0
    # ``status.conditions`` as last reported, Ready included; empty: a Ready condition made from ``ready``
    # (and the kubelet's pressures all False) since the node was created. ``ready`` always agrees with Ready.
    conditions: tuple[NodeCondition, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY)

    def condition(self, type_: str) -> NodeCondition | None:
        for c in self.conditions:
            if c.type == type_:
                return c
        if type_ == "Ready":
            return NodeCondition("Ready", "True" if self.ready else "False",
                                 "KubeletReady" if self.ready else "KubeletNotReady",
                                 "kubelet is posting ready status" if self.ready else "container runtime status check may not have completed yet",
                                 self.created)
        if type_ in KUBELET_CONDITIONS:
            reason, message = _HEALTHY_REASONS[type_]
            return NodeCondition(type_, "False", reason, message, self.created)
        return None

    def all_conditions(self) -> list[NodeCondition]:
        """What ``status.conditions`` shows: the kubelet's pressures, any others reported, then Ready."""
        out = [c for t in KUBELET_CONDITIONS if (c := self.condition(t)) is not None]
        out += [c for c in self.conditions if c.type not in KUBELET_CONDITIONS and c.type != "Ready"]
        ready = self.condition("Ready")
        assert ready is not None
        return [*out, ready]

    def with_condition(self, condition: NodeCondition) -> Node:
        """This node with ``condition`` replacing any of its type (``ready`` follows a Ready condition)."""
        kept = tuple(c for c in self.conditions if c.type != condition.type)
        ready = condition.status == "True" if condition.type == "Ready" else self.ready
        if condition.type != "Ready" and not any(c.type == "Ready" for c in kept):
            current = self.condition("Ready")
            assert current is not None
            kept = (*kept, current)
        return replace(self, conditions=(*kept, condition), ready=ready)

    @property
    def pool(self) -> str | None:
        return self.labels.get(LABEL_NODEGROUP)

    @property
    def image(self) -> str | None:
        return self.labels.get(LABEL_NODEGROUP_IMAGE)

    @property
    def zone(self) -> str | None:
        return self.labels.get(LABEL_ZONE)

    @property
    def instance_type(self) -> str | None:
        return self.labels.get(LABEL_INSTANCE_TYPE)

    @property
    def instance_id(self) -> str | None:
        """The EC2 instance behind the node, from ``spec.providerID`` (``aws:///<zone>/<id>``)."""
        if self.provider_id.startswith("aws:///"):
            return self.provider_id.rsplit("/", 1)[-1] or None
        return None

    def to_kube(self) -> dict[str, Any]:
        allocatable = self.allocatable.to_kube() | {"pods": str(self.max_pods)}
        spec: dict[str, Any] = {"providerID": self.provider_id}
        if self.unschedulable:
            spec["unschedulable"] = True
        if self.taints:
            spec["taints"] = [t.to_kube() for t in self.taints]
        metadata: dict[str, Any] = {
            "name": self.name,
            "uid": self.uid,
            "labels": dict(self.labels),
            "creationTimestamp": format_time(self.created),
            "resourceVersion": str(self.resource_version),
        }
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": metadata,
            "spec": spec,
            "status": {
                "allocatable": allocatable,
                "capacity": allocatable,
                "conditions": [c.to_kube() for c in self.all_conditions()],
            },
        }


# The DisruptionTarget condition's messages, as the component that sets each reason writes it.
DISRUPTION_MESSAGES = {
    "EvictionByEvictionAPI": "Eviction API: evicting",
    "PreemptionByScheduler": "Preempted by a higher-priority pod",
    "DeletionByTaintManager": "Taint manager: deleting due to NoExecute taint",
    "DeletionByPodGC": "PodGC: node no longer exists",
    "TerminationByKubelet": "The node was low on resource",
}


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    owner: OwnerReference | None = None
    node_name: str | None = None
    containers: tuple[Container, ...] = ()
    requests: Resources = Resources()
    priority: int = 0
    priority_class_name: str | None = None
    grace_seconds: int = 30
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    tolerations: tuple[Toleration, ...] = ()
    required_node_terms: tuple[NodeSelectorTerm, ...] = ()
    phase: str = "Pending"
    ready: bool = False
    deletion_time: float | None = None
    created: float = 0.0
    started: float | None = None
    evicted: bool = False
    resource_version: int = 0
    scheduled: float | None = None  # when it was bound to its node (PodScheduled's lastTransitionTime)
    waiting: str = ""  # why its containers are not running, when the kubelet says more than ContainerCreating
    running: float | None = None  # when the last of its containers started running (containerStatuses), when read
    ready_since: float | None = None  # Ready's lastTransitionTime, when read and Ready
    # Its DisruptionTarget condition's reason when the platform is taking it away (PreemptionByScheduler,
    # DeletionByTaintManager, DeletionByPodGC, TerminationByKubelet); an eviction sets ``evicted`` instead.
    disruption: str = ""
    inter: InterPodConstraints = NO_CONSTRAINTS  # required pod (anti-)affinity and topology spread
    # What the scheduler last said of it while it could not place it (PodScheduled False, reason Unschedulable),
    # and since when; "" once it is bound or was never refused.
    unschedulable: str = ""
    unschedulable_since: float | None = None

    @property
    def disruption_reason(self) -> str:
        """Why the platform took it away, as its DisruptionTarget condition says ("" when it did not)."""
        return self.disruption or ("EvictionByEvictionAPI" if self.evicted else "")

    @property
    def ready_at(self) -> float | None:
        if not self.ready:
            return None
        return self.ready_since if self.ready_since is not None else self.started

    @property
    def running_at(self) -> float | None:
        """When all its containers were running: read from the API, or in the simulator its start."""
        if self.running is not None:
            return self.running
        return self.started if self.phase in ("Running", "Succeeded", "Failed") else None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def with_status(
        self,
        node_name: str | None,
        phase: str,
        ready: bool,
        deletion_time: float | None,
        started: float | None,
        evicted: bool,
        resource_version: int,
        scheduled: float | None = None,
    ) -> Pod:
        """This pod with a new binding and status (the simulator's hot path: no ``replace()``)."""
        return self._copy(self.name, self.uid, self.owner, node_name, phase, ready, deletion_time, self.created,
                          started, evicted, resource_version, self.scheduled if scheduled is None else scheduled,
                          self.waiting)

    def spawn(self, name: str, uid: str, owner: OwnerReference, node_name: str | None, created: float, resource_version: int) -> Pod:
        """A new pending pod made from this one as a controller's template."""
        return self._copy(name, uid, owner, node_name, "Pending", False, None, created, None, False, resource_version,
                          created if node_name else None, "")

    def _copy(self, name: str, uid: str, owner: OwnerReference | None, node_name: str | None, phase: str, ready: bool,
              deletion_time: float | None, created: float, started: float | None, evicted: bool, resource_version: int,
              scheduled: float | None, waiting: str) -> Pod:
        return Pod(
            self.namespace, name, uid, self.labels, self.annotations, owner, node_name, self.containers, self.requests,
            self.priority, self.priority_class_name, self.grace_seconds, self.node_selector, self.tolerations,
            self.required_node_terms, phase, ready, deletion_time, created, started, evicted, resource_version,
            scheduled, waiting, disruption=self.disruption, inter=self.inter,
            unschedulable=self.unschedulable if node_name is None else "",
            unschedulable_since=self.unschedulable_since if node_name is None else None,
        )

    @property
    def owner_kind(self) -> str | None:
        return self.owner.kind if self.owner else None

    @property
    def is_daemonset(self) -> bool:
        return self.owner is not None and self.owner.kind == "DaemonSet"

    @property
    def is_mirror(self) -> bool:
        return ANNOTATION_MIRROR in self.annotations

    @property
    def is_finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def terminating(self) -> bool:
        return self.deletion_time is not None

    def to_kube(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "creationTimestamp": format_time(self.created),
            "resourceVersion": str(self.resource_version),
        }
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        if self.owner:
            metadata["ownerReferences"] = [self.owner.to_kube()]
        if self.deletion_time is not None:
            metadata["deletionTimestamp"] = format_time(self.deletion_time)
            metadata["deletionGracePeriodSeconds"] = self.grace_seconds
        spec: dict[str, Any] = {
            "containers": [c.to_kube() for c in self.containers],
            "terminationGracePeriodSeconds": self.grace_seconds,
            "priority": self.priority,
        }
        if self.node_name:
            spec["nodeName"] = self.node_name
        if self.priority_class_name:
            spec["priorityClassName"] = self.priority_class_name
        if self.node_selector:
            spec["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            spec["tolerations"] = [t.to_kube() for t in self.tolerations]
        affinity: dict[str, Any] = self.inter.affinity_to_kube()
        if self.required_node_terms:
            affinity["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [t.to_dict() for t in self.required_node_terms]
                }
            }
        if affinity:
            spec["affinity"] = affinity
        if self.inter.spread:
            spec["topologySpreadConstraints"] = [c.to_kube() for c in self.inter.spread]
        conditions: list[dict[str, Any]] = []
        bound = format_time(self.scheduled if self.scheduled is not None else self.created)
        if not self.node_name and self.unschedulable:
            pending = self.unschedulable_since if self.unschedulable_since is not None else self.created
            conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                               "message": self.unschedulable, "lastTransitionTime": format_time(pending)})
        if self.node_name:
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": bound})
            conditions.append({"type": "Initialized", "status": "True", "lastTransitionTime": bound})
        if self.phase in ("Running", "Succeeded", "Failed") or self.node_name:
            since = format_time(self.started) if self.ready and self.started is not None else bound
            for kind in ("ContainersReady", "Ready"):
                conditions.append({"type": kind, "status": "True" if self.ready else "False", "lastTransitionTime": since,
                                   **({} if self.ready else {"reason": "ContainersNotReady"})})
        if self.disruption_reason:
            conditions.append({"type": "DisruptionTarget", "status": "True", "reason": self.disruption_reason,
                               "message": DISRUPTION_MESSAGES.get(self.disruption_reason, self.disruption_reason)})
        status: dict[str, Any] = {"phase": self.phase, "conditions": conditions}
        if self.started is not None:
            status["startTime"] = format_time(self.started)
        if self.node_name:
            status["containerStatuses"] = [self._container_status(c) for c in self.containers]
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}

    def _container_status(self, container: Container) -> dict[str, Any]:
        if self.phase in ("Succeeded", "Failed"):
            state: dict[str, Any] = {"terminated": {"exitCode": 0 if self.phase == "Succeeded" else 1,
                                                    "reason": "Completed" if self.phase == "Succeeded" else "Error",
                                                    **({"startedAt": format_time(self.started)} if self.started else {})}}
        elif self.phase == "Running" and self.started is not None:
            state = {"running": {"startedAt": format_time(self.started)}}
        else:
            state = {"waiting": {"reason": self.waiting or "ContainerCreating"}}
        return {"name": container.name, "image": container.image, "imageID": "", "ready": self.ready, "restartCount": 0,
                "started": "running" in state, "state": state}


@dataclass(frozen=True, slots=True)
class PDBStatus:
    current_healthy: int = 0
    desired_healthy: int = 0
    expected_pods: int = 0
    disruptions_allowed: int = 0
    observed_generation: int = 0
    sync_failed: str | None = None

    def to_kube(self) -> dict[str, Any]:
        condition: dict[str, Any]
        if self.sync_failed:
            condition = {"type": "DisruptionAllowed", "status": "False", "reason": "SyncFailed", "message": self.sync_failed}
        elif self.disruptions_allowed > 0:
            condition = {"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": ""}
        else:
            condition = {"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": ""}
        condition["observedGeneration"] = self.observed_generation
        condition["lastTransitionTime"] = format_time(0)
        return {
            "currentHealthy": self.current_healthy,
            "desiredHealthy": self.desired_healthy,
            "expectedPods": self.expected_pods,
            "disruptionsAllowed": self.disruptions_allowed,
            "observedGeneration": self.observed_generation,
            "conditions": [condition],
        }


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    uid: str
    selector: LabelSelector | None
    min_available: IntOrPercent | None = None
    max_unavailable: IntOrPercent | None = None
    unhealthy_pod_eviction_policy: str | None = None
    generation: int = 1
    created: float = 0.0
    status: PDBStatus = field(default_factory=PDBStatus)
    resource_version: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def selects(self, pod: Pod) -> bool:
        """Whether this budget covers ``pod``: same namespace and a selector that matches.

        A nil selector matches nothing; an empty one (``{}``) matches every pod of the namespace
        (policy/v1).
        """
        return pod.namespace == self.namespace and self.selector is not None and self.selector.matches(pod.labels)

    def to_kube(self) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if self.selector is not None:
            spec["selector"] = self.selector.to_dict()
        if self.min_available is not None:
            spec["minAvailable"] = self.min_available.to_json()
        if self.max_unavailable is not None:
            spec["maxUnavailable"] = self.max_unavailable.to_json()
        if self.unhealthy_pod_eviction_policy:
            spec["unhealthyPodEvictionPolicy"] = self.unhealthy_pod_eviction_policy
        return {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "generation": self.generation,
                "creationTimestamp": format_time(self.created),
                "resourceVersion": str(self.resource_version),
            },
            "spec": spec,
            "status": self.status.to_kube(),
        }


@dataclass(frozen=True, slots=True)
class EvictionResult:
    """The answer of the eviction subresource, as the API server gives it."""

    code: int
    message: str = ""
    reason: str = ""
    causes: tuple[tuple[str, str], ...] = ()
    retry_after_seconds: int = 0

    @property
    def allowed(self) -> bool:
        return self.code in (200, 201)

    def to_status(self) -> dict[str, Any]:
        """The ``v1 Status`` body the API returns."""
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success" if self.allowed else "Failure",
        }
        if self.message:
            out["message"] = self.message
        if self.reason:
            out["reason"] = self.reason
        details: dict[str, Any] = {}
        if self.causes:
            details["causes"] = [{"reason": t, "message": m} for t, m in self.causes]
        if self.retry_after_seconds:
            details["retryAfterSeconds"] = self.retry_after_seconds
        if details:
            out["details"] = details
        out["code"] = self.code
        return out

    @classmethod
    def from_status(cls, body: Mapping[str, Any], code: int) -> EvictionResult:
        details = body.get("details") or {}
        causes = tuple((c.get("reason", ""), c.get("message", "")) for c in details.get("causes") or [])
        return cls(
            code=int(body.get("code", code)),
            message=body.get("message", ""),
            reason=body.get("reason", ""),
            causes=causes,
            retry_after_seconds=int(details.get("retryAfterSeconds", 0)),
        )


# The eviction subresource's decision for one pod, as ``pkg/registry/core/pod/storage/eviction.go``
# makes it. The simulator answers evictions with it and the rotation planner predicts them with it.
EVICT_FREELY = "evict-freely"  # deleted without consulting any budget
EVICT_UNDER_BUDGET = "evict-under-budget"  # allowed, and spends the budget's disruptionsAllowed
EVICT_UNHEALTHY = "evict-unhealthy"  # an unready pod that goes without spending the budget
REFUSE_TWO_BUDGETS = "refuse-two-budgets"  # 500: the pod is covered by more than one budget
REFUSE_NOT_PROCESSED = "refuse-not-processed"  # 429: the disruption controller has not seen the budget's generation
REFUSE_NO_ROOM = "refuse-no-room"  # 429: disruptionsAllowed is 0


def exempt_from_budgets(pod: Pod) -> bool:
    """Terminal, pending and terminating pods are deleted without consulting budgets."""
    return pod.phase in ("Succeeded", "Failed", "Pending") or pod.deletion_time is not None


def eviction_decision(pod: Pod, budgets: tuple[PodDisruptionBudget, ...] | list[PodDisruptionBudget],
                      status: PDBStatus | None = None) -> str:
    """What the eviction API does with ``pod`` right now, given the budgets that cover it.

    ``status`` is the one budget's status when the caller computes it (the simulator); otherwise the
    budget's own ``status`` is used, as the API server reads it.
    """
    if exempt_from_budgets(pod):
        return EVICT_FREELY
    if len(budgets) > 1:
        return REFUSE_TWO_BUDGETS
    if not budgets:
        return EVICT_FREELY
    pdb = budgets[0]
    st = status if status is not None else pdb.status
    if not pod.ready:
        if pdb.unhealthy_pod_eviction_policy == "AlwaysAllow":
            return EVICT_UNHEALTHY
        if st.current_healthy >= st.desired_healthy and st.desired_healthy > 0:
            return EVICT_UNHEALTHY
    if st.observed_generation < pdb.generation:
        return REFUSE_NOT_PROCESSED
    if st.disruptions_allowed <= 0:
        return REFUSE_NO_ROOM
    return EVICT_UNDER_BUDGET


# ---------------------------------------------------------------------------------------------
# Parsing, at the edge


def _obj(raw: Any, where: str, file: str | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise PlatformError("must be an object", file=file, field=where)
    return raw


def _str(raw: Any, where: str, file: str | None) -> str:
    if not isinstance(raw, str) or not raw:
        raise PlatformError("required string is missing", file=file, field=where)
    return raw


def _str_map(raw: Any, where: str, file: str | None) -> Mapping[str, str]:
    if raw is None:
        return EMPTY
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise PlatformError("must map strings to strings", file=file, field=where)
    return raw


def _int(raw: Any, where: str, file: str | None, default: int) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise PlatformError(f"must be an integer (got {raw!r})", file=file, field=where)
    return raw


def _list(raw: Any, where: str, file: str | None) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PlatformError("must be a list", file=file, field=where)
    return raw


def _ready(status: dict[str, Any], where: str, file: str | None) -> bool:
    for i, c in enumerate(_list(status.get("conditions"), f"{where}.conditions", file)):
        c = _obj(c, f"{where}.conditions[{i}]", file)
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def _metadata(raw: dict[str, Any], where: str, file: str | None) -> dict[str, Any]:
    meta = _obj(raw.get("metadata"), f"{where}.metadata", file)
    _str(meta.get("name"), f"{where}.metadata.name", file)
    return meta


def _created(meta: dict[str, Any], where: str, file: str | None) -> float:
    stamp = meta.get("creationTimestamp")
    return parse_time(stamp, f"{where}.metadata.creationTimestamp", file) if stamp else 0.0


def _resource_version(meta: dict[str, Any]) -> int:
    try:
        return int(meta.get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def parse_node(raw: Any, where: str = "node", file: str | None = None) -> Node:
    raw = _obj(raw, where, file)
    meta = _metadata(raw, where, file)
    spec = _obj(raw.get("spec") or {}, f"{where}.spec", file)
    status = _obj(raw.get("status") or {}, f"{where}.status", file)
    alloc_raw = status.get("allocatable") or status.get("capacity") or {}
    allocatable = _resources(alloc_raw, f"{where}.status.allocatable", file)
    pods = alloc_raw.get("pods", "110") if isinstance(alloc_raw, dict) else "110"
    taints = []
    for i, t in enumerate(_list(spec.get("taints"), f"{where}.spec.taints", file)):
        t = _obj(t, f"{where}.spec.taints[{i}]", file)
        taints.append(
            Taint(_str(t.get("key"), f"{where}.spec.taints[{i}].key", file), t.get("value", ""),
                  _str(t.get("effect"), f"{where}.spec.taints[{i}].effect", file))
        )
    return Node(
        name=meta["name"],
        uid=meta.get("uid") or meta["name"],
        labels=_str_map(meta.get("labels"), f"{where}.metadata.labels", file),
        provider_id=spec.get("providerID") or "",
        allocatable=allocatable,
        max_pods=int(parse_quantity(pods, f"{where}.status.allocatable.pods", file)),
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=_ready(status, f"{where}.status", file),
        taints=tuple(taints),
        created=_created(meta, where, file),
        resource_version=_resource_version(meta),
        conditions=_node_conditions(status, f"{where}.status.conditions", file),
        annotations=_str_map(meta.get("annotations"), f"{where}.metadata.annotations", file),
    )


def _node_conditions(status: dict[str, Any], where: str, file: str | None) -> tuple[NodeCondition, ...]:
    out = []
    for i, c in enumerate(_list(status.get("conditions"), where, file)):
        c = _obj(c, f"{where}[{i}]", file)
        since = c.get("lastTransitionTime")
        beat = c.get("lastHeartbeatTime")
        out.append(NodeCondition(
            _str(c.get("type"), f"{where}[{i}].type", file), str(c.get("status", "Unknown")), str(c.get("reason") or ""),
            str(c.get("message") or ""), parse_time(since, f"{where}[{i}].lastTransitionTime", file) if since else 0.0,
            parse_time(beat, f"{where}[{i}].lastHeartbeatTime", file) if beat else None))
    return tuple(out)


def _tolerations(raw: Any, where: str, file: str | None) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(_list(raw, where, file)):
        t = _obj(t, f"{where}[{i}]", file)
        op = t.get("operator", "Equal")
        if op not in ("Equal", "Exists"):
            raise PlatformError(f"operator must be Equal or Exists (got {op!r})", file=file, field=f"{where}[{i}].operator")
        out.append(Toleration(t.get("key", ""), op, t.get("value", ""), t.get("effect", "")))
    return tuple(out)


def _node_terms(spec: dict[str, Any], where: str, file: str | None) -> tuple[NodeSelectorTerm, ...]:
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {} if isinstance(affinity, dict) else {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    at = f"{where}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    terms = []
    for i, term in enumerate(_list(required.get("nodeSelectorTerms"), at, file)):
        term = _obj(term, f"{at}[{i}]", file)
        exprs = _list(term.get("matchExpressions"), f"{at}[{i}].matchExpressions", file)
        terms.append(
            NodeSelectorTerm(
                tuple(
                    parse_requirement(e, f"{at}[{i}].matchExpressions[{j}]", NODE_OPERATORS, file)
                    for j, e in enumerate(exprs)
                )
            )
        )
    return tuple(terms)


def parse_pod(raw: Any, where: str = "pod", file: str | None = None) -> Pod:
    raw = _obj(raw, where, file)
    meta = _metadata(raw, where, file)
    spec = _obj(raw.get("spec"), f"{where}.spec", file)
    status = _obj(raw.get("status") or {}, f"{where}.status", file)
    owner = None
    for i, ref in enumerate(_list(meta.get("ownerReferences"), f"{where}.metadata.ownerReferences", file)):
        ref = _obj(ref, f"{where}.metadata.ownerReferences[{i}]", file)
        if ref.get("controller"):
            at = f"{where}.metadata.ownerReferences[{i}]"
            owner = OwnerReference(
                ref.get("apiVersion", ""), _str(ref.get("kind"), f"{at}.kind", file),
                _str(ref.get("name"), f"{at}.name", file), ref.get("uid") or ref["name"],
            )
            break
    containers = []
    for i, c in enumerate(_list(spec.get("containers"), f"{where}.spec.containers", file)):
        at = f"{where}.spec.containers[{i}]"
        c = _obj(c, at, file)
        containers.append(
            Container(_str(c.get("name"), f"{at}.name", file), c.get("image", ""), _requests(c.get("resources"), f"{at}.resources", file))
        )
    if not containers:
        raise PlatformError("a pod needs at least one container", file=file, field=f"{where}.spec.containers")
    total = Resources()
    for c in containers:
        total = total + c.requests
    # Init containers run one at a time before the others: the pod needs the largest of them.
    for i, c in enumerate(_list(spec.get("initContainers"), f"{where}.spec.initContainers", file)):
        r = _requests(_obj(c, f"{where}.spec.initContainers[{i}]", file).get("resources"), f"{where}.spec.initContainers[{i}].resources", file)
        total = Resources(max(total.cpu_millis, r.cpu_millis), max(total.memory_bytes, r.memory_bytes), max(total.gpus, r.gpus))
    phase = status.get("phase") or "Pending"
    if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        raise PlatformError(f"unknown pod phase {phase!r}", file=file, field=f"{where}.status.phase")
    deletion = meta.get("deletionTimestamp")
    conditions = _list(status.get("conditions"), f"{where}.status.conditions", file)
    started = status.get("startTime")
    unschedulable = _unschedulable(conditions, f"{where}.status.conditions", file) if not spec.get("nodeName") else ("", None)
    return Pod(
        namespace=meta.get("namespace") or "default",
        name=meta["name"],
        uid=meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}",
        labels=_str_map(meta.get("labels"), f"{where}.metadata.labels", file),
        annotations=_str_map(meta.get("annotations"), f"{where}.metadata.annotations", file),
        owner=owner,
        node_name=spec.get("nodeName") or None,
        containers=tuple(containers),
        requests=total,
        priority=_int(spec.get("priority"), f"{where}.spec.priority", file, 0),
        priority_class_name=spec.get("priorityClassName"),
        grace_seconds=_int(spec.get("terminationGracePeriodSeconds"), f"{where}.spec.terminationGracePeriodSeconds", file, 30),
        node_selector=_str_map(spec.get("nodeSelector"), f"{where}.spec.nodeSelector", file),
        tolerations=_tolerations(spec.get("tolerations"), f"{where}.spec.tolerations", file),
        required_node_terms=_node_terms(spec, f"{where}.spec", file),
        phase=phase,
        ready=_ready(status, f"{where}.status", file),
        deletion_time=parse_time(deletion, f"{where}.metadata.deletionTimestamp", file) if deletion else None,
        created=_created(meta, where, file),
        started=parse_time(started, f"{where}.status.startTime", file) if started else None,
        evicted=_disruption(conditions) == "EvictionByEvictionAPI",
        disruption="" if _disruption(conditions) == "EvictionByEvictionAPI" else _disruption(conditions),
        resource_version=_resource_version(meta),
        scheduled=_scheduled(conditions, f"{where}.status.conditions", file),
        waiting=_waiting(status),
        running=_running(status, f"{where}.status.containerStatuses", file),
        ready_since=_since(conditions, "Ready", f"{where}.status.conditions", file),
        inter=parse_constraints(spec, f"{where}.spec", file),
        unschedulable=unschedulable[0],
        unschedulable_since=unschedulable[1],
    )


def _unschedulable(conditions: list[Any], where: str, file: str | None) -> tuple[str, float | None]:
    """PodScheduled False with reason Unschedulable: what the scheduler said, and since when."""
    for i, c in enumerate(conditions):
        if (isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"):
            since = c.get("lastTransitionTime")
            return (str(c.get("message") or "Unschedulable"),
                    parse_time(since, f"{where}[{i}].lastTransitionTime", file) if since else None)
    return "", None


def _disruption(conditions: list[Any]) -> str:
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return str(c.get("reason") or "EvictionByEvictionAPI")
    return ""


def _running(status: dict[str, Any], where: str, file: str | None) -> float | None:
    """When every container was running: the latest ``startedAt``, or None while one is not running."""
    times = []
    statuses = status.get("containerStatuses") or []
    for i, c in enumerate(statuses):
        started = ((c or {}).get("state") or {}).get("running", {}).get("startedAt") if isinstance(c, dict) else None
        if not started:
            return None
        times.append(parse_time(started, f"{where}[{i}].state.running.startedAt", file))
    return max(times) if times else None


def _since(conditions: list[Any], kind: str, where: str, file: str | None) -> float | None:
    """When condition ``kind`` turned True, or None while it is not."""
    for i, c in enumerate(conditions):
        if isinstance(c, dict) and c.get("type") == kind and c.get("status") == "True" and c.get("lastTransitionTime"):
            return parse_time(c["lastTransitionTime"], f"{where}[{i}].lastTransitionTime", file)
    return None


def _scheduled(conditions: list[Any], where: str, file: str | None) -> float | None:
    return _since(conditions, "PodScheduled", where, file)


def _waiting(status: dict[str, Any]) -> str:
    for c in status.get("containerStatuses") or []:
        reason = ((c or {}).get("state") or {}).get("waiting", {}).get("reason") if isinstance(c, dict) else None
        if reason and reason != "ContainerCreating":
            return str(reason)
    return ""


def parse_pdb(raw: Any, where: str = "pdb", file: str | None = None) -> PodDisruptionBudget:
    raw = _obj(raw, where, file)
    meta = _metadata(raw, where, file)
    spec = _obj(raw.get("spec") or {}, f"{where}.spec", file)
    status = _obj(raw.get("status") or {}, f"{where}.status", file)
    selector = None
    if spec.get("selector") is not None:
        selector = LabelSelector.parse(spec["selector"], f"{where}.spec.selector", file)
    min_available = max_unavailable = None
    if spec.get("minAvailable") is not None:
        min_available = IntOrPercent.parse(spec["minAvailable"], f"{where}.spec.minAvailable", file)
    if spec.get("maxUnavailable") is not None:
        max_unavailable = IntOrPercent.parse(spec["maxUnavailable"], f"{where}.spec.maxUnavailable", file)
    if min_available and max_unavailable:
        raise PlatformError("minAvailable and maxUnavailable cannot both be set", file=file, field=f"{where}.spec")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy not in (None, "IfHealthyBudget", "AlwaysAllow"):
        raise PlatformError(
            f"must be IfHealthyBudget or AlwaysAllow (got {policy!r})", file=file, field=f"{where}.spec.unhealthyPodEvictionPolicy"
        )
    s = f"{where}.status"
    return PodDisruptionBudget(
        namespace=meta.get("namespace") or "default",
        name=meta["name"],
        uid=meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}",
        selector=selector,
        min_available=min_available,
        max_unavailable=max_unavailable,
        unhealthy_pod_eviction_policy=policy,
        generation=_int(meta.get("generation"), f"{where}.metadata.generation", file, 1),
        created=_created(meta, where, file),
        status=PDBStatus(
            current_healthy=_int(status.get("currentHealthy"), f"{s}.currentHealthy", file, 0),
            desired_healthy=_int(status.get("desiredHealthy"), f"{s}.desiredHealthy", file, 0),
            expected_pods=_int(status.get("expectedPods"), f"{s}.expectedPods", file, 0),
            disruptions_allowed=_int(status.get("disruptionsAllowed"), f"{s}.disruptionsAllowed", file, 0),
            observed_generation=_int(status.get("observedGeneration"), f"{s}.observedGeneration", file, 0),
        ),
        resource_version=_resource_version(meta),
    )


@dataclass(frozen=True)
class Snapshot:
    """The contents of a cluster snapshot: nodes, pods and PodDisruptionBudgets."""

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    pdbs: tuple[PodDisruptionBudget, ...]
    source: str | None = None

    def to_kube(self) -> dict[str, Any]:
        return snapshot_document(self.nodes, self.pods, self.pdbs)


def snapshot_document(
    nodes: Iterable[Node], pods: Iterable[Pod], pdbs: Iterable[PodDisruptionBudget]
) -> dict[str, Any]:
    """A ``v1 List`` in the order kubectl prints ``get nodes,pods,pdb -A``."""
    items = [n.to_kube() for n in nodes]
    items += [p.to_kube() for p in pods]
    items += [b.to_kube() for b in pdbs]
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


_PARSERS = {"Node": parse_node, "Pod": parse_pod, "PodDisruptionBudget": parse_pdb}


def parse_snapshot(document: Any, file: str | None = None) -> Snapshot:
    doc = _obj(document, "(document)", file)
    if doc.get("kind") != "List" or not isinstance(doc.get("items"), list):
        raise PlatformError(
            "expected a v1 List with items, as `kubectl get nodes,pods,pdb -A -o json` prints", file=file, field="kind"
        )
    nodes: list[Node] = []
    pods: list[Pod] = []
    pdbs: list[PodDisruptionBudget] = []
    sinks: dict[str, list[Any]] = {"Node": nodes, "Pod": pods, "PodDisruptionBudget": pdbs}
    for i, item in enumerate(doc["items"]):
        where = f"items[{i}]"
        item = _obj(item, where, file)
        kind = item.get("kind")
        parser = _PARSERS.get(kind)  # type: ignore[arg-type]  # any value; unknown kinds are refused next
        if parser is None:
            raise PlatformError(
                f"unsupported kind {kind!r} (a snapshot holds Node, Pod and PodDisruptionBudget)", file=file, field=f"{where}.kind"
            )
        sinks[kind].append(parser(item, where, file))  # type: ignore[index]  # kind was checked against sinks above
    _check_unique(nodes, lambda n: n.name, "node", file)
    _check_unique(pods, lambda p: p.key, "pod", file)
    _check_unique(pdbs, lambda b: b.key, "PodDisruptionBudget", file)
    return Snapshot(tuple(nodes), tuple(pods), tuple(pdbs), source=file)


def _check_unique(values: list[Any], key: Any, what: str, file: str | None) -> None:
    seen: set[Any] = set()
    for v in values:
        k = key(v)
        if k in seen:
            raise PlatformError(f"{what} {'/'.join(k) if isinstance(k, tuple) else k} appears twice", file=file, field="items")
        seen.add(k)


def load_snapshot(path: str | Path) -> Snapshot:
    file = str(path)
    try:
        with open(path, "rb") as f:
            document = json.load(f)
    except FileNotFoundError:
        raise PlatformError("snapshot file not found", file=file) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else "encoding"
        raise PlatformError(f"not valid JSON ({where})", file=file) from None
    except RecursionError:
        raise PlatformError(TOO_DEEP, file=file) from None
    try:
        return parse_snapshot(document, file)
    except RecursionError:
        raise PlatformError(TOO_DEEP, file=file) from None



def save_snapshot(snapshot_doc: Mapping[str, Any], path: str | Path) -> None:
    tmp = Path(f"{path}.tmp")
    with open(tmp, "w") as f:
        json.dump(snapshot_doc, f, indent=4)
        f.write("\n")
    tmp.replace(path)
