"""The scheduler: it binds pending pods, highest priority first, to Ready, schedulable nodes that fit them and whose
taints they tolerate, spreading each class of pods (those with the same static constraints) round-robin over the
nodes that could take it; what it cannot place it says why of, as kube-scheduler does. It owns the queue of
pending pods, the classes and the index of what pod (anti-)affinity and topology spread need to know.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from platformctl.emulator.controllers.host import PodKey
from platformctl.emulator.simulation.events import POD_UNSCHEDULABLE
from platformctl.emulator.simulation.world import NodeState, World
from platformctl.kernel.cluster.model import Node, Pod, Resources
from platformctl.kernel.cluster.scheduling import (
    InterPodIndex,
    prefers_not,
    resource_reasons,
    static_filter,
    static_key,
    static_reason,
    unschedulable_message,
)


class SchedClass:
    """Pods with the same placement constraints share the list of nodes that could take them."""

    __slots__ = ("predicate", "nodes", "cursor", "dead")

    def __init__(self, predicate: Callable[[Node], bool]) -> None:
        self.predicate = predicate
        self.nodes: list[NodeState] = []
        self.cursor = 0
        self.dead = 0


def _no_binder(pod: Pod, state: NodeState) -> None:
    raise RuntimeError("the scheduler has no pods room to bind through")


class Scheduler:
    def __init__(self, world: World) -> None:
        self.w = world
        self.pending: dict[PodKey, None] = {}
        self.unschedulable: set[PodKey] = set()  # pending pods the scheduler already said it could not place
        self.classes: dict[tuple[Any, ...], SchedClass] = {}
        self._timer: Any = None
        self.inter = self._new_inter_index()
        # Binding a placed pod is the pods room's (it starts the pod): the pods room hands its ``bind`` over.
        self.bind: Callable[[Pod, NodeState], None] = _no_binder

    def _new_inter_index(self) -> InterPodIndex:
        w = self.w
        return InterPodIndex(lambda: ((s.node, [w.pods[k] for k in s.pods if k in w.pods])
                                      for s in w.nodes.values() if s.alive))

    # ------------------------------------------------------------------ the queue

    def enqueue(self, key: PodKey) -> None:
        self.pending[key] = None
        self.schedule_soon()

    def forget(self, key: PodKey) -> None:
        """The pod is gone: no longer pending."""
        self.pending.pop(key, None)
        self.unschedulable.discard(key)

    def schedule_soon(self) -> None:
        if self._timer is None and self.pending:
            self._timer = self.w.clock.call_later(0.0, self._schedule_pass)

    def pending_pods(self) -> list[Pod]:
        return [self.w.pods[k] for k in self.pending]

    # ------------------------------------------------------------------ what the nodes' changes mean to the classes

    def node_added(self, state: NodeState) -> None:
        for cls in self.classes.values():
            if cls.predicate(state.node):
                cls.nodes.append(state)
        self.inter.node_added(state.node)

    def node_removed(self, state: NodeState) -> None:
        for cls in self.classes.values():
            if cls.predicate(state.node):
                cls.dead += 1
        self.inter.node_removed(state.node)
        for key in state.pods:
            if key in self.w.pods:
                self.inter.pod_bound(self.w.pods[key], state.node, -1)

    def forget_classes(self) -> None:
        """A node's taints changed: which classes it serves is worked out again on demand."""
        self.classes.clear()

    def reindex(self) -> None:
        """A node's labels or taints changed: the classes and the inter-pod index are rebuilt on demand."""
        self.classes.clear()
        self.inter = self._new_inter_index()

    # ------------------------------------------------------------------ the pass

    def _class_for(self, pod: Pod, key: tuple[Any, ...]) -> SchedClass:
        cls = self.classes.get(key)
        if cls is None:
            cls = self.classes[key] = SchedClass(static_filter(pod))
            cls.nodes = [s for s in self.w.nodes.values() if cls.predicate(s.node)]
        elif cls.dead > len(cls.nodes) // 2:
            cls.nodes = [s for s in cls.nodes if s.alive]
            cls.dead = 0
            cls.cursor = 0
        return cls

    def _schedule_pass(self) -> None:
        self._timer = None
        if not self.pending:
            return
        pods = sorted((self.w.pods[k] for k in self.pending), key=lambda p: -p.priority)
        failed: dict[tuple[Any, ...], Resources] = {}
        said: dict[tuple[Any, ...], str] = {}  # what the scheduler said of a class's pods in this pass
        inter = self.inter
        for pod in pods:
            ctrl = self.w.controller_of(pod)
            key = ctrl.sched_key if ctrl else static_key(pod)
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
            target = self._place(pod, self._class_for(pod, key), inter, constrained)
            if target is None:
                if not constrained:
                    failed[key] = r
                said[key] = self._note_unschedulable(pod, said.get(key) if not constrained else None)
                continue
            del self.pending[pod.key]
            self.unschedulable.discard(pod.key)
            self.bind(pod, target)

    @staticmethod
    def _place(pod: Pod, cls: SchedClass, inter: InterPodIndex, constrained: bool) -> NodeState | None:
        """The next node of the class, round-robin, that takes the pod; one whose PreferNoSchedule taints it
        does not tolerate only when no other has room (the TaintToleration score prefers, it does not forbid)."""
        nodes = cls.nodes
        n = len(nodes)
        start = cls.cursor
        fallback = None
        fallback_idx = 0
        r = pod.requests
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
                cls.cursor = idx + 1
                return state
        if fallback is not None:
            cls.cursor = fallback_idx + 1
        return fallback

    def _note_unschedulable(self, pod: Pod, message: str | None = None) -> str:
        """The scheduler could not place ``pod``: its PodScheduled condition says why (False, Unschedulable),
        as the scheduler writes it after each failed attempt. Returns what it said."""
        if pod.unschedulable:
            return pod.unschedulable  # said already, while it has been pending
        message = message or self.why_unschedulable(pod)
        w = self.w
        if pod.key not in self.unschedulable:
            self.unschedulable.add(pod.key)
            w.record(POD_UNSCHEDULABLE, pod.namespace, pod.name, pod.uid)
        if pod.unschedulable != message:
            w.rv += 1
            w.pods[pod.key] = replace(pod, unschedulable=message, resource_version=w.rv,
                                      unschedulable_since=pod.unschedulable_since or w.now())
            w.note("pods", "MODIFIED", w.pods[pod.key])
        return message

    def why_unschedulable(self, pod: Pod) -> str:
        """What the scheduler says of a pod it cannot place, counted over the nodes as kube-scheduler counts them."""
        reasons: dict[str, int] = {}
        nodes = [s for s in self.w.nodes.values() if s.alive]
        for state in nodes:
            node = state.node
            static = static_reason(pod, node)
            if static is not None:
                why = [static]
            else:
                why = resource_reasons(Resources(state.cpu, state.mem, state.gpu), state.npods, pod.requests)
                if not why:
                    inter = self.inter.reason(pod, node)
                    why = [inter] if inter is not None else []
            for text in why:
                reasons[text] = reasons.get(text, 0) + 1
        # The simulator does not preempt: what kube-scheduler says when preemption finds no victim either.
        return unschedulable_message(reasons, len(nodes))
