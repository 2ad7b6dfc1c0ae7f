"""The ReplicaSet controller: ``replicas`` pods, no more, no fewer."""

from __future__ import annotations

from typing import Any

from platformctl.emulator.controllers.host import Controller, ControllerHost
from platformctl.kernel.cluster.model import Pod


def _deletion_rank(pod: Pod) -> tuple[Any, ...]:
    """Which pods a scale-down deletes first, as the ReplicaSet controller ranks them (``ActivePods``):
    unassigned before assigned, pending before running, not Ready before Ready, the newest first."""
    return (pod.node_name is not None, pod.phase == "Running", pod.ready, -pod.created)


def reconcile(host: ControllerHost, ctrl: Controller) -> None:
    while ctrl.active < ctrl.replicas:
        if host.create_owned_pod(ctrl) is None:  # admission refused it (its FailedCreate said why)
            break
    while ctrl.active > ctrl.replicas:  # one at a time: each deletion re-enters this controller
        owned = (host.find_pod(k) for k in ctrl.pods)
        live = [p for p in owned if p is not None and p.deletion_time is None and not p.is_finished]
        if not live:
            return
        host.terminate_pod(min(live, key=_deletion_rank))
