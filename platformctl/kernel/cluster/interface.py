"""The one small interface to a Kubernetes cluster.

``SimulatedCluster`` (in-process, virtual time) and ``LiveCluster`` (the official client, via
kubeconfig) both implement it; nothing above it knows which one it talks to. Its methods are the
API calls the toolkit needs, with the API's own semantics: label selectors in the API's string
syntax, cordon as ``spec.unschedulable``, and ``evict`` answering exactly as the eviction
subresource does (201, 429 with a budget cause, 500 for a pod under two budgets, 404).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from platformctl.kernel.clock import Clock
from platformctl.kernel.cluster.informer import Informer
from platformctl.kernel.cluster.model import EvictionResult, Node, Pod, PodDisruptionBudget, Taint


@runtime_checkable
class Cluster(Protocol):
    name: str

    @property
    def clock(self) -> Clock:
        """The time the cluster lives in: waits against this cluster sleep on it."""
        ...

    def list_nodes(self, label_selector: str | None = None) -> list[Node]: ...

    def get_node(self, name: str) -> Node:
        """Raises ``NotFoundError`` for an unknown node."""
        ...

    def cordon(self, name: str, unschedulable: bool = True) -> Node: ...

    def taint(self, name: str, taint: Taint) -> Node:
        """Add ``taint`` to the node (replacing one with the same key and effect); the node's other taints stay."""
        ...

    def untaint(self, name: str, key: str) -> Node:
        """Remove every taint with ``key``; the node's other taints stay."""
        ...

    def delete_node(self, name: str) -> None: ...

    def list_pods(
        self,
        namespace: str | None = None,
        label_selector: str | None = None,
        node_name: str | None = None,
    ) -> list[Pod]: ...

    def get_pod(self, namespace: str, name: str) -> Pod: ...

    def evict(self, namespace: str, name: str) -> EvictionResult: ...

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> Pod:
        """Delete a pod directly, past every budget (``grace_seconds=0``: at once, as ``--force`` does).
        Only for pods that are not running anyway: everything else goes through ``evict``."""
        ...

    def list_pdbs(self, namespace: str | None = None) -> list[PodDisruptionBudget]: ...

    def create_pod(self, pod: Pod) -> Pod:
        """Create ``pod`` as a user's client does (its namespace must exist on a real cluster)."""
        ...

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create a namespace; one that exists already is left as it is."""
        ...

    def list_namespaces(self, label_selector: str | None = None) -> list[str]: ...

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace and so everything in it (one already gone is not an error)."""
        ...

    # Workload objects as the API's JSON (kinds Deployment, ReplicaSet, DaemonSet, StatefulSet, Job, CronJob,
    # PodDisruptionBudget), read back with the status their controllers write.
    def create_object(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def get_object(self, kind: str, namespace: str, name: str) -> dict[str, Any]: ...

    def replace_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT: a ``metadata.resourceVersion`` in ``obj`` makes it a compare-and-swap (409 when stale)."""
        ...

    def patch_object(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch."""
        ...

    def scale(self, kind: str, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        """The ``scale`` subresource; returns the ``autoscaling/v1`` Scale."""
        ...

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        """Delete it and, in the background, what it owns (a Deployment's ReplicaSets and pods)."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """The cluster as ``kubectl get nodes,pods,pdb -A -o json`` prints it."""
        ...

    def informer(self, kind: str) -> Informer:
        """A cache of the cluster's ``nodes`` or ``pods``, listed once and kept current by the API's watch
        (``platformctl.kernel.cluster.informer``): waits on it wake when what they wait for happens."""
        ...
