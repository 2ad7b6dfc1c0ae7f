"""The DaemonSet controller: one pod on every node whose labels and taints admit the template."""

from __future__ import annotations

from platformctl.emulator.controllers.host import Controller, ControllerHost
from platformctl.kernel.cluster.model import Node
from platformctl.kernel.cluster.scheduling import static_filter


def admits(ctrl: Controller, node: Node) -> bool:
    return static_filter(ctrl.template)(node)


def start(host: ControllerHost, ctrl: Controller) -> None:
    """A new DaemonSet: a pod on every node that admits it."""
    for node in host.live_nodes():
        if admits(ctrl, node):
            host.create_owned_pod(ctrl, node_name=node.name)


def node_added(host: ControllerHost, node: Node) -> None:
    for ctrl in host.controllers_of_kind("DaemonSet"):
        if admits(ctrl, node):
            host.create_owned_pod(ctrl, node_name=node.name)


def pod_gone(host: ControllerHost, ctrl: Controller, node_name: str | None, node_alive: bool) -> None:
    """One of its pods went away: recreated on the same node while the node lives."""
    if node_name is not None and node_alive:
        host.create_owned_pod(ctrl, node_name=node_name)
