"""Where a pod can run: kube-scheduler's filters as pure functions, and a placement state that binds many pods in turn.

The filters are the default profile's, read from what the API shows of pods and nodes:
``NodeUnschedulable`` (a cordoned node), ``TaintToleration`` (``NoSchedule`` and ``NoExecute`` taints
the pod does not tolerate; ``PreferNoSchedule`` only scores), ``NodeAffinity`` (``nodeSelector`` and
required node affinity), ``NodeResourcesFit`` (requests against allocatable minus what already runs
there, and the pod count), ``InterPodAffinity`` (required pod affinity and anti-affinity, the
incoming pod's terms and, symmetrically, the terms of the pods already placed) and
``PodTopologySpread`` (``DoNotSchedule`` constraints: ``maxSkew`` over the domains of the nodes the pod's
node affinity admits, ``minDomains``). What does not fit is said as the scheduler says it in its
``FailedScheduling`` event: ``0/7 nodes are available: 3 Insufficient cpu, 4 node(s) were unschedulable.``

``Placement`` holds nodes and the pods bound to them and answers ``place(pod)``: the first node, in
a round-robin over the nodes that share the pod's static constraints, that passes every filter
(nodes it should rather avoid, such as those a ``PreferNoSchedule`` taint marks, last). Every change is
logged so ``rollback`` can undo a trial: the planner simulates a wave, and if its displaced pods do
not fit, tries a smaller one (``upgrade_service.planning.fit``). Nothing here reads a cluster or acts on one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from platformctl.kernel.cluster.constraints import PodAffinityTerm, SpreadConstraint
from platformctl.kernel.cluster.model import Node, Pod, Resources, Taint

# ---------------------------------------------------------------------------------------------- static filters


def untolerated(pod: Pod, taints: Iterable[Taint]) -> Taint | None:
    """The first ``NoSchedule``/``NoExecute`` taint ``pod`` does not tolerate, or None."""
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(taint) for t in pod.tolerations):
            return taint
    return None


def prefers_not(pod: Pod, node: Node) -> bool:
    """Whether ``node`` has a ``PreferNoSchedule`` taint ``pod`` does not tolerate (the scheduler avoids it)."""
    return any(t.effect == "PreferNoSchedule" and not any(tol.tolerates(t) for tol in pod.tolerations) for t in node.taints)


def affinity_admits(pod: Pod, labels: Mapping[str, str]) -> bool:
    """``nodeSelector`` and required node affinity (terms ORed, expressions ANDed)."""
    for key, value in pod.node_selector.items():
        if labels.get(key) != value:
            return False
    terms = pod.required_node_terms
    return not terms or any(t.matches(labels) for t in terms)


def static_reason(pod: Pod, node: Node) -> str | None:
    """Why ``node`` can never take ``pod`` as it stands (cordon, taints, node affinity), or None."""
    if not node.ready:
        return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
    if node.unschedulable:
        return "node(s) were unschedulable"
    taint = untolerated(pod, node.taints)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    if not affinity_admits(pod, node.labels):
        return "node(s) didn't match Pod's node affinity/selector"
    return None


def static_key(pod: Pod) -> tuple[Any, ...]:
    """Pods with the same key pass the same static filters on every node."""
    return (tuple(sorted(pod.node_selector.items())), pod.tolerations, pod.required_node_terms)


def static_filter(pod: Pod) -> Callable[[Node], bool]:
    """The static filters of ``pod`` that its labels and taints decide (node affinity and selector, taints),
    as one test of a node: which nodes a DaemonSet runs on, and which a class of pods may be placed on."""

    def eligible(node: Node) -> bool:
        return affinity_admits(pod, node.labels) and untolerated(pod, node.taints) is None

    return eligible


def resource_reasons(free: Resources, pods_free: int, r: Resources) -> list[str]:
    out = [text for short, text in ((free.cpu_millis < r.cpu_millis, "Insufficient cpu"),
                                    (free.memory_bytes < r.memory_bytes, "Insufficient memory"),
                                    (free.gpus < r.gpus, "Insufficient nvidia.com/gpu")) if short]
    if pods_free <= 0:
        out.append("Too many pods")
    return out


def unschedulable_message(counts: Mapping[str, int], total: int) -> str:
    """The scheduler's ``FailedScheduling`` message for a pod no node took."""
    detail = ", ".join(f"{n} {text}" for text, n in sorted(counts.items())) or "no node fits it"
    return (f"0/{total} nodes are available: {detail}. preemption: 0/{total} nodes are available: "
            f"{total} Preemption is not helpful for scheduling.")


