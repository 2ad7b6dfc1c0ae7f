"""The workload canaries: what a user of the platform does with a Deployment, a Job, a CronJob and a DaemonSet.

Each check submits its workload through the cluster interface (``create_object`` and its kin: the same
calls on the simulator, the local region and a live cluster), waits for it as a user would, and returns
what it saw as ``Observation``s (``Runner.record`` adds where and when):

- ``service``: a PodDisruptionBudget and a Deployment; all replicas Ready; a roll to a new template whose
  availability is sampled every poll and must never fall below the budget's ``minAvailable``; a scale to
  ``scaleTo``; a delete whose pods must go. One row: ``pod_startup_seconds`` of every pod it started,
  ``check_seconds``, ``roll_seconds`` and ``min_available``.
- ``batch``: a Job of ``parallelism`` pods; it must complete and every pod must have exited 0. One row.
- ``cron``: a CronJob; each of ``runs`` firings must make its Job within ``toleranceSeconds`` of the
  scheduled time (``fire_lateness_seconds``) and the Job must complete. A row per firing.
- ``daemon``: a DaemonSet tolerating every taint; every schedulable, Ready node must have a Ready pod of it
  within ``readyDeadlineSeconds``. A row per node, with the node's zone, pool and image: a bad image is
  named by its own rows.

A pod that failed says why (the kubelet's waiting reason, such as ``CreateContainerError``, with the node
and its image). A check that ran out of time after the platform disrupted one of its pods (evicted,
preempted, deleted by the taint manager: the pod's ``DisruptionTarget``) is ``disrupted``, not a failure;
the runner retries it once.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from croniter import croniter

from e2e_canary.definitions import BatchCanary, Canary, CronCanary, DaemonCanary, ServiceCanary
from e2e_canary.measure import Startup, startup
from e2e_canary.results import Metrics, Observation, Outcome
from platformctl.kernel.clock import Clock, past, synced_now, wait_for_change
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import LABEL_NODEGROUP, Node, Pod
from platformctl.kernel.errors import ApiRefused, NotFoundError
from platformctl.kernel.jsontypes import JSONMapping, JSONObject, JSONValue, array, mapping, to_int

SIM_START = "sim.platformctl.io/start-seconds"
SIM_RUN = "sim.platformctl.io/run-seconds"
ROLL_ANNOTATION = "platformctl.io/canary-roll"
LONGEST_WAIT = 15.0  # seconds a check waits for its cluster's pods to change before it looks anyway


class CheckFailed(Exception):
    """The check is over: ``outcome`` (fail, timeout or disrupted) and why."""

    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


@dataclass
class Check:
    """One attempt of one workload canary in its own namespace."""

    canary: Canary
    namespace: str
    cluster: Cluster
    poll: float
    labels: dict[str, str]
    started: float = 0.0
    deadline: float = 0.0
    disrupted: dict[str, str] = field(default_factory=dict)  # pod -> DisruptionTarget reason, as seen
    nodes: dict[str, Node] = field(default_factory=dict)
    origin: float | None = None  # the API server's creationTimestamp of the check's first object
    seen_version: int = 0  # the newest change of the cluster's pods this check has heard of (a local region's)

    def elapsed(self, end: float | None = None, start: float | None = None) -> float:
        """A duration of the check on the API server's clock: from ``start`` (else its first object's creation) to
        ``end`` (else the server's time now), never below zero. Both ends are the server's own stamps or readings,
        never this client's guess of its time: a busy client's lag is not the platform's."""
        first = start if start is not None else (self.origin if self.origin is not None else self.started)
        last = end if end is not None else synced_now(self.clock)
        return max(last - first, 0.0)

    @property
    def clock(self) -> Clock:
        return self.cluster.clock

    # ---------------------------------------------------------------- objects

    def template(self, *, run_seconds: int | None = None, restart: str | None = None, tolerate_all: bool = False,
                 extra_labels: dict[str, str] | None = None) -> JSONObject:
        """A pod template: one container, the canary's image and requests, labelled as the check's."""
        c = self.canary
        container: JSONObject = {"name": "probe", "image": c.pod_image,
                                 "resources": {"requests": {"cpu": c.resources.cpu, "memory": c.resources.memory}}}
        annotations = {SIM_START: "2"}
        if run_seconds is not None:
            container["command"] = ["sleep", str(run_seconds)]
            annotations[SIM_RUN] = str(run_seconds)
        spec: JSONObject = {"containers": [container], "terminationGracePeriodSeconds": 0}
        if restart:
            spec["restartPolicy"] = restart
        if tolerate_all:
            spec["tolerations"] = [{"operator": "Exists"}]
        return {"metadata": {"labels": {**self.labels, **(extra_labels or {})}, "annotations": annotations}, "spec": spec}

    def create(self, obj: JSONObject) -> JSONMapping:
        """Create ``obj`` (a manifest) in the check's namespace, with the check's labels; the object the API made."""
        obj = copy.deepcopy(obj)
        metadata = mapping(obj.get("metadata"))
        obj["metadata"] = {**metadata, "namespace": self.namespace, "labels": {**self.labels, **mapping(metadata.get("labels"))}}
        try:
            made = self.cluster.create_object(obj)
        except ApiRefused as exc:
            raise CheckFailed("fail" if exc.status >= 500 else "infra_error",
                              f"the API server answered {exc.status} to creating {obj['kind']} {metadata['name']}: "
                              f"{exc.detail}") from None
        if self.origin is None:
            self.origin = _stamp(made, "creationTimestamp")
            if self.origin is not None:
                # The deadline runs from the check's first object as the API server stamped it, as its durations do:
                # a client late to create it (descheduled, or guessing the server's time when it could not ask) does
                # not shorten what the platform is given.
                self.deadline = max(self.deadline, self.origin + self.canary.deadline)
        return made

    def get(self, kind: str, name: str) -> JSONMapping | None:
        try:
            return self.cluster.get_object(kind, self.namespace, name)
        except NotFoundError:
            return None

    # ---------------------------------------------------------------- pods

    def pods(self, selector: str | None = None) -> list[Pod]:
        pods = self.cluster.list_pods(namespace=self.namespace, label_selector=selector)
        for pod in pods:
            if pod.disruption_reason:
                self.disrupted.setdefault(pod.name, pod.disruption_reason)
        return pods

    def node(self, name: str | None) -> Node | None:
        if name is None:
            return None
        if name not in self.nodes:
            try:
                self.nodes[name] = self.cluster.get_node(name)
            except NotFoundError:
                return None
        return self.nodes[name]

    def stuck(self, pods: list[Pod]) -> list[str]:
        """Why pods do not run, as the kubelet says it (with the node and its image), for a reason a person reads."""
        out = []
        for pod in pods:
            if pod.waiting and pod.deletion_time is None:
                node = self.node(pod.node_name)
                image = f", image {node.image}" if node is not None and node.image else ""
                out.append(f"pod {pod.name} on {pod.node_name}{image}: {pod.waiting}")
        return out

    def startups(self, pods: list[Pod], seen: dict[str, float]) -> None:
        for pod in pods:
            if pod.name not in seen:
                s = startup(pod)
                if isinstance(s, Startup):
                    seen[pod.name] = s.seconds

    def wait(self, what: str, done: Callable[[], bool], pods: Callable[[], list[Pod]], until: float | None = None) -> None:
        """Poll ``done`` until it holds; past the deadline the check is a failure naming the stuck pods, a
        timeout, or disrupted when the platform took some of its pods away meanwhile."""
        end = min(until if until is not None else self.deadline, self.deadline)
        while not done():
            if past(self.clock, end):
                if done():  # looked at again once the cluster's own clock passed the deadline: what it made in time counts
                    return
                stuck = self.stuck(pods())
                if stuck:
                    raise CheckFailed("fail", f"{what}: not done in {end - self.started:.0f} s; " + "; ".join(stuck[:3]))
                if self.disrupted:
                    name, reason = next(iter(self.disrupted.items()))
                    raise CheckFailed("disrupted", f"{what}: not done in {end - self.started:.0f} s after the platform "
                                      f"disrupted pod {name} ({reason})")
                raise CheckFailed("timeout", f"{what}: not done within {end - self.started:.0f} s")
            self.rest()

    def rest(self) -> None:
        """Until the next look: a poll, or on a local region until the cluster's pods change (every step of a check
        is a pod's: scheduled, started, Ready, finished, gone), at most ``LONGEST_WAIT`` seconds."""
        self.seen_version = wait_for_change(self.clock, self.poll, self.cluster.name, "pods", self.seen_version,
                                            LONGEST_WAIT)


@functools.singledispatch
def observe(canary: Canary, check: Check) -> list[Observation]:
    """One attempt of ``canary``'s workload in ``check``'s namespace, and what it saw: the check registered for the
    canary's kind (``@observe.register`` on a function whose first parameter is the kind's model)."""
    raise NotImplementedError(f"{canary.kind} canaries have no workload check: the runner places their pods on each "
                              "pool's images")


# -------------------------------------------------------------------------------------------- service


@observe.register
def service(c: ServiceCanary, check: Check) -> list[Observation]:
    """Its durations are the platform's, from the server's stamps only, step by step: from the Deployment's creation
    to its last pod's Ready transition; from the roll's first new pod's creation to the last one's Ready; from the
    scale's first new pod's creation to its Ready; and the spread of the deletionTimestamps its delete gave its pods;
    summed. What the check itself took to notice a step done and act, a client descheduled on a busy machine, is not
    the platform's and is left out."""
    name = c.name
    selector = f"app={name}"
    check.create({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
                  "spec": {"minAvailable": c.budget, "selector": {"matchLabels": {"app": name}}}})
    template = check.template(extra_labels={"app": name})
    made = check.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
                  "spec": {"replicas": c.replicas, "selector": {"matchLabels": {"app": name}}, "template": template,
                           "strategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxSurge": c.max_surge, "maxUnavailable": c.max_unavailable}}}})
    seen: dict[str, float] = {}
    last_ready = 0.0  # the newest Ready transition among the live pods, when they last were all Ready
    live: list[Pod] = []  # the pods not being deleted, at the last look

    def ready(count: int) -> Callable[[], bool]:
        def done() -> bool:
            nonlocal last_ready, live
            live = [p for p in check.pods(selector) if p.deletion_time is None]
            check.startups(live, seen)
            status = _status(check.get("Deployment", name))
            ok = status.get("updatedReplicas") == count and status.get("availableReplicas") == count and \
                status.get("replicas") == count and sum(p.ready for p in live) == count
            if ok:
                last_ready = max((p.ready_at for p in live if p.ready_at is not None), default=last_ready)
            return ok
        return done

    check.wait(f"Deployment {name}: {c.replicas} replicas Ready", ready(c.replicas), lambda: check.pods(selector))
    created = _stamp(made, "creationTimestamp")
    steps = [last_ready - (created if created is not None else check.started)]
    # The roll: a new template (a new image when the canary names one), availability sampled at every poll.
    roll_start = synced_now(check.clock)
    rolled_to: JSONObject = {"metadata": {"annotations": {ROLL_ANNOTATION: str(roll_start)}}}
    if c.new_image:
        rolled_to["spec"] = {"containers": [{"name": "probe", "image": c.new_image}]}
    check.cluster.patch_object("Deployment", check.namespace, name, {"spec": {"template": rolled_to}})
    lowest = c.replicas

    def rolled() -> bool:
        nonlocal lowest
        pods = [p for p in check.pods(selector) if p.deletion_time is None]
        check.startups(pods, seen)
        lowest = min(lowest, sum(p.ready for p in pods))
        return ready(c.replicas)() and all(p.annotations.get(ROLL_ANNOTATION) == str(roll_start) for p in live)

    check.wait(f"Deployment {name}: rolled to its new template", rolled, lambda: check.pods(selector))
    roll_seconds = max(last_ready - min(p.created for p in live), 0.0)  # every live pod is the roll's now
    steps.append(roll_seconds)
    if lowest < c.budget:
        raise CheckFailed("fail", f"Deployment {name}: availability fell to {lowest} Ready during the roll, below the "
                          f"budget's minAvailable {c.budget}")
    if c.scale_to is not None:
        before = {p.name for p in live}
        check.cluster.scale("Deployment", check.namespace, name, c.scale_to)
        check.wait(f"Deployment {name}: scaled to {c.scale_to}", ready(c.scale_to), lambda: check.pods(selector))
        added = [p.created for p in live if p.name not in before]  # none when it scaled down: nothing to wait for
        steps.append(last_ready - min(added) if added else 0.0)
    check.cluster.delete_object("Deployment", check.namespace, name)
    marked: set[float] = set()  # the deletionTimestamps seen on its pods

    def gone() -> bool:
        pods = check.pods(selector)
        marked.update(p.deletion_time for p in pods if p.deletion_time is not None)
        return not [p for p in pods if p.deletion_time is None]

    check.wait(f"Deployment {name}: deleted, its pods gone", gone, lambda: [])
    steps.append(max(marked) - min(marked) if marked else 0.0)
    metrics: Metrics = {"pod_startup_seconds": sorted(seen.values()), "check_seconds": sum(max(s, 0.0) for s in steps),
                        "roll_seconds": roll_seconds, "min_available": lowest}
    return [Observation("ok", "", metrics)]


