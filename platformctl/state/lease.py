"""Holding a lease while work runs: acquire, renew in the background, check before acting, release.

``LeaseKeeper`` renews every third of the TTL on a thread of its own, so a holder busy with a long
call keeps its lease, and a holder that dies (SIGKILL, a lost machine) stops renewing and loses it
after the TTL. The work calls ``check()`` before every side effect: once a renewal failed (someone
took the lease over after it expired) it raises ``LeaseLost`` and the work stops acting.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid

from platformctl.state import Lease, LeaseLost, StateStore


def holder_id() -> str:
    """Who holds a lease: host, process and a random part (a pid can come back after a reboot)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class LeaseKeeper:
    def __init__(self, store: StateStore, name: str, holder: str, ttl: float) -> None:
        self.store = store
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.lease: Lease | None = None
        self.lost: str | None = None
        self.last_error: str | None = None  # the last renewal that failed for another reason (the store was unreachable)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> Lease:
        """Take the lease (``LeaseHeld`` when someone else holds it) and start renewing it."""
        self.lease = self.store.acquire(self.name, self.holder, self.ttl)
        self._thread = threading.Thread(target=self._renew_forever, name=f"lease {self.name}", daemon=True)
        self._thread.start()
        return self.lease

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            assert self.lease is not None
            try:
                self.lease = self.store.renew(self.lease, self.ttl)
            except LeaseLost as exc:
                self.lost = str(exc)
                return
            except Exception as exc:  # the store is unreachable: try again at the next beat, the TTL decides
                self.last_error = f"renewal failed: {exc}"

    def check(self) -> None:
        if self.lost is not None:
            raise LeaseLost(self.lost)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lease is not None and self.lost is None:
            self.store.release(self.lease)
        self.lease = None
