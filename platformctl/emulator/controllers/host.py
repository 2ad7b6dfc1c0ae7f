"""What the pod controllers (``replicaset``, ``statefulset``, ``daemonset``, ``job``) see of the cluster that runs them.

``Controller`` is the record of one controller of pods, kept by the simulator: its kind, its pod template,
its scale and the pods it owns. ``ControllerHost`` names exactly what a controller calls on the cluster:
find a pod, create one of its own, delete one, delete a finished controller later, the nodes and the
DaemonSets there are, and the clock. The simulator implements it (its pods room,
``platformctl.emulator.simulation.pods``); this module imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from platformctl.emulator.podspec import DEFAULT_RUN_SECONDS, DEFAULT_START_SECONDS, annotation_code, annotation_seconds
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.model import ANNOTATION_RUN_SECONDS, ANNOTATION_START_SECONDS, Node, Pod
from platformctl.kernel.cluster.scheduling import static_key

PodKey = tuple[str, str]  # (namespace, name)


class Controller:
    """One ReplicaSet, StatefulSet, DaemonSet or Job as the simulator runs it."""

    __slots__ = (
        "kind", "namespace", "name", "uid", "template", "replicas", "pods", "active",
        "completions", "succeeded", "ttl_seconds", "start_seconds", "run_seconds", "exit_code", "sched_key", "done", "done_at", "created",
        "backoff_limit", "failure_rules", "failed", "failed_reason", "failed_message", "terminating",
    )

    def __init__(self, kind: str, namespace: str, name: str, uid: str, template: Pod, replicas: int) -> None:
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.uid = uid
        self.template = template
        self.replicas = replicas  # parallelism, for a Job
        self.pods: set[PodKey] = set()
        self.active = 0  # owned pods neither terminating nor finished
        self.completions = replicas
        self.succeeded = 0
        self.ttl_seconds: float | None = None
        self.start_seconds = annotation_seconds(template, ANNOTATION_START_SECONDS, DEFAULT_START_SECONDS)
        self.run_seconds = annotation_seconds(template, ANNOTATION_RUN_SECONDS, DEFAULT_RUN_SECONDS)
        self.exit_code = annotation_code(template)  # a Job pod's, once it has run
        self.sched_key: tuple[Any, ...] = static_key(template)
        self.done = False
        self.done_at: float | None = None  # when a Job completed (or failed)
        self.created = 0.0
        # A Job's: its backoffLimit, its podFailurePolicy's rules (with them, a pod is replaced only once it has
        # terminated: Kubernetes' podReplacementPolicy Failed), the pods that failed and counted, and why it failed.
        self.backoff_limit = 6
        self.failure_rules: tuple[dict[str, Any], ...] = ()
        self.failed = 0
        self.failed_reason = ""  # BackoffLimitExceeded or PodFailurePolicy once the Job failed
        self.failed_message = ""
        self.terminating = 0  # its pods terminating and not yet replaced (with failure rules)


class ControllerHost(Protocol):
    """The cluster as a pod controller acts on it."""

    @property
    def clock(self) -> VirtualClock: ...

    @property
    def job_done_hooks(self) -> list[Callable[[str], None]]:
        """Called with a Job controller's uid when it completes (the CronJob controller prunes its history)."""
        ...

    def now(self) -> float: ...

    def find_pod(self, key: PodKey) -> Pod | None:
        """The pod of that namespace and name, if there is one."""
        ...

    def create_owned_pod(self, ctrl: Controller, node_name: str | None = None, name: str | None = None) -> Pod | None:
        """A new pod from ``ctrl``'s template, owned by it: bound to ``node_name`` if given (a DaemonSet's), named
        ``name`` if given (a StatefulSet's), else ``<controller>-<random suffix>``; None when admission refused it."""
        ...

    def terminate_pod(self, pod: Pod) -> Pod:
        """Delete ``pod`` as its controller does (no budget check): it terminates over its grace period."""
        ...

    def delete_controller(self, uid: str) -> None:
        """The controller goes, and as the garbage collector does, every pod it owns."""
        ...

    def live_nodes(self) -> list[Node]:
        """Every node of the cluster."""
        ...

    def controllers_of_kind(self, kind: str) -> list[Controller]: ...
