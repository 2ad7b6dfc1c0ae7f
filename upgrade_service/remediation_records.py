"""Remediation's records, one dataclass per kind, in the stream ``remediation/<cluster>`` (its side effects are
``intents.Intent`` and ``intents.Done``, a drain's ``journal_records.Drained`` and ``Settling``, as a rotation's).

As the rotation journal's, a record is a dict only where it enters the store (``to_record``) and where
``remediate status`` prints it; the log folds it back into its dataclass (``from_record``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from upgrade_service.journal_records import JournalRecord

STARTED = "remediation-started"
FINISHED = "remediation-finished"
SKIPPED = "skipped"
INCIDENT = "breaker-open"
CLEARED = "breaker-closed"


@dataclass(frozen=True)
class RemediationStarted(JournalRecord):
    """A broken node (or an instance that never joined) being replaced: what a resumed run needs to finish it."""

    KIND: ClassVar[str] = STARTED
    id: str = ""
    subject: str = ""  # the node's name, or the instance's when it never joined
    node: str | None = None
    instance: str | None = None
    group: str | None = None
    pool: str | None = None
    zone: str | None = None
    reason: str = ""
    since: float | None = None
    members: list[str] = field(default_factory=list)  # the group's instances when it started: a new one is the replacement
    kubelet_gone_since: float | None = None
    surged: bool = False  # an earlier surge already stands in for it
    max_per_hour: int | None = None  # the policy's limit this one counted against (what the dashboard shows it of)


@dataclass(frozen=True)
class RemediationFinished(JournalRecord):
    KIND: ClassVar[str] = FINISHED
    id: str = ""
    subject: str = ""
    result: str = ""  # replaced | recovered | gone | stopped | drain-failed | replacement-not-ready
    detail: str = ""
    replacement: str | None = None


@dataclass(frozen=True)
class Skipped(JournalRecord):
    KIND: ClassVar[str] = SKIPPED
    subject: str = ""
    code: str = ""  # breaker-open | rate-limit | under-rotation | unmanaged | in-progress | …
    why: str = ""
    problem: str = ""


@dataclass(frozen=True)
class BreakerOpen(JournalRecord):
    """An incident: too many nodes unhealthy at once, in the cluster, a zone or a pool; nothing is replaced."""

    KIND: ClassVar[str] = INCIDENT
    scopes: list[str] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    total: int = 0
    unhealthy: list[dict[str, Any]] = field(default_factory=list)  # subject, reason, zone, pool, since of each

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, "at": self.at, **self.to_record()}


@dataclass(frozen=True)
class BreakerClosed(JournalRecord):
    KIND: ClassVar[str] = CLEARED
    unhealthy: int = 0
    total: int = 0
