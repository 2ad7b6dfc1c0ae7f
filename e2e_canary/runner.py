"""Carrying canaries out against one cluster, through the cluster interface only, and recording what they saw.

The same code runs against the simulator in process, the local region over HTTP, and a live cluster via
kubeconfig. Each attempt gets a namespace of its own, ``canary-<name>-<attempt>``, labelled
``platformctl.io/canary=<name>``; a run starts by deleting every such namespace a crashed run left (under
the cluster's canary lease, so that two runners never reap each other's). Every pod of an attempt is one
result in the state store's stream ``canary/<stage>/<cluster>/<day>`` (kept ``RETENTION_SECONDS``, 90
days; a window is read from the days it covers, newest first): stage, cluster, zone, pool, image and
canary, an outcome (``ok | fail | timeout | disrupted | infra_error``) with a reason, and its pod startup
latency and phases (``e2e_canary.measure``) plus the time of the whole check.

Kinds: ``node-pool`` (here: pods pinned to each pool and to each image in it, the arms a rotation's
verdict compares, each pod a result) and ``service``, ``batch``, ``cron``, ``daemon`` (``e2e_canary.checks``:
a Deployment rolled, scaled and deleted; a Job; a CronJob's firings; a DaemonSet on every node). A check the
platform disrupted is recorded as ``disrupted`` and carried out once more.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from e2e_canary.checks import LONGEST_WAIT
from e2e_canary.definitions import LABEL, Canary
from e2e_canary.measure import NotStarted, Startup, startup
from platformctl.kernel.clock import past, synced_now, wait_for_change
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import LABEL_NODEGROUP, LABEL_NODEGROUP_IMAGE, Container, Pod, Toleration
from platformctl.kernel.errors import ApiRefused, PlatformError
from platformctl.kernel.state import StateStore

if TYPE_CHECKING:
    from e2e_canary.judge import Arm

RUNNABLE = ("node-pool", "service", "batch", "cron", "daemon")
ATTEMPT_LABEL = "platformctl.io/canary-attempt"
# The simulator's start time for the probe container (a real kubelet ignores the annotation): a pause
# container starts in about a second on a warm node.
SIM_START = {"sim.platformctl.io/start-seconds": "2"}


# What each DisruptionTarget reason means for a canary: the platform took the pod away, the image is not to blame.
DISRUPTED_BY = {"EvictionByEvictionAPI": "evicted through the eviction API (a drain)",
                "PreemptionByScheduler": "preempted by the scheduler for a higher-priority pod",
                "DeletionByTaintManager": "deleted by the taint manager (its node went NotReady or unreachable)",
                "DeletionByPodGC": "deleted by pod GC (its node is gone)",
                "TerminationByKubelet": "terminated by the kubelet (node pressure)"}


def disrupted(pod: str, reason: str) -> str:
    if not reason:
        return (f"pod {pod} was deleted before it ran, by the platform (an eviction, a preemption, or its node went "
                "away, between two looks); retried once")
    return f"pod {pod} was {DISRUPTED_BY.get(reason, 'disrupted by the platform')} ({reason}); retried once"


RETENTION_SECONDS = 90 * 86400  # canary results are kept this long (journals and ledgers for ever)
SLACK_SECONDS = 600.0  # how far a window read goes past its start: results appended a little out of order


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


def stream_of(stage: str, cluster: str) -> str:
    """The name of a cluster's canaries: its runner's lease, and the stem of its results' streams."""
    return ResultStream(stage, cluster).name


def results_stream(stage: str, cluster: str, at: float) -> str:
    """Where a result taken at ``at`` (the cluster's time) is kept: one stream per cluster and day, so that reading a
    window touches the days it covers, newest first, and stops at its start."""
    return ResultStream.of(stage, cluster, at).name


@dataclass
class PoolArm:
    """Where the node-pool canary runs one of its arms: a pool's schedulable, Ready nodes on one image (the judge's
    ``Arm`` is what an arm measured)."""

    pool: str
    image: str
    zone: str | None
    nodes: int


@dataclass
class AttemptReport:
    canary: str
    cluster: str
    namespace: str
    results: list[dict[str, Any]] = field(default_factory=list)
    skipped: str = ""

    @property
    def outcomes(self) -> Counter[str]:
        return Counter(r["outcome"] for r in self.results)


