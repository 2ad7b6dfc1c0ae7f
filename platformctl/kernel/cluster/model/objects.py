"""The typed values of a node, a pod and a PodDisruptionBudget, each with ``to_kube()`` for its API form."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from platformctl.kernel.cluster.constraints import NO_CONSTRAINTS, InterPodConstraints
from platformctl.kernel.cluster.model.values import (
    ANNOTATION_MIRROR,
    EMPTY,
    LABEL_INSTANCE_TYPE,
    LABEL_NODEGROUP,
    LABEL_ZONE,
    Resources,
    format_time,
    image_of,
)
from platformctl.kernel.cluster.selectors import (
    IntOrPercent,
    LabelSelector,
    NodeSelectorTerm,
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
    kubelet_version: str = ""  # the kubelet's Kubernetes version ("": the control plane's, as when it registered)

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
        return image_of(self.labels)

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
    exit_code: int | None = None  # its container's, once it ended (a kubelet's word; None: it ran as the simulation says)
    finished: float | None = None  # when its container ended (``state.terminated.finishedAt``)
    restarts: int = 0  # how often the kubelet restarted its container (restartPolicy Always: a Deployment's pod)

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
            unschedulable_since=self.unschedulable_since if node_name is None else None, exit_code=self.exit_code,
            finished=self.finished, restarts=self.restarts,
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
            code = self.exit_code if self.exit_code is not None else 0 if self.phase == "Succeeded" else 1
            state: dict[str, Any] = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                                    **({"startedAt": format_time(self.started)} if self.started else {}),
                                                    **({"finishedAt": format_time(self.finished)} if self.finished else {})}}
        elif self.phase == "Running" and self.started is not None and not self.waiting:
            state = {"running": {"startedAt": format_time(self.started)}}
        else:
            state = {"waiting": {"reason": self.waiting or "ContainerCreating"}}
        return {"name": container.name, "image": container.image, "imageID": "", "ready": self.ready, "restartCount": self.restarts,
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


