"""A cache of a cluster's nodes or pods kept current by the API's watch, as client-go's informers keep theirs.

An informer lists once, remembers the list's ``resourceVersion``, and from then on applies the
watch's events (``ADDED``, ``MODIFIED``, ``DELETED``; ``BOOKMARK`` only moves the version on). A
watch the server ends with 410 Gone (the version is older than it keeps) is answered with a new
list; a watch that breaks (the connection drops, the server errs) falls back to listing again after
a short pause, so nothing depends on one long-lived connection. ``wait(until, timeout)`` returns as
soon as ``until()`` holds on the cache, or when ``timeout`` seconds of the cluster's clock have
passed: a wave moves on when what it waits for happened, not at its next poll.

``Informer`` is the cache (``nodes``, ``pods`` or ``pdbs``: PodDisruptionBudgets with the status the
disruption controller writes) and its indexes (pods by node, by owner, by namespace, so the executor's
questions cost what they concern, not the whole cluster); each side of the cluster seam feeds it
its own way, behind ``Cluster.informer(kind)``: the simulator from its change log, stepping its
virtual clock from one due callback to the next (``platformctl.emulator.sim_watch``), the live
adapter from the API server's watch, streamed in a thread of its own
(``platformctl.kernel.cluster.live_watch``). ``stats`` counts what was read (list and watch requests,
listed items and watch events), for the rotation benchmark.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from platformctl.kernel.clock import Clock
from platformctl.kernel.cluster.model import Node, Pod

KINDS = ("nodes", "pods", "pdbs")


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    obj: Any  # a Node or a Pod (None for a bookmark)
    resource_version: str


@dataclass
class InformerStats:
    lists: int = 0
    watches: int = 0  # watch requests (the simulator: waits that watched)
    objects: int = 0  # listed items plus watch events
    relists: int = 0  # lists after the first: a watch expired or broke

    def add(self, other: InformerStats) -> None:
        self.lists += other.lists
        self.watches += other.watches
        self.objects += other.objects
        self.relists += other.relists

    def to_dict(self) -> dict[str, int]:
        return {"lists": self.lists, "watches": self.watches, "objects": self.objects, "relists": self.relists}


def _key(kind: str, obj: Any) -> Any:
    return obj.name if kind == "nodes" else obj.key  # a pod's or a budget's is (namespace, name)


class Informer:
    """Nodes or pods of one cluster, as the watch tells them; subclasses feed it (``sync``, ``wait``)."""

    def __init__(self, kind: str, clock: Clock) -> None:
        if kind not in KINDS:
            raise ValueError(f"an informer watches {' or '.join(KINDS)}, not {kind}")
        self.kind = kind
        self.clock = clock
        self.stats = InformerStats()
        self.objects: dict[Any, Any] = {}
        self.resource_version: str | None = None
        self.changes = 0  # moves whenever the cache changes: a caller can tell whether anything happened
        self.watch_errors: list[str] = []
        self._by_node: dict[str, set[Any]] = defaultdict(set)
        self._by_owner: dict[str, set[Any]] = defaultdict(set)
        self._by_namespace: dict[str, set[Any]] = defaultdict(set)
        self._moves: dict[str, int] = defaultdict(int)  # namespace -> changes of its pods so far
        self._owner_moves: dict[str, int] = defaultdict(int)  # owner uid -> changes of its pods so far
        self._unschedulable: set[Any] = set()  # pending pods the scheduler said it cannot place

    def unschedulable(self) -> list[Pod]:
        """Pods waiting for a node that the scheduler said it cannot place (``PodScheduled`` False, Unschedulable)."""
        self.start()
        return [self.objects[k] for k in self._unschedulable]

    def moves_in(self, namespaces: Iterable[str]) -> int:
        """How many changes the pods of ``namespaces`` have seen so far (compare two readings to see if any moved)."""
        return sum(self._moves.get(ns, 0) for ns in namespaces)

    def moves_of(self, owners: Iterable[str]) -> int:
        """How many changes the pods of these owners (uids) have seen so far."""
        return sum(self._owner_moves.get(uid, 0) for uid in owners)

    # ------------------------------------------------------------------ what subclasses provide

    def start(self) -> None:
        """List (once) and begin watching."""
        raise NotImplementedError

    def sync(self) -> None:
        """Apply whatever the watch has to say now, without waiting."""
        raise NotImplementedError

    def wait(self, until: Callable[[], bool], timeout: float) -> bool:
        """Keep the cache current until ``until()`` holds (True) or ``timeout`` seconds of the cluster's clock have
        passed (then ``until()``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop watching."""

    # ------------------------------------------------------------------ reading the cache

    def items(self) -> list[Any]:
        self.start()
        return list(self.objects.values())

    def nodes(self) -> list[Node]:
        return self.items()

    def get(self, key: Any) -> Any | None:
        self.start()
        return self.objects.get(key)

    def pods_on(self, node: str) -> list[Pod]:
        self.start()
        return [self.objects[k] for k in self._by_node.get(node, ())]

    def pods_of(self, owner_uid: str) -> list[Pod]:
        self.start()
        return [self.objects[k] for k in self._by_owner.get(owner_uid, ())]

    def pods_in(self, namespace: str) -> list[Any]:
        """The pods (or budgets) of ``namespace``."""
        self.start()
        return [self.objects[k] for k in self._by_namespace.get(namespace, ())]

    # ------------------------------------------------------------------ for subclasses

    def _replace_all(self, items: Iterable[Any], version: str, relist: bool) -> None:
        """A list's answer replaces the cache."""
        self.stats.lists += 1
        if relist:
            self.stats.relists += 1
        self.objects.clear()
        self._by_node.clear()
        self._by_owner.clear()
        self._by_namespace.clear()
        self._unschedulable.clear()
        count = 0
        for obj in items:
            self._put(obj)
            count += 1
        self.stats.objects += count
        self.resource_version = version
        self.changes += 1

    def _apply(self, batch: Iterable[WatchEvent]) -> bool:
        moved = False
        for event in batch:
            self.stats.objects += 1
            if event.resource_version:
                self.resource_version = event.resource_version
            if event.type == "BOOKMARK" or event.obj is None:
                continue
            if event.type == "DELETED":
                self._drop(_key(self.kind, event.obj))
            else:
                self._put(event.obj)
            moved = True
        if moved:
            self.changes += 1
        return moved

    def _put(self, obj: Any) -> None:
        key = _key(self.kind, obj)
        if key in self.objects:
            self._drop(key)
        self.objects[key] = obj
        if self.kind == "pdbs":
            self._by_namespace[obj.namespace].add(key)
        elif self.kind == "pods":
            if obj.node_name:
                self._by_node[obj.node_name].add(key)
            if obj.owner is not None:
                self._by_owner[obj.owner.uid].add(key)
                self._owner_moves[obj.owner.uid] += 1
            self._by_namespace[obj.namespace].add(key)
            self._moves[obj.namespace] += 1
            if obj.node_name is None and obj.unschedulable:
                self._unschedulable.add(key)

    def _drop(self, key: Any) -> None:
        obj = self.objects.pop(key, None)
        if obj is not None and self.kind == "pdbs":
            self._by_namespace[obj.namespace].discard(key)
        if obj is None or self.kind != "pods":
            return
        self._moves[obj.namespace] += 1
        if obj.owner is not None:
            self._owner_moves[obj.owner.uid] += 1
        self._unschedulable.discard(key)
        for index, value in ((self._by_node, obj.node_name), (self._by_owner, obj.owner.uid if obj.owner else None),
                             (self._by_namespace, obj.namespace)):
            if value is not None and value in index:
                index[value].discard(key)
                if not index[value]:
                    del index[value]
