"""A lease holder stops acting once its lease may have expired, whatever made its renewals fail.

Real time, short TTLs: the keeper's clock is the process's monotonic clock, as in production.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from platformctl.clock import WallClock
from platformctl.state import LeaseLost
from platformctl.state.lease import LeaseKeeper, margin_for
from platformctl.state.sqlite import SQLiteStore
from upgrade_service.journal import Journal, read_state


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
