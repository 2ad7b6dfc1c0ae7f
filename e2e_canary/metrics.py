"""What the canary runner tells Prometheus (prometheus_client), with labels whose values are bounded: the stage, the
cluster, the canary (from its definitions), the outcome, the phase and the disruption reason (fixed sets).
Images are not a label: they change with every rotation, and telling them apart is the verdict's job.

- ``platformctl_canary_attempts_total{outcome}``: results by outcome (``ok``, ``fail``, ``timeout``,
  ``disrupted``, ``infra_error``);
- ``platformctl_canary_pod_startup_seconds``: pod startup latency (SIG-scalability's SLI), a histogram;
- ``platformctl_canary_phase_seconds{phase}``: creation to scheduled, scheduled to running, running to Ready;
- ``platformctl_canary_disruptions_total{reason}``: pods the platform took away, by ``DisruptionTarget`` reason;
- ``platformctl_canary_seconds_since_last_success``: in the cluster's own time, at scrape;
- ``platformctl_canary_verdict{verdict}``: 1 for the cluster's last verdict (each canary over its evidence
  window, as `canary verdict` judges), 0 for the others.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from e2e_canary.results import OUTCOMES, CanaryResult
from platformctl.kernel.clock import Clock
from platformctl.kernel.errors import PlatformError

PHASES = {"scheduled_seconds": "scheduled", "started_seconds": "started", "ready_seconds": "ready"}
DISRUPTIONS = ("EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager", "DeletionByPodGC",
               "TerminationByKubelet")
VERDICTS = ("pass", "fail", "inconclusive")
# Around the 5 s objective, finer below it: where a regression shows first.
BUCKETS = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0)


class CanaryMetrics:
    def __init__(self, stage: str) -> None:
        self.stage = stage
        self.registry = CollectorRegistry()
        common = ["stage", "cluster", "canary"]
        self.attempts = Counter("platformctl_canary_attempts", "Canary results, by outcome.", [*common, "outcome"],
                                registry=self.registry)
        self.startup = Histogram("platformctl_canary_pod_startup_seconds", "Pod startup latency (SIG-scalability): "
                                 "creation until every container runs, image pulls excluded.", common, buckets=BUCKETS,
                                 registry=self.registry)
        self.phases = Histogram("platformctl_canary_phase_seconds", "Pod startup phases: creation to scheduled, "
                                "scheduled to running, running to Ready.", [*common, "phase"], buckets=BUCKETS,
                                registry=self.registry)
        self.disruptions = Counter("platformctl_canary_disruptions", "Canary pods the platform evicted, preempted or "
                                   "deleted, by DisruptionTarget reason.", [*common, "reason"], registry=self.registry)
        self.since_success = Gauge("platformctl_canary_seconds_since_last_success", "Seconds since the canary's last "
                                   "ok result, in the cluster's time.", common, registry=self.registry)
        self.verdict = Gauge("platformctl_canary_verdict", "1 for the cluster's last verdict (each canary over its "
                             "evidence window), 0 for the others.", ["stage", "cluster", "verdict"], registry=self.registry)
        self._last_ok: dict[tuple[str, str], float] = {}

    def watch(self, cluster: str, canary: str, clock: Clock) -> None:
        """Make the canary's series exist from the start (a never-succeeding canary shows, not an absent series)."""
        for outcome in OUTCOMES:
            self.attempts.labels(self.stage, cluster, canary, outcome)
        started = clock.now()
        key = (cluster, canary)
        self.since_success.labels(self.stage, cluster, canary).set_function(
            lambda: clock.now() - self._last_ok.get(key, started))

    def observe(self, cluster: str, canary: str, rows: Iterable[CanaryResult]) -> None:
        for row in rows:
            self.attempts.labels(self.stage, cluster, canary, row.outcome).inc()
            for value in row.samples("pod_startup_seconds"):
                self.startup.labels(self.stage, cluster, canary).observe(value)
            for key, phase in PHASES.items():
                for value in row.samples(key):
                    self.phases.labels(self.stage, cluster, canary, phase).observe(value)
            if row.outcome == "disrupted":
                reason = next((r for r in DISRUPTIONS if r in row.reason), "other")
                self.disruptions.labels(self.stage, cluster, canary, reason).inc()
            if row.ok:
                self._last_ok[(cluster, canary)] = row.at

    def set_verdict(self, cluster: str, verdict: str) -> None:
        for v in VERDICTS:
            self.verdict.labels(self.stage, cluster, v).set(1.0 if v == verdict else 0.0)


def check_address(address: str, port: int) -> None:
    """The metrics port must be free: said before the runner touches a cluster."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as probe:
        # as the server binds (SO_REUSEADDR): a runner restarted in its pod finds its port free though the scrapes of the
        # one before linger in TIME_WAIT, while a port another process listens on is still refused
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as exc:
            raise PlatformError(f"cannot serve metrics on {address}:{port} ({exc.strerror})", field="--metrics-port") from None


def serve(metrics: CanaryMetrics, address: str, port: int) -> WSGIServer:
    server, _thread = start_http_server(port, addr=address, registry=metrics.registry)
    return server
