"""The StatefulSet controller: pods ``<name>-0`` … ``<name>-<replicas-1>``, each recreated under its own name
once the old one is gone; a scale-down removes the highest ordinals first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platformctl.cluster.simulator import SimulatedCluster


def _ordinal(ctrl: Any, pod_name: str) -> int:
    tail = pod_name.removeprefix(f"{ctrl.name}-")
    return int(tail) if tail.isdigit() else -1


def reconcile(sim: SimulatedCluster, ctrl: Any, recreate: str | None = None) -> None:
    if recreate is not None:
        if (ctrl.namespace, recreate) not in sim._pods and _ordinal(ctrl, recreate) < ctrl.replicas:
            sim._create_owned_pod(ctrl, name=recreate)
        return
    for i in range(ctrl.replicas):
        name = f"{ctrl.name}-{i}"
        if (ctrl.namespace, name) not in sim._pods:
            sim._create_owned_pod(ctrl, name=name)
    surplus = sorted((k for k in ctrl.pods if _ordinal(ctrl, k[1]) >= ctrl.replicas), key=lambda k: -_ordinal(ctrl, k[1]))
    for key in surplus:
        pod = sim._pods.get(key)
        if pod is not None and pod.deletion_time is None:
            sim._begin_termination(pod, evicted=False)
