"""What a state store is: its records, its leases, the errors a lease raises, and the ``StateStore`` protocol both
stores implement (``platformctl.kernel.state.sqlite``, ``platformctl.kernel.state.dynamodb``). The package
(``platformctl.kernel.state``) re-exports them and picks a store; this module imports neither store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from platformctl.kernel.errors import PlatformError, Unavailable


@dataclass(frozen=True)
class Record:
    stream: str
    seq: int
    time: float  # wall-clock seconds when the store wrote it
    data: Mapping[str, Any]


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    token: str  # new at every acquisition
    acquired: float
    expires: float

    def expired(self, now: float) -> bool:
        return now >= self.expires


class LeaseHeld(Exception):
    """Someone else holds the lease and it has not expired."""

    def __init__(self, lease: Lease) -> None:
        self.lease = lease
        super().__init__(f"lease {lease.name} is held by {lease.holder} until {lease.expires:.0f}")


class NoSuchStore(PlatformError):
    """The store named is not there (a DynamoDB table that does not exist): the user's mistake for a command that reads
    one, and for one that asks whether something was ever recorded, a sign that nothing was."""


class StoreUnavailable(Unavailable):
    """The state store did not answer or refused (DynamoDB's own error, or no connection), said with the store's location
    and the store's own code: raised by a store's adapter in place of its SDK's error, so that nothing above the seam
    knows which store it talks to."""


class LeaseLost(Exception):
    """The lease is no longer the caller's: it expired and someone else took it, or it was released."""


@runtime_checkable
class StateStore(Protocol):
    location: str  # how the user named it: a path, sqlite:///..., dynamodb://...

    def append(self, stream: str, data: Mapping[str, Any], *, fence: Lease | None = None, key: str | None = None,
               retain_seconds: float | None = None, sequence: str | None = None) -> Record:
        """Add a record. ``fence``: only while that lease is the writer's (else ``LeaseLost``, nothing written);
        ``key``: the append's own name, so a retry after a lost answer is not written twice (made up when not
        given); ``retain_seconds``: the record expires that long after it is written; ``sequence``: the record's
        number is the next of that sequence, one order shared by every stream appended under it (``read_sequence``
        reads them merged), where without it each stream numbers its own. A sequence's first number follows the last
        record of the stream of its own name, so a stream written before its sequence existed keeps its order."""
        ...

    def read_sequence(self, sequence: str, after: int = 0) -> list[Record]:
        """The records numbered by ``sequence`` above ``after`` (of every stream appended under it, and of the stream
        of its name), in the sequence's order, each with the stream it is in: every record numbered up to the
        sequence's last number when the read began, none missed."""
        ...

    def append_many(self, stream: str, rows: Sequence[Mapping[str, Any]], *, fence: Lease | None = None,
                    retain_seconds: float | None = None) -> list[Record]: ...

    def read(self, stream: str, after: int = 0, limit: int | None = None) -> list[Record]:
        """Records of ``stream`` with a sequence number above ``after``, oldest first."""
        ...

    def read_back(self, stream: str, before: int | None = None, limit: int = 500) -> list[Record]:
        """Up to ``limit`` records of ``stream`` below sequence number ``before`` (else the newest), newest first."""
        ...

    def prune(self) -> int:
        """Delete records whose retention ran out; how many went."""
        ...

    def last(self, stream: str) -> Record | None: ...

    def streams(self, prefix: str = "") -> list[str]:
        """Names of the streams that start with ``prefix``, sorted."""
        ...

    def acquire(self, name: str, holder: str, ttl: float) -> Lease: ...

    def renew(self, lease: Lease, ttl: float) -> Lease: ...

    def release(self, lease: Lease) -> None: ...

    def lease(self, name: str) -> Lease | None:
        """The lease as last written (possibly expired), or None when nobody ever held it or it was released."""
        ...

    def close(self) -> None: ...
