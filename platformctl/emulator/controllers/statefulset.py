"""The StatefulSet controller: pods ``<name>-0`` … ``<name>-<replicas-1>``, each recreated under its own name
once the old one is gone; a scale-down removes the highest ordinals first."""

from __future__ import annotations

from platformctl.emulator.controllers.host import Controller, ControllerHost


def _ordinal(ctrl: Controller, pod_name: str) -> int:
    tail = pod_name.removeprefix(f"{ctrl.name}-")
    return int(tail) if tail.isdigit() else -1


def reconcile(host: ControllerHost, ctrl: Controller, recreate: str | None = None) -> None:
    if recreate is not None:
        if host.find_pod((ctrl.namespace, recreate)) is None and _ordinal(ctrl, recreate) < ctrl.replicas:
            host.create_owned_pod(ctrl, name=recreate)
        return
    for i in range(ctrl.replicas):
        name = f"{ctrl.name}-{i}"
        if host.find_pod((ctrl.namespace, name)) is None:
            host.create_owned_pod(ctrl, name=name)
    surplus = sorted((k for k in ctrl.pods if _ordinal(ctrl, k[1]) >= ctrl.replicas), key=lambda k: -_ordinal(ctrl, k[1]))
    for key in surplus:
        pod = host.find_pod(key)
        if pod is not None and pod.deletion_time is None:
            host.terminate_pod(pod)
