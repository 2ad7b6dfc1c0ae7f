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

``SimulatedCluster`` is the front door: each concern is a room of ``platformctl.emulator.simulation`` (the
shared world, budgets, the scheduler, pods and controllers, eviction, nodes and their faults, pools,
snapshots) and every call here is handed to the room that owns it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any

from platformctl.emulator.podspec import DEFAULT_RUN_SECONDS, DEFAULT_START_SECONDS
from platformctl.emulator.sim_watch import ChangeLog, SimulatedInformer
from platformctl.emulator.simulation import snapshots
from platformctl.emulator.simulation.budgets import Budget, BudgetRoom
from platformctl.emulator.simulation.events import (
    EVICTION_REFUSED,
    NODE_ADDED,
    NODE_CONDITION,
    NODE_CORDONED,
    NODE_DELETED,
    NODE_NOT_READY,
    NODE_READY,
    NODE_UNCORDONED,
    PDB_CREATED,
    POD_BACK_OFF,
    POD_CREATE_FAILED,
    POD_CREATED,
    POD_DELETE_REQUESTED,
    POD_DELETED,
    POD_EVICTED,
    POD_LOST,
    POD_NOT_READY,
    POD_READY,
    POD_SCHEDULED,
    POD_SUCCEEDED,
    POD_TAINT_EVICTED,
    POD_TERMINATING,
    POD_UNSCHEDULABLE,
    WORKLOAD_EVENT,
    Event,
)
from platformctl.emulator.simulation.eviction import MSG_TOO_MANY, MSG_TWO_PDBS, SUCCESS, Eviction
from platformctl.emulator.simulation.nodes import (
    CONDITION_TAINTS,
    DEFAULT_TOLERATION_SECONDS,
    NODE_MONITOR_GRACE_SECONDS,
    TAINT_NOT_READY,
    TAINT_UNREACHABLE,
    NodeRoom,
)
from platformctl.emulator.simulation.pods import PodRoom, Runtime
from platformctl.emulator.simulation.pools import NodePoolSpec, PoolRoom, build_node
from platformctl.emulator.simulation.scheduler import Scheduler
from platformctl.emulator.simulation.world import World
from platformctl.emulator.workloads import ObjectApi, Workloads
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.budget_status import CONTROLLER_API, SCALABLE_KINDS
from platformctl.kernel.cluster.model import EvictionResult, Node, Pod, PodDisruptionBudget, Snapshot, Taint

__all__ = [
    "CONDITION_TAINTS", "CONTROLLER_API", "DEFAULT_RUN_SECONDS", "DEFAULT_START_SECONDS", "DEFAULT_TOLERATION_SECONDS",
    "EVICTION_REFUSED", "MSG_TOO_MANY", "MSG_TWO_PDBS", "NODE_ADDED", "NODE_CONDITION", "NODE_CORDONED", "NODE_DELETED",
    "NODE_MONITOR_GRACE_SECONDS", "NODE_NOT_READY", "NODE_READY", "NODE_UNCORDONED", "PDB_CREATED", "POD_BACK_OFF",
    "POD_CREATED", "POD_CREATE_FAILED", "POD_DELETED", "POD_DELETE_REQUESTED", "POD_EVICTED", "POD_LOST", "POD_NOT_READY", "POD_READY",
    "POD_SCHEDULED", "POD_SUCCEEDED", "POD_TAINT_EVICTED", "POD_TERMINATING", "POD_UNSCHEDULABLE", "SCALABLE_KINDS",
    "SUCCESS", "TAINT_NOT_READY", "TAINT_UNREACHABLE", "WORKLOAD_EVENT", "Event", "NodePoolSpec", "SimulatedCluster",
    "build_node",
]


