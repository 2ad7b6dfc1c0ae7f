"""A canary result, typed, and where results are kept: the one place they turn into store records and back.

Every pod of an attempt (a check's row, a firing of a CronJob, a DaemonSet's pod on a node) is one
``CanaryResult``: the stage, cluster, zone, pool and image it ran on, the canary and its kind, an outcome (``ok |
fail | timeout | disrupted | infra_error``) with a reason, its measurements (``Metrics``: pod startup latency and
its phases, the check's time) and when it was taken, in the cluster's time. A check says what it saw as an
``Observation``; the runner adds where and when.

Results are kept in the state store's stream ``canary/<stage>/<cluster>/<day>`` (``ResultStream``, kept
``RETENTION_SECONDS``, 90 days); ``results`` reads a window from the days it covers, newest first, and
``newest_at`` when the stage's newest result was taken. Nothing else reads or writes those streams.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from platformctl.kernel.jsontypes import JSONMapping, JSONObject, mapping, optional_str, to_float, to_int
from platformctl.kernel.state import StateStore

Outcome = Literal["ok", "fail", "timeout", "disrupted", "infra_error"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "fail", "timeout", "disrupted", "infra_error")
# A measurement: seconds (a duration), a count (``min_available``), or every pod's seconds (a check's pods), or None.
MetricValue = float | list[float] | None
Metrics = dict[str, MetricValue]
JUDGED = ("pod_startup_seconds", "check_seconds")  # the measurements the judge compares

RETENTION_SECONDS = 90 * 86400  # canary results are kept this long (journals and ledgers for ever)
SLACK_SECONDS = 600.0  # how far a window read goes past its start: results appended a little out of order
RESULT = "result"  # the kind of a result's record in its stream


@dataclass(frozen=True)
class Observation:
    """What a check saw, before the runner says where and when: an outcome, why, what it measured, and the zone, pool
    and image it ran on when the check knows them itself (a DaemonSet's pod on one node); else the attempt's."""

    outcome: Outcome
    reason: str = ""
    metrics: Metrics = field(default_factory=dict)
    zone: str | None = None
    pool: str | None = None
    image: str | None = None


@dataclass(frozen=True, slots=True)
class CanaryResult:
    """One result of one canary on one cluster: where, what, when (the cluster's time)."""

    canary: str
    canary_kind: str
    attempt: str
    stage: str
    cluster: str
    zone: str | None
    pool: str | None
    image: str | None
    outcome: Outcome
    reason: str
    metrics: JSONMapping  # what the check measured (``Metrics``), as a record holds it: read through ``samples``
    at: float
    evidence_window: int | None = None  # seconds the canary's definition fixes its verdict's window to

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def samples(self, metric: str) -> list[float]:
        """A measurement's samples: a check's every pod, one value, or none."""
        value = self.metrics.get(metric)
        if isinstance(value, list):
            return [float(v) for v in value]
        return [] if value is None else [to_float(value)]

    def to_record(self) -> JSONObject:
        """The store's record (the JSON shape ``canary results`` and older runners wrote)."""
        return {"kind": RESULT, "canary": self.canary, "canary_kind": self.canary_kind, "attempt": self.attempt,
                "stage": self.stage, "cluster": self.cluster, "zone": self.zone, "pool": self.pool, "image": self.image,
                "outcome": self.outcome, "reason": self.reason, "metrics": dict(self.metrics), "at": self.at,
                **({"evidence_window": self.evidence_window} if self.evidence_window else {})}

    @classmethod
    def from_record(cls, data: JSONMapping) -> CanaryResult | None:
        """The result a store record holds, or None when it is not one (a lease, another kind). The records are this
        module's own JSON (``to_record``): read as they were written, a missing field as its empty value."""
        if data.get("kind") != RESULT:
            return None
        get = data.get
        window = get("evidence_window")
        return cls(str(get("canary") or ""), str(get("canary_kind") or ""), str(get("attempt") or ""),
                   str(get("stage") or ""), str(get("cluster") or ""), optional_str(get("zone")), optional_str(get("pool")),
                   optional_str(get("image")), _OUTCOME.get(str(get("outcome")), "infra_error"), str(get("reason") or ""),
                   mapping(get("metrics")), to_float(get("at") or 0.0), to_int(window) if window else None)


_OUTCOME: dict[str, Outcome] = {o: o for o in OUTCOMES}


def within(rows: Iterable[CanaryResult], start: float, end: float, *, open_end: bool = False) -> list[CanaryResult]:
    """The results taken from ``start`` to ``end`` (before ``end``, with ``open_end``)."""
    return [r for r in rows if start <= r.at and (r.at < end if open_end else r.at <= end)]


# ---------------------------------------------------------------------------------------------- their streams


@dataclass(frozen=True)
class ResultStream:
    """The name of a stream of canary results, read and written here only: ``canary/<stage>/<cluster>/<day>`` (a
    day's results of a cluster, UTC, so that a window reads only the days it covers), or ``canary/<stage>/<cluster>``
    with no day (the runner's lease; results an older runner wrote)."""

    stage: str
    cluster: str
    day: str = ""  # YYYY-MM-DD, or "" for the undated stream

    @classmethod
    def of(cls, stage: str, cluster: str, at: float) -> ResultStream:
        return cls(stage, cluster, _day(at))

    @classmethod
    def parse(cls, name: str) -> ResultStream | None:
        """The stream ``name`` names, or None when it is not a canary stream."""
        parts = name.split("/")
        if parts[0] != "canary" or len(parts) not in (3, 4) or not all(parts[1:]):
            return None
        return cls(parts[1], parts[2], parts[3] if len(parts) == 4 else "")

    @staticmethod
    def prefix(stage: str | None = None) -> str:
        """What every stream of ``stage`` (of every stage, with none) begins with: ``StateStore.streams``' argument."""
        return f"canary/{stage}/" if stage is not None else "canary/"

    @property
    def name(self) -> str:
        return f"canary/{self.stage}/{self.cluster}" + (f"/{self.day}" if self.day else "")


def _day(at: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(at))


def streams_of(store: StateStore, stage: str | None = None) -> list[ResultStream]:
    """The canary streams in ``store`` (of ``stage``, when given)."""
    return [found for name in store.streams(ResultStream.prefix(stage)) if (found := ResultStream.parse(name)) is not None]


def keep(store: StateStore, result: CanaryResult, retention: float = RETENTION_SECONDS) -> None:
    """Append a result to its cluster's stream of the day it was taken (the cluster's time), kept ``retention`` s."""
    store.append(ResultStream.of(result.stage, result.cluster, result.at).name, result.to_record(),
                 retain_seconds=retention)


def results(store: StateStore, stage: str, since: float | None = None, until: float | None = None,
            cluster: str | None = None) -> list[CanaryResult]:
    """The stage's canary results (of one cluster, when given) at or after ``since`` and at or before ``until``, in the
    clusters' time, oldest first. A window costs what it holds: only the days it covers are read, newest first, until
    a result older than the window (less some slack) shows up; never the whole history."""
    first = _day(since - SLACK_SECONDS) if since is not None else ""
    last = _day(until) if until is not None else "9999"
    out: list[CanaryResult] = []
    for stream in streams_of(store, stage):
        if cluster is not None and stream.cluster != cluster:
            continue
        if stream.day and not first <= stream.day <= last:
            continue
        out += _window(store, stream.name, since, until)
    return sorted(out, key=lambda r: r.at)


def newest_at(store: StateStore, stage: str) -> float | None:
    """When the stage's newest canary result was taken (the clusters' time): the last record of each cluster's newest
    stream (by day; an undated stream, as an older runner wrote, sorts first), one record read per cluster."""
    latest: dict[str, ResultStream] = {}
    for stream in streams_of(store, stage):
        if stream.cluster not in latest or stream.day > latest[stream.cluster].day:
            latest[stream.cluster] = stream
    found = [float(r.data.get("at", 0)) for stream in latest.values() for r in store.read_back(stream.name, limit=1)]
    return max(found, default=None)


def _window(store: StateStore, stream: str, since: float | None, until: float | None) -> list[CanaryResult]:
    """The results of one stream taken from ``since`` to ``until`` (either open); a record is made a result only
    when it is in the window."""
    last = float("inf") if until is None else until
    if since is None:
        return [r for record in store.read(stream) if float(record.data.get("at", 0)) <= last
                and (r := CanaryResult.from_record(record.data)) is not None]
    rows: list[CanaryResult] = []
    before: int | None = None
    while True:
        page = store.read_back(stream, before=before, limit=500)
        for record in page:
            if since <= float(record.data.get("at", 0)) <= last and (result := CanaryResult.from_record(record.data)):
                rows.append(result)
        if len(page) < 500 or float(page[-1].data.get("at", 0)) < since - SLACK_SECONDS:
            return rows
        before = page[-1].seq
