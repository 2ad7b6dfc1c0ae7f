"""Whether a PodDisruptionBudget at its floor gives room again by itself: a wait, or a block.

A budget allows no disruption when it has no more healthy pods than it needs. Most often that is for a moment: the
pods an earlier wave evicted are on their way back (waiting for the node that boots for them, starting on it, not yet
Ready), its controller has not made all of them yet, or its status — which the disruption controller writes after
the pods change — has not caught up with pods that are Ready already. Such a budget recovers; the rotation waits for
it. It cannot recover when none of its missing pods is on its way: every one fails to start (CrashLoopBackOff,
ImagePullBackOff …: the application is unhealthy on its own) or the scheduler cannot place it on any node there is or
that is booting. That is a block, named with its reason.

``budget_recovery`` only reads the planner's snapshot; ``upgrade_service.running.execute`` waits on what it finds, and gives up
on a budget whose pods show no change for ``stuckSeconds`` past the time its pods take to start.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from platformctl.kernel.cluster.model import Node, PDBStatus, Pod, PodDisruptionBudget
from platformctl.kernel.cluster.scheduling import static_reason

# What the kubelet says of a container that will not start without someone changing something.
FAILING = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "CreateContainerError",
           "InvalidImageName", "RunContainerError", "ErrImageNeverPull")


@dataclass(frozen=True, slots=True)
class Recovery:
    """What a budget at its floor is waiting for: ``coming`` of its pods are on their way back (``recovering``), or
    ``detail`` says why none is."""

    coming: int
    detail: str
    lagging: bool = False  # its pods already give room; the status has not caught up

    @property
    def recovering(self) -> bool:
        return self.coming > 0 or self.lagging


def failing(pod: Pod) -> bool:
    return pod.waiting.startswith(FAILING)


def placeable(pod: Pod, nodes: Collection[Node]) -> bool:
    """Whether a pending pod will get a node: the scheduler has not said it cannot place it and a node there is would
    take it, or a node that is still booting would (the scheduler refuses a pod until then)."""
    for node in nodes:
        if node.unschedulable:
            continue
        if node.ready and not pod.unschedulable and static_reason(pod, node) is None:
            return True
        if not node.ready and static_reason(pod, replace(node, ready=True)) is None:
            return True
    return False


def budget_recovery(pdb: PodDisruptionBudget, members: list[Pod], nodes: Collection[Node], computed: PDBStatus) -> Recovery:
    """``pdb`` at its floor, ``members`` the pods it selects, ``nodes`` the cluster's, ``computed`` the status the
    disruption controller would write over ``members`` now."""
    if computed.disruptions_allowed > 0:
        return Recovery(0, f"its status lags its pods, {computed.current_healthy} of which are healthy", lagging=True)
    pending = starting = 0
    stuck: list[str] = []
    live = 0
    for pod in members:
        if pod.terminating or pod.is_finished:
            continue
        live += 1
        if pod.ready:
            continue
        if pod.node_name is None:
            if placeable(pod, nodes):
                pending += 1
            else:
                stuck.append(f"pod {pod.name} cannot be placed"
                             + (f" ({pod.unschedulable})" if pod.unschedulable else " on any node"))
        elif failing(pod):
            stuck.append(f"pod {pod.name} on {pod.node_name}: {pod.waiting}")
        else:
            starting += 1
    made = max(computed.expected_pods - live, 0)  # its controller makes them again (a ReplicaSet as soon as one goes)
    coming = pending + starting + made
    if coming:
        parts = [f"{n} {what}" for n, what in ((pending, "waiting for a node"), (starting, "starting"),
                                                (made, "not yet made by its controller")) if n]
        return Recovery(coming, f"{coming} of its pods {'is' if coming == 1 else 'are'} on the way back ({', '.join(parts)})")
    return Recovery(0, "; ".join(stuck[:2]) if stuck else "none of its missing pods is on the way back")
