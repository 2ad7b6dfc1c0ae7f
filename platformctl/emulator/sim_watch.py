"""The simulator's watch: a change log of its nodes and pods, and the informer that reads it in virtual time.

Every change the simulator makes to a node or a pod is appended to ``ChangeLog`` (once a watcher has
asked for it: a simulation nobody watches keeps none) with a resource version of its own, as the
API server's watch cache keeps them; the oldest are dropped past ``capacity``, and a watcher that
fell further behind is told its version expired, as the API server answers 410 Gone.

``SimulatedInformer.wait`` steps the virtual clock from one due callback to the next and applies
what each step changed, so a waiter wakes at the very instant what it waits for happens, and
hours of rotation still play out in seconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any, Protocol

from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.informer import Informer, WatchEvent
from platformctl.kernel.cluster.model import Node, Pod, PodDisruptionBudget


class Expired(Exception):
    """The asked version is older than the oldest change kept."""


class ChangeLog:
    def __init__(self, floor: int, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self.entries: dict[str, list[tuple[int, str, Any]]] = {"nodes": [], "pods": [], "pdbs": []}
        self.floor = {"nodes": floor, "pods": floor, "pdbs": floor}

    def append(self, kind: str, type_: str, obj: Any, rv: int) -> None:
        log = self.entries[kind]
        log.append((rv, type_, obj))
        if len(log) > self.capacity:
            drop = len(log) // 2
            self.floor[kind] = log[drop - 1][0]
            del log[:drop]

    def since(self, kind: str, rv: int) -> list[tuple[int, str, Any]]:
        if rv < self.floor[kind]:
            raise Expired()
        log = self.entries[kind]
        return log[bisect.bisect_right(log, rv, key=lambda e: e[0]):]


class WatchedCluster(Protocol):
    """The simulator as its informer reads it."""

    @property
    def clock(self) -> VirtualClock: ...

    @property
    def resource_version(self) -> int: ...

    def change_log(self) -> ChangeLog: ...

    def list_nodes(self, label_selector: str | None = None) -> list[Node]: ...

    def list_pods(self, namespace: str | None = None, label_selector: str | None = None,
                  node_name: str | None = None) -> list[Pod]: ...

    def list_pdbs(self, namespace: str | None = None) -> list[PodDisruptionBudget]: ...

    def budget_object(self, budget: Any, change: str) -> PodDisruptionBudget:
        """A budget of the change log as a watch event carries it, with its status now."""
        ...


class SimulatedInformer(Informer):
    """An informer over the simulator's change log; ``wait`` moves virtual time only as far as it has to."""

    def __init__(self, sim: WatchedCluster, kind: str) -> None:
        super().__init__(kind, sim.clock)
        self.sim = sim

    def start(self) -> None:
        if self.resource_version is None:
            self.sim.change_log()  # from now on every change is kept
            self._list(relist=False)

    def _list(self, relist: bool) -> None:
        listers: dict[str, Callable[[], list[Any]]] = {"nodes": self.sim.list_nodes, "pods": self.sim.list_pods,
                                                       "pdbs": self.sim.list_pdbs}
        items = listers[self.kind]()
        self._replace_all(items, str(self.sim.resource_version), relist)

    def _pull(self) -> bool:
        try:
            changes = self.sim.change_log().since(self.kind, int(self.resource_version or 0))
        except Expired:
            self._list(relist=True)
            return True
        if not changes:
            return False
        if self.kind == "pdbs":
            # A budget's entry says it changed; its status is what the disruption controller computes now (one event
            # for several changes in a row, as the controller writes the newest status once).
            latest: dict[Any, tuple[int, str, Any]] = {}
            for rv, t, budget in changes:
                latest[budget.pdb.key] = (rv, t, budget)
            return self._apply([WatchEvent(t, self.sim.budget_object(b, t), str(rv)) for rv, t, b in
                                sorted(latest.values(), key=lambda e: e[0])])
        return self._apply([WatchEvent(t, o, str(rv)) for rv, t, o in changes])

    def sync(self) -> None:
        self.start()
        self._pull()

    def wait(self, until: Callable[[], bool], timeout: float) -> bool:
        self.start()
        self.stats.watches += 1
        clock = self.sim.clock
        deadline = clock.now() + max(timeout, 0.0)
        self._pull()
        if until():
            return True
        while True:
            due = clock.next_due()
            if due is None or due > deadline:
                clock.run_until(deadline)
                self._pull()
                return until()
            clock.run_until(due)
            if self._pull() and until():
                return True
