"""The DaemonSet controller: one pod on every node whose labels and taints admit the template."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from platformctl.cluster.model import Node
    from platformctl.cluster.simulator import SimulatedCluster


def admits(ctrl: Any, node: Node) -> bool:
    from platformctl.cluster.simulator import _predicate

    return _predicate(ctrl.template)(node)


def start(sim: SimulatedCluster, ctrl: Any) -> None:
    """A new DaemonSet: a pod on every node that admits it."""
    for state in list(sim._nodes.values()):
        if state.alive and admits(ctrl, state.node):
            sim._create_owned_pod(ctrl, node_name=state.node.name)


def node_added(sim: SimulatedCluster, node: Node) -> None:
    for ctrl in list(sim._controllers.values()):
        if ctrl.kind == "DaemonSet" and admits(ctrl, node):
            sim._create_owned_pod(ctrl, node_name=node.name)


def pod_gone(sim: SimulatedCluster, ctrl: Any, node_name: str | None, node_alive: bool) -> None:
    """One of its pods went away: recreated on the same node while the node lives."""
    if node_name is not None and node_alive:
        sim._create_owned_pod(ctrl, node_name=node_name)
