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
from dataclasses import dataclass

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
