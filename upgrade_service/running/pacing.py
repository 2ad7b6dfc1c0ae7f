"""Pacing mutating API calls under the platform's SLO (``maxMutationsPerMinute``, default 1,000).

A token bucket on the cluster's clock: it holds at most a minute's worth of calls and refills at
the per-minute rate. ``take()`` waits (on the cluster's clock) until a call may go; ``wait_for(n)``
waits until a wave's worth of calls fits, so a wave starts only when it will not have to stall
half-way. Pace, never fail: the executor slows down instead of breaking the SLO.
"""

from __future__ import annotations

from platformctl.kernel.clock import Clock


class MutationPacer:
    def __init__(self, per_minute: int, clock: Clock) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self.tokens = self.capacity
        self.stamp = clock.now()
        self.calls = 0
        self.waited = 0.0

    def _refill(self) -> None:
        now = self.clock.now()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, n: int) -> float:
        """Wait until ``n`` calls (at most a minute's worth) fit; returns the seconds waited."""
        need = min(float(n), self.capacity)
        self._refill()
        if self.tokens >= need:
            return 0.0
        seconds = (need - self.tokens) / self.rate
        self.clock.sleep(seconds)
        self.waited += seconds
        self._refill()
        return seconds

    def take(self) -> None:
        self._refill()
        if self.tokens < 1.0:
            seconds = (1.0 - self.tokens) / self.rate
            self.clock.sleep(seconds)
            self.waited += seconds
            self._refill()
        self.tokens -= 1.0
        self.calls += 1
