"""Nodes, and their faults as a real node shows them.

A node has EKS labels, allocatable CPU/memory/GPUs/pods, the Ready condition, cordon and taints, and a boot
time until Ready; deleting it loses the pods still bound to it (pod GC deletes them). Its faults: a kubelet
that stops posting status (the node controller marks Ready Unknown after its grace period) or posts NotReady,
then the NoExecute taint whose 300 s toleration the taint manager enforces; conditions the kubelet or a
node-problem-detector report (tainted NoSchedule while True, TaintNodesByCondition); and the recovery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from platformctl.emulator.controllers import daemonset
from platformctl.emulator.simulation.events import (
    NODE_ADDED,
    NODE_CONDITION,
    NODE_CORDONED,
    NODE_DELETED,
    NODE_NOT_READY,
    NODE_READY,
    NODE_UNCORDONED,
    POD_LOST,
    POD_NOT_READY,
    POD_READY,
    POD_TAINT_EVICTED,
)
from platformctl.emulator.simulation.pods import PodRoom
from platformctl.emulator.simulation.scheduler import Scheduler
from platformctl.emulator.simulation.world import NodeState, World
from platformctl.kernel.cluster.model import Node, NodeCondition, Taint
from platformctl.kernel.errors import NotFoundError, PlatformError

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


class NodeRoom:
    def __init__(self, world: World, pods: PodRoom, scheduler: Scheduler) -> None:
        self.w = world
        self.pods = pods
        self.scheduler = scheduler
        self.by_instance: dict[str, str] = {}  # instance id (from providerID) -> node name
        self.pool_counts: dict[str, int] = {}
        # Images whose nodes never turn Ready (a kubelet that cannot start): a bad image, as a test makes one.
        self.broken_images: set[str] = set()

    # ------------------------------------------------------------------ nodes

    def register(self, node: Node) -> None:
        """A node as a snapshot holds it, taken as it is (no event, no version of its own)."""
        self.w.nodes[node.name] = NodeState(node, None)
        if node.instance_id:
            self.by_instance[node.instance_id] = node.name

    def add_node(self, node: Node, ready_after: float | None = None, pool: str | None = None) -> Node:
        w = self.w
        if node.name in w.nodes:
            raise PlatformError(f"node {node.name} already exists", field="metadata.name")
        node = replace(node, ready=ready_after is None and node.ready, resource_version=w.next_rv(),
                       created=node.created or w.now())
        state = NodeState(node, pool)
        w.nodes[node.name] = state
        if node.instance_id:
            self.by_instance[node.instance_id] = node.name
        if pool is not None:
            self.pool_counts[pool] = self.pool_counts.get(pool, 0) + 1
        self.scheduler.node_added(state)
        w.note("nodes", "ADDED", node)
        w.record(NODE_ADDED, "", node.name, node.image)
        if ready_after is not None:
            w.clock.call_later(ready_after, self._node_ready, state)
        daemonset.node_added(self.pods, node)
        if node.ready:
            self.scheduler.schedule_soon()
        return node

    def _node_ready(self, state: NodeState) -> None:
        w = self.w
        if not state.alive or state.node.ready or state.node.image in self.broken_images:
            return
        if state.kubelet_down:  # it booted into a kubelet fault: Ready once the fault is over
            w.clock.call_later(NODE_MONITOR_GRACE_SECONDS, self._node_ready, state)
            return
        ready = NodeCondition("Ready", "True", "KubeletReady", "kubelet is posting ready status", w.now())
        state.node = replace(state.node.with_condition(ready), resource_version=w.next_rv())
        w.note("nodes", "MODIFIED", state.node)
        w.record(NODE_READY, "", state.node.name)
        self._start_waiting(state)
        self.scheduler.schedule_soon()

    def _start_waiting(self, state: NodeState) -> None:
        """The node is Ready: the pods bound to it meanwhile start."""
        waiting, state.waiting = state.waiting, []
        for key in waiting:
            pod = self.w.pods.get(key)
            if pod is not None and pod.node_name == state.node.name:
                self.pods.start_pod_timer(pod)

    def get_node(self, name: str) -> Node:
        return self.w.node_state(name).node

    def list_nodes(self, label_selector: str | None = None) -> list[Node]:
        nodes = [s.node for s in self.w.nodes.values()]
        if label_selector:
            selector = self.w.selector(label_selector)
            nodes = [n for n in nodes if selector.matches(n.labels)]
        return nodes

    def taint(self, name: str, taint: Taint) -> Node:
        kept = tuple(t for t in self.get_node(name).taints if (t.key, t.effect) != (taint.key, taint.effect))
        return self.update_node(name, taints=(*kept, taint))

    def untaint(self, name: str, key: str) -> Node:
        return self.update_node(name, taints=tuple(t for t in self.get_node(name).taints if t.key != key))

    def update_node(self, name: str, *, unschedulable: bool | None = None, labels: Mapping[str, str] | None = None,
                    taints: tuple[Taint, ...] | None = None, annotations: Mapping[str, str] | None = None) -> Node:
        w = self.w
        state = w.node_state(name)
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
        state.node = replace(new, resource_version=w.next_rv())
        w.note("nodes", "MODIFIED", state.node)
        if new.unschedulable != old.unschedulable:
            w.record(NODE_CORDONED if new.unschedulable else NODE_UNCORDONED, "", name)
        if new.labels != old.labels or new.taints != old.taints:
            # Which scheduling classes the node serves may have changed: they are rebuilt on demand.
            self.scheduler.reindex()
        for taint in new.taints:  # the taint manager: a new NoExecute taint evicts every pod that does not tolerate it
            if taint.effect == "NoExecute" and taint not in old.taints:
                self._taint_evict(state, state.epoch, taint)
        self.scheduler.schedule_soon()
        return state.node

    def delete_node(self, name: str) -> str | None:
        """Delete the node object; pods still bound to it are lost (pod GC force-deletes them). Returns the pool
        that managed it, if any."""
        w = self.w
        state = w.nodes.pop(name, None)
        if state is None:
            raise NotFoundError(f'nodes "{name}" not found', field="node")
        state.alive = False
        w.rv += 1
        if state.node.instance_id:
            self.by_instance.pop(state.node.instance_id, None)
        self.scheduler.node_removed(state)
        if state.pool is not None:
            self.pool_counts[state.pool] -= 1
        w.note("nodes", "DELETED", state.node)
        w.record(NODE_DELETED, "", name)
        for key in list(state.pods):
            pod = w.pods.get(key)
            if pod is not None:
                if pod.deletion_time is None and not pod.is_finished:
                    w.record(POD_LOST, pod.namespace, pod.name, (pod.uid, pod.is_daemonset))
                self.pods.remove_pod(pod, node_gone=True)
        return state.pool

    # ------------------------------------------------------------------ the pools' view of the nodes

    def pool_of(self, node_name: str) -> str | None:
        state = self.w.nodes.get(node_name)
        return state.pool if state is not None else None

    def node_of_instance(self, instance_id: str) -> str | None:
        return self.by_instance.get(instance_id)

    def pool_nodes(self, name: str) -> list[Node]:
        return [s.node for s in self.w.nodes.values() if s.pool == name]

    def count(self, pool: str) -> int:
        return self.pool_counts.get(pool, 0)

    # ------------------------------------------------------------------ node faults, as a real node shows them

    def stop_kubelet(self, name: str, status: str = "Unknown") -> None:
        if status not in ("Unknown", "False"):
            raise PlatformError(f"a kubelet fault is Unknown or False, not {status!r}", field="status")
        w = self.w
        state = w.node_state(name)
        state.epoch += 1
        if status == "Unknown":
            state.kubelet_down = True
            w.clock.call_later(NODE_MONITOR_GRACE_SECONDS, self._lost_contact, state, state.epoch, w.now())
        else:
            self._not_ready(state, NodeCondition("Ready", "False", "KubeletNotReady",
                                                 "container runtime network not ready: NetworkReady=false "
                                                 "reason:NetworkPluginNotReady message:container runtime is down", w.now()),
                            TAINT_NOT_READY)

    def _lost_contact(self, state: NodeState, epoch: int, last_heartbeat: float) -> None:
        if not state.alive or state.epoch != epoch:
            return
        self._not_ready(state, NodeCondition("Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.",
                                             self.w.now(), last_heartbeat), TAINT_UNREACHABLE)

    def _not_ready(self, state: NodeState, ready: NodeCondition, taint_key: str) -> None:
        w = self.w
        node = state.node.with_condition(ready)
        others = tuple(t for t in node.taints if t.key not in (TAINT_UNREACHABLE, TAINT_NOT_READY))
        taints = (*others, Taint(taint_key, "", "NoSchedule"), Taint(taint_key, "", "NoExecute"))
        state.node = replace(node, taints=taints, resource_version=w.next_rv())
        w.note("nodes", "MODIFIED", state.node)
        self.scheduler.forget_classes()
        w.record(NODE_NOT_READY, "", state.node.name, (ready.status, ready.reason))
        for key in list(state.pods):  # the node lifecycle controller's MarkPodsNotReady
            pod = w.pods.get(key)
            if pod is not None and pod.ready and not pod.is_finished:
                self.pods.set_pod(pod, node_name=pod.node_name, phase=pod.phase, ready=False, deletion_time=pod.deletion_time,
                                  started=pod.started, evicted=pod.evicted)
                w.record(POD_NOT_READY, pod.namespace, pod.name, pod.uid)
        w.clock.call_later(DEFAULT_TOLERATION_SECONDS, self._taint_evict, state, state.epoch, Taint(taint_key, "", "NoExecute"))

    def _taint_evict(self, state: NodeState, epoch: int, taint: Taint) -> None:
        w = self.w
        if not state.alive or state.epoch != epoch:
            return
        for key in list(state.pods):
            pod = w.pods.get(key)
            if pod is None or pod.is_daemonset or pod.is_mirror or pod.is_finished or pod.terminating:
                continue
            if any(t.tolerates(taint) for t in pod.tolerations):
                continue  # a toleration without tolerationSeconds: it stays
            w.record(POD_TAINT_EVICTED, pod.namespace, pod.name, (pod.uid, taint.key))
            w.rv += 1
            pod = w.pods[key] = replace(pod, disruption="DeletionByTaintManager", resource_version=w.rv)
            w.note("pods", "MODIFIED", pod)
            self.pods.begin_termination(pod, evicted=False)

    def set_node_condition(self, name: str, type_: str, status: str = "True", reason: str = "", message: str = "") -> Node:
        if type_ == "Ready":
            raise PlatformError("Ready is the kubelet's own: use a kubelet fault", field="type")
        if status not in ("True", "False", "Unknown"):
            raise PlatformError(f"a condition's status is True, False or Unknown, not {status!r}", field="status")
        w = self.w
        state = w.node_state(name)
        old = state.node.condition(type_)
        since = old.since if old is not None and old.status == status else w.now()
        node = state.node.with_condition(NodeCondition(type_, status, reason or f"{type_}{'Detected' if status == 'True' else 'Resolved'}",
                                                       message, since))
        key = CONDITION_TAINTS.get(type_)
        if key is not None:
            kept = tuple(t for t in node.taints if t.key != key)
            node = replace(node, taints=(*kept, Taint(key, "", "NoSchedule")) if status == "True" else kept)
            self.scheduler.forget_classes()
        state.node = replace(node, resource_version=w.next_rv())
        w.note("nodes", "MODIFIED", state.node)
        had = node.condition(type_)
        w.record(NODE_CONDITION, "", name, (type_, status, had.reason if had is not None else reason))
        self.scheduler.schedule_soon()
        return state.node

    def restore_node(self, name: str) -> Node:
        w = self.w
        state = w.node_state(name)
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
            node = node.with_condition(NodeCondition("Ready", "True", "KubeletReady", "kubelet is posting ready status", w.now()))
        state.node = replace(node, resource_version=w.next_rv())
        w.note("nodes", "MODIFIED", state.node)
        self.scheduler.forget_classes()
        if state.node.ready and not was_ready:
            w.record(NODE_READY, "", name)
            for key in list(state.pods):
                pod = w.pods.get(key)
                if pod is not None and pod.phase == "Running" and not pod.ready and not pod.terminating:
                    self.pods.set_pod(pod, node_name=pod.node_name, phase=pod.phase, ready=True, deletion_time=None,
                                      started=pod.started, evicted=pod.evicted)
                    w.record(POD_READY, pod.namespace, pod.name, pod.uid)
            self._start_waiting(state)
        stuck, state.stuck = state.stuck, []
        for key in stuck:
            pod = w.pods.get(key)
            if pod is not None and pod.terminating:
                self.pods.remove_pod(pod)
        self.scheduler.schedule_soon()
        return state.node
