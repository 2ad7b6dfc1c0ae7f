"""The canaries, as the in-cluster daemon and an operator run them: run them on a stage, and judge a stage.

``run_canaries`` is the daemon: it takes each cluster's lease, reaps what a crashed run left, then carries out each
canary on its jittered interval, records every result in the stage's store and serves Prometheus metrics, until
``once`` is done or it is interrupted. ``judge_stage`` is the verdict the gate and the release pipeline read.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from e2e_canary.definitions import Canary, default_canary_dir, load_canaries
from e2e_canary.judge import load_config
from e2e_canary.metrics import CanaryMetrics, check_address, serve
from e2e_canary.results import CanaryResult, ResultStream, newest_at, results
from e2e_canary.runner import AttemptReport, Runner
from e2e_canary.verdict import EVIDENCE_STEPS, Verdict, canary_verdicts, stage_verdict
from platformctl.app.platform import Platform
from platformctl.app.stores import store_for
from platformctl.kernel.clock import Clock, parked
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.humanize import parse_duration
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.state import LeaseHeld, StateStore
from platformctl.kernel.state.lease import LeaseKeeper, holder_id

EXIT_OK, EXIT_FAILED, EXIT_LEASE_HELD = 0, 1, 3
VERDICT_WINDOW = 1800.0  # the metrics' verdict: each canary's evidence window, in steps of 30 minutes


def duration(text: str, option: str) -> float:
    """A positive duration an operator wrote (seconds, or 30m, 12h, 90d), else a one-line error naming ``option``."""
    try:
        seconds = float(parse_duration(text))
    except ValueError as exc:
        raise PlatformError(str(exc), field=option) from None
    if not seconds > 0:
        raise PlatformError("must be longer than 0", field=option)
    return seconds


@dataclass(frozen=True)
class CanaryRunRequest:
    stage: str
    cluster: str | None = None  # one cluster of the stage, else all
    once: bool = False
    folder: Path | None = None
    kubeconfig: str | None = None
    state: str | None = None
    lease_ttl: float = 60.0
    retention: str = "90d"
    metrics_port: int = 9464  # 0: none; never with ``once``
    metrics_address: str = "127.0.0.1"


@dataclass
class CanaryRun:
    """Canaries made ready to run: definitions read, the metrics address checked, the clusters and store reached."""

    stage: str
    canaries: list[Canary]
    store: StateStore
    clusters: dict[str, Cluster]
    once: bool
    lease_ttl: float
    retention: float
    metrics: tuple[str, int] | None  # where to serve them, if at all


@dataclass
class ClusterRun:
    cluster: str
    reaped: list[str] = field(default_factory=list)
    attempts: list[AttemptReport] = field(default_factory=list)  # with ``once`` only: a daemon keeps them in the store
    lease_held_by: str | None = None

    def to_dict(self) -> JSONObject:
        if self.lease_held_by is not None:
            return {"cluster": self.cluster, "lease_held_by": self.lease_held_by}
        return {"cluster": self.cluster, "reaped": self.reaped, "canaries": [
            {"canary": a.canary, "namespace": a.namespace, "outcomes": dict(a.outcomes), "skipped": a.skipped,
             "results": [r.to_record() for r in a.results]} for a in self.attempts]}


@dataclass
class CanaryRunReport:
    stage: str
    clusters: list[ClusterRun] = field(default_factory=list)
    exit_code: int = EXIT_OK

    def to_dict(self) -> JSONObject:
        return {"stage": self.stage, "clusters": [c.to_dict() for c in self.clusters], "exit_code": self.exit_code}


def prepare_canaries(platform: Platform, request: CanaryRunRequest) -> CanaryRun:
    """Check every input and reach every cluster; change nothing."""
    from platformctl.kernel.cluster.live import LiveCluster

    keep = duration(request.retention, "--retention")
    stage = platform.stage(request.stage)
    names = [c.name for c in stage.clusters()]
    if request.cluster is not None and request.cluster not in names:
        raise PlatformError(f"no cluster {request.cluster!r} in stage {request.stage} (clusters: {', '.join(names)})",
                            field="--cluster")
    canaries = load_canaries(request.folder or default_canary_dir())
    serving = request.metrics_port != 0 and not request.once
    if serving:
        check_address(request.metrics_address, request.metrics_port)
    store = store_for(platform, request.state, stage=request.stage)
    config = platform.kubeconfig(request.kubeconfig)
    from platformctl.kernel.retry import NEVER

    # one call each, never asked again: a canary measures the API as its users meet it
    clusters: dict[str, Cluster] = {n: LiveCluster.from_kubeconfig(config, n, backoff=NEVER)
                                    for n in ([request.cluster] if request.cluster else names)}
    return CanaryRun(request.stage, canaries, store, clusters, request.once, request.lease_ttl, keep,
                     (request.metrics_address, request.metrics_port) if serving else None)


def run_canaries(run: CanaryRun, say: Callable[[str], None], on_attempt: Callable[[str, AttemptReport], None]) -> CanaryRunReport:
    """Run the canaries until ``once`` is done or a KeyboardInterrupt (Ctrl-C, or SIGTERM turned into one) stops it;
    every lease taken is given back."""
    report = CanaryRunReport(run.stage)
    keepers: list[LeaseKeeper] = []
    holder = holder_id()
    stop = threading.Event()  # set on Ctrl-C: every cluster's check ends at its next wait
    try:
        runners: dict[str, Runner] = {}
        for name, cluster in run.clusters.items():
            keeper = LeaseKeeper(run.store, ResultStream(run.stage, name).name, holder, run.lease_ttl)
            try:
                keeper.acquire()
            except LeaseHeld as held:
                say(f"{name}: not run: another runner holds its lease ({held.lease.holder}, for up to "
                    f"{run.lease_ttl:g} s after its last renewal)")
                report.clusters.append(ClusterRun(name, lease_held_by=held.lease.holder))
                report.exit_code = EXIT_LEASE_HELD
                continue
            keepers.append(keeper)
            runners[name] = Runner(run.stage, name, cast(Cluster, _Stoppable(cluster, stop)), run.store, progress=say,
                                   retention=run.retention)
        entries = {name: ClusterRun(name, runner.reap()) for name, runner in runners.items()}
        _loop(run, runners, keepers, entries, report, say, on_attempt, stop)
        report.clusters += list(entries.values())
    except KeyboardInterrupt:
        pass
    finally:
        for keeper in keepers:
            keeper.release()
    return report


def _loop(run: CanaryRun, runners: dict[str, Runner], keepers: list[LeaseKeeper], entries: dict[str, ClusterRun],
          report: CanaryRunReport, say: Callable[[str], None], on_attempt: Callable[[str, AttemptReport], None],
          stop: threading.Event) -> None:
    """Each canary of each cluster in a thread of its own, each attempt starting when it is due there (an interval
    plus jitter after the last one started, on the cluster's clock), as the Pulumi program runs a runner in every
    cluster: one cluster's slow check never holds another's, a cron canary watching its firings never holds the
    node-pool canary's next pods, and a canary's interval is what each cluster gets (the canary gate's window check,
    ``rotation.check_gate_window``, counts on it). A Ctrl-C (or SIGTERM) stops every check at its next wait, and each deletes its namespace."""
    metrics = CanaryMetrics(run.stage)
    for name, runner in runners.items():
        for c in run.canaries:
            metrics.watch(name, c.name, runner.clock)
    if run.metrics is not None and runners:
        serve(metrics, *run.metrics)
        say(f"metrics on http://{run.metrics[0]}:{run.metrics[1]}/metrics")
    lock = threading.Lock()
    failed: list[BaseException] = []

    def attempted(name: str, attempt: AttemptReport) -> None:
        with lock:
            if run.once:  # a runner that runs for months keeps its results in the store, not in memory
                entries[name].attempts.append(attempt)
            if (attempt.outcomes.get("fail") or attempt.outcomes.get("timeout")) and report.exit_code != EXIT_LEASE_HELD:
                report.exit_code = EXIT_FAILED
            on_attempt(name, attempt)

    # Each thread says it is over with an Event of its own, never through Thread.join: on Python 3.11 a join that a
    # KeyboardInterrupt (Ctrl-C, or SIGTERM turned into one) cuts short marks a running thread dead (CPython
    # gh-90882), so the process would exit before that cluster's check deleted its namespace.
    work = [(name, runner, c) for name, runner in runners.items() for c in run.canaries]
    over = {(name, c.name): threading.Event() for name, _, c in work}
    verdicts = {name: _ClusterVerdict(name, metrics) for name in runners}

    def canary(name: str, runner: Runner, c: Canary) -> None:
        try:
            _one_canary(run, runner, c, keepers, verdicts[name], lambda attempt: attempted(name, attempt))
        except _Stopped:
            pass
        except BaseException as exc:  # a lost lease, an unreachable store: the whole run stops, as it did
            failed.append(exc)
            stop.set()
        finally:
            over[(name, c.name)].set()

    threads = [threading.Thread(target=canary, args=(name, runner, c), name=f"canary {c.name} {name}", daemon=True)
               for name, runner, c in work]
    clock = next(iter(runners.values())).clock if runners else None
    try:
        with parked(clock) if clock is not None else contextlib.nullcontext():  # waiting for threads, not for time
            for thread in threads:
                thread.start()
            for done in over.values():
                while not done.wait(0.5):
                    pass
    except KeyboardInterrupt:
        stop.set()
        end = time.monotonic() + STOP_WAIT_SECONDS
        for done in over.values():  # each ends at its check's next wait and deletes its namespace
            done.wait(max(end - time.monotonic(), 0.0))
        raise
    if failed:
        raise failed[0]
    order = {c.name: i for i, c in enumerate(run.canaries)}
    for entry in entries.values():  # (``once``) as the canaries are listed, whichever ended first
        entry.attempts.sort(key=lambda a: order.get(a.canary, len(order)))


STOP_WAIT_SECONDS = 20.0  # wall seconds a stopped run gives its clusters' checks to clean up


class _ClusterVerdict:
    """A cluster's recent results, and the verdict its metrics show, shared by its canaries' threads."""

    def __init__(self, cluster: str, metrics: CanaryMetrics) -> None:
        self.cluster = cluster
        self.metrics = metrics
        self.lock = threading.Lock()
        self.recent: list[CanaryResult] = []
        self.judged = float("-inf")  # when the metrics' verdict was last taken

    def add(self, canary: str, rows: list[CanaryResult], now: float) -> None:
        with self.lock:
            self.metrics.observe(self.cluster, canary, rows)
            reach = 2 * EVIDENCE_STEPS * VERDICT_WINDOW  # what the verdict can look at; older results are the store's
            self.recent = [r for r in self.recent + rows if r.at >= now - reach]
            # The verdict's statistics over hours of results cost more than a check: taken again at once after a result
            # that is not ok, else every VERDICT_REFRESH_SECONDS of the cluster's time (a slowdown shows within them).
            if now - self.judged >= VERDICT_REFRESH_SECONDS or not all(r.ok for r in rows):
                self.judged = now
                self.metrics.set_verdict(self.cluster, canary_verdicts(self.recent, now, VERDICT_WINDOW).verdict)


def _one_canary(run: CanaryRun, runner: Runner, c: Canary, keepers: list[LeaseKeeper], verdict: _ClusterVerdict,
                attempted: Callable[[AttemptReport], None]) -> None:
    """One canary on one cluster: an attempt, then the next an interval plus jitter after this one started (at once
    when it took longer), until the run is stopped (``once``: one attempt)."""
    while True:
        for keeper in keepers:
            keeper.check()
        started = runner.clock.now()
        attempt = runner.run(c)
        now = runner.clock.now()
        verdict.add(c.name, attempt.results, now)
        attempted(attempt)
        if run.once:
            return
        due = started + c.interval + random.uniform(0, c.jitter)
        while runner.clock.now() < due:  # looking again at least every IDLE_SECONDS of the cluster's time
            runner.clock.sleep(min(max(due - runner.clock.now(), 0.1), IDLE_SECONDS))


IDLE_SECONDS = 60.0  # the longest a cluster's runner waits between looks at what is due
VERDICT_REFRESH_SECONDS = 300.0  # how stale the metrics' verdict may be while every result is ok


class _Stopped(Exception):
    """The run was asked to stop: the check ends at its next wait."""


class _Stoppable:
    """A runner thread's cluster, whose clock cuts each wait in slices of about a wall second and, once the run is
    asked to stop, raises ``_Stopped`` at the next one: a check ends there (and deletes its namespace) instead of
    running on. Everything else is the cluster's own."""

    def __init__(self, cluster: Cluster, stop: threading.Event) -> None:
        self._cluster = cluster
        self._stop = stop
        self.clock = _StoppableClock(cluster.clock, stop)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)


