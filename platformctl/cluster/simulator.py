"""A simulated Kubernetes cluster on a virtual clock.

It implements the ``Cluster`` interface and models what node rotation depends on:

- nodes with EKS labels, allocatable CPU/memory/GPUs/pods, the Ready condition, cordon, a boot time
  until Ready, and deletion (the pods bound to a deleted node are lost, as pod GC deletes them);
- pods owned by ReplicaSets, StatefulSets, DaemonSets and Jobs (or by nothing), with requests,
  priority, grace periods, phases and readiness after a start time; the controllers recreate what
  they own (a ReplicaSet or Job at once when a pod starts terminating, a StatefulSet with the same
  name once the old pod is gone, a DaemonSet on every eligible node) and a scheduler binds pending
  pods, highest priority first, to Ready, schedulable nodes that fit them and whose taints they
  tolerate, spreading a class of pods round-robin over its nodes;
- PodDisruptionBudgets whose status is what the disruption controller computes (expected pods from
  the owning controllers' scale, percentages rounded up, the fail-safe for pods whose controller has
  no scale), and an eviction subresource that answers exactly as the API server's does;
- node pools that behave like auto scaling groups (for pure simulations; the local region backs
  pools with moto's auto scaling groups instead);
- an event log of everything that happened, for invariant checks afterwards.

Evictions here delete the pod in the same step as the budget check, so the window that the real
``status.disruptedPods`` map covers never opens and is not modelled.

Behaviour knobs of a pod live in annotations so that snapshots keep them:
``sim.platformctl.io/start-seconds`` (scheduled to Ready, default 10) and
``sim.platformctl.io/run-seconds`` (a Job pod's run time, default 900).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from platformctl.clock import VirtualClock
from platformctl.cluster.controllers import daemonset, job, replicaset, statefulset
from platformctl.cluster.model import (
    ANNOTATION_RUN_SECONDS,
    ANNOTATION_START_SECONDS,
    EVICT_FREELY,
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_NODE_TYPE,
    LABEL_NODEGROUP,
    LABEL_NODEGROUP_IMAGE,
    LABEL_ZONE,
    REFUSE_NO_ROOM,
    REFUSE_NOT_PROCESSED,
    REFUSE_TWO_BUDGETS,
    EvictionResult,
    Node,
    NodeCondition,
    OwnerReference,
    PDBStatus,
    Pod,
    PodDisruptionBudget,
    Resources,
    Snapshot,
    Taint,
    eviction_decision,
    snapshot_document,
)
from platformctl.cluster.scheduling import (
    InterPodIndex,
    affinity_admits,
    prefers_not,
    resource_reasons,
    static_reason,
    unschedulable_message,
    untolerated,
)
from platformctl.cluster.selectors import LabelSelector, parse_selector_string
from platformctl.cluster.sim_watch import ChangeLog, SimulatedInformer
from platformctl.errors import NotFoundError, PlatformError
from platformctl.instance_types import INSTANCE_TYPES

DEFAULT_START_SECONDS = 10.0
DEFAULT_RUN_SECONDS = 900.0
# Kinds whose scale the disruption controller can read (Deployments are reached through their
# ReplicaSets). A budget covering pods of any other controller fails safe with no disruptions.
SCALABLE_KINDS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})
CONTROLLER_API = {"ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Job": "batch/v1"}

MSG_TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."
MSG_TWO_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
SUCCESS = EvictionResult(201)


class Event(NamedTuple):
    time: float
    kind: str
    namespace: str
    name: str
    detail: Any = None


# Event kinds. Pod events carry the pod's uid in ``detail`` unless noted.
NODE_ADDED = "NodeAdded"
NODE_READY = "NodeReady"
NODE_CORDONED = "NodeCordoned"
NODE_UNCORDONED = "NodeUncordoned"
NODE_DELETED = "NodeDeleted"
POD_CREATED = "PodCreated"  # detail: (uid, budget keys covering the pod, healthy)
PDB_CREATED = "PDBCreated"  # detail: (budget key, ((uid, healthy) of the pods it covers, ...))
POD_SCHEDULED = "PodScheduled"  # detail: (uid, node)
POD_READY = "PodReady"
POD_SUCCEEDED = "PodSucceeded"
POD_EVICTED = "PodEvicted"  # detail: (uid, was_ready, budget key or None, desired healthy)
POD_TERMINATING = "PodTerminating"  # deleted without eviction (by a client or a controller)
POD_DELETE_REQUESTED = "PodDeleteRequested"  # a client deleted it directly, not through the eviction API
POD_DELETED = "PodDeleted"
POD_LOST = "PodLost"  # its node went away; detail: (uid, owned by a DaemonSet)
EVICTION_REFUSED = "EvictionRefused"  # detail: (code, message)
POD_UNSCHEDULABLE = "PodUnschedulable"  # the scheduler found no node for it (once per time it is pending)
NODE_NOT_READY = "NodeNotReady"  # detail: (status, reason): the node controller's or the kubelet's verdict
NODE_CONDITION = "NodeCondition"  # detail: (type, status, reason): a kubelet or node-problem-detector condition changed
POD_NOT_READY = "PodNotReady"  # the node controller marked a running pod not Ready (its node is not Ready)
POD_CREATE_FAILED = "PodCreateFailed"  # detail: (uid, reason): the kubelet could not create its containers
POD_TAINT_EVICTED = "PodTaintEvicted"  # the taint manager deleted it: its node's NoExecute taint outlived its toleration
# A workload controller said something of a workload object: detail (apiVersion, kind, uid, reason, message, component)
WORKLOAD_EVENT = "WorkloadEvent"

# How the control plane treats a node whose kubelet stops: kube-controller-manager's
# --node-monitor-grace-period (50 s since 1.29), then the NoExecute taint that evicts pods after the
# DefaultTolerationSeconds admission plugin's 300 s (DaemonSet pods tolerate it forever).
NODE_MONITOR_GRACE_SECONDS = 50.0  # 40 s before Kubernetes 1.29 (kubernetes/kubernetes#121793)
DEFAULT_TOLERATION_SECONDS = 300.0
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
# Conditions that TaintNodesByCondition turns into NoSchedule taints.
CONDITION_TAINTS = {"MemoryPressure": "node.kubernetes.io/memory-pressure", "DiskPressure": "node.kubernetes.io/disk-pressure",
                    "PIDPressure": "node.kubernetes.io/pid-pressure", "NetworkUnavailable": "node.kubernetes.io/network-unavailable"}


@dataclass
class NodePoolSpec:
    """A node pool of a pure simulation, kept at ``desired`` nodes like an auto scaling group."""

    name: str
    zone: str
    instance_type: str
    image: str
    desired: int
    boot_seconds: float = 180.0
    node_type: str = "general"
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    region: str = "us-east-1"
    max_size: int | None = None  # None: no ceiling


def build_node(
    *,
    name: str,
    zone: str,
    region: str,
    instance_type: str,
    pool: str,
    image: str,
    instance_id: str,
    node_type: str = "general",
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    created: float = 0.0,
    ready: bool = True,
) -> Node:
    """A node as EKS registers an instance of a node group."""
    itype = INSTANCE_TYPES.get(instance_type)
    if itype is None:
        raise PlatformError(f"unknown instance type {instance_type!r}", field="instanceType")
    all_labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        LABEL_HOSTNAME: name,
        LABEL_INSTANCE_TYPE: instance_type,
        LABEL_ZONE: zone,
        "topology.kubernetes.io/region": region,
        LABEL_NODEGROUP: pool,
        LABEL_NODEGROUP_IMAGE: image,
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        LABEL_NODE_TYPE: node_type,
        **(labels or {}),
    }
    return Node(
        name=name,
        uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{instance_id}/{name}")),
        labels=all_labels,
        provider_id=f"aws:///{zone}/{instance_id}",
        allocatable=Resources(itype.allocatable_cpu_millis, itype.allocatable_memory_bytes, itype.gpus),
        max_pods=itype.max_pods,
        ready=ready,
        taints=tuple(taints),
        created=created,
    )


class _NodeState:
    __slots__ = ("node", "alive", "cpu", "mem", "gpu", "npods", "pods", "waiting", "pool", "kubelet_down", "stuck", "epoch")

    def __init__(self, node: Node, pool: str | None) -> None:
        self.node = node
        self.alive = True
        alloc = node.allocatable
        self.cpu = alloc.cpu_millis
        self.mem = alloc.memory_bytes
        self.gpu = alloc.gpus
        self.npods = node.max_pods
        self.pods: set[tuple[str, str]] = set()
        self.waiting: list[tuple[str, str]] = []  # bound pods waiting for the node to be Ready
        self.pool = pool  # the simulated pool managing this node, if any
        self.kubelet_down = False  # the kubelet stopped posting status: pods on the node cannot finish terminating
        self.stuck: list[tuple[str, str]] = []  # pods deleted while the kubelet was down, still Terminating
        self.epoch = 0  # moves at every fault or recovery, so that timers of an older one do nothing

    def charge(self, r: Resources, sign: int) -> None:
        self.cpu -= sign * r.cpu_millis
        self.mem -= sign * r.memory_bytes
        self.gpu -= sign * r.gpus
        self.npods -= sign

    def fits(self, r: Resources) -> bool:
        return self.npods > 0 and self.cpu >= r.cpu_millis and self.mem >= r.memory_bytes and self.gpu >= r.gpus


class _Controller:
    __slots__ = (
        "kind", "namespace", "name", "uid", "template", "replicas", "pods", "active",
        "completions", "succeeded", "ttl_seconds", "start_seconds", "run_seconds", "sched_key", "done", "done_at", "created",
    )

    def __init__(self, kind: str, namespace: str, name: str, uid: str, template: Pod, replicas: int) -> None:
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.template = template
        self.replicas = replicas  # parallelism, for a Job
        self.pods: set[tuple[str, str]] = set()
        self.active = 0  # owned pods neither terminating nor finished
        self.completions = replicas
        self.succeeded = 0
        self.ttl_seconds: float | None = None
        self.start_seconds = _annotation_seconds(template, ANNOTATION_START_SECONDS, DEFAULT_START_SECONDS)
        self.run_seconds = _annotation_seconds(template, ANNOTATION_RUN_SECONDS, DEFAULT_RUN_SECONDS)
        self.sched_key = _sched_key(template)
        self.done = False
        self.done_at: float | None = None  # when a Job completed
        self.created = 0.0


class _Budget:
    __slots__ = ("pdb", "members", "healthy", "ctrl_refs", "unsupported", "unsupported_pod", "expected", "refusals")

    def __init__(self, pdb: PodDisruptionBudget) -> None:
        self.pdb = pdb
        self.expected: int | None = None  # sum of the owning controllers' scale, while ctrl_refs holds
        self.refusals: dict[tuple[int, int], EvictionResult] = {}
        self.members: set[tuple[str, str]] = set()
        self.healthy = 0
        self.ctrl_refs: dict[str, int] = {}
        self.unsupported = 0
        self.unsupported_pod = ""

    def add(self, pod: Pod) -> None:
        self.members.add(pod.key)
        if pod.ready and pod.deletion_time is None:
            self.healthy += 1
        owner = pod.owner
        if owner is None:
            return  # unmanaged pods do not count towards the expected scale
        if owner.kind in SCALABLE_KINDS:
            refs = self.ctrl_refs.get(owner.uid, 0)
            if not refs:
                self.expected = None
            self.ctrl_refs[owner.uid] = refs + 1
        else:
            self.unsupported += 1
            self.unsupported_pod = pod.name

    def remove(self, pod: Pod) -> None:
        self.members.discard(pod.key)
        if pod.ready and pod.deletion_time is None:
            self.healthy -= 1
        owner = pod.owner
        if owner is None:
            return
        if owner.kind in SCALABLE_KINDS:
            left = self.ctrl_refs[owner.uid] - 1
            if left:
                self.ctrl_refs[owner.uid] = left
            else:
                del self.ctrl_refs[owner.uid]
                self.expected = None
        else:
            self.unsupported -= 1


class _SchedClass:
    """Pods with the same placement constraints share the list of nodes that could take them."""

    __slots__ = ("predicate", "nodes", "cursor", "dead")

    def __init__(self, predicate: Callable[[Node], bool]) -> None:
        self.predicate = predicate
        self.nodes: list[_NodeState] = []
        self.cursor = 0
        self.dead = 0


def _annotation_seconds(pod: Pod, key: str, default: float) -> float:
    raw = pod.annotations.get(key)
    if raw is None:
        return default
    try:
        return max(float(raw), 0.0)
    except ValueError:
        return default


def _sched_key(pod: Pod) -> tuple[Any, ...]:
    return (tuple(sorted(pod.node_selector.items())), pod.tolerations, pod.required_node_terms)


def _predicate(pod: Pod) -> Callable[[Node], bool]:
    """The static filters (node affinity and selector, taints) of ``pod``, as one test of a node."""

    def eligible(node: Node) -> bool:
        return affinity_admits(pod, node.labels) and untolerated(pod, node.taints) is None

    return eligible


def _healthy(pod: Pod) -> bool:
    return pod.ready and pod.deletion_time is None


class SimulatedCluster:
    """An in-process Kubernetes cluster; see the module docstring for what it models."""

    def __init__(self, name: str = "sim", clock: VirtualClock | None = None, seed: int = 0, region: str = "us-east-1") -> None:
        self.name = name
        self.region = region
        self._clock = clock or VirtualClock()
        self._rng = random.Random(seed)
        self._nodes: dict[str, _NodeState] = {}
        self._pods: dict[tuple[str, str], Pod] = {}
        self._pods_by_ns: dict[str, set[tuple[str, str]]] = {}
        self._pod_budgets: dict[tuple[str, str], tuple[_Budget, ...]] = {}
        self._budgets: dict[tuple[str, str], _Budget] = {}
        self._budgets_by_ns: dict[str, list[_Budget]] = {}
        self._controllers: dict[str, _Controller] = {}
        self._pools: dict[str, NodePoolSpec] = {}
        self._pending: dict[tuple[str, str], None] = {}
        self._classes: dict[tuple[Any, ...], _SchedClass] = {}
        self._schedule_timer: Any = None
        self._selector_cache: dict[str, LabelSelector] = {}
        self._rv = 0
        self._launched = 0
        self._pool_counts: dict[str, int] = {}
        self._by_instance: dict[str, str] = {}  # instance id (from providerID) -> node name
        # Images whose nodes never turn Ready (a kubelet that cannot start): a bad image, as a test makes one.
        self.broken_images: set[str] = set()
        # Images whose nodes run pods late (seconds) or never (None): `local fault slow-start|bad-image`.
        self.image_faults: dict[str, float | None] = {}
        # The share of creates the simulated API server answers 503 (`local fault api-errors`).
        self.api_error_rate = 0.0
        self._namespaces: dict[str, dict[str, str]] = {}
        self._unschedulable: set[tuple[str, str]] = set()  # pending pods the scheduler already said it could not place
        self._inter = self._new_inter_index()  # what pod (anti-)affinity and topology spread need to know
        self._changes: ChangeLog | None = None  # kept once someone watches
        self.events: list[Event] = []
        self._api_objects: Any = None
        self.job_done_hooks: list[Callable[[str], None]] = []  # called with a Job controller's uid when it completes

    # ------------------------------------------------------------------ basics

    @property
    def api_objects(self) -> Any:
        """The workload objects (Deployments, Jobs, CronJobs …) as the API holds them, with their controllers:
        ``platformctl.cluster.workloads.Workloads``, made on first use."""
        if self._api_objects is None:
            from platformctl.cluster.workloads import Workloads

            self._api_objects = Workloads(self)
        return self._api_objects

    @property
    def clock(self) -> VirtualClock:
        return self._clock

    def now(self) -> float:
        return self._clock.now()

    def advance(self, seconds: float) -> None:
        self._clock.sleep(seconds)

    def workload_event(self, api_version: str, kind: str, namespace: str, name: str, uid: str, reason: str, message: str,
                       component: str) -> None:
        """What a workload controller reports about its object (``ScalingReplicaSet``, ``SuccessfulCreate`` …)."""
        self._record(WORKLOAD_EVENT, namespace, name, (api_version, kind, uid, reason, message, component))

    def _record(self, kind: str, namespace: str, name: str, detail: Any = None) -> None:
        self.events.append(Event(self._clock.now(), kind, namespace, name, detail))

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    @property
    def resource_version(self) -> int:
        """The cluster's newest resource version: it moves whenever any object changes."""
        return self._rv

    def next_resource_version(self) -> int:
        """A fresh resource version, for an API layer that records a change the simulator does not hold (a deletion)."""
        return self._next_rv()

    def _uid(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def change_log(self) -> ChangeLog:
        """Every change of a node or pod from now on, for watchers (``platformctl.cluster.sim_watch``)."""
        if self._changes is None:
            self._changes = ChangeLog(self._rv)
        return self._changes

    def _note(self, kind: str, type_: str, obj: Any) -> None:
        if self._changes is not None:
            self._rv += 1  # each change its own version, as the API server's watch cache numbers them
            self._changes.append(kind, type_, obj, self._rv)

    def informer(self, kind: str) -> SimulatedInformer:
        """A cache of this cluster's ``nodes`` or ``pods`` kept by watching it (see ``Cluster.informer``)."""
        return SimulatedInformer(self, kind)

    def _new_inter_index(self) -> InterPodIndex:
        return InterPodIndex(lambda: ((s.node, [self._pods[k] for k in s.pods if k in self._pods])
                                      for s in self._nodes.values() if s.alive))

    def _suffix(self, n: int = 5) -> str:
        return "".join(self._rng.choices("bcdfghjklmnpqrstvwxz2456789", k=n))

    # ------------------------------------------------------------------ nodes

    def add_node(self, node: Node, ready_after: float | None = None, pool: str | None = None) -> Node:
        """Register a node. With ``ready_after`` it starts NotReady and turns Ready that much later."""
        if node.name in self._nodes:
            raise PlatformError(f"node {node.name} already exists", field="metadata.name")
        node = replace(node, ready=ready_after is None and node.ready, resource_version=self._next_rv(),
                       created=node.created or self.now())
        state = _NodeState(node, pool)
        self._nodes[node.name] = state
        if node.instance_id:
            self._by_instance[node.instance_id] = node.name
        if pool is not None:
            self._pool_counts[pool] = self._pool_counts.get(pool, 0) + 1
        for cls in self._classes.values():
            if cls.predicate(node):
                cls.nodes.append(state)
        self._inter.node_added(node)
        self._note("nodes", "ADDED", node)
        self._record(NODE_ADDED, "", node.name, node.labels.get(LABEL_NODEGROUP_IMAGE))
        if ready_after is not None:
            self._clock.call_later(ready_after, self._node_ready, state)
        daemonset.node_added(self, node)
        if node.ready:
            self._schedule_soon()
        return node

    def _node_ready(self, state: _NodeState) -> None:
        if not state.alive or state.node.ready or state.node.image in self.broken_images:
            return
        if state.kubelet_down:  # it booted into a kubelet fault: Ready once the fault is over
            self._clock.call_later(NODE_MONITOR_GRACE_SECONDS, self._node_ready, state)
            return
        ready = NodeCondition("Ready", "True", "KubeletReady", "kubelet is posting ready status", self.now())
        state.node = replace(state.node.with_condition(ready), resource_version=self._next_rv())
        self._note("nodes", "MODIFIED", state.node)
        self._record(NODE_READY, "", state.node.name)
        waiting, state.waiting = state.waiting, []
        for key in waiting:
            pod = self._pods.get(key)
            if pod is not None and pod.node_name == state.node.name:
                self._start_pod_timer(pod)
        self._schedule_soon()

    def get_node(self, name: str) -> Node:
        state = self._nodes.get(name)
        if state is None:
            raise NotFoundError(f'nodes "{name}" not found', field="node")
        return state.node

    def list_nodes(self, label_selector: str | None = None) -> list[Node]:
        nodes = [s.node for s in self._nodes.values()]
        if label_selector:
            selector = self._selector(label_selector)
            nodes = [n for n in nodes if selector.matches(n.labels)]
        return nodes

    def cordon(self, name: str, unschedulable: bool = True) -> Node:
        return self.update_node(name, unschedulable=unschedulable)

    def taint(self, name: str, taint: Taint) -> Node:
        kept = tuple(t for t in self.get_node(name).taints if (t.key, t.effect) != (taint.key, taint.effect))
        return self.update_node(name, taints=(*kept, taint))

    def untaint(self, name: str, key: str) -> Node:
        return self.update_node(name, taints=tuple(t for t in self.get_node(name).taints if t.key != key))

    def update_node(self, name: str, *, unschedulable: bool | None = None, labels: Mapping[str, str] | None = None,
                    taints: tuple[Taint, ...] | None = None, annotations: Mapping[str, str] | None = None) -> Node:
        """Change what a client may change on a node: ``spec.unschedulable``, labels, annotations, taints."""
        state = self._nodes.get(name)
        if state is None:
            raise NotFoundError(f'nodes "{name}" not found', field="node")
        old = state.node
        new = replace(
            old,
            unschedulable=old.unschedulable if unschedulable is None else unschedulable,
            labels=old.labels if labels is None else dict(labels),
            taints=old.taints if taints is None else taints,
            annotations=old.annotations if annotations is None else dict(annotations),
        )
        if new == old:
            return old
        state.node = replace(new, resource_version=self._next_rv())
        self._note("nodes", "MODIFIED", state.node)
        if new.unschedulable != old.unschedulable:
            self._record(NODE_CORDONED if new.unschedulable else NODE_UNCORDONED, "", name)
        if new.labels != old.labels or new.taints != old.taints:
            # Which scheduling classes the node serves may have changed: they are rebuilt on demand.
            self._classes.clear()
            self._inter = self._new_inter_index()
        self._schedule_soon()
        return state.node

    def delete_node(self, name: str) -> None:
        """Delete the node object; pods still bound to it are lost (pod GC force-deletes them)."""
        state = self._nodes.pop(name, None)
        if state is None:
            raise NotFoundError(f'nodes "{name}" not found', field="node")
        state.alive = False
        self._rv += 1
        if state.node.instance_id:
            self._by_instance.pop(state.node.instance_id, None)
        for cls in self._classes.values():
            if cls.predicate(state.node):
                cls.dead += 1
        self._inter.node_removed(state.node)
        for key in state.pods:
            if key in self._pods:
                self._inter.pod_bound(self._pods[key], state.node, -1)
        if state.pool is not None:
            self._pool_counts[state.pool] -= 1
        self._note("nodes", "DELETED", state.node)
        self._record(NODE_DELETED, "", name)
        for key in list(state.pods):
            pod = self._pods.get(key)
            if pod is not None:
                if pod.deletion_time is None and not pod.is_finished:
                    self._record(POD_LOST, pod.namespace, pod.name, (pod.uid, pod.is_daemonset))
                self._remove_pod(pod, node_gone=True)
        if state.pool is not None:
            self._replenish(state.pool)

    # ------------------------------------------------------------------ node faults, as a real node shows them

    def _state(self, name: str) -> _NodeState:
        state = self._nodes.get(name)
        if state is None:
            raise NotFoundError(f'nodes "{name}" not found', field="node")
        return state

    def stop_kubelet(self, name: str, status: str = "Unknown") -> None:
        """The node's kubelet fails. ``Unknown``: it stops posting status (a hung instance, a lost network);
        the node controller marks Ready Unknown after its grace period. ``False``: it keeps posting, NotReady
        (a dead container runtime). Either way the node is tainted, its pods are marked not Ready, and after
        their 300 s toleration the taint manager deletes them (they stay Terminating while no kubelet confirms)."""
        if status not in ("Unknown", "False"):
            raise PlatformError(f"a kubelet fault is Unknown or False, not {status!r}", field="status")
        state = self._state(name)
        state.epoch += 1
        if status == "Unknown":
            state.kubelet_down = True
            self._clock.call_later(NODE_MONITOR_GRACE_SECONDS, self._lost_contact, state, state.epoch, self.now())
        else:
            self._not_ready(state, NodeCondition("Ready", "False", "KubeletNotReady",
                                                 "container runtime network not ready: NetworkReady=false "
                                                 "reason:NetworkPluginNotReady message:container runtime is down", self.now()),
                            TAINT_NOT_READY)

    def _lost_contact(self, state: _NodeState, epoch: int, last_heartbeat: float) -> None:
        if not state.alive or state.epoch != epoch:
            return
        self._not_ready(state, NodeCondition("Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.",
                                             self.now(), last_heartbeat), TAINT_UNREACHABLE)

    def _not_ready(self, state: _NodeState, ready: NodeCondition, taint_key: str) -> None:
        node = state.node.with_condition(ready)
        others = tuple(t for t in node.taints if t.key not in (TAINT_UNREACHABLE, TAINT_NOT_READY))
        taints = (*others, Taint(taint_key, "", "NoSchedule"), Taint(taint_key, "", "NoExecute"))
        state.node = replace(node, taints=taints, resource_version=self._next_rv())
        self._note("nodes", "MODIFIED", state.node)
        self._classes.clear()
        self._record(NODE_NOT_READY, "", state.node.name, (ready.status, ready.reason))
        for key in list(state.pods):  # the node lifecycle controller's MarkPodsNotReady
            pod = self._pods.get(key)
            if pod is not None and pod.ready and not pod.is_finished:
                self._set_pod(pod, node_name=pod.node_name, phase=pod.phase, ready=False, deletion_time=pod.deletion_time,
                              started=pod.started, evicted=pod.evicted)
                self._record(POD_NOT_READY, pod.namespace, pod.name, pod.uid)
        self._clock.call_later(DEFAULT_TOLERATION_SECONDS, self._taint_evict, state, state.epoch, Taint(taint_key, "", "NoExecute"))

    def _taint_evict(self, state: _NodeState, epoch: int, taint: Taint) -> None:
        if not state.alive or state.epoch != epoch:
            return
        for key in list(state.pods):
            pod = self._pods.get(key)
            if pod is None or pod.is_daemonset or pod.is_mirror or pod.is_finished or pod.terminating:
                continue
            if any(t.tolerates(taint) for t in pod.tolerations):
                continue  # a toleration without tolerationSeconds: it stays
            self._record(POD_TAINT_EVICTED, pod.namespace, pod.name, (pod.uid, taint.key))
            self._rv += 1
            pod = self._pods[key] = replace(pod, disruption="DeletionByTaintManager", resource_version=self._rv)
            self._note("pods", "MODIFIED", pod)
            self._begin_termination(pod, evicted=False)

    def set_node_condition(self, name: str, type_: str, status: str = "True", reason: str = "", message: str = "") -> Node:
        """A condition the kubelet (``MemoryPressure``, ``DiskPressure``, ``PIDPressure``), the CNI
        (``NetworkUnavailable``) or a node-problem-detector reports. The kubelet's own are tainted NoSchedule
        while True (TaintNodesByCondition); Ready goes through ``stop_kubelet``."""
        if type_ == "Ready":
            raise PlatformError("Ready is the kubelet's own: use a kubelet fault", field="type")
        if status not in ("True", "False", "Unknown"):
            raise PlatformError(f"a condition's status is True, False or Unknown, not {status!r}", field="status")
        state = self._state(name)
        old = state.node.condition(type_)
        since = old.since if old is not None and old.status == status else self.now()
        node = state.node.with_condition(NodeCondition(type_, status, reason or f"{type_}{'Detected' if status == 'True' else 'Resolved'}",
                                                       message, since))
        key = CONDITION_TAINTS.get(type_)
        if key is not None:
            kept = tuple(t for t in node.taints if t.key != key)
            node = replace(node, taints=(*kept, Taint(key, "", "NoSchedule")) if status == "True" else kept)
            self._classes.clear()
        state.node = replace(node, resource_version=self._next_rv())
        self._note("nodes", "MODIFIED", state.node)
        had = node.condition(type_)
        self._record(NODE_CONDITION, "", name, (type_, status, had.reason if had is not None else reason))
        self._schedule_soon()
        return state.node

    def restore_node(self, name: str) -> Node:
        """Every fault of the node is over: the kubelet posts Ready again, its conditions are healthy, the
        control plane's taints go, its pods are Ready again, and pods deleted meanwhile finish terminating."""
        state = self._state(name)
        state.epoch += 1
        state.kubelet_down = False
        node = state.node
        for c in node.conditions:
            if c.type != "Ready" and (c.status != "False" or c.type in CONDITION_TAINTS):
                self.set_node_condition(name, c.type, "False", "")
        node = state.node
        drop = {TAINT_UNREACHABLE, TAINT_NOT_READY}
        node = replace(node, taints=tuple(t for t in node.taints if t.key not in drop))
        was_ready = node.ready
        # A node that never finished booting has no Ready condition of its own yet: its boot goes on.
        if not was_ready and any(c.type == "Ready" for c in node.conditions) and node.image not in self.broken_images:
            node = node.with_condition(NodeCondition("Ready", "True", "KubeletReady", "kubelet is posting ready status", self.now()))
        state.node = replace(node, resource_version=self._next_rv())
        self._note("nodes", "MODIFIED", state.node)
        self._classes.clear()
        if state.node.ready and not was_ready:
            self._record(NODE_READY, "", name)
            for key in list(state.pods):
                pod = self._pods.get(key)
                if pod is not None and pod.phase == "Running" and not pod.ready and not pod.terminating:
                    self._set_pod(pod, node_name=pod.node_name, phase=pod.phase, ready=True, deletion_time=None,
                                  started=pod.started, evicted=pod.evicted)
                    self._record(POD_READY, pod.namespace, pod.name, pod.uid)
            waiting, state.waiting = state.waiting, []
            for key in waiting:
                pod = self._pods.get(key)
                if pod is not None and pod.node_name == name:
                    self._start_pod_timer(pod)
        stuck, state.stuck = state.stuck, []
        for key in stuck:
            pod = self._pods.get(key)
            if pod is not None and pod.terminating:
                self._remove_pod(pod)
        self._schedule_soon()
        return state.node

    # ------------------------------------------------------------------ pools (pure simulation)

    def add_pool(self, spec: NodePoolSpec, ready: bool = True) -> list[str]:
        """Create a pool with ``spec.desired`` nodes, Ready at once or after the boot time."""
        if spec.name in self._pools:
            raise PlatformError(f"node pool {spec.name} already exists", field="nodePools")
        self._pools[spec.name] = spec
        return [self._launch(spec, boot=not ready).name for _ in range(spec.desired)]

    def pool(self, name: str) -> NodePoolSpec:
        try:
            return self._pools[name]
        except KeyError:
            raise NotFoundError(f"no node pool {name!r}", field="pool") from None

    def pool_names(self) -> list[str]:
        return list(self._pools)

    def pool_of(self, node_name: str) -> str | None:
        """The simulated pool that manages the node, if any."""
        state = self._nodes.get(node_name)
        return state.pool if state is not None else None

    def node_of_instance(self, instance_id: str) -> str | None:
        return self._by_instance.get(instance_id)

    def pool_nodes(self, name: str) -> list[Node]:
        return [s.node for s in self._nodes.values() if s.pool == name]

    def set_pool_image(self, name: str, image: str) -> None:
        """Point the pool's launch template at a new image: nodes launched from now on boot it."""
        self.pool(name).image = image

    def scale_pool(self, name: str, desired: int) -> None:
        spec = self.pool(name)
        spec.desired = desired
        nodes = sorted(self.pool_nodes(name), key=lambda n: (n.image == spec.image, n.created))
        for node in nodes[: max(len(nodes) - desired, 0)]:
            self.delete_node(node.name)
        self._replenish(name)

    def terminate_instance(self, node_name: str, decrement_desired: bool = False) -> None:
        """Like ``TerminateInstanceInAutoScalingGroup``: the node goes, the pool may replace it."""
        state = self._nodes.get(node_name)
        if state is None:
            raise NotFoundError(f'nodes "{node_name}" not found', field="node")
        if decrement_desired and state.pool is not None:
            self._pools[state.pool].desired -= 1
        self.delete_node(node_name)

    def _replenish(self, pool: str) -> None:
        spec = self._pools[pool]
        for _ in range(spec.desired - self._pool_counts.get(pool, 0)):
            self._launch(spec, boot=True)

    def _launch(self, spec: NodePoolSpec, boot: bool) -> Node:
        self._launched += 1
        n = self._launched
        name = f"ip-10-{(n >> 16) & 255}-{(n >> 8) & 255}-{n & 255}.{spec.region}.compute.internal"
        node = build_node(
            name=name, zone=spec.zone, region=spec.region, instance_type=spec.instance_type, pool=spec.name,
            image=spec.image, instance_id=f"i-{self._rng.getrandbits(68):017x}", node_type=spec.node_type,
            labels=spec.labels, taints=spec.taints, created=self.now(),
        )
        return self.add_node(node, ready_after=spec.boot_seconds if boot else None, pool=spec.name)

    # ------------------------------------------------------------------ pods and controllers

    def create_workload(
        self,
        kind: str,
        template: Pod,
        replicas: int,
        *,
        completions: int | None = None,
        ttl_seconds: float | None = None,
    ) -> str:
        """Create a ReplicaSet, StatefulSet, DaemonSet or Job whose pods look like ``template``.

        ``template`` carries the namespace, the name of the controller (as ``name``), labels,
        annotations, containers, requests and placement. Returns the controller's uid.
        """
        if kind not in CONTROLLER_API:
            raise PlatformError(f"unsupported workload kind {kind!r}", field="kind")
        uid = self._uid()
        ctrl = _Controller(kind, template.namespace, template.name, uid, template, replicas)
        ctrl.created = self.now()
        if kind == "Job":
            ctrl.completions = completions if completions is not None else replicas
            ctrl.ttl_seconds = ttl_seconds
        self._controllers[uid] = ctrl
        if kind == "DaemonSet":
            daemonset.start(self, ctrl)
        else:
            self._reconcile(ctrl)
        return uid

    def scale_workload(self, uid: str, replicas: int) -> None:
        """Set a ReplicaSet's or StatefulSet's replicas (a Job's parallelism): its controller creates or deletes
        pods to match."""
        ctrl = self._controllers.get(uid)
        if ctrl is None:
            raise NotFoundError(f"no workload with uid {uid}", field="metadata.uid")
        if ctrl.kind == "DaemonSet":
            raise PlatformError("a DaemonSet has no replicas to scale", field="spec.replicas")
        ctrl.replicas = replicas
        self._reconcile(ctrl)

    def create_pod(self, pod: Pod) -> Pod:
        """Create a pod as given (a bare pod, or one whose owner the simulator does not run)."""
        if pod.key in self._pods:
            raise PlatformError(f'pods "{pod.name}" already exists', field="metadata.name")
        return self._add_pod(replace(pod, created=pod.created or self.now()))

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None, controller: bool = False) -> Pod:
        """Delete a pod directly (no budget check), with its grace period or ``grace_seconds``; ``controller``:
        a controller deletes it (the namespace controller emptying a deleted namespace), not a client.

        Returns the pod as it is after the call: terminating, or already gone with a grace of 0.
        """
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise NotFoundError(f'pods "{name}" not found', field="pod")
        if pod.deletion_time is None and not pod.is_finished and not controller:
            self._record(POD_DELETE_REQUESTED, pod.namespace, pod.name, (pod.uid, pod.node_name))
        pod = self._begin_termination(pod, evicted=False)
        if grace_seconds == 0:
            self._remove_pod(pod)
        return pod

    # Namespaces, for the clients that make their own (canaries): the simulator keeps their labels only.
    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self._namespaces[name] = dict(labels or {})

    def list_namespaces(self, label_selector: str | None = None) -> list[str]:
        names = set(self._namespaces) | {ns for ns, keys in self._pods_by_ns.items() if keys}
        if not label_selector:
            return sorted(names)
        selector = self._selector(label_selector)
        return sorted(n for n in names if selector.matches(self._namespaces.get(n, {})))

    def delete_namespace(self, name: str) -> None:
        """As the namespace controller does: every workload, budget and pod of it is deleted (by a controller, not
        a client)."""
        self._namespaces.pop(name, None)
        if self._api_objects is not None:
            for plural, objects in self._api_objects.objects.items():
                for ns, wname in list(objects):
                    if ns == name and (ns, wname) in objects:
                        self._api_objects.delete(plural, ns, wname)
        for budget in list(self._budgets_by_ns.get(name, ())):
            self.delete_pdb(name, budget.pdb.name)
        for uid in [u for u, c in self._controllers.items() if c.namespace == name]:
            self._delete_controller(uid)  # the garbage collector: its controllers go with it
        for key in list(self._pods_by_ns.get(name, ())):
            pod = self._pods.get(key)
            if pod is not None:
                self.delete_pod(pod.namespace, pod.name, controller=True)

    # Workload objects (Deployments, Jobs, CronJobs, DaemonSets, budgets …) as a client writes them: the API's
    # JSON, the API's answers (platformctl.cluster.workloads), the same calls LiveCluster makes over HTTP.
    def create_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._object_api().create(obj)

    def get_object(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return self._object_api().get(kind, namespace, name)

    def replace_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._object_api().replace(obj)

    def patch_object(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._object_api().patch(kind, namespace, name, patch)

    def scale(self, kind: str, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        return self._object_api().scale(kind, namespace, name, replicas)

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        self._object_api().delete(kind, namespace, name)

    def _object_api(self) -> Any:
        from platformctl.cluster.workloads import ObjectApi

        return ObjectApi(self)

    def delete_workload(self, uid: str) -> None:
        """Delete a controller and, as the garbage collector does, every pod it owns."""
        if uid not in self._controllers:
            raise NotFoundError(f"no workload with uid {uid}", field="metadata.uid")
        self._delete_controller(uid)

    def workloads(self) -> list[tuple[str, str, str, str, Pod, int]]:
        """Every controller: (kind, namespace, name, uid, pod template, replicas)."""
        return [(c.kind, c.namespace, c.name, c.uid, c.template, c.replicas) for c in self._controllers.values()]

    def has_workload(self, uid: str) -> bool:
        return uid in self._controllers

    def workload_status(self, uid: str) -> dict[str, Any]:
        """What a controller would write into its status: its pods, the ready ones, the finished ones."""
        ctrl = self._controllers.get(uid)
        if ctrl is None:
            return {"replicas": 0, "ready": 0, "active": 0, "succeeded": 0, "complete": False, "completed_at": None}
        pods = [self._pods[k] for k in ctrl.pods if k in self._pods]
        live = [p for p in pods if p.deletion_time is None and not p.is_finished]
        return {
            "replicas": len(live),
            "ready": sum(p.ready for p in live),
            "active": ctrl.active,
            "succeeded": ctrl.succeeded,
            "complete": ctrl.done,
            "completed_at": ctrl.done_at,
        }

    def get_pod(self, namespace: str, name: str) -> Pod:
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise NotFoundError(f'pods "{name}" not found', field="pod")
        return pod

    def list_pods(
        self, namespace: str | None = None, label_selector: str | None = None, node_name: str | None = None
    ) -> list[Pod]:
        if node_name is not None:
            state = self._nodes.get(node_name)
            keys: Iterable[tuple[str, str]] = state.pods if state else ()
            pods = [self._pods[k] for k in keys if namespace is None or k[0] == namespace]
        elif namespace is not None:
            pods = [self._pods[k] for k in self._pods_by_ns.get(namespace, ())]
        else:
            pods = list(self._pods.values())
        if label_selector:
            selector = self._selector(label_selector)
            pods = [p for p in pods if selector.matches(p.labels)]
        return pods

    def _selector(self, text: str) -> LabelSelector:
        selector = self._selector_cache.get(text)
        if selector is None:
            selector = self._selector_cache[text] = parse_selector_string(text)
        return selector

    def _create_owned_pod(self, ctrl: _Controller, node_name: str | None = None, name: str | None = None) -> Pod:
        t = ctrl.template
        if name is None:
            name = f"{ctrl.name}-{self._suffix()}"
            while (ctrl.namespace, name) in self._pods:
                name = f"{ctrl.name}-{self._suffix()}"
        self._rv += 1
        owner = OwnerReference(CONTROLLER_API[ctrl.kind], ctrl.kind, ctrl.name, ctrl.uid)
        return self._add_pod(t.spawn(name, self._uid(), owner, node_name, self.now(), self._rv), ctrl)

    def _add_pod(self, pod: Pod, ctrl: _Controller | None = None, keep_version: bool = False) -> Pod:
        if ctrl is None and not keep_version:
            pod = replace(pod, resource_version=self._next_rv())
        if pod.node_name is not None and pod.scheduled is None:
            pod = replace(pod, scheduled=pod.created)  # created bound (a DaemonSet's, or a snapshot's)
        key = pod.key
        self._pods[key] = pod
        self._note("pods", "ADDED", pod)
        self._pods_by_ns.setdefault(pod.namespace, set()).add(key)
        budgets = tuple(b for b in self._budgets_by_ns.get(pod.namespace, ()) if b.pdb.selects(pod))
        if budgets:
            self._pod_budgets[key] = budgets
            for b in budgets:
                b.add(pod)
                self._note("pdbs", "MODIFIED", b)
        if ctrl is None and pod.owner is not None:
            ctrl = self._controllers.get(pod.owner.uid)
        if ctrl is not None:
            ctrl.pods.add(key)
            if pod.deletion_time is None and not pod.is_finished:
                ctrl.active += 1
        self._record(POD_CREATED, pod.namespace, pod.name, (pod.uid, tuple(b.pdb.key for b in budgets), _healthy(pod)))
        if pod.is_finished:
            if pod.node_name in self._nodes:
                self._nodes[pod.node_name].pods.add(key)
                self._inter.pod_bound(pod, self._nodes[pod.node_name].node, 1)
            return pod
        if pod.node_name is None:
            self._pending[key] = None
            self._schedule_soon()
            return pod
        state = self._nodes.get(pod.node_name)
        if state is None:
            # Bound to a node that does not exist: pod GC deletes it.
            self._record(POD_LOST, pod.namespace, pod.name, (pod.uid, pod.is_daemonset))
            self._remove_pod(pod, node_gone=True)
            return pod
        state.pods.add(key)
        state.charge(pod.requests, 1)
        self._inter.pod_bound(pod, state.node, 1)
        if pod.deletion_time is not None:
            self._clock.call_at(pod.deletion_time + pod.grace_seconds, self._finish_termination, key, pod.uid)
        elif not pod.ready:
            if state.node.ready:
                self._start_pod_timer(pod)
            else:
                state.waiting.append(key)
        elif ctrl is not None and ctrl.kind == "Job":
            self._clock.call_later(ctrl.run_seconds, self._pod_succeeded, key, pod.uid)
        return pod

    def _set_pod(
        self,
        old: Pod,
        *,
        node_name: str | None,
        phase: str,
        ready: bool,
        deletion_time: float | None,
        started: float | None,
        evicted: bool,
        scheduled: float | None = None,
    ) -> Pod:
        """Store a pod's new binding or status and keep the budgets' healthy counts in step."""
        self._rv += 1
        new = old.with_status(node_name, phase, ready, deletion_time, started, evicted, self._rv, scheduled)
        self._pods[new.key] = new
        self._note("pods", "MODIFIED", new)
        was, now = _healthy(old), _healthy(new)
        if was != now:
            delta = 1 if now else -1
            for b in self._pod_budgets.get(new.key, ()):
                b.healthy += delta
                self._note("pdbs", "MODIFIED", b)
        return new

    def _start_pod_timer(self, pod: Pod) -> None:
        ctrl = self._controllers.get(pod.owner.uid) if pod.owner else None
        delay = ctrl.start_seconds if ctrl else _annotation_seconds(pod, ANNOTATION_START_SECONDS, DEFAULT_START_SECONDS)
        if self.image_faults:
            state = self._nodes.get(pod.node_name or "")
            fault = self.image_faults.get(state.node.image or "", 0.0) if state is not None else 0.0
            if fault is None:  # the image's runtime cannot create containers: the kubelet retries, in vain
                self._rv += 1
                self._pods[pod.key] = replace(pod, waiting="CreateContainerError", resource_version=self._rv)
                self._note("pods", "MODIFIED", self._pods[pod.key])
                self._record(POD_CREATE_FAILED, pod.namespace, pod.name, (pod.uid, "CreateContainerError"))
                return
            delay += fault
        self._clock.call_later(delay, self._pod_started, pod.key, pod.uid)

    def set_image_fault(self, image: str, extra_start_seconds: float | None) -> None:
        """Containers on nodes booted from ``image`` start ``extra_start_seconds`` late, or never (``None``:
        ``CreateContainerError``). Pods already stuck on it retry when the fault is lifted."""
        self.image_faults[image] = extra_start_seconds

    def clear_image_faults(self) -> None:
        self.image_faults.clear()
        for pod in list(self._pods.values()):
            if pod.waiting and pod.node_name and pod.deletion_time is None:
                self._rv += 1
                pod = self._pods[pod.key] = replace(pod, waiting="", resource_version=self._rv)
                self._note("pods", "MODIFIED", pod)
                self._start_pod_timer(pod)

    def _pod_started(self, key: tuple[str, str], uid: str) -> None:
        pod = self._pods.get(key)
        if pod is None or pod.uid != uid or pod.deletion_time is not None or pod.is_finished:
            return
        pod = self._set_pod(pod, node_name=pod.node_name, phase="Running", ready=True, deletion_time=None,
                            started=pod.started or self.now(), evicted=pod.evicted)
        self._record(POD_READY, pod.namespace, pod.name, uid)
        ctrl = self._controllers.get(pod.owner.uid) if pod.owner else None
        if ctrl is not None and ctrl.kind == "Job":
            self._clock.call_later(ctrl.run_seconds, self._pod_succeeded, key, uid)

    def _pod_succeeded(self, key: tuple[str, str], uid: str) -> None:
        pod = self._pods.get(key)
        if pod is None or pod.uid != uid or pod.deletion_time is not None or pod.is_finished:
            return
        pod = self._set_pod(pod, node_name=pod.node_name, phase="Succeeded", ready=False, deletion_time=None,
                            started=pod.started, evicted=pod.evicted)
        self._record(POD_SUCCEEDED, pod.namespace, pod.name, uid)
        state = self._nodes.get(pod.node_name or "")
        if state is not None:
            state.charge(pod.requests, -1)
            self._schedule_soon()
        ctrl = self._controllers.get(pod.owner.uid) if pod.owner else None
        if ctrl is not None:
            ctrl.active -= 1
            ctrl.succeeded += 1
            self._reconcile(ctrl)

    def _begin_termination(self, pod: Pod, evicted: bool) -> Pod:
        if pod.deletion_time is not None:
            return pod
        unbound = pod.node_name is None or pod.is_finished
        new = self._set_pod(pod, node_name=pod.node_name, phase=pod.phase, ready=False, deletion_time=self.now(),
                            started=pod.started, evicted=pod.evicted or evicted)
        ctrl = self._controllers.get(pod.owner.uid) if pod.owner else None
        if ctrl is not None and not pod.is_finished:
            ctrl.active -= 1
        if not evicted:
            self._record(POD_TERMINATING, pod.namespace, pod.name, pod.uid)
        if unbound:
            self._remove_pod(new)
        else:
            self._clock.call_later(pod.grace_seconds, self._finish_termination, pod.key, pod.uid)
        if ctrl is not None and ctrl.kind in ("ReplicaSet", "Job"):
            self._reconcile(ctrl)
        return new

    def _finish_termination(self, key: tuple[str, str], uid: str) -> None:
        pod = self._pods.get(key)
        if pod is None or pod.uid != uid:
            return
        state = self._nodes.get(pod.node_name or "")
        if state is not None and state.kubelet_down:
            state.stuck.append(key)  # no kubelet to confirm the containers stopped: Terminating until it returns
            return
        self._remove_pod(pod)

    def _remove_pod(self, pod: Pod, node_gone: bool = False) -> None:
        key = pod.key
        if self._pods.get(key) is not pod:
            return
        del self._pods[key]
        self._rv += 1  # a deletion is a change: watchers and the API's change log must see it
        self._note("pods", "DELETED", pod)
        self._pods_by_ns[pod.namespace].discard(key)
        self._pending.pop(key, None)
        self._unschedulable.discard(key)
        for b in self._pod_budgets.pop(key, ()):
            b.remove(pod)
            self._note("pdbs", "MODIFIED", b)
        state = self._nodes.get(pod.node_name or "")
        if state is not None and key in state.pods:
            state.pods.discard(key)
            if not pod.is_finished:
                state.charge(pod.requests, -1)
            self._inter.pod_bound(pod, state.node, -1)
            self._schedule_soon()
        self._record(POD_DELETED, pod.namespace, pod.name, pod.uid)
        ctrl = self._controllers.get(pod.owner.uid) if pod.owner else None
        if ctrl is None:
            return
        ctrl.pods.discard(key)
        if pod.deletion_time is None and not pod.is_finished:
            ctrl.active -= 1  # lost without terminating first
        if ctrl.kind == "DaemonSet":
            daemonset.pod_gone(self, ctrl, state.node.name if state is not None else None,
                               not node_gone and state is not None and state.alive)
        elif ctrl.kind == "StatefulSet":
            self._reconcile(ctrl, recreate=pod.name)
        else:
            self._reconcile(ctrl)

    def _reconcile(self, ctrl: _Controller, recreate: str | None = None) -> None:
        """The owner's controller (``platformctl.cluster.controllers``) brings its pods in line with its spec."""
        if ctrl.done or ctrl.kind == "DaemonSet":
            return
        if ctrl.kind == "StatefulSet":
            statefulset.reconcile(self, ctrl, recreate)
        elif ctrl.kind == "Job":
            job.reconcile(self, ctrl)
        else:
            replicaset.reconcile(self, ctrl)

    def _delete_controller(self, uid: str) -> None:
        ctrl = self._controllers.pop(uid, None)
        if ctrl is None:
            return
        ctrl.done = True
        for key in list(ctrl.pods):
            pod = self._pods.get(key)
            if pod is not None:
                self._begin_termination(pod, evicted=False)

    # ------------------------------------------------------------------ scheduling

    def _schedule_soon(self) -> None:
        if self._schedule_timer is None and self._pending:
            self._schedule_timer = self._clock.call_later(0.0, self._schedule_pass)

    def _class_for(self, pod: Pod, key: tuple[Any, ...]) -> _SchedClass:
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = _SchedClass(_predicate(pod))
            cls.nodes = [s for s in self._nodes.values() if cls.predicate(s.node)]
        elif cls.dead > len(cls.nodes) // 2:
            cls.nodes = [s for s in cls.nodes if s.alive]
            cls.dead = 0
            cls.cursor = 0
        return cls

    def pending_pods(self) -> list[Pod]:
        return [self._pods[k] for k in self._pending]

    def _schedule_pass(self) -> None:
        self._schedule_timer = None
        if not self._pending:
            return
        pods = sorted((self._pods[k] for k in self._pending), key=lambda p: -p.priority)
        failed: dict[tuple[Any, ...], Resources] = {}
        said: dict[tuple[Any, ...], str] = {}  # what the scheduler said of a class's pods in this pass
        inter = self._inter
        for pod in pods:
            ctrl = self._controllers.get(pod.owner.uid) if pod.owner else None
            key = ctrl.sched_key if ctrl else _sched_key(pod)
            r = pod.requests
            constrained = inter.applies(pod)
            smallest_failure = failed.get(key)
            if not constrained and smallest_failure is not None and (
                r.cpu_millis >= smallest_failure.cpu_millis
                and r.memory_bytes >= smallest_failure.memory_bytes
                and r.gpus >= smallest_failure.gpus
            ):
                self._note_unschedulable(pod, said.get(key))
                continue  # a pod no larger already found no room in this pass
            cls = self._class_for(pod, key)
            nodes = cls.nodes
            n = len(nodes)
            start = cls.cursor
            target = fallback = None
            fallback_idx = 0
            for i in range(n):
                idx = (start + i) % n
                state = nodes[idx]
                node = state.node
                if state.alive and node.ready and not node.unschedulable and state.fits(r):
                    if constrained and inter.reason(pod, node) is not None:
                        continue
                    if node.taints and prefers_not(pod, node):
                        if fallback is None:
                            fallback, fallback_idx = state, idx
                        continue
                    target = state
                    cls.cursor = idx + 1
                    break
            if target is None and fallback is not None:
                # Only nodes whose PreferNoSchedule taints the pod does not tolerate have room: the
                # scheduler's TaintToleration score prefers, it does not forbid.
                target, cls.cursor = fallback, fallback_idx + 1
            if target is None:
                if not constrained:
                    failed[key] = r
                said[key] = self._note_unschedulable(pod, said.get(key) if not constrained else None)
                continue
            self._bind(pod, target)

    def _note_unschedulable(self, pod: Pod, message: str | None = None) -> str:
        """The scheduler could not place ``pod``: its PodScheduled condition says why (False, Unschedulable),
        as the scheduler writes it after each failed attempt. Returns what it said."""
        if pod.unschedulable:
            return pod.unschedulable  # said already, while it has been pending
        message = message or self.why_unschedulable(pod)
        if pod.key not in self._unschedulable:
            self._unschedulable.add(pod.key)
            self._record(POD_UNSCHEDULABLE, pod.namespace, pod.name, pod.uid)
        if pod.unschedulable != message:
            self._rv += 1
            self._pods[pod.key] = replace(pod, unschedulable=message, resource_version=self._rv,
                                          unschedulable_since=pod.unschedulable_since or self.now())
            self._note("pods", "MODIFIED", self._pods[pod.key])
        return message

    def why_unschedulable(self, pod: Pod) -> str:
        """What the scheduler says of a pod it cannot place, counted over the nodes as kube-scheduler counts them."""
        reasons: dict[str, int] = {}
        nodes = [s for s in self._nodes.values() if s.alive]
        for state in nodes:
            node = state.node
            static = static_reason(pod, node)
            if static is not None:
                why = [static]
            else:
                why = resource_reasons(Resources(state.cpu, state.mem, state.gpu), state.npods, pod.requests)
                if not why:
                    inter = self._inter.reason(pod, node)
                    why = [inter] if inter is not None else []
            for text in why:
                reasons[text] = reasons.get(text, 0) + 1
        # The simulator does not preempt: what kube-scheduler says when preemption finds no victim either.
        return unschedulable_message(reasons, len(nodes))

    def _bind(self, pod: Pod, state: _NodeState) -> None:
        del self._pending[pod.key]
        self._unschedulable.discard(pod.key)
        pod = self._set_pod(pod, node_name=state.node.name, phase=pod.phase, ready=pod.ready, deletion_time=None,
                            started=pod.started, evicted=pod.evicted, scheduled=self.now())
        state.pods.add(pod.key)
        state.charge(pod.requests, 1)
        self._inter.pod_bound(pod, state.node, 1)
        self._record(POD_SCHEDULED, pod.namespace, pod.name, (pod.uid, state.node.name))
        self._start_pod_timer(pod)

    # ------------------------------------------------------------------ budgets and eviction

    def create_pdb(self, pdb: PodDisruptionBudget, keep_version: bool = False) -> PodDisruptionBudget:
        if pdb.key in self._budgets:
            raise PlatformError(f'poddisruptionbudgets "{pdb.name}" already exists', field="metadata.name")
        if not keep_version:
            pdb = replace(pdb, created=pdb.created or self.now(), resource_version=self._next_rv())
        budget = _Budget(pdb)
        self._budgets[pdb.key] = budget
        self._note("pdbs", "ADDED", budget)
        self._budgets_by_ns.setdefault(pdb.namespace, []).append(budget)
        members = []
        for key in self._pods_by_ns.get(pdb.namespace, ()):
            pod = self._pods[key]
            if pdb.selects(pod):
                budget.add(pod)
                self._pod_budgets[key] = (*self._pod_budgets.get(key, ()), budget)
                members.append((pod.uid, _healthy(pod)))
        self._record(PDB_CREATED, pdb.namespace, pdb.name, (pdb.key, tuple(members)))
        return self._with_status(budget)

    def delete_pdb(self, namespace: str, name: str) -> PodDisruptionBudget:
        budget = self._budgets.pop((namespace, name), None)
        if budget is None:
            raise NotFoundError(f'poddisruptionbudgets "{name}" not found', field="pdb")
        self._note("pdbs", "DELETED", budget)
        self._budgets_by_ns[namespace].remove(budget)
        for key, budgets in list(self._pod_budgets.items()):
            if budget in budgets:
                rest = tuple(b for b in budgets if b is not budget)
                if rest:
                    self._pod_budgets[key] = rest
                else:
                    del self._pod_budgets[key]
        self._next_rv()
        return self._with_status(budget)

    def list_pdbs(self, namespace: str | None = None) -> list[PodDisruptionBudget]:
        return [self._with_status(b) for b in self._budgets.values() if namespace is None or b.pdb.namespace == namespace]

    def get_pdb(self, namespace: str, name: str) -> PodDisruptionBudget:
        budget = self._budgets.get((namespace, name))
        if budget is None:
            raise NotFoundError(f'poddisruptionbudgets "{name}" not found', field="pdb")
        return self._with_status(budget)

    def budget_object(self, budget: _Budget, change: str) -> PodDisruptionBudget:
        """A budget as a watch event carries it: with its status now (a deleted one as it was)."""
        return budget.pdb if change == "DELETED" else self._with_status(budget)

    def _with_status(self, budget: _Budget) -> PodDisruptionBudget:
        return replace(budget.pdb, status=self._status(budget))

    def _status(self, budget: _Budget) -> PDBStatus:
        """What the disruption controller would write into the budget's status now."""
        pdb = budget.pdb
        healthy = budget.healthy
        if pdb.max_unavailable is not None or (pdb.min_available is not None and pdb.min_available.percent):
            if budget.unsupported:
                # getExpectedScale found a pod whose controller has no scale: failSafe keeps the old
                # status and allows no disruption.
                old = pdb.status
                return replace(old, disruptions_allowed=0, sync_failed=f'found no controllers for pod "{budget.unsupported_pod}"')
            expected = budget.expected
            if expected is None:
                expected = 0
                for uid in budget.ctrl_refs:
                    ctrl = self._controllers.get(uid)
                    if ctrl is not None:
                        expected += ctrl.replicas
                budget.expected = expected
            if pdb.max_unavailable is not None:
                desired = max(expected - pdb.max_unavailable.scaled(expected, round_up=True), 0)
            else:
                assert pdb.min_available is not None
                desired = pdb.min_available.scaled(expected, round_up=True)
        elif pdb.min_available is not None:
            desired = pdb.min_available.value
            expected = len(budget.members)
        else:
            desired = expected = 0
        allowed = healthy - desired
        if expected <= 0 or allowed <= 0:
            allowed = 0
        return PDBStatus(
            current_healthy=healthy, desired_healthy=desired, expected_pods=expected,
            disruptions_allowed=allowed, observed_generation=pdb.generation,
        )

    def budgets_of(self, pod: Pod) -> list[PodDisruptionBudget]:
        return [self._with_status(b) for b in self._pod_budgets.get(pod.key, ())]

    def evict(self, namespace: str, name: str) -> EvictionResult:
        """The eviction subresource (``POST .../pods/<name>/eviction``), rule for rule."""
        pod = self._pods.get((namespace, name))
        if pod is None:
            return EvictionResult(404, f'pods "{name}" not found', "NotFound")
        budgets = self._pod_budgets.get(pod.key, ())
        budget = budgets[0] if len(budgets) == 1 else None
        status = self._status(budget) if budget is not None else None
        decision = eviction_decision(pod, [b.pdb for b in budgets], status)
        if decision == EVICT_FREELY:
            self._evicted(pod, None, 0)
            return SUCCESS
        if decision == REFUSE_TWO_BUDGETS:
            return self._refused(pod, EvictionResult(500, MSG_TWO_PDBS))
        assert budget is not None and status is not None
        pdb = budget.pdb
        if decision == REFUSE_NOT_PROCESSED:
            return self._refused(
                pod,
                EvictionResult(429, MSG_TOO_MANY, "TooManyRequests",
                               (("DisruptionBudget", f"The disruption budget {pdb.name} is still being processed by the server."),),
                               retry_after_seconds=10),
            )
        if decision == REFUSE_NO_ROOM:
            state = (status.desired_healthy, status.current_healthy)
            result = budget.refusals.get(state)
            if result is None:
                result = budget.refusals[state] = EvictionResult(
                    429, MSG_TOO_MANY, "TooManyRequests",
                    (("DisruptionBudget", f"The disruption budget {pdb.name} needs {status.desired_healthy} "
                                          f"healthy pods and has {status.current_healthy} currently"),),
                )
            return self._refused(pod, result)
        self._evicted(pod, pdb.key, status.desired_healthy)
        return SUCCESS

    def _evicted(self, pod: Pod, budget: tuple[str, str] | None, desired: int) -> None:
        self._record(POD_EVICTED, pod.namespace, pod.name, (pod.uid, _healthy(pod), budget, desired))
        self._begin_termination(pod, evicted=True)

    def _refused(self, pod: Pod, result: EvictionResult) -> EvictionResult:
        self._record(EVICTION_REFUSED, pod.namespace, pod.name, (result.code, result.causes[0][1] if result.causes else result.message))
        return result

    # ------------------------------------------------------------------ whole-cluster views

    def snapshot(self) -> dict[str, Any]:
        nodes = sorted((s.node for s in self._nodes.values()), key=lambda n: n.name)
        pods = sorted(self._pods.values(), key=lambda p: p.key)
        pdbs = sorted(self.list_pdbs(), key=lambda b: b.key)
        return snapshot_document(nodes, pods, pdbs)

    def settled(self) -> bool:
        """No pod waits for a node and every node and every running pod is Ready."""
        if self._pending:
            return False
        if any(not s.node.ready for s in self._nodes.values()):
            return False
        return all(p.ready or p.is_finished or p.deletion_time is not None for p in self._pods.values())

    def run_until_settled(self, max_seconds: float = 3600.0, step: float = 5.0) -> bool:
        deadline = self.now() + max_seconds
        while self.now() < deadline:
            if self.settled():
                return True
            self.advance(step)
        return self.settled()

    # ------------------------------------------------------------------ loading a snapshot

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, clock: VirtualClock | None = None, name: str = "snapshot", seed: int = 0) -> SimulatedCluster:
        """A simulator holding the snapshot's objects, its controllers inferred from the pods' owners.

        A controller's scale is taken as the number of its pods that are neither terminating nor
        finished (for a StatefulSet, terminating ones count: it has not replaced them yet); a Job
        runs its active pods to completion; a DaemonSet's template is one of its pods.
        The clock starts at the newest timestamp in the snapshot unless one is given.
        """
        if clock is None:
            stamps = [n.created for n in snapshot.nodes] + [p.created for p in snapshot.pods]
            clock = VirtualClock(max(stamps) if stamps else VirtualClock().now())
        sim = cls(name=name, clock=clock, seed=seed)
        versions = [n.resource_version for n in snapshot.nodes] + [p.resource_version for p in snapshot.pods]
        versions += [b.resource_version for b in snapshot.pdbs]
        sim._rv = max(versions, default=0)  # objects keep their versions; changes count on from here
        for node in snapshot.nodes:
            sim._nodes[node.name] = _NodeState(node, None)
            if node.instance_id:
                sim._by_instance[node.instance_id] = node.name
        for pdb in snapshot.pdbs:
            sim.create_pdb(pdb, keep_version=True)
        by_owner: dict[str, list[Pod]] = {}
        for pod in snapshot.pods:
            if pod.owner is not None and pod.owner.kind in CONTROLLER_API:
                by_owner.setdefault(pod.owner.uid, []).append(pod)
        for uid, pods in by_owner.items():
            first = pods[0]
            assert first.owner is not None
            live = [p for p in pods if p.deletion_time is None and not p.is_finished]
            template = replace(first, name=first.owner.name)
            scale = len(live)
            if first.owner.kind == "StatefulSet":
                # A StatefulSet recreates a terminating pod under its name only once it is gone: it still counts.
                scale = len({p.name for p in pods if not p.is_finished})
            ctrl = _Controller(first.owner.kind, first.namespace, first.owner.name, uid, template, scale)
            if ctrl.kind == "Job":
                ctrl.completions = len(live) + sum(1 for p in pods if p.phase == "Succeeded")
                ctrl.succeeded = ctrl.completions - len(live)
            sim._controllers[uid] = ctrl
        for pod in snapshot.pods:
            sim._add_pod(pod, keep_version=True)
        return sim