class Runner:
    def __init__(self, stage: str, name: str, cluster: Cluster, store: StateStore, *, poll_seconds: float = 2.0,
                 progress: Callable[[str], None] | None = None, retention: float = RETENTION_SECONDS) -> None:
        self.stage = stage
        self.retention = retention  # seconds its results are kept
        self.name = name
        self.cluster = cluster
        self.store = store
        self.clock = cluster.clock
        self.poll = poll_seconds
        self.progress = progress or (lambda message: None)

    def reap(self) -> list[str]:
        """Delete every canary namespace left on the cluster (by a run that crashed); returns their names."""
        left = self.cluster.list_namespaces(LABEL)
        for namespace in left:
            self.progress(f"{self.name}: reaping {namespace}, left by an earlier run")
            self.cluster.delete_namespace(namespace)
        return left

    def arms(self) -> list[PoolArm]:
        found: dict[tuple[str, str], PoolArm] = {}
        for node in self.cluster.list_nodes():
            pool, image = node.labels.get(LABEL_NODEGROUP), node.labels.get(LABEL_NODEGROUP_IMAGE)
            if pool is None or image is None or node.unschedulable or not node.ready:
                continue  # a cordoned or broken node is the rotation's or remediation's: no user can land there
            arm = found.setdefault((pool, image), PoolArm(pool, image, node.zone, 0))
            arm.nodes += 1
        return [found[k] for k in sorted(found)]

    def run(self, canary: Canary) -> AttemptReport:
        attempt = uuid.uuid4().hex[:8]
        namespace = f"{canary.namespace}-{attempt}"
        report = AttemptReport(canary.name, self.name, namespace)
        if canary.kind not in RUNNABLE:
            report.skipped = f"kind {canary.kind} is defined but not carried out by this version"
            return report
        if canary.clusters and self.name not in canary.clusters:
            report.skipped = f"not for this cluster (clusters: {', '.join(canary.clusters)})"
            return report
        try:
            self.cluster.create_namespace(namespace, {LABEL: canary.name, ATTEMPT_LABEL: attempt})
        except ApiRefused as exc:
            report.results.append(self._record(canary, attempt, None, "fail" if exc.status >= 500 else "infra_error",
                                               f"creating namespace {namespace}: {exc.detail}", {}))
            return report
        try:
            if canary.kind == "node-pool":
                report.results = self._node_pool(canary, attempt, namespace)
            else:
                report.results = self._workload(canary, attempt, namespace)
                if any(r["outcome"] == "disrupted" for r in report.results):  # the platform's doing: once more
                    self.cluster.delete_namespace(namespace)
                    namespace = report.namespace = f"{namespace}-r"
                    self.cluster.create_namespace(namespace, {LABEL: canary.name, ATTEMPT_LABEL: attempt})
                    report.results += self._workload(canary, attempt, namespace)
        finally:
            self.cluster.delete_namespace(namespace)
        return report

    def _workload(self, canary: Canary, attempt: str, namespace: str) -> list[dict[str, Any]]:
        from e2e_canary.checks import CHECKS, Check, CheckFailed

        check = Check(canary, namespace, self.cluster, self.poll, {LABEL: canary.name, ATTEMPT_LABEL: attempt})
        check.started = synced_now(self.clock)  # pods' Ready times are the server's
        check.deadline = check.started + canary.deadline
        self.progress(f"{self.name}: {canary.name}: {canary.kind} check in {namespace}, up to {canary.deadline} s")
        try:
            rows = CHECKS[canary.kind](check)
        except CheckFailed as failed:
            rows = [{"outcome": failed.outcome, "reason": failed.reason, "metrics": {}}]
        except ApiRefused as exc:  # a call mid-check the API refused: the platform's failure when it is a 5xx
            rows = [{"outcome": "fail" if exc.status >= 500 else "infra_error", "reason": str(exc.detail), "metrics": {}}]
        return [self.record(canary, attempt, None, row) for row in rows]

    def record(self, canary: Canary, attempt: str, arm: PoolArm | None, row: dict[str, Any]) -> dict[str, Any]:
        """A check's row, where it ran (the row's own zone, pool and image, else the arm's) and when."""
        data = self._record(canary, attempt, arm, row["outcome"], row.get("reason", ""), row.get("metrics", {}),
                            where={k: row[k] for k in ("zone", "pool", "image") if k in row})
        return data

    # ---------------------------------------------------------------- node-pool

    def _pod(self, canary: Canary, attempt: str, namespace: str, arm: PoolArm, i: int, retry: bool = False) -> Pod:
        requests = canary.resources.requests()
        name = f"{arm.pool}-{arm.image.removeprefix('ami-')[-8:]}-{i}{'-r' if retry else ''}"
        return Pod(namespace, name, str(uuid.uuid4()), labels={LABEL: canary.name, ATTEMPT_LABEL: attempt, "arm-pool": arm.pool},
                   annotations=dict(SIM_START), node_selector={LABEL_NODEGROUP: arm.pool, LABEL_NODEGROUP_IMAGE: arm.image},
                   tolerations=(Toleration(operator="Exists", effect="NoSchedule"),
                                Toleration(operator="Exists", effect="PreferNoSchedule")),
                   containers=(Container("probe", canary.pod_image, requests),), requests=requests, grace_seconds=0)

    def _node_pool(self, canary: Canary, attempt: str, namespace: str) -> list[dict[str, Any]]:
        start = synced_now(self.clock)  # pods' Ready times are the server's
        deadline = start + canary.deadline
        arms = {}
        results: list[dict[str, Any]] = []
        present = self.arms()
        for arm in present:
            for i in range(canary.pods_per_arm):
                made = self._pod(canary, attempt, namespace, arm, i)
                try:
                    self.cluster.create_pod(made)
                except ApiRefused as exc:
                    outcome = "fail" if exc.status >= 500 else "infra_error"
                    results.append(self._record(canary, attempt, arm, outcome,
                                                f"the API server answered {exc.status} to creating pod {made.name}: {exc.detail}", {}))
                    continue
                arms[made.name] = (arm, i, False)
        self.progress(f"{self.name}: {canary.name}: {len(arms)} pods on {len(present)} arms, waiting up to {canary.deadline} s")
        done: dict[str, dict[str, Any]] = {}
        heard = 0  # the newest change of the cluster's pods heard of
        while True:
            pods = {p.name: p for p in self.cluster.list_pods(namespace=namespace)}
            for name, (arm, i, retried) in list(arms.items()):
                if name in done:
                    continue
                pod = pods.get(name)
                # from the kubelet's own startedAt: a poll's lag is not the platform's. A pod gone before this
                # canary saw it run was taken away between two polls (evicted, preempted, its node gone).
                seen = startup(pod) if pod is not None else NotStarted("disrupted", "")
                if isinstance(seen, Startup):
                    ready = pod.ready_at if pod is not None else None
                    # from its own creation, both the server's stamps: pods of many arms are created one after
                    # another, and the last one's wait for its turn is not its image's
                    created = pod.created if pod is not None and pod.created else start
                    end = ready if ready is not None else synced_now(self.clock)
                    metrics = {**seen.to_dict(), "check_seconds": max(end - created, 0.0)}
                    done[name] = self._record(canary, attempt, arm, "ok", "", metrics)
                elif seen.reason == "disrupted":
                    done[name] = self._record(canary, attempt, arm, "disrupted", disrupted(name, seen.disruption), {})
                    if not retried:  # retried once: a disruption is the platform's doing, not the image's
                        again = self._pod(canary, attempt, namespace, arm, i, retry=True)
                        try:
                            self.cluster.create_pod(again)
                            arms[again.name] = (arm, i, True)
                        except (ApiRefused, PlatformError):
                            pass
            if len(done) == len(arms) or past(self.clock, deadline):
                break
            heard = wait_for_change(self.clock, self.poll, self.cluster.name, "pods", heard, LONGEST_WAIT)
        for name, (arm, _, _) in arms.items():
            if name in done:
                results.append(done[name])
                continue
            pod = pods.get(name)
            seen = startup(pod) if pod is not None else NotStarted("gone")
            reason = seen.reason if isinstance(seen, NotStarted) else "not running"
            if reason.startswith("waiting: "):  # the kubelet says why: a failure, not slowness
                results.append(self._record(canary, attempt, arm, "fail", f"pod {name} on image {arm.image}: "
                                            f"{reason.removeprefix('waiting: ')} for {canary.deadline} s", {}))
            elif reason == "unscheduled":  # pinned to an arm whose nodes are full: nothing measured of the image
                said = (f" (the scheduler: {pod.unschedulable})" if pod is not None and pod.unschedulable
                        else f" (bound to {pod.node_name}, no PodScheduled time)" if pod is not None and pod.node_name else "")
                results.append(self._record(canary, attempt, arm, "infra_error", f"pod {name} found no room on the "
                                            f"{arm.nodes} Ready node(s) of pool {arm.pool} on image {arm.image} within "
                                            f"{canary.deadline} s{said}: the arm is full, the image was not measured", {}))
            else:
                results.append(self._record(canary, attempt, arm, "timeout", f"pod {name} on image {arm.image} not "
                                            f"running within the deadline {canary.deadline} s ({reason})", {}))
        return results

    def _record(self, canary: Canary, attempt: str, arm: PoolArm | None, outcome: str, reason: str,
                metrics: dict[str, Any], where: dict[str, Any] | None = None) -> dict[str, Any]:
        data = {"kind": "result", "canary": canary.name, "canary_kind": canary.kind, "attempt": attempt,
                "stage": self.stage, "cluster": self.name, "zone": arm.zone if arm else None,
                "pool": arm.pool if arm else None, "image": arm.image if arm else None, **(where or {}),
                "outcome": outcome, "reason": reason, "metrics": metrics, "at": self.clock.now(),
                **({"evidence_window": canary.evidence_window} if canary.evidence_window else {})}
        self.store.append(results_stream(self.stage, self.name, float(data["at"])), data, retain_seconds=self.retention)
        return data