class _StoppableClock:
    def __init__(self, clock: Clock, stop: threading.Event) -> None:
        self._clock = clock
        self._stop = stop

    def now(self) -> float:
        return self._clock.now()

    def sleep(self, seconds: float) -> None:
        until = self._clock.now() + seconds
        piece = max(float(getattr(self._clock, "speed", 1.0)), 1.0)  # about a wall second of the cluster's time
        while True:
            if self._stop.is_set():
                raise _Stopped()
            left = until - self._clock.now()
            if left <= 0:
                return
            self._clock.sleep(min(left, piece))

    def __getattr__(self, name: str) -> Any:  # sync, parked, wait_for_change: the cluster's clock's own
        found = getattr(self._clock, name)
        if name != "wait_for_change":
            return found

        def wait_for_change(*args: object) -> object:  # a local region's wait for a change: held a few wall seconds at most
            if self._stop.is_set():
                raise _Stopped()
            answer = found(*args)
            if self._stop.is_set():
                raise _Stopped()
            return answer

        return wait_for_change


@dataclass(frozen=True)
class VerdictRequest:
    stage: str
    window: str = "30m"
    baseline: str | None = None  # an image: every other image's results judged against its
    canaries: tuple[str, ...] = ()  # only these canaries' results
    config: Path | None = None
    state: str | None = None


def judge_stage(platform: Platform, request: VerdictRequest) -> Verdict:
    """The stage's verdict from its canaries' stored results: ``verdict`` is pass, fail or inconclusive, with why."""
    span = duration(request.window, "--window")
    config = load_config(request.config)
    store = store_for(platform, request.state, stage=request.stage, existing=True)
    # The window ends now, or at the newest result when that is later (a local region's clock runs ahead of the wall).
    now = max(time.time(), newest_at(store, request.stage) or 0.0)
    # What can be judged and nothing older: each canary's longest evidence window and the same span before it (the
    # default), or the one window of the image arms. A verdict costs its windows, not the history.
    reach = span if request.baseline else 2 * EVIDENCE_STEPS * span
    rows = results(store, request.stage, since=now - reach, until=now)
    if request.canaries:
        unknown = sorted(set(request.canaries) - {r.canary for r in rows})
        if unknown:
            raise PlatformError(f"no result of canary {unknown[0]!r} in stage {request.stage}", field="--canary")
        rows = [r for r in rows if r.canary in request.canaries]
    verdict = stage_verdict(rows, now, span, request.baseline, config)
    verdict.stage, verdict.state, verdict.at = request.stage, store.location, now
    return verdict
