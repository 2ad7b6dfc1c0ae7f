"""One contract for the state store, run against both implementations: SQLite and DynamoDB (moto's server).

DynamoDB runs behind moto's threaded server on 127.0.0.1, so separate processes share one table as
operators' machines would share the real one; the races below are between real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state import LeaseHeld, LeaseLost, StateStore, open_store
from platformctl.kernel.state.dynamodb import DynamoDBStore, create_table
from platformctl.kernel.state.sqlite import SQLiteStore


class SettableClock:
    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


_tables = iter(range(10_000))


@pytest.fixture(params=["sqlite", "dynamodb"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """How a user names the store: a path, or dynamodb://TABLE (a fresh table each test)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    request.getfixturevalue("aws_env")
    table = f"platformctl-state-{next(_tables)}"
    create_table(table)
    return f"dynamodb://{table}"


def with_clock(spec: str, clock: SettableClock) -> StateStore:
    store = open_store(spec)
    store.clock = clock  # type: ignore[attr-defined]
    return store


def test_append_numbers_each_stream_from_one_and_reads_from_a_sequence_on(spec: str) -> None:
    store = open_store(spec)
    assert store.last("rotation/a") is None and store.read("rotation/a") == []
    made = [store.append("rotation/a", {"n": i, "what": "cordon"}) for i in range(1, 6)]
    store.append("rotation/b", {"n": 1})
    assert [r.seq for r in made] == [1, 2, 3, 4, 5]
    assert [r.data["n"] for r in store.read("rotation/a", after=2)] == [3, 4, 5]
    assert [r.seq for r in store.read("rotation/a", after=1, limit=2)] == [2, 3]
    last = store.last("rotation/a")
    assert last is not None and last.seq == 5 and last.data == {"n": 5, "what": "cordon"}
    assert store.streams("rotation/") == ["rotation/a", "rotation/b"] and store.streams("canary/") == []
    # Another handle (another process, another operator) sees the same records.
    again = open_store(spec)
    assert [r.data for r in again.read("rotation/a")] == [r.data for r in made]


def test_concurrent_writers_never_share_a_sequence_number(spec: str) -> None:
    store = open_store(spec)
    seqs: list[int] = []
    lock = threading.Lock()

    def write(writer: int) -> None:
        mine = open_store(spec)
        for i in range(10):
            record = mine.append("shared", {"writer": writer, "i": i})
            with lock:
                seqs.append(record.seq)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 41))
    records = store.read("shared")
    assert [r.seq for r in records] == list(range(1, 41))
    # Each writer's records keep their order.
    for w in range(4):
        assert [r.data["i"] for r in records if r.data["writer"] == w] == list(range(10))


def test_streams_under_one_sequence_share_one_order_and_are_read_merged_with_none_missed(spec: str) -> None:
    """The release ledger's partitions: each writer its own stream, one order for all. A stream written before its
    sequence existed keeps its numbers (the sequence goes on after its last); writers racing in different streams
    never share a number, and a reader merging them sees each writer's records in order, none missed."""
    store = open_store(spec)
    legacy = [store.append("release/ledger", {"n": i}) for i in range(3)]  # as an older version wrote it
    assert [r.seq for r in legacy] == [1, 2, 3]
    seqs: list[tuple[str, int]] = []
    lock = threading.Lock()

    def write(stage: str) -> None:
        mine = open_store(spec)
        for i in range(8):
            record = mine.append(f"release/ledger@{stage}", {"stage": stage, "i": i}, sequence="release/ledger")
            with lock:
                seqs.append((stage, record.seq))

    threads = [threading.Thread(target=write, args=(stage,)) for stage in ("dev", "staging", "prod")]
    for t in threads:
        t.start()
    people = store.append("release/ledger", {"who": "alice"}, sequence="release/ledger")
    seen_during = store.read_sequence("release/ledger")
    for t in threads:
        t.join()
    assert sorted([n for _, n in seqs] + [people.seq]) == list(range(4, 4 + 25))  # one order, no number twice
    merged = store.read_sequence("release/ledger")
    assert [r.seq for r in merged] == list(range(1, 4 + 25))
    assert {r.stream for r in merged} == {"release/ledger", "release/ledger@dev", "release/ledger@staging",
                                          "release/ledger@prod"}
    for stage in ("dev", "staging", "prod"):
        assert [r.data["i"] for r in merged if r.data.get("stage") == stage] == list(range(8))
        assert [r.seq for r in store.read(f"release/ledger@{stage}")] == sorted(n for s, n in seqs if s == stage)
    assert [r.seq for r in seen_during] == list(range(1, len(seen_during) + 1))  # a prefix: nothing below skipped
    assert [r.seq for r in store.read_sequence("release/ledger", after=20)] == list(range(21, 29))


