"""Putting back what a rotation holds: settle every side effect a dead run left unconfirmed by looking at the world,
then terminate a first-light node its judgement has not let in and uncordon and untaint every node the run still holds,
journalled. The executor does it when it is aborted, and
``rotate abort`` (``upgrade_service.running.runs.abort_cluster``) when the run that held them is gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.errors import NotFoundError
from platformctl.kernel.nodegroups import NodeGroups
from upgrade_service.journal.intents import settle_eviction, settle_with_groups
from upgrade_service.journal.records import AbortedRecord, Control, ControlAction
from upgrade_service.journal.rotation import FIRST_LIGHT_KEY, Journal
from upgrade_service.running.first_light import clear_node, first_light_instances, node_of
from upgrade_service.running.run_types import TAINT


def settle_everything(journal: Journal, cluster: Cluster, groups: NodeGroups | None) -> None:
    """Close every side effect a dead run started but never confirmed, by looking at the world: an instance terminated
    only if its group no longer has it in service, a capacity change if the group shows it, a cordon or taint if the
    node carries it, an eviction if its pod is gone. What then counts as held is what really is."""
    state = journal.refresh()
    for key, intent in list(state.pending.items()):
        if groups is not None and settle_with_groups(journal, key, intent, groups):
            continue
        if settle_eviction(journal, key, intent, cluster):
            continue
        op, node = intent["op"], intent.get("node")
        if op in ("cordon", "uncordon", "taint", "untaint") and node:
            try:
                found = cluster.get_node(node)
            except NotFoundError:
                journal.done(key, ok=False, recovered=True, result="node gone")
                continue
            taint = FIRST_LIGHT_KEY if intent.get("first_light") else TAINT.key
            tainted = any(t.key == taint for t in found.taints)
            happened = {"cordon": found.unschedulable, "uncordon": not found.unschedulable, "taint": tainted,
                        "untaint": not tainted}[op]
            journal.done(key, ok=happened, recovered=True,
                         result=f"the node {'shows' if happened else 'does not show'} it: {op} {'happened' if happened else 'never took effect'}")
        else:
            journal.done(key, ok=False, recovered=True, result="interrupted; not redone by an abort")


def put_back(journal: Journal, cluster: Cluster, groups: NodeGroups | None = None) -> tuple[str, list[str]]:
    """End an open run as aborted: settle what a dead run left unconfirmed, then uncordon and untaint every node it
    still holds (journalled). Returns why, and the nodes still held afterwards as the cluster shows them (none, unless
    an API call failed). The capacity it added stays: lowering a group's desired count would let the group pick which
    instance goes, and it may pick a node with pods on it."""
    settle_everything(journal, cluster, groups)
    state = journal.refresh()
    lit = state.first_light
    if lit is not None and not lit.passed and groups is not None:  # a first-light node its judgement has not let in
        for pool, group, instance in first_light_instances(lit, groups):
            lit_node = lit.nodes.get(pool) or node_of(cluster, instance)
            if lit_node and clear_node(cluster, journal, lit_node, pool):
                continue  # pods that would not leave: kept (cordoned, and said below)
            key = journal.intent("terminate", node=lit_node, instance=instance, group=group, decrement=True,
                                 first_light=pool)
            groups.retire(instance, replace=False)
            journal.done(key)
        state = journal.refresh()
    request = state.abort or Control(ControlAction.ABORT, None)
    undoings: tuple[tuple[str, set[str], Callable[[str], Any]], ...] = (
        ("uncordon", state.cordoned, lambda n: cluster.cordon(n, False)),
        ("untaint", state.tainted, lambda n: cluster.untaint(n, TAINT.key)))
    for op, names, undo in undoings:
        for name in sorted(names):
            key = journal.intent(op, node=name)
            try:
                undo(name)
            except NotFoundError as exc:
                journal.done(key, ok=False, error=str(exc))
                continue
            journal.done(key)
    state = journal.refresh()
    held = []
    for name in sorted(state.cordoned | state.tainted):
        try:
            node = cluster.get_node(name)
        except NotFoundError:
            continue
        if node.unschedulable or any(t.key == TAINT.key for t in node.taints):
            held.append(name)
    reason = f"aborted by {request.by or 'an operator'}" + (f": {request.reason}" if request.reason else "")
    journal.append(AbortedRecord(request.by, reason, held))
    return reason, held
