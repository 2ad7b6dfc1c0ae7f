"""The state store in one SQLite file: the default, for one operator's machine or one job's volume.

WAL mode lets readers (``rotate status`` in another terminal) read while a writer writes. Every
write is one ``BEGIN IMMEDIATE`` transaction, which SQLite serialises across processes, so the
next sequence number and a lease's take-over are decided by one writer at a time; ``busy_timeout``
makes a second writer wait its turn instead of failing. (Not the switch to WAL on a new file: SQLite answers
``SQLITE_BUSY`` at once, without the busy handler, to a process that switches while another does, as several jobs
opening a new store together do; that one statement is asked again until the same timeout.) A fenced append checks the lease and
writes the record in that one transaction. One connection per thread: a stage rotation runs one
thread per cluster.

The file is checked when opened: one that holds another program's tables is refused on one line
rather than written into. Files an older version wrote are brought up to date (the stream registry
and the retention column are added, once).
"""

from __future__ import annotations

import functools
import json
import random
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from platformctl.kernel.clock import Clock, WallClock
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state.base import Lease, LeaseHeld, LeaseLost, Record, StoreUnavailable

F = TypeVar("F", bound=Callable[..., Any])
# SQLite's answers that may pass by themselves: another process's write outlasted the busy timeout, or the file's
# folder was briefly unreachable. A full disk, a read-only file or a corrupt one needs someone.
TRANSIENT = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_IOERR})
NOT_A_STORE = frozenset({sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT})


def _unavailable(location: str, exc: sqlite3.Error) -> StoreUnavailable:
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    return StoreUnavailable(f"{location}: SQLite answered {name}: {exc}",
                            transient=code is not None and (code & 0xFF) in TRANSIENT)


