"""The Job controller: ``parallelism`` pods at a time until ``completions`` of them succeeded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platformctl.cluster.simulator import SimulatedCluster


def reconcile(sim: SimulatedCluster, ctrl: Any) -> None:
    while ctrl.active < ctrl.replicas and ctrl.succeeded + ctrl.active < ctrl.completions:
        sim._create_owned_pod(ctrl)
    if ctrl.succeeded >= ctrl.completions and not ctrl.done:
        ctrl.done = True
        ctrl.done_at = sim.now()
        if ctrl.ttl_seconds is not None:
            sim._clock.call_later(ctrl.ttl_seconds, sim._delete_controller, ctrl.uid)
        for hook in sim.job_done_hooks:  # the CronJob controller prunes its history when a Job of it finishes
            hook(ctrl.uid)