# ---------------------------------------------------------------------------------------------- placement state


@dataclass
class Slot:
    """One node as the placement sees it: what it has left, and whether new pods may land on it."""

    node: Node
    cpu: int
    mem: int
    gpu: int
    pods_free: int
    schedulable: bool
    avoid: bool  # a caller's mark (an outdated node, say): used only when no other node fits
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    alive: bool = True

    @property
    def name(self) -> str:
        return self.node.name

    def fits(self, r: Resources) -> bool:
        return self.pods_free > 0 and self.cpu >= r.cpu_millis and self.mem >= r.memory_bytes and self.gpu >= r.gpus

    def charge(self, r: Resources, sign: int) -> None:
        self.cpu -= sign * r.cpu_millis
        self.mem -= sign * r.memory_bytes
        self.gpu -= sign * r.gpus
        self.pods_free -= sign


class _Ring:
    """Nodes tried in turn from a cursor (the scheduler spreads a workload's pods); nodes that left stay in the
    list, marked dead, until they are half of it. ``failed`` remembers the smallest request no node here could
    take since capacity was last freed, so a pod no smaller is not tried against every full node again."""

    __slots__ = ("nodes", "cursor", "dead", "failed")

    def __init__(self, nodes: list[Slot]) -> None:
        self.nodes = nodes
        self.cursor = 0
        self.dead = 0
        self.failed: tuple[int, Resources] | None = None  # (capacity version, request)

    def compact(self) -> None:
        if self.dead > len(self.nodes) // 2:
            self.nodes = [s for s in self.nodes if s.alive]
            self.dead = 0
            self.cursor = 0


class _Class:
    """The nodes that pass one static key's filters: those the pods prefer, and those they take only when
    nothing else fits (an untolerated ``PreferNoSchedule`` taint, or a caller's mark)."""

    __slots__ = ("first", "last")

    def __init__(self, first: list[Slot], last: list[Slot]) -> None:
        self.first = _Ring(first)
        self.last = _Ring(last)


def _charges(pod: Pod) -> bool:
    """Whether a bound pod holds resources on its node (a finished one does not)."""
    return not pod.is_finished


_CountKey = tuple[Any, ...]


