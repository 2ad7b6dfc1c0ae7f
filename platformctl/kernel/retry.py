"""Retrying what is transient: a call the API refused without acting on it (429 Too Many Requests, honouring its
Retry-After; 5xx while a control plane scales or restarts) or that never reached it (a reset, a timeout) is asked
again after a jittered, growing wait, under a budget of attempts and of time on the caller's clock (the virtual one
in a simulation, the region's on the local region). The wait is "full jitter" (a uniform draw between nothing and
the exponential step), what AWS's and client-go's backoffs do so that many clients do not retry in step.

What is retried is the caller's to say: a read or an idempotent write on every transient answer; a create or a
delete only when the API said it did not act (429, 503), since a lost answer to one that acted would make the retry
answer 409 or 404."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from platformctl.kernel.clock import Clock

T = TypeVar("T")

TRANSIENT = frozenset({429, 500, 502, 503, 504})
NOT_ACTED = frozenset({429, 503})  # the API says it did nothing: safe to ask again whatever the call


@dataclass(frozen=True)
class Backoff:
    attempts: int = 8  # calls in all, the first included
    base: float = 0.5  # seconds: the first step
    cap: float = 20.0  # the longest step
    budget: float = 120.0  # seconds of the caller's clock from the first call after which no retry is made

    def wait(self, retry: int, rng: random.Random, retry_after: float | None = None) -> float:
        """How long to wait before retry number ``retry`` (1, 2, …): at least what the server asked for."""
        step = min(self.cap, self.base * 2 ** (retry - 1))
        drawn = rng.uniform(0, step)
        return max(drawn, retry_after or 0.0)


NEVER = Backoff(attempts=1)  # one call, as a canary makes it: it measures the API as users meet it


def retrying(call: Callable[[], T], again: Callable[[Exception], bool], backoff: Backoff, clock: Clock,
             rng: random.Random, retry_after: Callable[[Exception], float | None] = lambda exc: None,
             retried: Callable[[], None] = lambda: None) -> T:
    """``call()``, asked again while ``again`` says its error is worth asking again for and the backoff's attempts and
    budget (on ``clock``, from the first call) allow; the last error is raised as it came. ``retried`` is told of
    each retry (a count for reports)."""
    began = clock.now()
    for attempt in range(1, backoff.attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == backoff.attempts or not again(exc):
                raise
            wait = backoff.wait(attempt, rng, retry_after(exc))
            if clock.now() + wait - began > backoff.budget:
                raise
        retried()
        clock.sleep(wait)
    raise AssertionError("unreachable")
