"""Pods and the controllers that own them: a pod's life (created, bound, started, Ready, succeeded, terminating,
gone), the namespaces, and the bookkeeping of each ReplicaSet, StatefulSet, DaemonSet and Job whose controller
(``platformctl.emulator.controllers``) recreates what it owns. This room is the ``ControllerHost`` those
controllers act on, and the binder the scheduler hands the pods it placed.

A pod bound to a node starts after its start time (``sim.platformctl.io/start-seconds``, default 10 s; later,
or never, on an image with a fault) once the node is Ready; a Job's pod succeeds after its run time
(``sim.platformctl.io/run-seconds``, default 900 s); a deleted pod terminates over its grace period, unless
its node's kubelet is down, when it stays Terminating until the kubelet is back.

A pod the ``runtime`` runs (the local region's kubelet runs the toolkit's own image as a process:
``platformctl.emulator.server.kubelet``) instead ends when its process does: ``container_exited`` with its exit
code; a deleted one is sent SIGTERM at once and SIGKILL at the end of its grace period, and is gone as soon as its
process has ended.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from platformctl.emulator.controllers import daemonset, job, replicaset, statefulset
from platformctl.emulator.controllers.host import Controller, PodKey
from platformctl.emulator.podspec import DEFAULT_START_SECONDS, annotation_seconds
from platformctl.emulator.simulation.budgets import BudgetRoom
from platformctl.emulator.simulation.events import (
    POD_BACK_OFF,
    POD_CREATE_FAILED,
    POD_CREATED,
    POD_DELETE_REQUESTED,
    POD_DELETED,
    POD_LOST,
    POD_READY,
    POD_SCHEDULED,
    POD_SUCCEEDED,
    POD_TERMINATING,
)
from platformctl.emulator.simulation.scheduler import Scheduler
from platformctl.emulator.simulation.world import NodeState, World
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.budget_status import CONTROLLER_API, healthy
from platformctl.kernel.cluster.model import ANNOTATION_START_SECONDS, Node, OwnerReference, Pod
from platformctl.kernel.errors import NotFoundError, PlatformError
from platformctl.kernel.instance_types import INSTANCE_TYPES


class Runtime(Protocol):
    """What runs the containers of the pods it takes for real (the local region's kubelet); every call is made under
    the simulation's lock and returns at once."""

    def runs(self, pod: Pod) -> bool: ...

    def blocked(self, pod: Pod) -> tuple[str, str] | None: ...  # (waiting reason, event message) while it cannot be made

    def start(self, pod: Pod) -> None: ...

    def stop(self, pod: Pod) -> None: ...  # SIGTERM: the pod is terminating

    def kill(self, pod: Pod) -> bool: ...  # SIGKILL at the end of its grace period: whether it was still running

    def log(self, pod: Pod) -> str | None: ...  # what its container wrote (``kubectl logs``); None: nothing kept


# The kinds whose pods' restartPolicy is Always (the API server refuses any other in their templates): a container of
# theirs that ends is restarted in place by the kubelet, never the pod replaced.
RESTARTED = frozenset({"ReplicaSet", "StatefulSet", "DaemonSet"})
CRASH_BACKOFF_SECONDS = 10.0  # the kubelet's first back-off before restarting a crashed container
MAX_CRASH_BACKOFF_SECONDS = 300.0  # and its cap
CONFIG_RETRY_SECONDS = 10.0  # how often a kubelet tries again a container it could not make (a missing Secret)
START_SPREAD = 0.2  # sigma of the log of a container start's spread: a real start's p99 is about 1.6x its median


def start_seconds(base: float, node: Node | None, rng: random.Random) -> float:
    """How long a pod's containers take to start, as a real start varies: the pod's own time (its controller's or its
    annotation's), times the instance type's pace (fewer cores start containers slower), times a lognormal spread
    drawn from the simulator's seeded random source (the same run gives the same times). Whole seconds, as the API's
    timestamps are: a duration read from two of them is what the simulation did. A bad image's delay adds to it."""
    if base <= 0:
        return 0.0
    kind = INSTANCE_TYPES.get((node.instance_type if node is not None else None) or "")
    pace = 1.0 + 0.25 / kind.vcpus if kind is not None else 1.0
    return float(max(round(base * pace * math.exp(rng.gauss(0.0, START_SPREAD))), 1))


class PodRoom:
    def __init__(self, world: World, budgets: BudgetRoom, scheduler: Scheduler) -> None:
        self.w = world
        self.budgets = budgets
        self.scheduler = scheduler
        scheduler.bind = self.bind
        # Images whose nodes run pods late (seconds) or never (None): `local fault slow-start|bad-image`.
        self.image_faults: dict[str, float | None] = {}
        self.namespaces: dict[str, dict[str, str]] = {}  # the namespaces clients made, with their labels
        self.job_done_hooks: list[Callable[[str], None]] = []  # called with a Job controller's uid when it completes
        self.runtime: Runtime | None = None  # what runs some pods' containers for real (the local region's kubelet)
        # Admission of a controller's new pod (the local region's Pod Security): True refuses it (and has said why).
        self.refuses: Callable[[Controller], bool] | None = None

    # ------------------------------------------------------------------ what the controllers call (ControllerHost)

    @property
    def clock(self) -> VirtualClock:
        return self.w.clock

    def now(self) -> float:
        return self.w.clock.now()

    def find_pod(self, key: PodKey) -> Pod | None:
        return self.w.pods.get(key)

    def create_owned_pod(self, ctrl: Controller, node_name: str | None = None, name: str | None = None) -> Pod | None:
        if self.refuses is not None and self.refuses(ctrl):
            return None  # admission refused it: the controller tries again at its next reconcile
        w = self.w
        if name is None:
            name = f"{ctrl.name}-{w.suffix()}"
            while (ctrl.namespace, name) in w.pods:
                name = f"{ctrl.name}-{w.suffix()}"
        w.rv += 1
        owner = OwnerReference(CONTROLLER_API[ctrl.kind], ctrl.kind, ctrl.name, ctrl.uid)
        return self.add_pod(ctrl.template.spawn(name, w.uid(), owner, node_name, w.now(), w.rv), ctrl)

    def terminate_pod(self, pod: Pod) -> Pod:
        return self.begin_termination(pod, evicted=False)

    def delete_controller(self, uid: str) -> None:
        ctrl = self.w.controllers.pop(uid, None)
        if ctrl is None:
            return
        self.w.controllers_removed += 1
        ctrl.done = True
        for key in list(ctrl.pods):
            pod = self.w.pods.get(key)
            if pod is not None:
                self.begin_termination(pod, evicted=False)

    def live_nodes(self) -> list[Node]:
        return [s.node for s in self.w.nodes.values() if s.alive]

    def controllers_of_kind(self, kind: str) -> list[Controller]:
        return [c for c in self.w.controllers.values() if c.kind == kind]

    # ------------------------------------------------------------------ controllers

    def create_workload(self, kind: str, template: Pod, replicas: int, *, completions: int | None = None,
                        ttl_seconds: float | None = None, backoff_limit: int = 6,
                        failure_rules: tuple[dict[str, Any], ...] = (), generated_selector: bool = True) -> str:
        if kind not in CONTROLLER_API:
            raise PlatformError(f"unsupported workload kind {kind!r}", field="kind")
        uid = self.w.uid()
        if kind == "Job" and generated_selector:  # the labels kube-apiserver puts on a Job's template, to select by
            template = replace(template, labels={**template.labels, **job.job_labels(uid, template.name)})
        ctrl = Controller(kind, template.namespace, template.name, uid, template, replicas)
        ctrl.created = self.w.now()
        if kind == "Job":
            ctrl.completions = completions if completions is not None else replicas
            ctrl.ttl_seconds = ttl_seconds
            ctrl.backoff_limit, ctrl.failure_rules = backoff_limit, failure_rules
        self.w.controllers[uid] = ctrl
        if kind == "DaemonSet":
            daemonset.start(self, ctrl)
        else:
            self.reconcile(ctrl)
        return uid

    def scale_workload(self, uid: str, replicas: int) -> None:
        ctrl = self.w.controllers.get(uid)
        if ctrl is None:
            raise NotFoundError(f"no workload with uid {uid}", field="metadata.uid")
        if ctrl.kind == "DaemonSet":
            raise PlatformError("a DaemonSet has no replicas to scale", field="spec.replicas")
        ctrl.replicas = replicas
        self.budgets.scale_changed(uid)
        self.reconcile(ctrl)

    def delete_workload(self, uid: str) -> None:
        if uid not in self.w.controllers:
            raise NotFoundError(f"no workload with uid {uid}", field="metadata.uid")
        self.delete_controller(uid)

    def workloads(self) -> list[tuple[str, str, str, str, Pod, int]]:
        return [(c.kind, c.namespace, c.name, c.uid, c.template, c.replicas) for c in self.w.controllers.values()]

    def has_workload(self, uid: str) -> bool:
        return uid in self.w.controllers

    def workload_status(self, uid: str) -> dict[str, Any]:
        ctrl = self.w.controllers.get(uid)
        if ctrl is None:
            return {"replicas": 0, "ready": 0, "active": 0, "succeeded": 0, "failed": 0, "complete": False,
                    "completed_at": None, "failed_reason": "", "failed_message": ""}
        pods = [self.w.pods[k] for k in ctrl.pods if k in self.w.pods]
        live = [p for p in pods if p.deletion_time is None and not p.is_finished]
        return {
            "replicas": len(live),
            "ready": sum(p.ready for p in live),
            "active": ctrl.active,
            "succeeded": ctrl.succeeded,
            "failed": ctrl.failed,
            "terminating": ctrl.terminating,
            "complete": ctrl.done and not ctrl.failed_reason,
            "completed_at": ctrl.done_at,
            "failed_reason": ctrl.failed_reason,  # the Job failed (BackoffLimitExceeded, PodFailurePolicy)
            "failed_message": ctrl.failed_message,
        }

    def reconcile(self, ctrl: Controller, recreate: str | None = None) -> None:
        """The owner's controller (``platformctl.emulator.controllers``) brings its pods in line with its spec."""
        if ctrl.done or ctrl.kind == "DaemonSet":
            return
        if ctrl.kind == "StatefulSet":
            statefulset.reconcile(self, ctrl, recreate)
        elif ctrl.kind == "Job":
            job.reconcile(self, ctrl)
        else:
            replicaset.reconcile(self, ctrl)

    # ------------------------------------------------------------------ pods and namespaces, as clients see them

    def create_pod(self, pod: Pod) -> Pod:
        if pod.key in self.w.pods:
            raise PlatformError(f'pods "{pod.name}" already exists', field="metadata.name")
        return self.add_pod(replace(pod, created=pod.created or self.w.now()))

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None, controller: bool = False) -> Pod:
        pod = self.w.pods.get((namespace, name))
        if pod is None:
            raise NotFoundError(f'pods "{name}" not found', field="pod")
        if pod.deletion_time is None and not pod.is_finished and not controller:
            self.w.record(POD_DELETE_REQUESTED, pod.namespace, pod.name, (pod.uid, pod.node_name))
        pod = self.begin_termination(pod, evicted=False)
        if grace_seconds == 0:
            self.remove_pod(pod)
        return pod

    def get_pod(self, namespace: str, name: str) -> Pod:
        pod = self.w.pods.get((namespace, name))
        if pod is None:
            raise NotFoundError(f'pods "{name}" not found', field="pod")
        return pod

    def list_pods(self, namespace: str | None = None, label_selector: str | None = None,
                  node_name: str | None = None) -> list[Pod]:
        w = self.w
        if node_name is not None:
            state = w.nodes.get(node_name)
            keys: Iterable[PodKey] = state.pods if state else ()
            pods = [w.pods[k] for k in keys if namespace is None or k[0] == namespace]
        elif namespace is not None:
            pods = [w.pods[k] for k in w.pods_by_ns.get(namespace, ())]
        else:
            pods = list(w.pods.values())
        if label_selector:
            selector = w.selector(label_selector)
            pods = [p for p in pods if selector.matches(p.labels)]
        return pods

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self.namespaces[name] = dict(labels or {})

    def list_namespaces(self, label_selector: str | None = None) -> list[str]:
        names = set(self.namespaces) | {ns for ns, keys in self.w.pods_by_ns.items() if keys}
        if not label_selector:
            return sorted(names)
        selector = self.w.selector(label_selector)
        return sorted(n for n in names if selector.matches(self.namespaces.get(n, {})))

    def empty_namespace(self, name: str) -> None:
        """The namespace controller's last steps: its controllers go (the garbage collector) and so does every pod."""
        for uid in [u for u, c in self.w.controllers.items() if c.namespace == name]:
            self.delete_controller(uid)
        for key in list(self.w.pods_by_ns.get(name, ())):
            pod = self.w.pods.get(key)
            if pod is not None:
                self.delete_pod(pod.namespace, pod.name, controller=True)

    # ------------------------------------------------------------------ a pod's life

    def add_pod(self, pod: Pod, ctrl: Controller | None = None, keep_version: bool = False) -> Pod:
        w = self.w
        if ctrl is None and not keep_version:
            pod = replace(pod, resource_version=w.next_rv())
        if pod.node_name is not None and pod.scheduled is None:
            pod = replace(pod, scheduled=pod.created)  # created bound (a DaemonSet's, or a snapshot's)
        key = pod.key
        w.pods[key] = pod
        w.note("pods", "ADDED", pod)
        w.pods_by_ns.setdefault(pod.namespace, set()).add(key)
        budgets = self.budgets.pod_added(pod)
        if ctrl is None:
            ctrl = w.controller_of(pod)
        if ctrl is not None:
            ctrl.pods.add(key)
            if pod.deletion_time is None and not pod.is_finished:
                ctrl.active += 1
        w.record(POD_CREATED, pod.namespace, pod.name, (pod.uid, tuple(b.pdb.key for b in budgets), healthy(pod)))
        if pod.is_finished:
            if pod.node_name in w.nodes:
                w.nodes[pod.node_name].pods.add(key)
                self.scheduler.inter.pod_bound(pod, w.nodes[pod.node_name].node, 1)
            return pod
        if pod.node_name is None:
            self.scheduler.enqueue(key)
            return pod
        state = w.nodes.get(pod.node_name)
        if state is None:
            # Bound to a node that does not exist: pod GC deletes it.
            w.record(POD_LOST, pod.namespace, pod.name, (pod.uid, pod.is_daemonset))
            self.remove_pod(pod, node_gone=True)
            return pod
        self._bound(pod, state)
        if pod.deletion_time is not None:
            w.clock.call_at(pod.deletion_time + pod.grace_seconds, self._finish_termination, key, pod.uid)
        elif not pod.ready:
            if state.node.ready:
                self.start_pod_timer(pod)
            else:
                state.waiting.append(key)
        elif ctrl is not None and ctrl.kind == "Job":
            self._job_pod_runs(ctrl, pod)
        return pod

    def _bound(self, pod: Pod, state: NodeState) -> None:
        state.pods.add(pod.key)
        state.charge(pod.requests, 1)
        self.scheduler.inter.pod_bound(pod, state.node, 1)

    def bind(self, pod: Pod, state: NodeState) -> None:
        """The scheduler placed ``pod`` on the node: bound, it starts."""
        pod = self.set_pod(pod, node_name=state.node.name, phase=pod.phase, ready=pod.ready, deletion_time=None,
                           started=pod.started, evicted=pod.evicted, scheduled=self.w.now())
        self._bound(pod, state)
        self.w.record(POD_SCHEDULED, pod.namespace, pod.name, (pod.uid, state.node.name))
        self.start_pod_timer(pod)

    def set_pod(self, old: Pod, *, node_name: str | None, phase: str, ready: bool, deletion_time: float | None,
                started: float | None, evicted: bool, scheduled: float | None = None) -> Pod:
        """Store a pod's new binding or status and keep the budgets' healthy counts in step."""
        w = self.w
        w.rv += 1
        new = old.with_status(node_name, phase, ready, deletion_time, started, evicted, w.rv, scheduled)
        w.pods[new.key] = new
        w.note("pods", "MODIFIED", new)
        now = healthy(new)
        if healthy(old) != now:
            self.budgets.health_changed(new.key, now)
        return new

    def start_pod_timer(self, pod: Pod) -> None:
        w = self.w
        ctrl = w.controller_of(pod)
        base = ctrl.start_seconds if ctrl else annotation_seconds(pod, ANNOTATION_START_SECONDS, DEFAULT_START_SECONDS)
        state = w.nodes.get(pod.node_name or "")
        delay = start_seconds(base, state.node if state is not None else None, w.rng)
        if self.image_faults:
            fault = self.image_faults.get(state.node.image or "", 0.0) if state is not None else 0.0
            if fault is None:  # the image's runtime cannot create containers: the kubelet retries, in vain
                w.rv += 1
                w.pods[pod.key] = replace(pod, waiting="CreateContainerError", resource_version=w.rv)
                w.note("pods", "MODIFIED", w.pods[pod.key])
                w.record(POD_CREATE_FAILED, pod.namespace, pod.name, (pod.uid, "CreateContainerError"))
                return
            delay += fault
        w.clock.call_later(delay, self._pod_started, pod.key, pod.uid)

    def set_image_fault(self, image: str, extra_start_seconds: float | None) -> None:
        self.image_faults[image] = extra_start_seconds

    def clear_image_faults(self) -> None:
        w = self.w
        self.image_faults.clear()
        for pod in list(w.pods.values()):
            if pod.waiting and pod.node_name and pod.deletion_time is None:
                w.rv += 1
                pod = w.pods[pod.key] = replace(pod, waiting="", resource_version=w.rv)
                w.note("pods", "MODIFIED", pod)
                self.start_pod_timer(pod)

    def _pod_started(self, key: PodKey, uid: str) -> None:
        pod = self.w.pods.get(key)
        if pod is None or pod.uid != uid or pod.deletion_time is not None or pod.is_finished:
            return
        runtime = self.runtime if self.runtime is not None and self.runtime.runs(pod) else None
        if runtime is not None:
            why = runtime.blocked(pod)
            if why is not None:  # not yet: it waits, says why, and is tried again
                w = self.w
                if pod.waiting != why[0]:
                    w.rv += 1
                    pod = w.pods[key] = replace(pod, waiting=why[0], resource_version=w.rv)
                    w.note("pods", "MODIFIED", pod)
                w.record(POD_CREATE_FAILED, pod.namespace, pod.name, (uid, why[1]))
                w.clock.call_later(CONFIG_RETRY_SECONDS, self._pod_started, key, uid)
                return
            if pod.waiting:
                pod = self.w.pods[key] = replace(pod, waiting="")
        was_ready = pod.ready
        pod = self.set_pod(pod, node_name=pod.node_name, phase="Running", ready=True, deletion_time=None,
                           started=pod.started or self.w.now(), evicted=pod.evicted)
        if not was_ready:  # (a runtime handed a pod it did not start yet: it was Ready already)
            self.w.record(POD_READY, pod.namespace, pod.name, uid)
        if runtime is not None:
            runtime.start(pod)  # it ends when its process does (container_exited)
            return
        ctrl = self.w.controller_of(pod)
        if ctrl is not None and ctrl.kind == "Job":
            self._job_pod_runs(ctrl, pod)

    def _job_pod_runs(self, ctrl: Controller, pod: Pod) -> None:
        """A simulated Job pod (no runtime) ends after its run-seconds, with its exit-code annotation's code."""
        if ctrl.exit_code:
            self.w.clock.call_later(ctrl.run_seconds, self.container_exited, pod.namespace, pod.name, pod.uid,
                                    ctrl.exit_code)
        else:
            self.w.clock.call_later(ctrl.run_seconds, self._pod_succeeded, pod.key, pod.uid)

    def container_exited(self, namespace: str, name: str, uid: str, code: int) -> None:
        """The runtime's word: the pod's process ended with ``code``. A terminating pod is then gone; any other
        succeeded (0) or failed, and its Job judges it."""
        w = self.w
        pod = w.pods.get((namespace, name))
        if pod is None or pod.uid != uid or pod.is_finished:
            return
        if pod.deletion_time is None and pod.owner is not None and pod.owner.kind in RESTARTED:
            self._crashed(pod, code)
            return
        pod = w.pods[pod.key] = replace(pod, exit_code=code, finished=w.clock.now())
        if pod.deletion_time is not None:
            self._finish_termination(pod.key, uid, exited=True)
            return
        if code == 0:
            self._pod_succeeded(pod.key, uid)
            return
        pod, ctrl = self._pod_ended(pod, "Failed")
        if ctrl is not None:
            if ctrl.kind == "Job":
                job.pod_failed(self, ctrl, pod)
            self.reconcile(ctrl)

    def _crashed(self, pod: Pod, code: int) -> None:
        """A container that must run for ever ended (restartPolicy Always): the kubelet starts it again in the same pod,
        at once the first time, then after a back-off (10 s, doubled each time, at most 5 minutes: the kubelet's
        ``flowcontrol.Backoff``; it does not forget a count after 10 minutes of running, as the kubelet does), saying
        ``CrashLoopBackOff`` meanwhile."""
        w = self.w
        pod = self.set_pod(replace(pod, waiting="CrashLoopBackOff", restarts=pod.restarts + 1), node_name=pod.node_name,
                           phase="Running", ready=False, deletion_time=None, started=pod.started, evicted=pod.evicted)
        delay = 0.0 if pod.restarts == 1 else min(CRASH_BACKOFF_SECONDS * 2 ** (pod.restarts - 2), MAX_CRASH_BACKOFF_SECONDS)
        if delay:
            container = pod.containers[0].name if pod.containers else ""
            w.record(POD_BACK_OFF, pod.namespace, pod.name,
                     (pod.uid, f"Back-off restarting failed container {container} in pod {pod.name}_{pod.namespace}"
                      f"({pod.uid}) (it exited {code})"))
        w.clock.call_later(delay, self._pod_started, pod.key, pod.uid)

    def hand_over(self) -> None:
        """A runtime that starts beside a running cluster (the region's kubelets once its API serves) starts the
        containers of the pods it takes that the simulation already runs, as a kubelet that starts runs its node's pods."""
        runtime = self.runtime
        if runtime is None:
            return
        for pod in list(self.w.pods.values()):
            if pod.phase == "Running" and pod.deletion_time is None and pod.node_name and runtime.runs(pod):
                self._pod_started(pod.key, pod.uid)

    def _pod_succeeded(self, key: PodKey, uid: str) -> None:
        w = self.w
        pod = w.pods.get(key)
        if pod is None or pod.uid != uid or pod.deletion_time is not None or pod.is_finished:
            return
        if pod.finished is None:
            pod = w.pods[key] = replace(pod, finished=w.clock.now())
        pod, ctrl = self._pod_ended(pod, "Succeeded")
        w.record(POD_SUCCEEDED, pod.namespace, pod.name, uid)
        if ctrl is not None:
            ctrl.succeeded += 1
            self.reconcile(ctrl)

    def _pod_ended(self, pod: Pod, phase: str) -> tuple[Pod, Controller | None]:
        """The pod's containers ended (``phase`` Succeeded or Failed): its node's room given back, its controller's
        active count down by one; the pod and its controller (None when it has none)."""
        w = self.w
        pod = self.set_pod(pod, node_name=pod.node_name, phase=phase, ready=False, deletion_time=None,
                           started=pod.started, evicted=pod.evicted)
        state = w.nodes.get(pod.node_name or "")
        if state is not None:
            state.charge(pod.requests, -1)
            self.scheduler.schedule_soon()
        ctrl = w.controller_of(pod)
        if ctrl is not None:
            ctrl.active -= 1
        return pod, ctrl

    def begin_termination(self, pod: Pod, evicted: bool) -> Pod:
        if pod.deletion_time is not None:
            return pod
        unbound = pod.node_name is None or pod.is_finished
        new = self.set_pod(pod, node_name=pod.node_name, phase=pod.phase, ready=False, deletion_time=self.w.now(),
                           started=pod.started, evicted=pod.evicted or evicted)
        ctrl = self.w.controller_of(pod)
        if ctrl is not None and not pod.is_finished:
            ctrl.active -= 1
            if ctrl.kind == "Job" and ctrl.failure_rules and not unbound:
                ctrl.terminating += 1  # replaced once it has terminated (podReplacementPolicy Failed)
        if not unbound and not pod.is_finished and self.runtime is not None and self.runtime.runs(pod):
            self.runtime.stop(pod)
        if not evicted:
            self.w.record(POD_TERMINATING, pod.namespace, pod.name, pod.uid)
        if unbound:
            self.remove_pod(new)
        else:
            self.w.clock.call_later(pod.grace_seconds, self._finish_termination, pod.key, pod.uid)
        if ctrl is not None and ctrl.kind in ("ReplicaSet", "Job"):
            self.reconcile(ctrl)
        return new

    def _finish_termination(self, key: PodKey, uid: str, exited: bool = False) -> None:
        pod = self.w.pods.get(key)
        if pod is None or pod.uid != uid:
            return
        if not exited and not pod.is_finished and self.runtime is not None and self.runtime.runs(pod):
            if self.runtime.kill(pod):  # its grace period is over: SIGKILL
                pod = self.w.pods[key] = replace(pod, exit_code=137, finished=self.w.clock.now())
        state = self.w.nodes.get(pod.node_name or "")
        if state is not None and state.kubelet_down:
            state.stuck.append(key)  # no kubelet to confirm the containers stopped: Terminating until it returns
            return
        self.remove_pod(pod)

    def remove_pod(self, pod: Pod, node_gone: bool = False) -> None:
        w = self.w
        key = pod.key
        if w.pods.get(key) is not pod:
            return
        del w.pods[key]
        w.rv += 1  # a deletion is a change: watchers and the API's change log must see it
        w.note("pods", "DELETED", pod)
        w.pods_by_ns[pod.namespace].discard(key)
        self.scheduler.forget(key)
        self.budgets.pod_removed(pod)
        state = w.nodes.get(pod.node_name or "")
        if state is not None and key in state.pods:
            state.pods.discard(key)
            if not pod.is_finished:
                state.charge(pod.requests, -1)
            self.scheduler.inter.pod_bound(pod, state.node, -1)
            self.scheduler.schedule_soon()
        w.record(POD_DELETED, pod.namespace, pod.name, pod.uid)
        if not pod.is_finished and self.runtime is not None and self.runtime.runs(pod):
            self.runtime.kill(pod)  # gone with its node, or deleted past its grace: its process goes too
        ctrl = w.controller_of(pod)
        if ctrl is None:
            return
        ctrl.pods.discard(key)
        if pod.deletion_time is None and not pod.is_finished:
            ctrl.active -= 1  # lost without terminating first
        if ctrl.kind == "Job" and ctrl.failure_rules and not pod.is_finished:
            if pod.deletion_time is not None and pod.node_name is not None:
                ctrl.terminating -= 1
            # it ended without succeeding: a pod lost with its node is the pod GC's (DisruptionTarget)
            job.pod_failed(self, ctrl, replace(pod, disruption=pod.disruption or ("DeletionByPodGC" if node_gone else "")))
        if ctrl.kind == "DaemonSet":
            daemonset.pod_gone(self, ctrl, state.node.name if state is not None else None,
                               not node_gone and state is not None and state.alive)
        elif ctrl.kind == "StatefulSet":
            self.reconcile(ctrl, recreate=pod.name)
        else:
            self.reconcile(ctrl)
