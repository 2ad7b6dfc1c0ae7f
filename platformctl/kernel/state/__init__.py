"""The state store: append-only streams of records, and leases. One seam, two implementations.

Every subsystem that must remember what it did keeps it here: the rotation executor's journal, the
canaries' results, the release pipeline's ledger. What it offers is deliberately small:

- **streams**: ``append(stream, data)`` adds a record with the next sequence number of its stream
  (1, 2, 3, ...; two writers never get the same one), ``read(stream, after=seq)`` returns the
  records after a sequence number, oldest first, ``read_back(stream, before=seq)`` the newest
  first (a window of recent records costs the window, not the history), ``last(stream)`` the
  newest, and ``streams(prefix)`` the names, from a registry (never a scan of the records). An
  append given a ``fence`` (the lease its writer holds) is written only while that lease is still
  the writer's and unexpired, checked in the same transaction: a holder that was paused past its
  lease and taken over writes nothing. An append given ``retain_seconds`` expires (canary results;
  journals and ledgers are kept for ever);
- **leases**: ``acquire(name, holder, ttl)`` succeeds when nobody holds the lease or its holder let
  it expire, and raises ``LeaseHeld`` otherwise; ``renew`` extends it for its holder only (``LeaseLost``
  when someone took it over), ``release`` gives it up. Each acquisition gets a new ``token``, so a
  holder that stalled past its TTL can tell that the lease it renews is no longer its own.

``SQLiteStore`` (a file; WAL mode, so readers never wait for the writer) is the default, at
``$PLATFORMCTL_HOME/state.db`` or ``.platformctl/kernel/state.db``; ``DynamoDBStore`` (a table shared by
operators, conditional writes) is reached through the project's boto3 factory. ``open_store`` picks
one from ``--state PATH | sqlite:///PATH | dynamodb://TABLE`` (the application layer's ``store_for`` adds
``$PLATFORMCTL_STATE`` and the stage's own). Lease times
are wall-clock seconds: a lease is about whether a process is alive, which only wall time tells.
"""

from __future__ import annotations

from pathlib import Path

from platformctl.kernel.environment import STATE_VARIABLE, AwsTarget, Environment
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state.base import Lease, LeaseHeld, LeaseLost, NoSuchStore, Record, StateStore, StoreUnavailable

ENV = STATE_VARIABLE


def default_path(home: Path | None = None) -> Path:
    """The default store: ``state.db`` in the toolkit's home (``$PLATFORMCTL_HOME``, which the caller read)."""
    return (home or Environment().home) / "state.db"


def dynamodb_spec(given: str, where: str) -> tuple[str, str | None]:
    """``dynamodb://TABLE`` or ``dynamodb://TABLE?region=REGION``: the table and its region (None: the command's), or
    one line naming ``where`` the spec came from."""
    table, _, query = given.removeprefix("dynamodb://").partition("?")
    table = table.strip("/")
    if not table:
        raise PlatformError("dynamodb:// needs a table name (dynamodb://TABLE)", file=given, field=where)
    region = None  # a table in another region than the command's (the release ledger every stage shares)
    if query:
        key, _, region = query.partition("=")
        if key != "region" or not region:
            raise PlatformError("expected dynamodb://TABLE or dynamodb://TABLE?region=REGION", file=given, field=where)
    return table, region


def open_store(spec: str | None = None, existing: bool = False, *, where: str = "--state", home: Path | None = None,
               target: AwsTarget | None = None) -> StateStore:
    """The store ``spec`` names (``where``: the flag or variable it came from), else the default SQLite file in
    ``home``. ``existing``: a command that only reads (a status, a verdict) or acts on what a store holds (a pause) is
    given a store that exists, never makes one: a mistyped path is one line and exit 2, not an empty store that answers
    "nothing here". ``target``: the AWS a DynamoDB table is in."""
    given = spec or ""
    if given.startswith("dynamodb://"):
        from platformctl.kernel.state.dynamodb import DynamoDBStore

        table, region = dynamodb_spec(given, where)
        return DynamoDBStore(table, location=given, region=region, target=target)
    from platformctl.kernel.state.sqlite import SQLiteStore

    if not given:
        path = default_path(home)
        path.parent.mkdir(parents=True, exist_ok=True)
        return SQLiteStore(path, location=str(path))
    if "://" in given and not given.startswith("sqlite:///"):
        raise PlatformError("expected PATH, sqlite:///PATH or dynamodb://TABLE", file=given, field=where)
    # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy spells them.
    path = Path(given.removeprefix("sqlite:///")) if given.startswith("sqlite:///") else Path(given)
    if existing and not path.exists():
        raise PlatformError(f"no state store at {path} (this command reads or acts on what a store holds: it never "
                            "makes one)", file=given, field=where)
    return SQLiteStore(path, location=given)


__all__ = ["ENV", "Lease", "LeaseHeld", "LeaseLost", "NoSuchStore", "Record", "StateStore", "StoreUnavailable", "default_path",
           "dynamodb_spec", "open_store"]
