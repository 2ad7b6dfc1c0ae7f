"""Checks over a simulator's event log, made after the fact.

They replay the log on their own bookkeeping (which pods are healthy under which budget) rather
than trusting the simulator's incremental counters, so a bug in those counters shows up here.
"""

from __future__ import annotations

from collections.abc import Iterable

from platformctl.emulator import simulator as sim


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