def test_a_fenced_append_under_a_sequence_takes_no_number_once_the_lease_is_lost(spec: str) -> None:
    clock = SettableClock()
    store = with_clock(spec, clock)
    lease = store.acquire("release/tick/dev", "tick-a", ttl=60)
    first = store.append("release/ledger@dev", {"n": 1}, fence=lease, sequence="release/ledger")
    clock.t += 61
    store.acquire("release/tick/dev", "tick-b", ttl=60)
    with pytest.raises(LeaseLost):
        store.append("release/ledger@dev", {"n": 2}, fence=lease, sequence="release/ledger")
    after = store.append("release/ledger", {"n": 3}, sequence="release/ledger")
    assert (first.seq, after.seq) == (1, 2)
    assert [r.data["n"] for r in store.read_sequence("release/ledger")] == [1, 3]


def test_a_lease_is_one_holders_until_it_expires(spec: str) -> None:
    clock = SettableClock()
    a, b = with_clock(spec, clock), with_clock(spec, clock)
    lease = a.acquire("rotation/c1", "run-a", ttl=30)
    assert lease.holder == "run-a" and lease.expires == clock.t + 30
    with pytest.raises(LeaseHeld) as held:
        b.acquire("rotation/c1", "run-b", ttl=30)
    assert held.value.lease.holder == "run-a"
    clock.t += 20
    lease = a.renew(lease, ttl=30)  # renewed: good for 30 s from now
    clock.t += 20
    with pytest.raises(LeaseHeld):
        b.acquire("rotation/c1", "run-b", ttl=30)
    assert b.acquire("rotation/other", "run-b", ttl=30).holder == "run-b"  # leases are independent
    clock.t += 11  # a stopped renewing: its lease ran out
    taken = b.acquire("rotation/c1", "run-b", ttl=30)
    assert taken.token != lease.token
    with pytest.raises(LeaseLost):
        a.renew(lease, ttl=30)  # the stalled holder learns it lost the lease
    a.release(lease)  # releasing a lease that is no longer yours changes nothing
    current = b.lease("rotation/c1")
    assert current is not None and current.holder == "run-b"
    b.release(taken)
    assert b.lease("rotation/c1") is None
    assert a.acquire("rotation/c1", "run-a", ttl=30).holder == "run-a"


_RACER = textwrap.dedent("""
    import json, sys, time
    from platformctl.kernel.state import LeaseHeld, open_store
    store = open_store(sys.argv[1])
    start = float(sys.argv[3])
    while time.time() < start:
        time.sleep(0.001)
    try:
        lease = store.acquire("rotation/race", sys.argv[2], ttl=300)
        store.append("race-log", {"won": sys.argv[2]})
        print(json.dumps({"won": True, "holder": lease.holder}))
    except LeaseHeld as exc:
        print(json.dumps({"won": False, "holder": exc.lease.holder}))
""")


