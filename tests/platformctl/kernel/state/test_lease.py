"""A lease holder stops acting once its lease may have expired, whatever made its renewals fail.

Real time, short TTLs: the keeper's clock is the process's monotonic clock, as in production.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from platformctl.kernel.clock import WallClock
from platformctl.kernel.state import LeaseLost
from platformctl.kernel.state.lease import LeaseKeeper, margin_for
from platformctl.kernel.state.sqlite import SQLiteStore
from upgrade_service.journal.rotation import Journal, read_state


class Unreachable(SQLiteStore):
    """A store whose renewals stop getting through (a lost network path, throttling): the lease lapses in it."""

    reachable = True

    def renew(self, lease: Any, ttl: float) -> Any:
        if not self.reachable:
            raise OSError("connection timed out")
        return super().renew(lease, ttl)


def test_a_holder_whose_renewals_fail_stops_before_its_lease_lapses_and_writes_nothing_after(tmp_path: Path) -> None:
    store = Unreachable(tmp_path / "state.db")
    keeper = LeaseKeeper(store, "rotation/c1", "run-a", ttl=1.0)
    keeper.acquire()
    journal = Journal(store, "c1", WallClock(), keeper)
    journal.write("run-started", run="r1", holder="run-a")
    time.sleep(1.2)
    keeper.check()  # renewals succeed: still its own, well past one TTL
    store.reachable = False
    time.sleep(1.0 - margin_for(1.0) + 0.1)
    with pytest.raises(LeaseLost, match="may have expired"):
        keeper.check()  # before any other host could have taken it over (the margin), the holder stops
    assert "connection timed out" in (keeper.lost or "")
    time.sleep(margin_for(1.0))
    other = LeaseKeeper(SQLiteStore(tmp_path / "state.db"), "rotation/c1", "run-b", ttl=1.0)
    other.acquire()  # the lease lapsed in the store: another host takes over
    with pytest.raises(LeaseLost):
        journal.write("wave-started", wave=1)  # the stalled holder's next write: refused, nothing written
    assert [r.data["kind"] for r in store.read("rotation/c1")] == ["run-started"]
    assert read_state(store, "c1").waves == {}
    other.release()
    keeper.release()


def test_a_holder_paused_past_its_lease_fails_its_first_write_even_if_its_clock_check_was_skipped(tmp_path: Path) -> None:
    """The fence does not rely on the holder looking at its clock: a takeover changes the token."""
    store = SQLiteStore(tmp_path / "state.db")
    paused = LeaseKeeper(store, "rotation/c1", "run-a", ttl=1.0)
    paused.acquire()
    paused._stop.set()  # frozen: no renewal happens
    journal = Journal(store, "c1", WallClock(), paused)
    time.sleep(1.05)
    taker = LeaseKeeper(store, "rotation/c1", "run-b", ttl=30.0)
    taker.acquire()
    with pytest.raises(LeaseLost):
        journal.write("intent", id="x", op="terminate")
    assert store.read("rotation/c1") == []
    taker.release()


def test_the_margin_is_a_tenth_of_the_ttl_at_least_a_second_and_never_more_than_half() -> None:
    assert margin_for(60) == 6 and margin_for(5) == 1 and margin_for(1) == 0.5


class Hanging:
    """A TCP path to an endpoint that can stop answering for a while: requests sent meanwhile are swallowed and their
    connections left open, as a half-dead network path or an overloaded endpoint leaves them."""

    def __init__(self, upstream: str) -> None:
        import socket
        import socketserver
        import threading
        from urllib.parse import urlparse

        target = urlparse(upstream)
        self.hang_until = 0.0
        outer = self

        class Pipe(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                up = socket.create_connection((target.hostname, target.port))

                def back() -> None:
                    try:
                        while data := up.recv(65536):
                            self.request.sendall(data)
                    except OSError:
                        pass

                threading.Thread(target=back, daemon=True).start()
                try:
                    while data := self.request.recv(65536):
                        if time.monotonic() < outer.hang_until:
                            time.sleep(outer.hang_until - time.monotonic() + 5)  # never forwarded; the caller gave up
                            return
                        up.sendall(data)
                except OSError:
                    pass
                finally:
                    up.close()

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Pipe)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_dynamodb_renewal_lost_to_a_hung_connection_does_not_cost_the_lease(
        aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's own timeouts (60 s to connect, 60 s to read, five attempts) would hold a renewal on a hung connection
    for minutes, past any TTL: the lease calls give up within a third of the TTL and the next renewal comes soon after,
    so one lost call keeps the lease and the holder acts on."""
    from platformctl.kernel.state.dynamodb import DynamoDBStore, create_table

    create_table("leases")
    path = Hanging(aws_env["AWS_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", path.url)
    try:
        store = DynamoDBStore("leases")
        ttl = 12.0
        keeper = LeaseKeeper(store, "rotation/c1", "run-a", ttl=ttl)
        keeper.acquire()
        time.sleep(ttl / 4 + 0.5)  # one renewal went through
        keeper.check()
        hang = ttl / 4 + 2.5
        hang_ends = time.time() + hang  # on the store's clock: a renewal after it is good until hang_ends + ttl
        path.hang_until = time.monotonic() + hang  # the next renewal: both its attempts hang
        deadline = time.monotonic() + 2 * ttl
        # Until a renewal made after the hang went through (or two TTLs, when the test fails): the lease is checked
        # every quarter second all the while.
        while time.monotonic() < deadline and not (keeper.last_error and keeper.lease is not None
                                                     and keeper.lease.expires >= hang_ends + ttl):
            keeper.check()  # never lost: the hung call gave up in time and the renewal after it went through
            time.sleep(0.25)
        keeper.check()
        assert keeper.last_error is not None and "timeout" in keeper.last_error.lower()  # one renewal was lost
        assert keeper.lease is not None and keeper.lease.expires >= hang_ends + ttl  # renewed since, by the same holder
        assert store.lease("rotation/c1").token == keeper.lease.token  # and the lease is still this holder's
        keeper.release()
        assert store.lease("rotation/c1") is None
    finally:
        path.close()
