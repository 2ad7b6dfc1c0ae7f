"""The Job controller: ``parallelism`` pods at a time until ``completions`` of them succeeded."""

from __future__ import annotations

from platformctl.emulator.controllers.host import Controller, ControllerHost


def reconcile(host: ControllerHost, ctrl: Controller) -> None:
    while ctrl.active < ctrl.replicas and ctrl.succeeded + ctrl.active < ctrl.completions:
        host.create_owned_pod(ctrl)
    if ctrl.succeeded >= ctrl.completions and not ctrl.done:
        ctrl.done = True
        ctrl.done_at = host.now()
        if ctrl.ttl_seconds is not None:
            host.clock.call_later(ctrl.ttl_seconds, host.delete_controller, ctrl.uid)
        for hook in host.job_done_hooks:  # the CronJob controller prunes its history when a Job of it finishes
            hook(ctrl.uid)