class InterPodIndex:
    """What ``InterPodAffinity`` and ``PodTopologySpread`` need to know about the pods already placed: per term
    or constraint asked about, matching pods per topology domain; per anti-affinity term of a placed pod, the
    domains it holds. Counters are built on first use by walking ``everything()`` (each node with its pods)
    and kept current by ``pod_bound``/``node_added``/``node_removed``; nothing is built until a pod with such
    constraints asks, so clusters without them pay nothing. A pod counts from when it is bound until it is
    gone (terminating included, as the scheduler counts it): matching reads only what never changes on a pod
    (namespace, labels), so what ``pod_bound(+1)`` counted, ``pod_bound(-1)`` takes back."""

    def __init__(self, everything: Callable[[], Iterable[tuple[Node, Iterable[Pod]]]]) -> None:
        self._everything = everything
        self._counts: dict[_CountKey, Counter[str]] = {}
        self._count_match: dict[_CountKey, Callable[[Pod, Node], bool]] = {}
        self._domains: dict[tuple[Any, ...], Counter[str]] = {}  # (topology key, node filter) -> nodes per domain
        self._domain_filter: dict[tuple[Any, ...], Callable[[Node], bool]] = {}
        self._anti: dict[tuple[PodAffinityTerm, str], Counter[str]] = {}  # terms of placed pods -> their domains
        self.with_terms = 0  # placed pods that carry anti-affinity terms

    def applies(self, pod: Pod) -> bool:
        """Whether the inter-pod filters can refuse a node to ``pod``."""
        return bool(self.with_terms) or not pod.inter.empty

    def pod_bound(self, pod: Pod, node: Node, sign: int) -> None:
        """``pod`` was bound to ``node`` (+1) or left it (-1)."""
        labels = node.labels
        for key, counter in self._counts.items():
            if self._count_match[key](pod, node):
                value = labels.get(key[-1])
                if value is not None:
                    counter[value] += sign
        if pod.inter.anti_affinity:
            self.with_terms += sign
            for term in pod.inter.anti_affinity:
                value = labels.get(term.topology_key)
                if value is not None:
                    self._anti.setdefault((term, pod.namespace), Counter())[value] += sign

    def node_added(self, node: Node) -> None:
        for dkey, counter in self._domains.items():
            value = node.labels.get(dkey[0])
            if value is not None and self._domain_filter[dkey](node):
                counter[value] += 1

    def node_removed(self, node: Node) -> None:
        for dkey, counter in self._domains.items():
            value = node.labels.get(dkey[0])
            if value is not None and self._domain_filter[dkey](node):
                counter[value] -= 1
                if counter[value] <= 0:
                    del counter[value]

    def _counter(self, key: _CountKey, match: Callable[[Pod, Node], bool]) -> Counter[str]:
        """Pods ``match`` picks, per value of the topology key (``key[-1]``), over every node."""
        counter = self._counts.get(key)
        if counter is None:
            counter = Counter()
            topology = key[-1]
            for node, pods in self._everything():
                value = node.labels.get(topology)
                if value is None:
                    continue
                for pod in pods:
                    if match(pod, node):
                        counter[value] += 1
            self._counts[key] = counter
            self._count_match[key] = match
        return counter

    def _term_counter(self, term: PodAffinityTerm, namespace: str) -> Counter[str]:
        return self._counter(("term", term, namespace, term.topology_key),
                             lambda p, _: term.selects(namespace, p.namespace, p.labels))

    def _spread_counter(self, c: SpreadConstraint, pod: Pod) -> tuple[Counter[str], Counter[str]]:
        """(matching pods per domain, eligible nodes per domain) for one constraint of ``pod``."""
        ns = pod.namespace
        node_filter = (tuple(sorted(pod.node_selector.items())), pod.required_node_terms) if c.honor_node_affinity else None
        taint_filter = pod.tolerations if c.honor_taints else None

        def eligible(node: Node) -> bool:
            if node_filter is not None and not affinity_admits(pod, node.labels):
                return False
            return taint_filter is None or untolerated(pod, node.taints) is None

        dkey = (c.topology_key, node_filter, taint_filter)
        domains = self._domains.get(dkey)
        if domains is None:
            domains = Counter()
            for node, _ in self._everything():
                value = node.labels.get(c.topology_key)
                if value is not None and eligible(node):
                    domains[value] += 1
            self._domains[dkey] = domains
            self._domain_filter[dkey] = eligible
        selector = c.selector
        counts = self._counter(("spread", selector, ns, node_filter, taint_filter, c.topology_key),
                               lambda p, node: (p.namespace == ns and selector is not None and selector.matches(p.labels)
                                                and eligible(node)))
        return counts, domains

    def reason(self, pod: Pod, node: Node) -> str | None:
        """Why the inter-pod filters refuse ``node`` for ``pod``, or None."""
        labels = node.labels
        inter = pod.inter
        for term in inter.anti_affinity:
            value = labels.get(term.topology_key)
            if value is not None and self._term_counter(term, pod.namespace)[value] > 0:
                return "node(s) didn't match pod anti-affinity rules"
        if self.with_terms:
            for (term, owner_ns), domains in self._anti.items():
                value = labels.get(term.topology_key)
                if value is not None and domains.get(value, 0) > 0 and term.selects(owner_ns, pod.namespace, pod.labels):
                    return "node(s) didn't satisfy existing pods anti-affinity rules"
        for term in inter.affinity:
            value = labels.get(term.topology_key)
            counter = self._term_counter(term, pod.namespace)
            if value is None or counter[value] <= 0:
                # The first pod of a group whose term selects itself may go anywhere the term's key exists.
                if value is not None and not any(counter.values()) and term.selects(pod.namespace, pod.namespace, pod.labels):
                    continue
                return "node(s) didn't match pod affinity rules"
        for c in inter.hard_spread:
            value = labels.get(c.topology_key)
            if value is None:
                return "node(s) didn't match pod topology spread constraints (missing required label)"
            counts, domains = self._spread_counter(c, pod)
            if c.min_domains is not None and len(domains) < c.min_domains:
                floor = 0
            else:
                floor = min((counts.get(d, 0) for d in domains), default=0)
            own = 1 if c.selector is not None and c.selector.matches(pod.labels) else 0
            if counts.get(value, 0) + own - floor > c.max_skew:
                return "node(s) didn't match pod topology spread constraints"
        return None


