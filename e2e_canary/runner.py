"""Carrying canaries out against one cluster, through the cluster interface only, and recording what they saw.

The same code runs against the simulator in process, the local region over HTTP, and a live cluster via
kubeconfig. Each attempt gets a namespace of its own, ``canary-<name>-<attempt>``, labelled
``platformctl.io/canary=<name>``; a run starts by deleting every such namespace a crashed run left (under
the cluster's canary lease, so that two runners never reap each other's). Every pod of an attempt is one
``CanaryResult`` (``e2e_canary.results``, which keeps it in the state store): stage, cluster, zone, pool, image
and canary, an outcome (``ok | fail | timeout | disrupted | infra_error``) with a reason, and its pod startup
latency and phases (``e2e_canary.measure``) plus the time of the whole check.

Kinds: ``node-pool`` (here: pods pinned to each pool and to each image in it, the arms a rotation's
verdict compares, each pod a result) and ``service``, ``batch``, ``cron``, ``daemon`` (``e2e_canary.checks``:
a Deployment rolled, scaled and deleted; a Job; a CronJob's firings; a DaemonSet on every node). A check the
platform disrupted is recorded as ``disrupted`` and carried out once more.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from e2e_canary.checks import LONGEST_WAIT
from e2e_canary.definitions import LABEL, Canary, NodePoolCanary
from e2e_canary.measure import NotStarted, Startup, startup
from e2e_canary.results import RETENTION_SECONDS, CanaryResult, Metrics, Observation, Outcome, keep
from platformctl.kernel.clock import past, synced_now, wait_for_change
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import LABEL_IMAGE, LABEL_NODEGROUP, Container, Pod, Toleration, image_label_of
from platformctl.kernel.errors import ApiFault, ApiRefused, PlatformError
from platformctl.kernel.state import StateStore

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


def started_after(pod: Pod) -> float | None:
    """How long after the API server made ``pod`` the kubelet started it (both the server's stamps), once it has."""
    return pod.running_at - pod.created if pod.running_at is not None and pod.created is not None else None


@dataclass
class PoolArm:
    """Where the node-pool canary runs one of its arms: a pool's schedulable, Ready nodes on one image (the judge's
    ``Arm`` is what an arm measured)."""

    pool: str
    image: str
    zone: str | None
    nodes: int
    image_label: str = LABEL_IMAGE  # the label the arm's nodes name their image by (a managed group's is EKS's)


@dataclass
class AttemptReport:
    canary: str
    cluster: str
    namespace: str
    results: list[CanaryResult] = field(default_factory=list)
    skipped: str = ""

    @property
    def outcomes(self) -> Counter[str]:
        return Counter(r.outcome for r in self.results)


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
            pool, key = node.labels.get(LABEL_NODEGROUP), image_label_of(node.labels)
            if pool is None or key is None or node.unschedulable or not node.ready:
                continue  # a cordoned or broken node is the rotation's or remediation's: no user can land there
            image = node.labels[key]
            arm = found.setdefault((pool, image), PoolArm(pool, image, node.zone, 0, key))
            arm.nodes += 1
        return [found[k] for k in sorted(found)]

    def run(self, canary: Canary) -> AttemptReport:
        attempt = uuid.uuid4().hex[:8]
        namespace = f"{canary.namespace}-{attempt}"
        report = AttemptReport(canary.name, self.name, namespace)
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
            if isinstance(canary, NodePoolCanary):  # its pods placed on each pool's images, the arms
                report.results = self._node_pool(canary, attempt, namespace)
            else:
                report.results = self._workload(canary, attempt, namespace)
                if any(r.outcome == "disrupted" for r in report.results):  # the platform's doing: once more
                    self.cluster.delete_namespace(namespace)
                    namespace = report.namespace = f"{namespace}-r"
                    self.cluster.create_namespace(namespace, {LABEL: canary.name, ATTEMPT_LABEL: attempt})
                    report.results += self._workload(canary, attempt, namespace)
        finally:
            self.cluster.delete_namespace(namespace)
        return report

    def _workload(self, canary: Canary, attempt: str, namespace: str) -> list[CanaryResult]:
        from e2e_canary.checks import Check, CheckFailed, observe

        check = Check(canary, namespace, self.cluster, self.poll, {LABEL: canary.name, ATTEMPT_LABEL: attempt})
        check.started = synced_now(self.clock)  # pods' Ready times are the server's
        check.deadline = check.started + canary.deadline
        self.progress(f"{self.name}: {canary.name}: {canary.kind} check in {namespace}, up to {canary.deadline} s")
        try:
            seen = observe(canary, check)
        except CheckFailed as failed:
            seen = [Observation(failed.outcome, failed.reason)]
        except ApiRefused as exc:  # a call mid-check the API refused: the platform's failure when it is a 5xx
            seen = [Observation("fail" if exc.status >= 500 else "infra_error", str(exc.detail))]
        return [self.record(canary, attempt, None, one) for one in seen]

    def record(self, canary: Canary, attempt: str, arm: PoolArm | None, seen: Observation) -> CanaryResult:
        """What a check saw, where it ran (its own zone, pool and image, else the arm's) and when, kept."""
        return self._record(canary, attempt, arm, seen.outcome, seen.reason, seen.metrics,
                            where=(seen.zone, seen.pool, seen.image) if seen.image or seen.pool or seen.zone else None)

    # ---------------------------------------------------------------- node-pool

    def _pod(self, canary: Canary, attempt: str, namespace: str, arm: PoolArm, i: int, retry: bool = False) -> Pod:
        requests = canary.resources.requests()
        name = f"{arm.pool}-{arm.image.removeprefix('ami-')[-8:]}-{i}{'-r' if retry else ''}"
        return Pod(namespace, name, str(uuid.uuid4()), labels={LABEL: canary.name, ATTEMPT_LABEL: attempt, "arm-pool": arm.pool},
                   annotations=dict(SIM_START), node_selector={LABEL_NODEGROUP: arm.pool, arm.image_label: arm.image},
                   tolerations=(Toleration(operator="Exists", effect="NoSchedule"),
                                Toleration(operator="Exists", effect="PreferNoSchedule")),
                   containers=(Container("probe", canary.pod_image, requests),), requests=requests, grace_seconds=0)

    def _node_pool(self, canary: NodePoolCanary, attempt: str, namespace: str) -> list[CanaryResult]:
        start = synced_now(self.clock)  # pods' Ready times are the server's
        arms = {}
        made_at = [start]
        results: list[CanaryResult] = []
        present = self.arms()
        for arm in present:
            for i in range(canary.pods_per_arm):
                made = self._pod(canary, attempt, namespace, arm, i)
                try:
                    made_at.append(self.cluster.create_pod(made).created or start)
                except ApiRefused as exc:
                    results.append(self._record(canary, attempt, arm, "fail" if exc.status >= 500 else "infra_error",
                                                f"the API server answered {exc.status} to creating pod {made.name}: {exc.detail}", {}))
                    continue
                arms[made.name] = (arm, i, False)
        # from the last pod as the API server stamped it: a runner slow to make them (descheduled, its calls slow)
        # does not shorten what the platform is given, as a check's deadline runs from its first object
        deadline = max(made_at) + canary.deadline
        self.progress(f"{self.name}: {canary.name}: {len(arms)} pods on {len(present)} arms, waiting up to {canary.deadline} s")
        done: dict[str, CanaryResult] = {}
        heard = 0  # the newest change of the cluster's pods heard of
        while True:
            # called before the look, so that the last look is taken once the cluster's time is past the deadline:
            # a client descheduled between a look and its deadline (a busy node, a throttled pod) judges by what the
            # cluster did in time, by the kubelet's stamps, not by a listing taken before its pause
            expired = past(self.clock, deadline)
            pods = {p.name: p for p in self.cluster.list_pods(namespace=namespace)}
            for name, (arm, i, retried) in list(arms.items()):
                if name in done:
                    continue
                pod = pods.get(name)
                # from the kubelet's own startedAt: a poll's lag is not the platform's. A pod gone before this
                # canary saw it run was taken away between two polls (evicted, preempted, its node gone).
                seen = startup(pod) if pod is not None else NotStarted("disrupted", "")
                late = started_after(pod) if isinstance(seen, Startup) and pod is not None else None
                if late is not None and late > canary.deadline:  # running now, but started past the deadline
                    done[name] = self._record(canary, attempt, arm, "timeout", f"pod {name} on image {arm.image} not "
                                              f"running within the deadline {canary.deadline} s (running only {late:.0f} "
                                              "s after it was made)", {})
                elif isinstance(seen, Startup):
                    ready = pod.ready_at if pod is not None else None
                    # from its own creation, both the server's stamps: pods of many arms are created one after
                    # another, and the last one's wait for its turn is not its image's
                    created = pod.created if pod is not None and pod.created else start
                    end = ready if ready is not None else synced_now(self.clock)
                    metrics: Metrics = {**seen.to_dict(), "check_seconds": max(end - created, 0.0)}
                    done[name] = self._record(canary, attempt, arm, "ok", "", metrics)
                elif seen.reason == "disrupted":
                    done[name] = self._record(canary, attempt, arm, "disrupted", disrupted(name, seen.disruption), {})
                    if not retried and not expired:  # retried once: a disruption is the platform's, not the image's
                        again = self._pod(canary, attempt, namespace, arm, i, retry=True)
                        try:
                            self.cluster.create_pod(again)
                            arms[again.name] = (arm, i, True)
                        except (ApiFault, PlatformError):
                            pass
            if len(done) == len(arms) or expired:
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

    def _record(self, canary: Canary, attempt: str, arm: PoolArm | None, outcome: Outcome, reason: str,
                metrics: Metrics, where: tuple[str | None, str | None, str | None] | None = None) -> CanaryResult:
        zone, pool, image = where if where is not None else (arm.zone, arm.pool, arm.image) if arm else (None, None, None)
        result = CanaryResult(canary.name, canary.kind, attempt, self.stage, self.name, zone, pool, image, outcome,
                              reason, dict(metrics), self.clock.now(), canary.evidence_window or None)
        keep(self.store, result, self.retention)
        return result


