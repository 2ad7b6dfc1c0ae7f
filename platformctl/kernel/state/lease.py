"""Holding a lease while work runs: acquire, renew in the background, check before acting, fence writes, release.

``LeaseKeeper`` renews every quarter of the TTL on a thread of its own, so a holder busy with a long
call keeps its lease, and a holder that dies (SIGKILL, a lost machine) stops renewing and loses it
after the TTL. A renewal that fails (a hung connection: the store's lease calls give up within a third of
the TTL, ``lease_call_timeout``) is tried again an eighth of the TTL later, so one lost call never costs
the lease. The work calls ``check()`` before every side effect. It raises ``LeaseLost`` once the
lease may have expired as the holder itself can tell: a renewal was refused (someone took the lease
over), or more than the TTL less a margin has passed on this process's monotonic clock since the
start of the last renewal that succeeded. The second covers what a refusal cannot: a store that
stopped answering, renewals that throttle, a process the operating system paused (SIGSTOP, a frozen
VM) past its TTL while another took over. Measured from when the renewal was sent, not when it came
back, so a slow answer never lengthens the lease.

The margin (a tenth of the TTL, at least a second) is also how far the hosts sharing a store may
disagree on the time: a DynamoDB lease's expiry is written with the holder's wall clock and read
with the taker's. Writes to the holder's own stream carry the lease as a fence (``fence``), checked
by the store in the write's transaction, so they fail whatever the clocks say.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

from platformctl.kernel.state.base import Lease, LeaseLost, StateStore

MIN_MARGIN_SECONDS = 1.0


def holder_id() -> str:
    """Who holds a lease: host, process and a random part (a pid can come back after a reboot)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def lease_call_timeout(ttl: float) -> float:
    """How long one attempt of a lease call may take (to connect, and to read its answer): with two attempts, a call
    gives up within a third of the TTL, and the renewal after it still comes before the lease lapses."""
    return min(max(ttl / 12, 0.5), 5.0)


def margin_for(ttl: float) -> float:
    """How long before its lease's expiry a holder stops acting (and the clock skew hosts may have)."""
    return min(max(ttl / 10, MIN_MARGIN_SECONDS), ttl / 2)


class LeaseKeeper:
    def __init__(self, store: StateStore, name: str, holder: str, ttl: float) -> None:
        self.store = store
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.margin = margin_for(ttl)
        self.lease: Lease | None = None
        self.lost: str | None = None
        self.last_error: str | None = None  # the last renewal that failed for another reason (the store was unreachable)
        self._valid_until = 0.0  # monotonic: past this the lease may have expired
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> Lease:
        """Take the lease (``LeaseHeld`` when someone else holds it) and start renewing it."""
        sent = time.monotonic()
        self.lease = self.store.acquire(self.name, self.holder, self.ttl)
        self._valid_until = sent + self.ttl - self.margin
        self._thread = threading.Thread(target=self._renew_forever, name=f"lease {self.name}", daemon=True)
        self._thread.start()
        return self.lease

    def _renew_forever(self) -> None:
        beat = self.ttl / 4
        while not self._stop.wait(beat):
            assert self.lease is not None
            sent = time.monotonic()
            try:
                self.lease = self.store.renew(self.lease, self.ttl)
            except LeaseLost as exc:
                self.lost = str(exc)
                return
            except Exception as exc:  # the store is unreachable: try again soon; check() minds the clock
                self.last_error = f"renewal failed: {exc}"
                beat = self.ttl / 8
                continue
            beat = self.ttl / 4
            self._valid_until = sent + self.ttl - self.margin

    @property
    def fence(self) -> Lease | None:
        """The lease to fence this holder's writes with (None when it is not held)."""
        return self.lease

    def check(self) -> None:
        """Raise ``LeaseLost`` unless the lease is certainly still this holder's."""
        if self.lost is not None:
            raise LeaseLost(self.lost)
        if self.lease is not None and time.monotonic() >= self._valid_until:
            why = f" (the last renewal failed: {self.last_error})" if self.last_error else ""
            self.lost = (f"lease {self.name} may have expired: no renewal has succeeded for {self.ttl - self.margin:.1f} s "
                         f"(its TTL {self.ttl:g} s less a {self.margin:g} s margin){why}")
            raise LeaseLost(self.lost)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lease is not None and self.lost is None:
            try:
                self.store.release(self.lease)
            except Exception as exc:
                self.last_error = f"release failed: {exc}"
        self.lease = None