def results(store: StateStore, stage: str, since: float | None = None, until: float | None = None,
            cluster: str | None = None) -> list[dict[str, Any]]:
    """The stage's canary results (of one cluster, when given) at or after ``since`` and at or before ``until``, in the
    clusters' time, oldest first. A window costs what it holds: only the days it covers are read, newest first, until
    a result older than the window (less some slack) shows up; never the whole history."""
    first = _day(since - SLACK_SECONDS) if since is not None else ""
    last = _day(until) if until is not None else "9999"
    out: list[dict[str, Any]] = []
    for stream in streams_of(store, stage):
        if cluster is not None and stream.cluster != cluster:
            continue
        if stream.day and not first <= stream.day <= last:
            continue
        out += [r for r in _window(store, stream.name, since) if until is None or float(r.get("at", 0)) <= until]
    return sorted(out, key=lambda r: r["at"])


def newest_at(store: StateStore, stage: str) -> float | None:
    """When the stage's newest canary result was taken (the clusters' time): the last record of each cluster's newest
    stream (by day; an undated stream, as an older runner wrote, sorts first), one record read per cluster."""
    latest: dict[str, ResultStream] = {}
    for stream in streams_of(store, stage):
        if stream.cluster not in latest or stream.day > latest[stream.cluster].day:
            latest[stream.cluster] = stream
    found = [float(r.data.get("at", 0)) for stream in latest.values() for r in store.read_back(stream.name, limit=1)]
    return max(found, default=None)


