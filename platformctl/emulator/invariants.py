"""Checks over a simulator's event log, made after the fact.

They replay the log on their own bookkeeping (which pods are healthy under which budget) rather
than trusting the simulator's incremental counters, so a bug in those counters shows up here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from platformctl.emulator import simulator as sim
from platformctl.kernel.cluster.model import ANNOTATION_ROTATION, ANNOTATION_SETTLE, Pod


def eviction_budget_violations(events: Iterable[sim.Event]) -> list[str]:
    """Every eviction of a healthy pod that left its budget below its desired healthy count."""
    budgets_of: dict[str, tuple[tuple[str, str], ...]] = {}
    healthy: dict[tuple[str, str], set[str]] = {}
    violations: list[str] = []

    def unhealthy(uid: str) -> None:
        for key in budgets_of.get(uid, ()):
            healthy.setdefault(key, set()).discard(uid)

    for ev in events:
        kind = ev.kind
        if kind == sim.POD_CREATED:
            uid, keys, is_healthy = ev.detail
            budgets_of[uid] = keys
            if is_healthy:
                for key in keys:
                    healthy.setdefault(key, set()).add(uid)
        elif kind == sim.PDB_CREATED:
            key, members = ev.detail
            for uid, is_healthy in members:
                budgets_of[uid] = (*budgets_of.get(uid, ()), key)
                if is_healthy:
                    healthy.setdefault(key, set()).add(uid)
        elif kind == sim.POD_READY:
            for key in budgets_of.get(ev.detail, ()):
                healthy.setdefault(key, set()).add(ev.detail)
        elif kind in (sim.POD_TERMINATING, sim.POD_SUCCEEDED, sim.POD_NOT_READY):
            unhealthy(ev.detail)
        elif kind == sim.POD_LOST:
            unhealthy(ev.detail[0])
        elif kind == sim.POD_DELETED:
            unhealthy(ev.detail)
            budgets_of.pop(ev.detail, None)
        elif kind == sim.POD_EVICTED:
            uid, was_healthy, budget, desired = ev.detail
            unhealthy(uid)
            if budget is not None and was_healthy:
                left = len(healthy.get(budget, ()))
                if left < desired:
                    violations.append(
                        f"{ev.time:.0f}: evicting {ev.namespace}/{ev.name} left budget {'/'.join(budget)} "
                        f"with {left} healthy pods, below its desired {desired}"
                    )
    return violations


def lost_pods(events: Iterable[sim.Event], include_daemonsets: bool = False) -> list[str]:
    """Pods that went down with their node instead of being moved off it first (a DaemonSet's pods
    belong to their node and are left out unless asked for)."""
    return [f"{e.namespace}/{e.name}" for e in events if e.kind == sim.POD_LOST and (include_daemonsets or not e.detail[1])]


def deleted_without_eviction(events: Iterable[sim.Event]) -> list[str]:
    """Running pods a client deleted directly, bypassing the eviction API and every budget."""
    return [f"{e.namespace}/{e.name}" for e in events if e.kind == sim.POD_DELETE_REQUESTED]


def one_at_a_time_breaches(events: Iterable[sim.Event], pods: Iterable[Pod],
                           settle_of: Callable[[Pod], float | None] | None = None) -> list[str]:
    """Evictions of a one-at-a-time workload's pod while another of its pods was not Ready again yet, or before the
    last one back had been Ready for the workload's settle time. ``pods``: the cluster's pods before (a StatefulSet's
    pods keep their names); ``settle_of``: a pod's settle seconds when it is one-at-a-time, else None (a rotation
    policy's rules decide); without it, the pods' own ``platformctl.io/rotation`` annotations."""
    workload_of: dict[tuple[str, str], tuple[str, str]] = {}
    settle: dict[tuple[str, str], float] = {}
    for p in pods:
        seconds = settle_of(p) if settle_of is not None else \
            float(p.annotations.get(ANNOTATION_SETTLE) or 0) if p.annotations.get(ANNOTATION_ROTATION) == "one-at-a-time" \
            else None
        if seconds is not None and p.owner is not None:
            key = (p.namespace, p.owner.name)
            workload_of[(p.namespace, p.name)] = key
            settle[key] = seconds
    away: dict[tuple[str, str], set[str]] = {}
    back: dict[tuple[str, str], float] = {}
    out = []
    for e in events:
        workload = workload_of.get((e.namespace, e.name))
        if workload is None:
            continue
        gone = away.setdefault(workload, set())
        if e.kind == sim.POD_EVICTED:
            others = gone - {e.name}
            if others or e.time < back.get(workload, float("-inf")) + settle[workload]:
                why = f"{', '.join(sorted(others))} not back yet" if others else \
                    f"{e.time - back[workload]:.0f} s after the last one came back, of {settle[workload]:.0f} s to settle"
                out.append(f"{e.namespace}/{e.name} evicted while {why}")
            gone.add(e.name)
        elif e.kind == sim.POD_READY and e.name in gone:
            gone.discard(e.name)
            back[workload] = e.time
    return out
