"""Draining nodes through the cluster interface, as ``kubectl drain`` does.

Cordon the nodes, then evict every pod that drain evicts (not DaemonSet pods, not mirror pods, not
finished pods), retrying refused evictions every ``poll_seconds`` on the cluster's own clock, until
no such pod is left on any of the nodes (terminating pods count until they are gone) or the timeout
passes. Several nodes drain together, which is how a rotation wave drains. This acts; it plans
nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import Pod


def drain_blocks_on(pod: Pod) -> bool:
    """Whether drain has to move ``pod`` off its node before the node counts as drained."""
    return not (pod.is_daemonset or pod.is_mirror or pod.is_finished)


@dataclass
class DrainReport:
    nodes: tuple[str, ...]
    drained: list[str] = field(default_factory=list)
    evictions: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    timed_out: bool = False

    @property
    def complete(self) -> bool:
        return len(self.drained) == len(self.nodes)


def drain(
    cluster: Cluster,
    nodes: Sequence[str],
    *,
    poll_seconds: float = 5.0,
    timeout_seconds: float = 3600.0,
    on_poll: Callable[[DrainReport], None] | None = None,
) -> DrainReport:
    clock = cluster.clock
    start = clock.now()
    report = DrainReport(tuple(nodes))
    for name in nodes:
        cluster.cordon(name)
    remaining = list(dict.fromkeys(nodes))
    while True:
        still: list[str] = []
        for name in remaining:
            blocking = [p for p in cluster.list_pods(node_name=name) if drain_blocks_on(p)]
            if not blocking:
                report.drained.append(name)
                continue
            still.append(name)
            for pod in blocking:
                if pod.terminating:
                    continue
                result = cluster.evict(pod.namespace, pod.name)
                if result.allowed:
                    report.evictions += 1
                elif result.code != 404:
                    report.refusals[f"{result.code} {result.reason or 'Error'}"] += 1
        remaining = still
        report.seconds = clock.now() - start
        if on_poll is not None:
            on_poll(report)
        if not remaining:
            return report
        if report.seconds >= timeout_seconds:
            report.timed_out = True
            return report
        clock.sleep(poll_seconds)