def _window(store: StateStore, stream: str, since: float | None) -> list[dict[str, Any]]:
    if since is None:
        return [dict(r.data) for r in store.read(stream) if r.data.get("kind") == "result"]
    rows: list[dict[str, Any]] = []
    before: int | None = None
    while True:
        page = store.read_back(stream, before=before, limit=500)
        for record in page:
            at = float(record.data.get("at", 0))
            if record.data.get("kind") == "result" and at >= since:
                rows.append(dict(record.data))
        if len(page) < 500 or float(page[-1].data.get("at", 0)) < since - SLACK_SECONDS:
            return rows
        before = page[-1].seq


def arm_of(rows: Sequence[dict[str, Any]]) -> Arm:
    """The judge's arm of some results: startup samples and check times of the ok ones, and every outcome."""
    from e2e_canary.judge import Arm  # numpy's import only when a verdict is asked

    samples: dict[str, list[float]] = {"pod_startup_seconds": [], "check_seconds": []}
    for r in rows:
        if r["outcome"] == "ok":
            for metric in samples:
                value = r["metrics"].get(metric)
                if isinstance(value, list):  # a check's every pod
                    samples[metric] += [float(v) for v in value]
                elif value is not None:
                    samples[metric].append(float(value))
    return Arm(samples, dict(Counter(r["outcome"] for r in rows)))
