"""A snapshot loaded into the simulator, and the whole-cluster views: the snapshot it would save, and whether it
has settled."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from platformctl.emulator.controllers.host import Controller
from platformctl.emulator.simulation.budgets import BudgetRoom
from platformctl.emulator.simulation.nodes import NodeRoom
from platformctl.emulator.simulation.pods import PodRoom
from platformctl.emulator.simulation.scheduler import Scheduler
from platformctl.emulator.simulation.world import World
from platformctl.kernel.cluster.budget_status import CONTROLLER_API, inferred_scale
from platformctl.kernel.cluster.model import Pod, Snapshot, snapshot_document


def load(world: World, nodes: NodeRoom, budgets: BudgetRoom, pods: PodRoom, snapshot: Snapshot) -> None:
    """The snapshot's objects, as they are, into an empty simulator; its controllers inferred from the pods' owners.

    A controller's scale is taken as the number of its pods that are neither terminating nor finished (for a
    StatefulSet, terminating ones count: it has not replaced them yet); a Job runs its active pods to
    completion; a DaemonSet's template is one of its pods.
    """
    versions = [n.resource_version for n in snapshot.nodes] + [p.resource_version for p in snapshot.pods]
    versions += [b.resource_version for b in snapshot.pdbs]
    world.rv = max(versions, default=0)  # objects keep their versions; changes count on from here
    for node in snapshot.nodes:
        nodes.register(node)
    for pdb in snapshot.pdbs:
        budgets.create(pdb, keep_version=True)
    by_owner: dict[str, list[Pod]] = {}
    for pod in snapshot.pods:
        if pod.owner is not None and pod.owner.kind in CONTROLLER_API:
            by_owner.setdefault(pod.owner.uid, []).append(pod)
    for uid, owned in by_owner.items():
        first = owned[0]
        assert first.owner is not None
        template = replace(first, name=first.owner.name)
        ctrl = Controller(first.owner.kind, first.namespace, first.owner.name, uid, template,
                          inferred_scale(first.owner.kind, owned))
        if ctrl.kind == "Job":
            live = sum(1 for p in owned if p.deletion_time is None and not p.is_finished)
            ctrl.completions = live + sum(1 for p in owned if p.phase == "Succeeded")
            ctrl.succeeded = ctrl.completions - live
        world.controllers[uid] = ctrl
    for pod in snapshot.pods:
        pods.add_pod(pod, keep_version=True)


def document(world: World, budgets: BudgetRoom) -> dict[str, Any]:
    """The cluster as ``kubectl get nodes,pods,pdb -A -o json`` would print it."""
    nodes = sorted((s.node for s in world.nodes.values()), key=lambda n: n.name)
    pods = sorted(world.pods.values(), key=lambda p: p.key)
    pdbs = sorted(budgets.list_pdbs(), key=lambda b: b.key)
    return snapshot_document(nodes, pods, pdbs)


def settled(world: World, scheduler: Scheduler) -> bool:
    """No pod waits for a node and every node and every running pod is Ready."""
    if scheduler.pending:
        return False
    if any(not s.node.ready for s in world.nodes.values()):
        return False
    return all(p.ready or p.is_finished or p.deletion_time is not None for p in world.pods.values())