class SimulatedCluster:
    """An in-process Kubernetes cluster; see the module docstring for what it models."""

    def __init__(self, name: str = "sim", clock: VirtualClock | None = None, seed: int = 0, region: str = "us-east-1") -> None:
        self.name = name
        self.region = region
        self._world = World(clock or VirtualClock(), seed)
        self._budgets = BudgetRoom(self._world)
        self._scheduler = Scheduler(self._world)
        self._pods = PodRoom(self._world, self._budgets, self._scheduler)
        self._eviction = Eviction(self._world, self._budgets, self._pods)
        self._nodes = NodeRoom(self._world, self._pods, self._scheduler)
        self._pools = PoolRoom(self._world, self._nodes, name)
        # The share of creates (or, with verbs "all", of every request but a watch) the simulated API server answers
        # 503 (`local fault api-errors`).
        self.api_error_rate = 0.0
        self.api_error_verbs = "create"
        # An outage: the fault lasts ``api_error_for`` seconds of the region's time from the first request it answers
        # 503 (``api_error_until``, set then), then ends by itself.
        self.api_error_for: float | None = None
        self.api_error_until: float | None = None
        # Which requests the fault answers 503 is drawn from the cluster's own seed, so a run (and a test) repeats.
        self.api_error_draw = random.Random(f"{seed}/api-errors")
        self._api_objects: Workloads | None = None

    # ------------------------------------------------------------------ basics

    @property
    def api_objects(self) -> Workloads:
        """The workload objects (Deployments, Jobs, CronJobs …) as the API holds them, with their controllers:
        ``platformctl.emulator.workloads.Workloads``, made on first use."""
        if self._api_objects is None:
            self._api_objects = Workloads(self)
        return self._api_objects

    @property
    def clock(self) -> VirtualClock:
        return self._world.clock

    @property
    def workloads_removed(self) -> int:
        """How many workload controllers are gone so far (deleted, or a Job past its TTL): it moves when one goes."""
        return self._world.controllers_removed

    @property
    def events(self) -> list[Event]:
        """An event log of everything that happened (``platformctl.emulator.simulation.events``)."""
        return self._world.events

    @events.setter
    def events(self, events: list[Event]) -> None:
        self._world.events = events

    @property
    def broken_images(self) -> set[str]:
        """Images whose nodes never turn Ready (a kubelet that cannot start): a bad image, as a test makes one."""
        return self._nodes.broken_images

    @broken_images.setter
    def broken_images(self, images: set[str]) -> None:
        self._nodes.broken_images = images

    @property
    def image_faults(self) -> dict[str, float | None]:
        """Images whose nodes run pods late (seconds) or never (None): `local fault slow-start|bad-image`."""
        return self._pods.image_faults

    @image_faults.setter
    def image_faults(self, faults: dict[str, float | None]) -> None:
        self._pods.image_faults = faults

    @property
    def job_done_hooks(self) -> list[Callable[[str], None]]:
        """Called with a Job controller's uid when it completes."""
        return self._pods.job_done_hooks

    @job_done_hooks.setter
    def job_done_hooks(self, hooks: list[Callable[[str], None]]) -> None:
        self._pods.job_done_hooks = hooks

    def now(self) -> float:
        return self._world.clock.now()

    def advance(self, seconds: float) -> None:
        self._world.clock.sleep(seconds)

    def workload_event(self, api_version: str, kind: str, namespace: str, name: str, uid: str, reason: str, message: str,
                       component: str) -> None:
        """What a workload controller reports about its object (``ScalingReplicaSet``, ``SuccessfulCreate`` …)."""
        self._world.record(WORKLOAD_EVENT, namespace, name, (api_version, kind, uid, reason, message, component))

    @property
    def resource_version(self) -> int:
        """The cluster's newest resource version: it moves whenever any object changes."""
        return self._world.rv

    def next_resource_version(self) -> int:
        """A fresh resource version, for an API layer that records a change the simulator does not hold (a deletion)."""
        return self._world.next_rv()

    def change_log(self) -> ChangeLog:
        """Every change of a node or pod from now on, for watchers (``platformctl.emulator.sim_watch``)."""
        return self._world.change_log()

    def informer(self, kind: str) -> SimulatedInformer:
        """A cache of this cluster's ``nodes`` or ``pods`` kept by watching it (see ``Cluster.informer``)."""
        return SimulatedInformer(self, kind)

    # ------------------------------------------------------------------ nodes and their faults

    def add_node(self, node: Node, ready_after: float | None = None, pool: str | None = None) -> Node:
        """Register a node. With ``ready_after`` it starts NotReady and turns Ready that much later."""
        return self._nodes.add_node(node, ready_after, pool)

    def get_node(self, name: str) -> Node:
        return self._nodes.get_node(name)

    def list_nodes(self, label_selector: str | None = None) -> list[Node]:
        return self._nodes.list_nodes(label_selector)

    def cordon(self, name: str, unschedulable: bool = True) -> Node:
        return self._nodes.update_node(name, unschedulable=unschedulable)

    def taint(self, name: str, taint: Taint) -> Node:
        return self._nodes.taint(name, taint)

    def untaint(self, name: str, key: str) -> Node:
        return self._nodes.untaint(name, key)

    def update_node(self, name: str, *, unschedulable: bool | None = None, labels: Mapping[str, str] | None = None,
                    taints: tuple[Taint, ...] | None = None, annotations: Mapping[str, str] | None = None) -> Node:
        """Change what a client may change on a node: ``spec.unschedulable``, labels, annotations, taints."""
        return self._nodes.update_node(name, unschedulable=unschedulable, labels=labels, taints=taints, annotations=annotations)

    def delete_node(self, name: str) -> None:
        """Delete the node object; pods still bound to it are lost (pod GC force-deletes them)."""
        self._pools.delete_node(name)

    def stop_kubelet(self, name: str, status: str = "Unknown") -> None:
        """The node's kubelet fails. ``Unknown``: it stops posting status (a hung instance, a lost network);
        the node controller marks Ready Unknown after its grace period. ``False``: it keeps posting, NotReady
        (a dead container runtime). Either way the node is tainted, its pods are marked not Ready, and after
        their 300 s toleration the taint manager deletes them (they stay Terminating while no kubelet confirms)."""
        self._nodes.stop_kubelet(name, status)

    def set_node_condition(self, name: str, type_: str, status: str = "True", reason: str = "", message: str = "") -> Node:
        """A condition the kubelet (``MemoryPressure``, ``DiskPressure``, ``PIDPressure``), the CNI
        (``NetworkUnavailable``) or a node-problem-detector reports. The kubelet's own are tainted NoSchedule
        while True (TaintNodesByCondition); Ready goes through ``stop_kubelet``."""
        return self._nodes.set_node_condition(name, type_, status, reason, message)

    def restore_node(self, name: str) -> Node:
        """Every fault of the node is over: the kubelet posts Ready again, its conditions are healthy, the
        control plane's taints go, its pods are Ready again, and pods deleted meanwhile finish terminating."""
        return self._nodes.restore_node(name)

    # ------------------------------------------------------------------ pools (pure simulation)

    def add_pool(self, spec: NodePoolSpec, ready: bool = True) -> list[str]:
        """Create a pool with ``spec.desired`` nodes, Ready at once or after the boot time."""
        return self._pools.add_pool(spec, ready)

    def pool(self, name: str) -> NodePoolSpec:
        return self._pools.pool(name)

    def pool_names(self) -> list[str]:
        return self._pools.pool_names()

    def pool_of(self, node_name: str) -> str | None:
        """The simulated pool that manages the node, if any."""
        return self._nodes.pool_of(node_name)

    def node_of_instance(self, instance_id: str) -> str | None:
        return self._nodes.node_of_instance(instance_id)

    def pool_nodes(self, name: str) -> list[Node]:
        return self._nodes.pool_nodes(name)

    def set_pool_image(self, name: str, image: str) -> None:
        """Point the pool's launch template at a new image: nodes launched from now on boot it."""
        self._pools.set_pool_image(name, image)

    def scale_pool(self, name: str, desired: int) -> None:
        self._pools.scale_pool(name, desired)

    def terminate_instance(self, node_name: str, decrement_desired: bool = False) -> None:
        """Like ``TerminateInstanceInAutoScalingGroup``: the node goes, the pool may replace it."""
        self._pools.terminate_instance(node_name, decrement_desired)

    # ------------------------------------------------------------------ pods and controllers

    def create_workload(self, kind: str, template: Pod, replicas: int, *, completions: int | None = None,
                        ttl_seconds: float | None = None, backoff_limit: int = 6,
                        failure_rules: tuple[dict[str, Any], ...] = (), generated_selector: bool = True) -> str:
        """Create a ReplicaSet, StatefulSet, DaemonSet or Job whose pods look like ``template``.

        ``template`` carries the namespace, the name of the controller (as ``name``), labels,
        annotations, containers, requests and placement. A Job's ``backoff_limit`` and ``failure_rules`` (its
        ``podFailurePolicy``'s) judge its pods that fail; its pods carry the labels of the selector the API server
        makes for it unless ``generated_selector`` is False (``manualSelector``). Returns the controller's uid.
        """
        return self._pods.create_workload(kind, template, replicas, completions=completions, ttl_seconds=ttl_seconds,
                                          backoff_limit=backoff_limit, failure_rules=failure_rules,
                                          generated_selector=generated_selector)

    def admit_pods(self, refuses: Callable[[Any], bool]) -> None:
        """Ask ``refuses(controller)`` before a controller makes a pod (True: refused, and it said why)."""
        self._pods.refuses = refuses

    def use_runtime(self, runtime: Runtime) -> None:
        """Run the containers of the pods ``runtime`` takes for real (the local region's kubelet)."""
        self._pods.runtime = runtime
        self._pods.hand_over()

    def container_log(self, namespace: str, name: str) -> str:
        """What the pod's container wrote, as ``kubectl logs`` reads it: the runtime's record of a pod it runs, nothing
        for a pod the simulation runs (its containers write nothing)."""
        pod = self._pods.get_pod(namespace, name)
        runtime = self._pods.runtime
        return (runtime.log(pod) if runtime is not None and runtime.runs(pod) else None) or ""

    def container_exited(self, namespace: str, name: str, uid: str, code: int) -> None:
        """A pod's process ended with ``code`` (the runtime's word)."""
        self._pods.container_exited(namespace, name, uid, code)

    def scale_workload(self, uid: str, replicas: int) -> None:
        """Set a ReplicaSet's or StatefulSet's replicas (a Job's parallelism): its controller creates or deletes
        pods to match."""
        self._pods.scale_workload(uid, replicas)

    def delete_workload(self, uid: str) -> None:
        """Delete a controller and, as the garbage collector does, every pod it owns."""
        self._pods.delete_workload(uid)

    def workloads(self) -> list[tuple[str, str, str, str, Pod, int]]:
        """Every controller: (kind, namespace, name, uid, pod template, replicas)."""
        return self._pods.workloads()

    def has_workload(self, uid: str) -> bool:
        return self._pods.has_workload(uid)

    def workload_status(self, uid: str) -> dict[str, Any]:
        """What a controller would write into its status: its pods, the ready ones, the finished ones."""
        return self._pods.workload_status(uid)

    def create_pod(self, pod: Pod) -> Pod:
        """Create a pod as given (a bare pod, or one whose owner the simulator does not run)."""
        return self._pods.create_pod(pod)

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None, controller: bool = False) -> Pod:
        """Delete a pod directly (no budget check), with its grace period or ``grace_seconds``; ``controller``:
        a controller deletes it (the namespace controller emptying a deleted namespace), not a client.

        Returns the pod as it is after the call: terminating, or already gone with a grace of 0.
        """
        return self._pods.delete_pod(namespace, name, grace_seconds, controller)

    def get_pod(self, namespace: str, name: str) -> Pod:
        return self._pods.get_pod(namespace, name)

    def list_pods(self, namespace: str | None = None, label_selector: str | None = None,
                  node_name: str | None = None) -> list[Pod]:
        return self._pods.list_pods(namespace, label_selector, node_name)

    def set_image_fault(self, image: str, extra_start_seconds: float | None) -> None:
        """Containers on nodes booted from ``image`` start ``extra_start_seconds`` late, or never (``None``:
        ``CreateContainerError``). Pods already stuck on it retry when the fault is lifted."""
        self._pods.set_image_fault(image, extra_start_seconds)

    def clear_image_faults(self) -> None:
        self._pods.clear_image_faults()

    # Namespaces, for the clients that make their own (canaries): the simulator keeps their labels only.
    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self._pods.create_namespace(name, labels)

    def list_namespaces(self, label_selector: str | None = None) -> list[str]:
        return self._pods.list_namespaces(label_selector)

    def delete_namespace(self, name: str) -> None:
        """As the namespace controller does: every workload, budget and pod of it is deleted (by a controller, not
        a client)."""
        self._pods.namespaces.pop(name, None)
        if self._api_objects is not None:
            for plural, objects in self._api_objects.objects.items():
                for ns, wname in list(objects):
                    if ns == name and (ns, wname) in objects:
                        self._api_objects.delete(plural, ns, wname)
        for budget in self._budgets.in_namespace(name):
            self._budgets.delete(name, budget.pdb.name)
        self._pods.empty_namespace(name)

    # Workload objects (Deployments, Jobs, CronJobs, DaemonSets, budgets …) as a client writes them: the API's
    # JSON, the API's answers (platformctl.emulator.workloads), the same calls LiveCluster makes over HTTP.
    def create_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        return ObjectApi(self).create(obj)

    def get_object(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return ObjectApi(self).get(kind, namespace, name)

    def replace_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        return ObjectApi(self).replace(obj)

    def patch_object(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return ObjectApi(self).patch(kind, namespace, name, patch)

    def scale(self, kind: str, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        return ObjectApi(self).scale(kind, namespace, name, replicas)

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        ObjectApi(self).delete(kind, namespace, name)

    # ------------------------------------------------------------------ scheduling

    def pending_pods(self) -> list[Pod]:
        return self._scheduler.pending_pods()

    def why_unschedulable(self, pod: Pod) -> str:
        """What the scheduler says of a pod it cannot place, counted over the nodes as kube-scheduler counts them."""
        return self._scheduler.why_unschedulable(pod)

    # ------------------------------------------------------------------ budgets and eviction

    def create_pdb(self, pdb: PodDisruptionBudget, keep_version: bool = False) -> PodDisruptionBudget:
        return self._budgets.create(pdb, keep_version)

    def delete_pdb(self, namespace: str, name: str) -> PodDisruptionBudget:
        return self._budgets.delete(namespace, name)

    def list_pdbs(self, namespace: str | None = None) -> list[PodDisruptionBudget]:
        return self._budgets.list_pdbs(namespace)

    def get_pdb(self, namespace: str, name: str) -> PodDisruptionBudget:
        return self._budgets.get(namespace, name)

    def budget_object(self, budget: Budget, change: str) -> PodDisruptionBudget:
        """A budget as a watch event carries it: with its status now (a deleted one as it was)."""
        return self._budgets.budget_object(budget, change)

    def budgets_of(self, pod: Pod) -> list[PodDisruptionBudget]:
        return self._budgets.budgets_of(pod)

    def evict(self, namespace: str, name: str) -> EvictionResult:
        """The eviction subresource (``POST .../pods/<name>/eviction``), rule for rule."""
        return self._eviction.evict(namespace, name)

    # ------------------------------------------------------------------ whole-cluster views

    def snapshot(self) -> dict[str, Any]:
        return snapshots.document(self._world, self._budgets)

    def settled(self) -> bool:
        """No pod waits for a node and every node and every running pod is Ready."""
        return snapshots.settled(self._world, self._scheduler)

    def run_until_settled(self, max_seconds: float = 3600.0, step: float = 5.0) -> bool:
        deadline = self.now() + max_seconds
        while self.now() < deadline:
            if self.settled():
                return True
            self.advance(step)
        return self.settled()

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
        snapshots.load(sim._world, sim._nodes, sim._budgets, sim._pods, snapshot)
        return sim
