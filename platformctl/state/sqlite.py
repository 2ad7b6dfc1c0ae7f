"""The state store in one SQLite file: the default, for one operator's machine or one job's volume.

WAL mode lets readers (``rotate status`` in another terminal) read while a writer writes. Every
write is one ``BEGIN IMMEDIATE`` transaction, which SQLite serialises across processes, so the
next sequence number and a lease's take-over are decided by one writer at a time; ``busy_timeout``
makes a second writer wait its turn instead of failing. One connection per thread: a stage
rotation runs one thread per cluster.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from platformctl.clock import Clock, WallClock
from platformctl.errors import PlatformError
from platformctl.state import Lease, LeaseHeld, LeaseLost, Record

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    time REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (stream, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    token TEXT NOT NULL,
    acquired REAL NOT NULL,
    expires REAL NOT NULL
);
"""


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
            conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise PlatformError(f"cannot open the state store ({exc})", file=str(path), field="--state") from None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def _write(self) -> _Transaction:
        return _Transaction(self._conn())

    # ---------------------------------------------------------------- streams

    def append(self, stream: str, data: Mapping[str, Any]) -> Record:
        text = json.dumps(data, separators=(",", ":"), sort_keys=True)
        now = self.clock.now()
        with self._write() as conn:
            (seq,) = conn.execute(
                "INSERT INTO records (stream, seq, time, data) "
                "SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ? FROM records WHERE stream = ? RETURNING seq",
                (stream, now, text, stream)).fetchone()
        return Record(stream, seq, now, json.loads(text))

    def read(self, stream: str, after: int = 0, limit: int | None = None) -> list[Record]:
        rows = self._conn().execute(
            "SELECT seq, time, data FROM records WHERE stream = ? AND seq > ? ORDER BY seq LIMIT ?",
            (stream, after, -1 if limit is None else limit)).fetchall()
        return [Record(stream, seq, t, json.loads(d)) for seq, t, d in rows]

    def last(self, stream: str) -> Record | None:
        row = self._conn().execute("SELECT seq, time, data FROM records WHERE stream = ? ORDER BY seq DESC LIMIT 1",
                                   (stream,)).fetchone()
        return Record(stream, row[0], row[1], json.loads(row[2])) if row else None

    def streams(self, prefix: str = "") -> list[str]:
        rows = self._conn().execute("SELECT DISTINCT stream FROM records WHERE substr(stream, 1, ?) = ? ORDER BY stream",
                                    (len(prefix), prefix)).fetchall()
        return [r[0] for r in rows]

    # ---------------------------------------------------------------- leases

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

    def renew(self, lease: Lease, ttl: float) -> Lease:
        now = self.clock.now()
        with self._write() as conn:
            changed = conn.execute("UPDATE leases SET expires = ? WHERE name = ? AND holder = ? AND token = ?",
                                   (now + ttl, lease.name, lease.holder, lease.token)).rowcount
        if not changed:
            raise LeaseLost(f"lease {lease.name} is no longer held by {lease.holder}")
        return Lease(lease.name, lease.holder, lease.token, lease.acquired, now + ttl)

    def release(self, lease: Lease) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM leases WHERE name = ? AND token = ?", (lease.name, lease.token))

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


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on an exception): one writer at a time, across processes."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self.conn.execute("COMMIT" if kind is None else "ROLLBACK")