class Placement:
    """Nodes, the pods bound to them, and where more pods can go; every change can be rolled back."""

    def __init__(self, nodes: Iterable[Node], pods: Iterable[Pod] = (), avoid: Callable[[Node], bool] | None = None) -> None:
        self.slots: dict[str, Slot] = {}
        self.where: dict[tuple[str, str], str] = {}  # pod key -> node it is bound to
        self._avoid = avoid or (lambda node: False)
        self._classes: dict[tuple[Any, ...], _Class] = {}
        self._log: list[tuple[str, Any]] = []
        self._freed = 0  # moves whenever capacity is freed or added: failed requests are worth trying again
        self.inter = InterPodIndex(lambda: ((s.node, s.pods.values()) for s in self.slots.values()))
        self.placed = 0  # pods placed by ``place`` (a measure of the work done)
        for node in nodes:
            self._add_slot(node)
        for pod in pods:
            if pod.node_name and pod.node_name in self.slots and pod.deletion_time is None:
                self._bind(pod, self.slots[pod.node_name])
        self._log.clear()

    # ------------------------------------------------------------------ changes (logged, so they can be undone)

    def checkpoint(self) -> int:
        return len(self._log)

    def rollback(self, mark: int) -> None:
        while len(self._log) > mark:
            op, arg = self._log.pop()
            if op == "bind":
                pod = arg
                self._unbind(pod, self.slots[self.where[pod.key]])
            elif op == "unbind":
                pod, name = arg
                self._bind(pod, self.slots[name])
            elif op == "schedulable":
                name, before = arg
                self.slots[name].schedulable = before
                self._freed += 1
            elif op == "add":
                slot = self.slots[arg]
                for pod in list(slot.pods.values()):
                    self._unbind(pod, slot)
                self._remove_slot(arg)
            elif op == "remove":
                slot, pods = arg
                self._restore_slot(slot, pods)

    def commit(self) -> None:
        """Forget the undo log (what was done can no longer be rolled back)."""
        self._log.clear()

    def add_node(self, node: Node, daemon_pods: Iterable[Pod] = ()) -> Slot:
        """A node joins (a surge node, a replacement), with the DaemonSet pods it will run from the start."""
        slot = self._add_slot(node)
        self._log.append(("add", node.name))
        for pod in daemon_pods:
            self._bind(pod, slot)  # undone with the node
        return slot

    def remove_node(self, name: str) -> list[Pod]:
        """The node goes; returns the pods that were bound to it (unbound now)."""
        slot = self.slots[name]
        pods = list(slot.pods.values())
        for pod in pods:
            self._unbind(pod, slot)
        self._remove_slot(name)
        self._log.append(("remove", (slot, pods)))
        return pods

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        slot = self.slots[name]
        if slot.schedulable != schedulable:
            self._log.append(("schedulable", (name, slot.schedulable)))
            slot.schedulable = schedulable
            self._freed += 1

    def unbind(self, pod: Pod) -> None:
        name = self.where.get(pod.key)
        if name is None:
            return
        self._unbind(pod, self.slots[name])
        self._log.append(("unbind", (pod, name)))

    def bind(self, pod: Pod, name: str) -> None:
        self._bind(pod, self.slots[name])
        self._log.append(("bind", pod))

    # ------------------------------------------------------------------ asking

    def place(self, pod: Pod) -> str | None:
        """Bind ``pod`` to the first node that passes every filter (nodes to avoid last); None when none does."""
        cls = self._class(pod)
        for ring in (cls.first, cls.last):
            name = self._place_in(pod, ring)
            if name is not None:
                self.placed += 1
                return name
        return None

    def _place_in(self, pod: Pod, ring: _Ring) -> str | None:
        ring.compact()
        r = pod.requests
        inter = self.inter.applies(pod)
        if not inter and ring.failed is not None and ring.failed[0] == self._freed:
            f = ring.failed[1]
            if r.cpu_millis >= f.cpu_millis and r.memory_bytes >= f.memory_bytes and r.gpus >= f.gpus:
                return None
        nodes = ring.nodes
        n = len(nodes)
        start = ring.cursor
        for i in range(n):
            at = (start + i) % n
            slot = nodes[at]
            if not slot.alive or not slot.schedulable or not slot.fits(r):
                continue
            if inter and self.inter.reason(pod, slot.node) is not None:
                continue
            ring.cursor = at + 1
            self.bind(pod, slot.name)
            return slot.name
        if not inter:
            ring.failed = (self._freed, r)
        return None

    def why_not(self, pod: Pod) -> str:
        """What the scheduler would say of ``pod`` if no node takes it, counted node by node."""
        reasons: Counter[str] = Counter()
        for slot in self.slots.values():
            node = slot.node
            why = static_reason(pod, node) if slot.schedulable else "node(s) were unschedulable"
            if why is not None:
                reasons[why] += 1
                continue
            short = resource_reasons(Resources(slot.cpu, slot.mem, slot.gpu), slot.pods_free, pod.requests)
            if short:
                for text in short:
                    reasons[text] += 1
                continue
            inter = self.inter.reason(pod, node)
            if inter is not None:
                reasons[inter] += 1
        return unschedulable_message(reasons, len(self.slots))

    # ------------------------------------------------------------------ internals

    def _add_slot(self, node: Node) -> Slot:
        alloc = node.allocatable
        slot = Slot(node, alloc.cpu_millis, alloc.memory_bytes, alloc.gpus, node.max_pods,
                    node.ready and not node.unschedulable, self._avoid(node))
        self.slots[node.name] = slot
        for key, cls in self._classes.items():
            if self._static_ok(key, node):
                (cls.last if self._later(key, slot) else cls.first).nodes.append(slot)
        self.inter.node_added(node)
        self._freed += 1
        return slot

    def _remove_slot(self, name: str) -> Slot:
        slot = self.slots.pop(name)
        slot.alive = False
        for key, cls in self._classes.items():
            if self._static_ok(key, slot.node):
                (cls.last if self._later(key, slot) else cls.first).dead += 1
        self.inter.node_removed(slot.node)
        return slot

    def _restore_slot(self, slot: Slot, pods: list[Pod]) -> None:
        fresh = self._add_slot(slot.node)
        fresh.schedulable = slot.schedulable
        for pod in pods:
            self._bind(pod, fresh)

    def _bind(self, pod: Pod, slot: Slot) -> None:
        slot.pods[pod.key] = pod
        self.where[pod.key] = slot.name
        if _charges(pod):
            slot.charge(pod.requests, 1)
        self.inter.pod_bound(pod, slot.node, 1)

    def _unbind(self, pod: Pod, slot: Slot) -> None:
        self.inter.pod_bound(pod, slot.node, -1)
        del slot.pods[pod.key]
        del self.where[pod.key]
        if _charges(pod):
            slot.charge(pod.requests, -1)
        self._freed += 1

    def _static_ok(self, key: tuple[Any, ...], node: Node) -> bool:
        selector, tolerations, terms = key
        labels = node.labels
        for k, v in selector:
            if labels.get(k) != v:
                return False
        if terms and not any(t.matches(labels) for t in terms):
            return False
        for taint in node.taints:
            if taint.effect == "PreferNoSchedule":
                continue
            if not any(t.tolerates(taint) for t in tolerations):
                return False
        return True

    @staticmethod
    def _later(key: tuple[Any, ...], slot: Slot) -> bool:
        """Whether pods of ``key`` take ``slot`` only when nothing else fits."""
        if slot.avoid:
            return True
        tolerations = key[1]
        return any(t.effect == "PreferNoSchedule" and not any(tol.tolerates(t) for tol in tolerations)
                   for t in slot.node.taints)

    def _class(self, pod: Pod) -> _Class:
        key = static_key(pod)
        cls = self._classes.get(key)
        if cls is None:
            fits = [s for s in self.slots.values() if self._static_ok(key, s.node)]
            cls = self._classes[key] = _Class([s for s in fits if not self._later(key, s)],
                                              [s for s in fits if self._later(key, s)])
        return cls