def _store_errors(method: F) -> F:
    """What escapes a store call as SQLite's error (a write that waited out ``BUSY_SECONDS`` for another process's, a
    full disk, a file that went away) leaves the seam as a ``StoreUnavailable`` naming the store and SQLite's code, as
    the DynamoDB store's errors do: nothing above the seam knows which store it talks to."""

    @functools.wraps(method)
    def wrapped(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise _unavailable(self.location, exc) from None

    return cast(F, wrapped)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time REAL NOT NULL,
    data TEXT NOT NULL,
    expires REAL,
    PRIMARY KEY (stream, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token TEXT NOT NULL,
    acquired REAL NOT NULL,
    expires REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS streams (name TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sequences (name TEXT NOT NULL, stream TEXT NOT NULL, n INTEGER NOT NULL,
                                      PRIMARY KEY (name, stream)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_expiring ON records (expires) WHERE expires IS NOT NULL;
"""
_COLUMNS = {"records": {"stream", "seq", "time", "data"}, "leases": {"name", "holder", "token", "acquired", "expires"},
            "streams": {"name"}, "sequences": {"name", "stream", "n"}}
PRUNE_EVERY_SECONDS = 600.0  # how often a store that writes expiring records deletes the expired ones


class SQLiteStore:
    def __init__(self, path: Path, location: str | None = None, clock: Clock | None = None) -> None:
        self.path = path
        self.location = location or str(path)
        self.clock = clock or WallClock()
        self._local = threading.local()
        if path.is_dir():
            raise PlatformError("is a folder, not a state file", file=str(path), field="--state")
        if not path.parent.is_dir():
            raise PlatformError(f"cannot open the state store: folder {path.parent} does not exist", file=str(path),
                                field="--state")
        try:
            conn = self._conn()
            self._check_schema(conn)
            conn.executescript(_SCHEMA)
            self._migrate(conn)
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in NOT_A_STORE:  # the user named a file that is not one
                raise PlatformError(f"cannot open the state store ({exc})", file=str(path), field="--state") from None
            raise _unavailable(self.location, exc) from None
        self._pruned = 0.0

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """Refuse a file that holds another program's tables (before writing anything into it)."""
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        tables -= {"sqlite_sequence", "sqlite_stat1"}
        ours = tables & set(_COLUMNS)
        foreign = sorted(tables - set(_COLUMNS))
        if foreign and not ours:
            raise PlatformError(f"is not a platformctl state store: it holds another program's tables "
                                f"({', '.join(foreign[:5])})", file=str(self.path), field="--state")
        for table in ours:
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if not _COLUMNS[table] <= columns:
                raise PlatformError(f"is not a platformctl state store: its table {table} has columns "
                                    f"{', '.join(sorted(columns))}", file=str(self.path), field="--state")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring a file an older version wrote up to date: the retention column, and the registry of streams."""
        columns = {row[1] for row in conn.execute("PRAGMA table_info(records)")}
        registered = conn.execute("SELECT 1 FROM streams LIMIT 1").fetchone() is not None
        if "expires" in columns and (registered or conn.execute("SELECT 1 FROM records LIMIT 1").fetchone() is None):
            return  # up to date: nothing to write (a reader opening a store another process writes does not wait)
        with _Transaction(conn):
            if "expires" not in columns:
                conn.execute("ALTER TABLE records ADD COLUMN expires REAL")
                conn.execute("CREATE INDEX IF NOT EXISTS records_expiring ON records (expires) WHERE expires IS NOT NULL")
            if conn.execute("SELECT 1 FROM streams LIMIT 1").fetchone() is None:
                conn.execute("INSERT OR IGNORE INTO streams (name) SELECT DISTINCT stream FROM records")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
            _to_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def _write(self) -> _Transaction:
        return _Transaction(self._conn())

    # ---------------------------------------------------------------- streams

    def append(self, stream: str, data: Mapping[str, Any], *, fence: Lease | None = None, key: str | None = None,
               retain_seconds: float | None = None, sequence: str | None = None) -> Record:
        return self.append_many(stream, [data], fence=fence, retain_seconds=retain_seconds, sequence=sequence)[0]

    @_store_errors
    def append_many(self, stream: str, rows: Sequence[Mapping[str, Any]], *, fence: Lease | None = None,
                    retain_seconds: float | None = None, sequence: str | None = None) -> list[Record]:
        texts = [json.dumps(data, separators=(",", ":"), sort_keys=True) for data in rows]
        now = self.clock.now()
        expires = now + retain_seconds if retain_seconds is not None else None
        out: list[Record] = []
        with self._write() as conn:
            if fence is not None:
                self._hold(conn, fence, now)
            (first,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM records WHERE stream = ?", (stream,)).fetchone()
            last = first
            if sequence is not None:
                (counted,) = conn.execute("SELECT MAX(n) FROM sequences WHERE name = ?", (sequence,)).fetchone()
                last = counted if counted is not None else conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM records WHERE stream = ?", (sequence,)).fetchone()[0]
                conn.execute("INSERT OR REPLACE INTO sequences (name, stream, n) VALUES (?, ?, ?)",
                             (sequence, stream, last + len(texts)))  # the sequence's last number is its streams' most
            conn.executemany("INSERT INTO records (stream, seq, time, data, expires) VALUES (?, ?, ?, ?, ?)",
                             [(stream, last + i, now, text, expires) for i, text in enumerate(texts, 1)])
            if first == 0:
                conn.execute("INSERT OR IGNORE INTO streams (name) VALUES (?)", (stream,))
        out = [Record(stream, last + i, now, json.loads(text)) for i, text in enumerate(texts, 1)]
        if expires is not None and now - self._pruned >= PRUNE_EVERY_SECONDS:
            self.prune()
        return out

    @staticmethod
    def _hold(conn: sqlite3.Connection, fence: Lease, now: float) -> None:
        """Inside the write's transaction: the lease is still the fence's, and not expired; else nothing is written."""
        row = conn.execute("SELECT holder, token, expires FROM leases WHERE name = ?", (fence.name,)).fetchone()
        if row is None or row[1] != fence.token or row[2] <= now:
            held = "released" if row is None else ("expired" if row[1] == fence.token else f"taken over by {row[0]}")
            raise LeaseLost(f"lease {fence.name} is no longer held by {fence.holder} ({held}): nothing was written")

    @_store_errors
    def prune(self) -> int:
        """Delete the records whose retention ran out (canary results); journals and ledgers have none."""
        now = self.clock.now()
        with self._write() as conn:
            gone = conn.execute("DELETE FROM records WHERE expires IS NOT NULL AND expires < ?", (now,)).rowcount
        self._pruned = now
        return int(gone)

    @_store_errors
    def read_back(self, stream: str, before: int | None = None, limit: int = 500) -> list[Record]:
        rows = self._conn().execute(
            "SELECT seq, time, data FROM records WHERE stream = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
            (stream, before if before is not None else 2**62, limit)).fetchall()
        return [Record(stream, seq, t, json.loads(d)) for seq, t, d in rows]

    @_store_errors
    def read(self, stream: str, after: int = 0, limit: int | None = None) -> list[Record]:
        rows = self._conn().execute(
            "SELECT seq, time, data FROM records WHERE stream = ? AND seq > ? ORDER BY seq LIMIT ?",
            (stream, after, -1 if limit is None else limit)).fetchall()
        return [Record(stream, seq, t, json.loads(d)) for seq, t, d in rows]

    @_store_errors
    def read_sequence(self, sequence: str, after: int = 0) -> list[Record]:
        # One statement: one snapshot of the file, so every record numbered below the newest it holds is in it.
        rows = self._conn().execute(
            "SELECT stream, seq, time, data FROM records WHERE (stream = ? OR stream IN "
            "(SELECT stream FROM sequences WHERE name = ?)) AND seq > ? ORDER BY seq, stream",
            (sequence, sequence, after)).fetchall()
        return [Record(stream, seq, t, json.loads(d)) for stream, seq, t, d in rows]

    @_store_errors
    def last(self, stream: str) -> Record | None:
        row = self._conn().execute("SELECT seq, time, data FROM records WHERE stream = ? ORDER BY seq DESC LIMIT 1",
                                   (stream,)).fetchone()
        return Record(stream, row[0], row[1], json.loads(row[2])) if row else None

    @_store_errors
    def streams(self, prefix: str = "") -> list[str]:
        # The registry's key range, not the records: listing costs the streams, not their history.
        rows = self._conn().execute("SELECT name FROM streams WHERE name >= ? AND name < ? ORDER BY name",
                                    (prefix, prefix + "\U0010ffff")).fetchall()
        return [r[0] for r in rows]

    # ---------------------------------------------------------------- leases

    @_store_errors
    def acquire(self, name: str, holder: str, ttl: float) -> Lease:
        now = self.clock.now()
        with self._write() as conn:
            current = self._lease(conn, name)
            if current is not None and current.holder != holder and not current.expired(now):
                raise LeaseHeld(current)
            lease = Lease(name, holder, uuid.uuid4().hex, now, now + ttl)
            conn.execute("INSERT OR REPLACE INTO leases (name, holder, token, acquired, expires) VALUES (?, ?, ?, ?, ?)",
                         (name, holder, lease.token, lease.acquired, lease.expires))
        return lease

    @_store_errors
    def renew(self, lease: Lease, ttl: float) -> Lease:
        """Extend the holder's lease; one that expired is not brought back (only a new acquisition takes it again)."""
        now = self.clock.now()
        with self._write() as conn:
            changed = conn.execute("UPDATE leases SET expires = ? WHERE name = ? AND holder = ? AND token = ? AND expires > ?",
                                   (now + ttl, lease.name, lease.holder, lease.token, now)).rowcount
        if not changed:
            raise LeaseLost(f"lease {lease.name} is no longer held by {lease.holder}")
        return Lease(lease.name, lease.holder, lease.token, lease.acquired, now + ttl)

    @_store_errors
    def release(self, lease: Lease) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM leases WHERE name = ? AND token = ?", (lease.name, lease.token))

    @_store_errors
    def lease(self, name: str) -> Lease | None:
        return self._lease(self._conn(), name)

    @staticmethod
    def _lease(conn: sqlite3.Connection, name: str) -> Lease | None:
        row = conn.execute("SELECT holder, token, acquired, expires FROM leases WHERE name = ?", (name,)).fetchone()
        return Lease(name, *row) if row else None

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


BUSY_SECONDS = 30.0  # how long a connection waits for another process's write before it says the store is locked


def _to_wal(conn: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode=WAL`` when the file is not in WAL mode already (a store another process opened first is:
    asking again would wait for its writers), asked again (jittered, doubling up to 0.2 s) while SQLite answers it
    busy."""
    deadline, delay = time.monotonic() + BUSY_SECONDS, 0.005
    while True:
        try:
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 0.2)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on an exception): one writer at a time, across processes."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self.conn.execute("COMMIT" if kind is None else "ROLLBACK")
