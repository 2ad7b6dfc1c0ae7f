"""What every room of the simulator shares: the virtual clock, the random source, the resource versions, the
event log and the change log watchers read, and the cluster's objects that several rooms act on: the nodes
(``NodeState``: what is left of each node's allocatable, the pods bound to it, its faults), the pods and
the controllers that own them. Which room writes what: the nodes room the nodes, the pods room the pods and
controllers (the scheduler and the node faults mark a pod unschedulable or disrupted in place).
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from platformctl.emulator.controllers.host import Controller, PodKey
from platformctl.emulator.sim_watch import ChangeLog
from platformctl.emulator.simulation.events import Event
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.model import Node, Pod, Resources
from platformctl.kernel.cluster.selectors import LabelSelector, parse_selector_string
from platformctl.kernel.errors import NotFoundError


class NodeState:
    __slots__ = ("node", "alive", "cpu", "mem", "gpu", "npods", "pods", "waiting", "pool", "kubelet_down", "stuck", "epoch")

    def __init__(self, node: Node, pool: str | None) -> None:
        self.node = node
        self.alive = True
        alloc = node.allocatable
        self.cpu = alloc.cpu_millis
        self.mem = alloc.memory_bytes
        self.gpu = alloc.gpus
        self.npods = node.max_pods
        self.pods: set[PodKey] = set()
        self.waiting: list[PodKey] = []  # bound pods waiting for the node to be Ready
        self.pool = pool  # the simulated pool managing this node, if any
        self.kubelet_down = False  # the kubelet stopped posting status: pods on the node cannot finish terminating
        self.stuck: list[PodKey] = []  # pods deleted while the kubelet was down, still Terminating
        self.epoch = 0  # moves at every fault or recovery, so that timers of an older one do nothing

    def charge(self, r: Resources, sign: int) -> None:
        self.cpu -= sign * r.cpu_millis
        self.mem -= sign * r.memory_bytes
        self.gpu -= sign * r.gpus
        self.npods -= sign

    def fits(self, r: Resources) -> bool:
        return self.npods > 0 and self.cpu >= r.cpu_millis and self.mem >= r.memory_bytes and self.gpu >= r.gpus


class World:
    """The shared state and the bookkeeping every change goes through (a resource version, an event, a change)."""

    def __init__(self, clock: VirtualClock, seed: int) -> None:
        self.clock = clock
        self.rng = random.Random(seed)
        self.rv = 0
        self.events: list[Event] = []
        self.changes: ChangeLog | None = None  # kept once someone watches
        self.nodes: dict[str, NodeState] = {}
        self.pods: dict[PodKey, Pod] = {}
        self.pods_by_ns: dict[str, set[PodKey]] = {}
        self.controllers: dict[str, Controller] = {}
        self.controllers_removed = 0  # every controller gone so far, which no resource version need show
        self._selectors: dict[str, LabelSelector] = {}

    def now(self) -> float:
        return self.clock.now()

    def record(self, kind: str, namespace: str, name: str, detail: Any = None) -> None:
        self.events.append(Event(self.clock.now(), kind, namespace, name, detail))

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def change_log(self) -> ChangeLog:
        if self.changes is None:
            self.changes = ChangeLog(self.rv)
        return self.changes

    def note(self, kind: str, type_: str, obj: Any) -> None:
        """A change of a node, pod or budget, for watchers (none kept while nobody watches)."""
        if self.changes is not None:
            self.rv += 1  # each change its own version, as the API server's watch cache numbers them
            self.changes.append(kind, type_, obj, self.rv)

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def suffix(self, n: int = 5) -> str:
        return "".join(self.rng.choices("bcdfghjklmnpqrstvwxz2456789", k=n))

    def selector(self, text: str) -> LabelSelector:
        selector = self._selectors.get(text)
        if selector is None:
            selector = self._selectors[text] = parse_selector_string(text)
        return selector

    def node_state(self, name: str) -> NodeState:
        state = self.nodes.get(name)
        if state is None:
            raise NotFoundError(f'nodes "{name}" not found', field="node")
        return state

    def controller_of(self, pod: Pod) -> Controller | None:
        return self.controllers.get(pod.owner.uid) if pod.owner else None