# -------------------------------------------------------------------------------------------- batch


def _job(check: Check, c: BatchCanary | CronCanary, name: str) -> JSONObject:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": c.parallelism, "completions": c.completions or c.parallelism, "backoffLimit": 0,
                     "template": check.template(run_seconds=c.run_seconds, restart="Never", extra_labels={"canary-job": name})}}


def _finished(check: Check, c: BatchCanary, name: str, seen: dict[str, float], until: float | None = None) -> None:
    selector = f"canary-job={name}"
    completions = c.completions or c.parallelism

    def done() -> bool:
        pods = check.pods(selector)
        check.startups(pods, seen)
        failed = [p for p in pods if p.phase == "Failed"]
        if failed:
            raise CheckFailed("fail", f"Job {name}: pod {failed[0].name} exited non-zero (phase Failed)")
        status = _status(check.get("Job", name))
        return to_int(status.get("succeeded", 0)) >= completions and any(
            mapping(cond).get("type") == "Complete" and mapping(cond).get("status") == "True"
            for cond in array(status.get("conditions")))

    check.wait(f"Job {name}: {completions} completions", done, lambda: check.pods(selector), until)


@observe.register
def batch(c: BatchCanary, check: Check) -> list[Observation]:
    name = c.name
    check.create(_job(check, c, name))
    seen: dict[str, float] = {}
    _finished(check, c, name, seen)
    completed = _stamp(_status(check.get("Job", name)), "completionTime", None)
    return [Observation("ok", "", {"pod_startup_seconds": sorted(seen.values()), "check_seconds": check.elapsed(completed)})]


