"""Time, as every part of the toolkit sees it.

Live runs use ``WallClock``. Simulations use ``VirtualClock``, a discrete-event clock: components
schedule callbacks at virtual instants and ``sleep`` runs every callback that falls due, so hours of
rotation play out in seconds and a waiting client and the simulated cluster share one notion of
time.
"""

from __future__ import annotations

import contextlib
import heapq
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

# Virtual time starts at a fixed instant so that simulations are reproducible:
# 2026-01-01T00:00:00Z.
VIRTUAL_EPOCH = 1767225600.0


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    def sleep(self, seconds: float) -> None: ...


def past(clock: Clock, deadline: float) -> bool:
    """Whether ``deadline`` has passed on ``clock``. A clock that can ask its source (``reached()``: a local region's
    clock as a client extrapolates it, which a busy server falls behind) is asked before a deadline is called, so that
    a deadline is the cluster's to call and not the client's guess."""
    if clock.now() < deadline:
        return False
    reached = getattr(clock, "reached", None)
    return not callable(reached) or bool(reached(deadline))


def synced_now(clock: Clock) -> float:
    """The clock's time, from its source when it can ask (a local region's server): a start measured against the
    server's own timestamps (a pod's Ready time) must be on the server's timeline, not the client's guess of it."""
    sync = getattr(clock, "sync", None)
    return float(sync()) if callable(sync) else clock.now()


def parked(clock: Clock) -> contextlib.AbstractContextManager[None]:
    """While the calling thread waits for other threads' work (not for time): a clock shared with a local region
    (``parked()``) lets the region skip time the other threads wait through; any other clock ignores it."""
    park = getattr(clock, "parked", None)
    return park() if callable(park) else contextlib.nullcontext()


def wait_for_change(clock: Clock, poll: float, cluster: str, kind: str, rv: int, longest: float) -> int:
    """Wait before the next look at ``kind`` in ``cluster``: ``poll`` seconds of a plain clock; on a clock that can be
    told what its caller waits for (a local region's), until that kind has a change newer than resource version ``rv``
    or ``longest`` seconds pass, so that the region skips what nobody waits through instead of answering a poll every
    ``poll`` seconds. Returns the newest version heard of (``rv`` when the clock cannot say)."""
    changes = getattr(clock, "wait_for_change", None)
    if callable(changes):
        latest = changes(clock.now() + max(longest, poll), cluster, kind, rv)
        if latest is not None:
            return int(latest)
    clock.sleep(poll)
    return rv


class WallClock:
    """Real time."""

    speed = 1.0  # cluster seconds per wall second

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class Timer:
    """A scheduled callback; ``cancel()`` stops it from running."""

    __slots__ = ("when", "callback", "args")

    def __init__(self, when: float, callback: Callable[..., Any] | None, args: tuple[Any, ...]):
        self.when = when
        self.callback = callback
        self.args = args

    def cancel(self) -> None:
        self.callback = None
        self.args = ()


class VirtualClock:
    """A clock whose time moves only when someone sleeps or advances it.

    Callbacks scheduled for the same instant run in the order they were scheduled. A callback may
    schedule further callbacks, including at the current instant; they run in the same ``sleep``.
    """

    def __init__(self, start: float = VIRTUAL_EPOCH) -> None:
        self._now = start
        self._queue: list[tuple[float, int, Timer]] = []
        self._seq = 0

    def now(self) -> float:
        return self._now

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> Timer:
        timer = Timer(max(when, self._now), callback, args)
        self._seq += 1
        heapq.heappush(self._queue, (timer.when, self._seq, timer))
        return timer

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Timer:
        return self.call_at(self._now + max(delay, 0.0), callback, *args)

    def sleep(self, seconds: float) -> None:
        self.run_until(self._now + max(seconds, 0.0))

    def run_until(self, when: float) -> None:
        """Run every callback due at or before ``when``, then set the time to ``when``."""
        queue = self._queue
        pop = heapq.heappop
        while queue and queue[0][0] <= when:
            at, _, timer = pop(queue)
            callback = timer.callback
            if callback is None:
                continue
            self._now = at
            timer.callback = None
            callback(*timer.args)
        if when > self._now:
            self._now = when

    def next_due(self) -> float | None:
        """When the next live callback is due, or None when nothing is scheduled."""
        queue = self._queue
        while queue and queue[0][2].callback is None:
            heapq.heappop(queue)
        return queue[0][0] if queue else None


def real_seconds(clock: Clock, seconds: float) -> float:
    """Wall seconds that ``seconds`` of ``clock`` take: a clock running ``speed`` times faster than wall time (the
    local region's, as its clients see it) says so with a ``speed`` attribute."""
    return seconds / float(getattr(clock, "speed", 1.0) or 1.0)