def test_processes_racing_for_one_lease_one_wins(spec: str, tmp_path: Path) -> None:
    script = tmp_path / "racer.py"
    script.write_text(_RACER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[4])}
    start = time.time() + 3.0  # every process is up and waiting before the race starts
    racers = [subprocess.Popen([sys.executable, str(script), spec, f"racer-{i}", str(start)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env) for i in range(6)]
    results = []
    for proc in racers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    winners = [r for r in results if r["won"]]
    assert len(winners) == 1
    # Every loser was told who holds it, and the store agrees.
    assert {r["holder"] for r in results} == {winners[0]["holder"]}
    store = open_store(spec)
    lease = store.lease("rotation/race")
    assert lease is not None and lease.holder == winners[0]["holder"]
    assert [r.data["won"] for r in store.read("race-log")] == [winners[0]["holder"]]


_OPENER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from platformctl.kernel.state.sqlite import SQLiteStore
    start = float(sys.argv[2])
    while time.time() < start:
        time.sleep(0.001)
    SQLiteStore(Path(sys.argv[1])).append("opened", {"by": sys.argv[3]})
""")


def test_jobs_opening_one_new_sqlite_store_at_the_same_moment_all_open_it(tmp_path: Path) -> None:
    """SQLite answers a switch to WAL busy at once when another process switches the new file too (a stage's jobs
    starting together on a new store): without asking again, about one opener in fifteen failed (2026-11-27)."""
    script = tmp_path / "opener.py"
    script.write_text(_OPENER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[4])}
    for round_ in range(5):
        path = tmp_path / f"new-{round_}.db"
        start = time.time() + 1.0
        openers = [subprocess.Popen([sys.executable, str(script), str(path), str(start), f"job-{i}"], stderr=subprocess.PIPE,
                                    text=True, env=env) for i in range(8)]
        errors = [p.communicate(timeout=120)[1] for p in openers]
        assert [p.returncode for p in openers] == [0] * 8, "\n".join(errors)
        assert len(open_store(str(path)).read("opened")) == 8


def test_stores_that_cannot_be_opened_say_so_in_one_line(tmp_path: Path, aws_env: dict[str, str]) -> None:
    with pytest.raises(PlatformError, match="folder .* does not exist"):
        open_store(str(tmp_path / "missing" / "state.db"))
    with pytest.raises(PlatformError, match="is a folder"):
        open_store(str(tmp_path))
    (tmp_path / "garbage.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(PlatformError, match="cannot open the state store"):
        open_store(str(tmp_path / "garbage.db"))
    with pytest.raises(PlatformError, match="no DynamoDB table 'nope'"):
        open_store("dynamodb://nope")
    with pytest.raises(PlatformError, match="expected PATH"):
        open_store("postgres://db/state")


def test_a_dynamodb_store_that_stops_answering_says_so_as_the_stores_fault_not_as_botocores(aws_env: dict[str, str]) -> None:
    """Nothing above the seam knows it is DynamoDB: a table gone from under an open store is a ``StoreUnavailable``
    naming the store and DynamoDB's own code, which a command prints on one line and exits 1 for (a fault, not the
    user's mistake)."""
    from platformctl.kernel import aws
    from platformctl.kernel.errors import PlatformError, Unavailable
    from platformctl.kernel.state import StoreUnavailable

    table = f"platformctl-state-{next(_tables)}"
    create_table(table)
    store = open_store(f"dynamodb://{table}")
    store.append("journal/c1", {"kind": "run-started"})
    aws.client("dynamodb").delete_table(TableName=table)
    for call in (lambda: store.read("journal/c1"), lambda: store.append("journal/c1", {"kind": "x"}),
                 lambda: store.acquire("rotation/c1", "me", 60.0), lambda: store.streams("journal/")):
        with pytest.raises(StoreUnavailable) as gone:
            call()
        assert isinstance(gone.value, Unavailable) and not isinstance(gone.value, PlatformError)
        assert f"dynamodb://{table}" in str(gone.value) and "ResourceNotFoundException" in str(gone.value)


_WRITER = textwrap.dedent("""
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")  # another process's write, holding the file's write lock
    print("holding", flush=True)
    time.sleep(60)
""")


def test_a_sqlite_store_another_process_holds_locked_is_the_stores_fault_on_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that waited out the busy timeout for another process's write is a ``StoreUnavailable`` naming the store
    and SQLite's code, transient (tried again, never taken for the user's mistake), as DynamoDB's faults are; reads go on
    (WAL); and a command says it on one line and exits 1."""
    from platformctl.kernel.errors import Unavailable, is_transient
    from platformctl.kernel.state import StoreUnavailable
    from platformctl.kernel.state import sqlite as sqlite_store

    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    store.append("journal/c1", {"kind": "run-started"})
    holder = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        monkeypatch.setattr(sqlite_store, "BUSY_SECONDS", 0.3)
        late = SQLiteStore(path)  # a connection made now waits 0.3 s for the lock, not 30
        for call in (lambda: late.append("journal/c1", {"kind": "x"}), lambda: late.acquire("rotation/c1", "me", 60.0)):
            with pytest.raises(StoreUnavailable) as locked:
                call()
            assert isinstance(locked.value, Unavailable) and not isinstance(locked.value, PlatformError)
            assert str(path) in str(locked.value) and "SQLITE_BUSY" in str(locked.value) and is_transient(locked.value)
        assert [r.data["kind"] for r in late.read("journal/c1")] == ["run-started"]  # a reader is not held up
        from click.testing import CliRunner

        from platformctl.cli import cli

        done = CliRunner().invoke(cli, ["rotate", "pause", "--stage", "dev", "--state", str(path), "--reason", "locked"])
        assert done.exit_code == 1, done.output
        said = done.stderr.strip().splitlines()
        assert len(said) == 1 and "SQLITE_BUSY" in said[0] and str(path) in said[0] and "Traceback" not in done.output
    finally:
        holder.kill()
        holder.wait()


def test_the_default_store_is_a_file_under_platformctl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORMCTL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PLATFORMCTL_STATE", raising=False)
    from platformctl.app.platform import Platform
    from platformctl.app.stores import store_for

    store = store_for(Platform.from_os(), None)
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "home" / "state.db"
    store.append("x", {})
    conn_mode = store._conn().execute("PRAGMA journal_mode").fetchone()[0]
    assert conn_mode == "wal"
    monkeypatch.setenv("PLATFORMCTL_STATE", f"sqlite:///{tmp_path / 'env.db'}")
    again = store_for(Platform.from_os(), None)
    assert isinstance(again, SQLiteStore) and again.path == tmp_path / "env.db"


def test_dynamodb_store_is_named_by_its_table(aws_env: dict[str, str]) -> None:
    create_table("named")
    store = open_store("dynamodb://named")
    assert isinstance(store, DynamoDBStore) and store.table == "named" and store.location == "dynamodb://named"


def test_a_fenced_append_is_written_only_while_the_lease_is_still_the_writers(spec: str) -> None:
    clock = SettableClock()
    a, b = with_clock(spec, clock), with_clock(spec, clock)
    lease = a.acquire("rotation/c1", "run-a", ttl=30)
    a.append("rotation/c1", {"n": 1}, fence=lease)
    clock.t += 29.9
    a.append("rotation/c1", {"n": 2}, fence=lease)  # just before its expiry: still its own
    clock.t += 0.1  # exactly at its expiry: no longer
    with pytest.raises(LeaseLost):
        a.append("rotation/c1", {"n": 3}, fence=lease)
    with pytest.raises(LeaseLost):
        a.renew(lease, ttl=30)  # an expired lease is not brought back by its old holder
    taken = b.acquire("rotation/c1", "run-b", ttl=30)  # at exactly the expiry another may take it
    b.append("rotation/c1", {"n": 3, "by": "b"}, fence=taken)
    with pytest.raises(LeaseLost):
        a.append("rotation/c1", {"n": 4}, fence=lease)  # the stalled holder's write after the takeover
    assert [r.data["n"] for r in a.read("rotation/c1")] == [1, 2, 3]
    assert a.read("rotation/c1")[-1].data["by"] == "b"
    b.release(taken)
    with pytest.raises(LeaseLost):
        b.append("rotation/c1", {"n": 5}, fence=taken)  # released: no longer anyone's


def test_the_same_holder_acquiring_again_gets_a_new_token_and_fences_out_its_old_one(spec: str) -> None:
    clock = SettableClock()
    store = with_clock(spec, clock)
    first = store.acquire("rotation/c1", "run-a", ttl=30)
    again = store.acquire("rotation/c1", "run-a", ttl=30)  # a restarted process with the same name
    assert again.token != first.token and again.holder == "run-a"
    store.append("rotation/c1", {"n": 1}, fence=again)
    with pytest.raises(LeaseLost):
        store.append("rotation/c1", {"n": 2}, fence=first)
    with pytest.raises(LeaseLost):
        store.renew(first, ttl=30)
    assert [r.data["n"] for r in store.read("rotation/c1")] == [1]


def test_a_window_is_read_newest_first_from_the_registry_of_streams(spec: str) -> None:
    store = open_store(spec)
    store.append_many("canary/dev/c1/2026-01-01", [{"kind": "result", "at": float(i)} for i in range(600)])
    store.append("canary/dev/c2/2026-01-01", {"kind": "result", "at": 5.0})
    store.append("rotation/c1", {"kind": "run-started"})
    assert store.streams("canary/dev/") == ["canary/dev/c1/2026-01-01", "canary/dev/c2/2026-01-01"]
    assert store.streams("") == ["canary/dev/c1/2026-01-01", "canary/dev/c2/2026-01-01", "rotation/c1"]
    newest = store.read_back("canary/dev/c1/2026-01-01", limit=3)
    assert [r.data["at"] for r in newest] == [599.0, 598.0, 597.0]
    older = store.read_back("canary/dev/c1/2026-01-01", before=newest[-1].seq, limit=2)
    assert [r.data["at"] for r in older] == [596.0, 595.0]


def test_records_with_a_retention_expire_and_journals_do_not(spec: str) -> None:
    clock = SettableClock()
    store = with_clock(spec, clock)
    store.append("canary/dev/c1/2026-01-01", {"kind": "result", "at": 1.0}, retain_seconds=3600)
    store.append("rotation/c1", {"kind": "run-started"})
    clock.t += 3601
    store.prune()
    assert store.read_back("canary/dev/c1/2026-01-01") == []  # gone, or (DynamoDB's TTL is lazy) no longer read
    assert len(store.read("rotation/c1")) == 1


def test_a_file_of_another_program_is_refused_not_written_into(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    with pytest.raises(PlatformError, match=r"is not a platformctl state store: it holds another program's tables \(users\)"):
        open_store(str(path))
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["users"]


class DroppedAnswers:
    """A DynamoDB client whose next few writes reach the table and then lose their answer, as when a connection
    drops after the request was served: the caller cannot tell whether the write happened."""

    def __init__(self, client: object, drops: int) -> None:
        self._client = client
        self.drops = drops

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    def _maybe_drop(self, method: str, **kwargs: object) -> object:
        from botocore.exceptions import ConnectionClosedError

        answer = getattr(self._client, method)(**kwargs)
        if self.drops > 0:
            self.drops -= 1
            raise ConnectionClosedError(endpoint_url="http://dynamodb")
        return answer

    def put_item(self, **kwargs: object) -> object:
        return self._maybe_drop("put_item", **kwargs)

    def transact_write_items(self, **kwargs: object) -> object:
        return self._maybe_drop("transact_write_items", **kwargs)


class Conflicting:
    """A DynamoDB client whose next few transactions DynamoDB cancels for a conflict (another request on one of
    their items at that moment: two ticks moving the ledger's counter at once), writing nothing, as DynamoDB does."""

    def __init__(self, client: Any, conflicts: int) -> None:
        self._client = client
        self.conflicts = conflicts
        self.exceptions = client.exceptions

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    def transact_write_items(self, **kwargs: Any) -> object:
        if self.conflicts > 0:
            self.conflicts -= 1
            reasons = [{"Code": "None"}] * (len(kwargs["TransactItems"]) - 1) + [{"Code": "TransactionConflict"}]
            raise self._client.exceptions.TransactionCanceledException(
                {"Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
                 "CancellationReasons": reasons}, "TransactWriteItems")
        return self._client.transact_write_items(**kwargs)


def test_a_dynamodb_append_dynamodb_cancels_for_a_conflict_is_tried_again_and_written_once(
        aws_env: dict[str, str]) -> None:
    create_table("conflicts")
    store = DynamoDBStore("conflicts")
    lease = store.acquire("release/tick/dev", "tick", ttl=300)
    store._ddb = Conflicting(store._ddb, conflicts=3)
    store.append("release/ledger@dev", {"n": 1}, fence=lease, sequence="release/ledger")
    store.append("rotation/c1", {"n": 2}, fence=lease)
    store._ddb.conflicts = 2
    store.append("release/ledger@dev", {"n": 3}, sequence="release/ledger")
    assert store._ddb.conflicts == 0
    assert [(r.seq, r.data["n"]) for r in store.read_sequence("release/ledger")] == [(1, 1), (2, 3)]
    assert [(r.seq, r.data["n"]) for r in store.read("rotation/c1")] == [(1, 2)]


def test_a_dynamodb_append_whose_answer_was_lost_is_not_written_twice(aws_env: dict[str, str]) -> None:
    create_table("dropped")
    store = DynamoDBStore("dropped")
    lease = store.acquire("rotation/c1", "run-a", ttl=300)
    store._ddb = DroppedAnswers(store._ddb, drops=2)
    store.append("rotation/c1", {"n": 1}, fence=lease)
    store.append("rotation/c1", {"n": 2})
    assert store._ddb.drops == 0
    assert [(r.seq, r.data["n"]) for r in store.read("rotation/c1")] == [(1, 1), (2, 2)]


def test_a_takeover_racing_a_late_renewal_of_an_expired_lease_leaves_one_holder(aws_env: dict[str, str]) -> None:
    """The stalled holder wakes as the lease expires and renews while another host takes it: whichever the table
    takes first, there is exactly one holder afterwards and the other learns it has none."""
    create_table("race-renewal")
    for attempt in range(20):
        clock = SettableClock()
        a, b = DynamoDBStore("race-renewal", clock=clock), DynamoDBStore("race-renewal", clock=clock)
        name = f"rotation/c{attempt}"
        lease = a.acquire(name, "stalled", ttl=10)
        clock.t += 10  # expired for both
        outcomes: dict[str, object] = {}

        def renew() -> None:  # run and joined within this iteration: the loop's names are the ones meant
            try:
                outcomes["renew"] = a.renew(lease, ttl=10)  # noqa: B023
            except LeaseLost as exc:
                outcomes["renew"] = exc  # noqa: B023

        def take() -> None:
            try:
                outcomes["take"] = b.acquire(name, "taker", ttl=10)  # noqa: B023
            except LeaseHeld as exc:
                outcomes["take"] = exc  # noqa: B023

        threads = [threading.Thread(target=renew), threading.Thread(target=take)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert isinstance(outcomes["renew"], LeaseLost)  # an expired lease is never renewed back to life
        holder = a.lease(name)
        assert holder is not None and holder.holder == "taker" and not isinstance(outcomes["take"], LeaseHeld)
        with pytest.raises(LeaseLost):
            a.append(name, {"late": True}, fence=lease)