# -------------------------------------------------------------------------------------------- cron


def firings_since(schedule: str, due: float, now: float) -> int:
    """How many times ``schedule`` fires after ``due`` up to ``now``."""
    times, n = croniter(schedule, due), 0
    while times.get_next(float) <= now:
        n += 1
    return n


def scheduled_since(cronjob: JSONMapping | None, due: float) -> bool:
    """Whether the CronJob controller says it fired at ``due`` or later (``status.lastScheduleTime``)."""
    last = _stamp(cronjob, "lastScheduleTime", "status")
    return last is not None and last >= due


@observe.register
def cron(c: CronCanary, check: Check) -> list[Observation]:
    name = c.name
    job = _job(check, c, name)
    # The controller deletes finished Jobs beyond successfulJobsHistoryLimit (3 by default): a check that comes back
    # late (its process descheduled, its API calls slow) must still find the runs it watches, so the CronJob keeps
    # every run that can fire within the check's deadline (a cron schedule fires at most once a minute).
    keep = c.runs + int(c.deadline // 60) + 2
    created = check.create({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
                            "spec": {"schedule": c.schedule, "concurrencyPolicy": "Allow", "successfulJobsHistoryLimit": keep,
                                     "jobTemplate": {"spec": job["spec"]}}})
    rows: list[Observation] = []
    from platformctl.kernel.cluster.model import parse_time

    # The firings the CronJob owes from its creation, in the API server's time (this client's clock may differ).
    times = croniter(c.schedule, parse_time(mapping(created["metadata"])["creationTimestamp"], "creationTimestamp", None))
    for _ in range(c.runs):
        due = times.get_next(float)
        job_name = f"{name}-{int(due // 60)}"  # the CronJob controller's name for the run scheduled at ``due``
        found: JSONObject = {}

        def fired(job_name: str = job_name, found: JSONObject = found) -> bool:
            obj = check.get("Job", job_name)
            if obj is not None:
                found.update(obj)
            return obj is not None

        # No run is made before its schedule: wait for it on the cluster's clock, then look (not a poll a minute long).
        check.clock.sleep(min(due, check.deadline) - synced_now(check.clock))
        try:
            # Lateness is the Job's own creationTimestamp against the schedule; looking for it a while past the
            # tolerance only keeps a slow poll (or a busy API server) from being taken for a late firing.
            check.wait(f"CronJob {name}: the run scheduled at {due:.0f}", fired, lambda: [],
                       until=due + c.tolerance_seconds + max(60.0, 5 * check.poll))
        except CheckFailed as failed:
            since = firings_since(c.schedule, due, synced_now(check.clock)) if failed.outcome == "timeout" else 0
            if since >= keep and scheduled_since(check.get("CronJob", name), due):
                # looked for only after as many later runs as the CronJob keeps, and its controller says it fired at
                # or after this one: made on time and pruned since, or not; nothing was measured of the platform (a
                # runner paused past its deadline). A controller that never fired is still "did not fire".
                rows.append(Observation("infra_error", f"CronJob {name}: the run scheduled at {due:.0f} was looked for "
                                        f"only after {since} later runs (it keeps {keep}): not measured"))
                continue
            rows.append(Observation("fail" if failed.outcome == "timeout" else failed.outcome,
                                    f"CronJob {name} did not fire within toleranceSeconds {c.tolerance_seconds} of its "
                                    f"schedule {c.schedule!r}" if failed.outcome == "timeout" else failed.reason))
            continue
        made = parse_time(mapping(found["metadata"])["creationTimestamp"], "creationTimestamp", None)
        lateness = max(made - due, 0.0)
        seen: dict[str, float] = {}
        # the Job's pods carry the template's labels: this run's are told apart by job-name
        job_selector = f"job-name={job_name}"

        def done(job_name: str = job_name, seen: dict[str, float] = seen, selector: str = job_selector) -> bool:
            pods = check.pods(selector)
            check.startups(pods, seen)
            status = _status(check.get("Job", job_name))
            return to_int(status.get("succeeded", 0)) >= (c.completions or c.parallelism)

        def its_pods(selector: str = job_selector) -> list[Pod]:
            return check.pods(selector)

        try:
            check.wait(f"CronJob {name}: run {job_name} complete", done, its_pods)
        except CheckFailed as failed:
            rows.append(Observation(failed.outcome, failed.reason, {"fire_lateness_seconds": lateness}))
            continue
        if lateness > c.tolerance_seconds:
            rows.append(Observation("fail", f"CronJob {name} fired {lateness:.0f} s after its schedule, more than "
                                    f"toleranceSeconds {c.tolerance_seconds}", {"fire_lateness_seconds": lateness}))
            continue
        completed = _stamp(_status(check.get("Job", job_name)), "completionTime", None)
        rows.append(Observation("ok", "", {"fire_lateness_seconds": lateness, "pod_startup_seconds": sorted(seen.values()),
                                           "check_seconds": check.elapsed(completed, start=due)}))
    return rows


# -------------------------------------------------------------------------------------------- daemon


@observe.register
def daemon(c: DaemonCanary, check: Check) -> list[Observation]:
    name = c.name
    selector = f"app={name}"
    check.create({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
                  "spec": {"selector": {"matchLabels": {"app": name}},
                           "template": check.template(tolerate_all=True, extra_labels={"app": name})}})
    expected = {n.name: n for n in check.cluster.list_nodes() if n.ready and not n.unschedulable}
    check.nodes.update(expected)
    until = check.started + c.ready_deadline_seconds
    seen: dict[str, float] = {}
    ready_at: dict[str, float] = {}
    node_of: dict[str, str | None] = {}

    def everywhere() -> bool:
        pods = check.pods(selector)
        check.startups(pods, seen)
        node_of.update({p.name: p.node_name for p in pods})
        for pod in pods:
            if pod.ready and pod.node_name in expected and pod.node_name not in ready_at:
                # the kubelet's Ready time, not when a poll saw it: a busy client's lag is not the platform's
                ready_at[pod.node_name] = check.elapsed(pod.ready_at)
        return set(ready_at) >= set(expected)

    stuck: dict[str, str] = {}
    try:
        check.wait(f"DaemonSet {name}: a Ready pod on each of {len(expected)} nodes", everywhere,
                   lambda: check.pods(selector), until)
    except CheckFailed:
        for pod in check.pods(selector):
            if pod.node_name in expected and pod.node_name not in ready_at and pod.waiting:
                stuck[pod.node_name] = pod.waiting
    startups = {p.node_name: seen.get(p.name) for p in check.pods(selector)}
    rows: list[Observation] = []
    for node_name, node in sorted(expected.items()):
        zone, pool, image = node.zone, node.labels.get(LABEL_NODEGROUP), node.image
        if node_name in ready_at:
            latency = startups.get(node_name)
            rows.append(Observation("ok", "", {**({"pod_startup_seconds": latency} if latency is not None else {}),
                                               "check_seconds": ready_at[node_name]}, zone, pool, image))
        elif node_name in stuck:
            rows.append(Observation("fail", f"DaemonSet {name}: its pod on {node_name} (image {image}): "
                                    f"{stuck[node_name]} for {c.ready_deadline_seconds} s", {}, zone, pool, image))
        elif any(node_of.get(pod) == node_name for pod in check.disrupted):
            taken, reason = next((p, r) for p, r in check.disrupted.items() if node_of.get(p) == node_name)
            rows.append(Observation("disrupted", f"DaemonSet {name}: its pod {taken} on {node_name} was taken away by "
                                    f"the platform ({reason})", {}, zone, pool, image))
        else:
            rows.append(Observation("timeout", f"DaemonSet {name}: no Ready pod on {node_name} within "
                                    f"readyDeadlineSeconds {c.ready_deadline_seconds}", {}, zone, pool, image))
    return rows


def _status(obj: JSONMapping | None) -> JSONMapping:
    """An object's ``status`` as the API server last wrote it (empty before it wrote any, or when there is no object)."""
    return mapping((obj or {}).get("status"))


def _stamp(obj: JSONValue, field_name: str, where: str | None = "metadata") -> float | None:
    """A timestamp the API server wrote on an object (``metadata.creationTimestamp``, ``status.completionTime``)."""
    from platformctl.kernel.cluster.model import parse_time

    part = mapping(obj).get(where) if where else obj
    raw = mapping(part).get(field_name)
    return parse_time(raw, field_name, None) if isinstance(raw, str) else None

