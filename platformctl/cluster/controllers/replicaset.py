"""The ReplicaSet controller: ``replicas`` pods, no more, no fewer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platformctl.cluster.model import Pod
    from platformctl.cluster.simulator import SimulatedCluster


def _deletion_rank(pod: Pod) -> tuple[Any, ...]:
    """Which pods a scale-down deletes first, as the ReplicaSet controller ranks them (``ActivePods``):
    unassigned before assigned, pending before running, not Ready before Ready, the newest first."""
    return (pod.node_name is not None, pod.phase == "Running", pod.ready, -pod.created)


def reconcile(sim: SimulatedCluster, ctrl: Any) -> None:
    while ctrl.active < ctrl.replicas:
        sim._create_owned_pod(ctrl)
    while ctrl.active > ctrl.replicas:  # one at a time: each deletion re-enters this controller
        live = [sim._pods[k] for k in ctrl.pods if k in sim._pods]
        live = [p for p in live if p.deletion_time is None and not p.is_finished]
        if not live:
            return
        sim._begin_termination(min(live, key=_deletion_rank), evicted=False)
