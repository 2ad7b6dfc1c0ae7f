"""When each wave of a plan starts and ends once waves overlap: the plan's estimate, by the executor's own rules.

A wave has a head (surge nodes booting, the drain, the terminations) and a tail (replacements booting, evicted pods
starting again, one-at-a-time workloads settling). The executor starts the next wave's head while earlier waves are
in their tails (``upgrade_service.running.overlap``), when:

- the open waves are of the same pools as the next one, and a wave of those pools has already come through in the
  run, its new nodes Ready and its pods back (the first wave of a pool proves its image alone; a pool after another in
  ``poolOrder`` starts when every open wave has come through, some perhaps still settling);
- the nodes out of service (cordoned, or terminated with a replacement still booting) and the next wave's nodes
  stay within ``maxInFlight`` and ``maxInFlightPerPool``.

Otherwise it waits for the open waves' pods to be back, then for the oldest one's end. A one-at-a-time workload
that the next wave moves again cannot have its pod evicted before its last move has settled, so that wave's drain
ends no sooner than the settle does; the settle counts from when the moved pod left (early in its wave's drain), not
from when that wave's whole drain ended.
``Schedule`` replays those rules over the plan's waves; the plan's estimate is when the last wave ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    """One wave as scheduled: offsets in seconds from the plan's start."""

    pools: frozenset[str]
    nodes: Counter[str]  # pool -> the wave's nodes in it
    start: int
    head_end: int  # drained and terminated
    out_until: int  # its nodes are back in service (replacements Ready): what maxInFlight counts until
    end: int
    back: int  # its pods are back: only its one-at-a-time workloads' settle time is left until its end
    chains: Mapping[str, int]  # one-at-a-time workload -> when its next pod may have left (its last is back, settled)
    proven: bool = False  # a wave of its pools had finished when it started: under surge it raised the next one's nodes


@dataclass
class Schedule:
    overlap: bool
    max_in_flight: int
    per_pool: Mapping[str, int]
    surge: bool = False  # surge strategy: a proven wave raises the next wave's new nodes with its own
    now: int = 0  # when the next wave may start (the last head's end)
    open: list[Span] = field(default_factory=list)
    proven: set[frozenset[str]] = field(default_factory=set)
    ends: int = 0
    last: Span | None = None

    def _admits(self, pools: frozenset[str], nodes: Counter[str]) -> bool:
        working = [s for s in self.open if s.back > self.now]  # the rest only settle
        if any(s.pools != pools for s in working) or (working and pools not in self.proven):
            return False
        out: Counter[str] = Counter()
        for s in self.open:
            if s.out_until > self.now:
                out.update(s.nodes)
        if sum(out.values()) + sum(nodes.values()) > self.max_in_flight:
            return False
        return all(out[p] + n <= self.per_pool[p] for p, n in nodes.items() if p in self.per_pool)

    def start_of(self, pools: Iterable[str], nodes: Counter[str]) -> int:
        """When a wave of ``nodes`` (pool -> count) starts: open waves that it may not overlap are finished first."""
        key = frozenset(pools)
        while self.open and self.open[0].end <= self.now:  # over by now: ended, as the executor ends them, in order
            self.proven.add(self.open.pop(0).pools)
        self.proven.update(s.pools for s in self.open if s.back <= self.now)
        while self.open and not (self.overlap and self._admits(key, nodes)):
            coming = next((s for s in self.open if s.back > self.now), None)
            if coming is not None:  # the open waves' pods back first: that may be all the next wave needs
                self.now = coming.back
                self.proven.update(s.pools for s in self.open if s.back <= self.now)
                continue
            oldest = self.open.pop(0)
            self.now = max(self.now, oldest.end)
        return self.now

    def stopped_until(self, at: int) -> None:
        """The run stops before the next wave (a maintenance window closed) and the next run starts at ``at``: the
        stopped run finished its open waves first, so nothing is open then (nor raised ahead across the stop)."""
        self.proven.update(s.pools for s in self.open)
        self.now = max([self.now, at, *(s.end for s in self.open)])
        self.open.clear()
        self.last = None

    def drains_from(self, pools: Iterable[str], start: int, boot: int) -> int:
        """When a wave starting at ``start`` may drain: once its surge nodes have booted (``boot`` seconds), from its
        start or, raised ahead under surge by the wave before (proven, of the same pools), from that wave's start."""
        key = frozenset(pools)
        ahead = self.overlap and self.surge and self.last is not None and self.last.proven and self.last.pools == key
        return max(start, (self.last.start if ahead and self.last is not None else start) + boot)

    def add(self, pools: Iterable[str], nodes: Counter[str], boot: int, head: int, tail: int, out: int,
            steps: Mapping[str, int], settle: int = 0, tails: Mapping[str, int] | None = None,
            leaving: Mapping[str, int] | None = None) -> Span:
        """Schedule the next wave (it starts when ``start_of`` says): ``boot`` seconds for its surge nodes, then ``head``
        until drained and terminated, ``tail`` more until it ends, the last ``settle`` of it settling; its nodes out
        of service ``out`` seconds past its head (its replacements' boot); each one-at-a-time workload it moves (-> its
        step: its successor's start, the grace first when a StatefulSet makes it only once the pod is gone, and its
        settle time) lets its next pod leave a step past its head, and its own pods of it leave over ``tails`` (-> from
        its first leaving until its last is gone; ``leaving``: until its last leaves) once an open wave's move of it lets
        them. Under surge, the wave before, if proven and of the
        same pools, raised this one's nodes: they boot from its start."""
        start = self.start_of(pools, nodes)
        key = frozenset(pools)
        drain = self.drains_from(key, start, boot)
        head_end = drain + head
        first: dict[str, int] = {}
        for w in steps:  # its pod of a workload an open wave moved goes once that one is back and has settled
            first[w] = max([drain, *(s.chains[w] for s in self.open if w in s.chains)])
            head_end = max(head_end, first[w] + (tails or {}).get(w, 0))
        # Its next pod may leave a step after this wave's last one left, which is not when the whole head ends.
        chains = {w: first[w] + (leaving or {}).get(w, 0) + step for w, step in steps.items()}
        span = Span(key, nodes, start, head_end, head_end + out, head_end + tail, head_end + tail - min(settle, tail),
                    chains, key in self.proven)
        self.open.append(span)
        self.last = span
        self.now = head_end
        self.ends = max(self.ends, span.end)
        return span
