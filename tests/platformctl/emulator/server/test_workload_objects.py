"""Deployments, Jobs, CronJobs and DaemonSets through the cluster interface: the same calls against the simulator
in process and against the local region's API over HTTP (the official client), judged by the pods the
simulator runs. A rolling update keeps to maxSurge and maxUnavailable at every second of it."""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from platformctl.emulator.server.objects import ClusterState
from platformctl.emulator.server.process import kubeconfig
from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from platformctl.kernel.cluster.live import LiveCluster
from platformctl.kernel.errors import ApiRefused, NotFoundError
from tests.platformctl.emulator.server.conftest import Served

NS = "canary-test"


@dataclass
class Under:
    """A cluster under test: the interface to call, the simulator behind it, and how its clock moves."""

    cluster: Any
    sim: SimulatedCluster
    advance: Callable[[float], None]


def _sim() -> SimulatedCluster:
    sim = SimulatedCluster("w")
    sim.add_pool(NodePoolSpec("general", "us-east-1a", "m6i.2xlarge", "ami-1", 3))
    sim.add_pool(NodePoolSpec("gpu", "us-east-1b", "m6i.2xlarge", "ami-2", 2))
    return sim


@pytest.fixture(params=["in-process", "over-http"])
def under(request: pytest.FixtureRequest, served: Served) -> Iterator[Under]:
    if request.param == "in-process":
        sim = _sim()
        yield Under(sim, sim, sim.advance)
        return
    sim = _sim()
    state = served.states["w"] = ClusterState(sim)  # the server's own dict of clusters
    served.kubeconfig.write_text(yaml.safe_dump(kubeconfig("test", served.url, list(served.states), "w")))
    live = LiveCluster.from_kubeconfig(str(served.kubeconfig), context="w")

    def advance(seconds: float) -> None:
        with served.cond:
            sim.advance(seconds)
            state.tick()

    with served.cond:
        state.create_namespace({"metadata": {"name": NS}})
    yield Under(live, sim, advance)


def deployment(name: str, replicas: int, surge: Any, unavailable: Any, image: str = "web:1") -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                     "template": {"metadata": {"labels": labels, "annotations": {"sim.platformctl.io/start-seconds": "5"}},
                                  "spec": {"containers": [{"name": "web", "image": image,
                                                           "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}}


def pods(sim: SimulatedCluster, app: str) -> list[Any]:
    return [p for p in sim.list_pods(NS, f"app={app}") if p.deletion_time is None]


def roll(under: Under, name: str, seconds: int = 300) -> tuple[int, int, list[str]]:
    """Step the clock a second at a time through a roll: the fewest Ready pods, the most pods (terminating ones not
    counted, as the controller does not count them), the images at the end."""
    fewest, most = 10**6, 0
    for _ in range(seconds):
        under.advance(1)
        live = pods(under.sim, name)
        fewest = min(fewest, sum(p.ready for p in live))
        most = max(most, len(live))
    return fewest, most, sorted(p.containers[0].image for p in pods(under.sim, name))


def test_a_rolling_update_keeps_within_max_surge_and_max_unavailable(under: Under) -> None:
    under.cluster.create_object(deployment("web", 4, 1, 0))
    under.advance(30)
    status = under.cluster.get_object("Deployment", NS, "web")["status"]
    assert status["readyReplicas"] == 4 and status["updatedReplicas"] == 4
    under.cluster.patch_object("Deployment", NS, "web", {"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "web:2"}]}}}})
    fewest, most, images = roll(under, "web")
    assert fewest == 4 and most <= 5  # maxUnavailable 0: never below 4 Ready; maxSurge 1: never more than 5 pods
    assert images == ["web:2"] * 4
    obj = under.cluster.get_object("Deployment", NS, "web")
    assert obj["status"]["updatedReplicas"] == 4 and obj["status"]["availableReplicas"] == 4
    assert obj["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    assert obj["metadata"]["generation"] == 2 and obj["status"]["observedGeneration"] == 2

    # PUT back the first template: a rollback, with maxUnavailable 2 and no surge this time.
    back = copy.deepcopy(obj)
    del back["status"]
    back["spec"]["template"]["spec"]["containers"][0]["image"] = "web:1"
    back["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": 0, "maxUnavailable": "50%"}
    under.cluster.replace_object(back)
    fewest, most, images = roll(under, "web")
    assert fewest >= 2 and most <= 4 and images == ["web:1"] * 4
    stale = {**back, "metadata": {**back["metadata"], "resourceVersion": "1"}}
    with pytest.raises(ApiRefused) as conflict:
        under.cluster.replace_object(stale)
    assert conflict.value.status == 409


def test_scale_and_delete(under: Under) -> None:
    under.cluster.create_object(deployment("api", 2, "25%", "25%"))
    under.advance(30)
    scale = under.cluster.scale("Deployment", NS, "api", 5)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 5
    under.advance(30)
    assert sum(p.ready for p in pods(under.sim, "api")) == 5
    under.cluster.scale("Deployment", NS, "api", 1)
    under.advance(60)
    assert len(under.sim.list_pods(NS, "app=api")) == 1
    under.cluster.delete_object("Deployment", NS, "api")
    under.advance(60)
    assert under.sim.list_pods(NS, "app=api") == []
    with pytest.raises(NotFoundError):
        under.cluster.get_object("Deployment", NS, "api")


def test_a_job_completes_and_a_cronjob_fires_on_its_schedule(under: Under) -> None:
    template = {"metadata": {"labels": {"app": "batch"}, "annotations": {"sim.platformctl.io/run-seconds": "20",
                                                                         "sim.platformctl.io/start-seconds": "2"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}}
    under.cluster.create_object({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sum", "namespace": NS},
                                 "spec": {"parallelism": 3, "completions": 3, "template": template}})
    under.advance(10)
    assert under.cluster.get_object("Job", NS, "sum")["status"]["active"] == 3
    under.advance(30)
    job = under.cluster.get_object("Job", NS, "sum")["status"]
    assert job["succeeded"] == 3 and [c["type"] for c in job["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    created = under.sim.now()
    under.cluster.create_object({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick", "namespace": NS},
                                 "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}})
    under.advance(185)
    cron = under.cluster.get_object("CronJob", NS, "tick")["status"]
    fired = [p for p in under.sim.list_pods(NS) if p.name.startswith("tick-")]
    minutes = sorted({int(p.name.split("-")[1]) for p in fired})
    assert len(minutes) == 3 and all(m * 60 > created for m in minutes)  # every minute, from the next one on
    assert [min(p.created for p in fired if int(p.name.split("-")[1]) == m) for m in minutes] == [m * 60 for m in minutes]
    assert cron["lastScheduleTime"]


def test_a_finished_job_is_gone_once_its_ttl_passes(under: Under) -> None:
    template = {"metadata": {"annotations": {"sim.platformctl.io/run-seconds": "5", "sim.platformctl.io/start-seconds": "1"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}}
    under.cluster.create_object({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once", "namespace": NS},
                                 "spec": {"ttlSecondsAfterFinished": 60, "template": template}})
    under.advance(20)
    assert under.cluster.get_object("Job", NS, "once")["status"]["succeeded"] == 1
    under.advance(30)  # finished, its TTL not yet passed
    assert under.cluster.get_object("Job", NS, "once")["status"]["succeeded"] == 1
    under.advance(60)
    with pytest.raises(NotFoundError):
        under.cluster.get_object("Job", NS, "once")
    under.advance(60)  # and it stays gone, as do its pods
    with pytest.raises(NotFoundError):
        under.cluster.get_object("Job", NS, "once")
    assert not [p for p in under.sim.list_pods(NS) if p.name.startswith("once-")]


def test_a_daemonset_runs_on_every_node_that_admits_it(under: Under) -> None:
    labels = {"app": "agent"}
    under.cluster.create_object({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": NS},
                                 "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
                                          "spec": {"containers": [{"name": "a", "image": "agent"}]}}}})
    under.advance(30)
    status = under.cluster.get_object("DaemonSet", NS, "agent")["status"]
    assert status["desiredNumberScheduled"] == 5 and status["numberReady"] == 5
    assert sorted(p.node_name for p in pods(under.sim, "agent")) == sorted(n.name for n in under.sim.list_nodes())


def test_mistakes_get_the_apis_answers(under: Under) -> None:
    under.cluster.create_object(deployment("dup", 1, 1, 0))
    with pytest.raises(ApiRefused) as exists:
        under.cluster.create_object(deployment("dup", 1, 1, 0))
    assert exists.value.status == 409
    bad = deployment("bad", 1, 0, 0)
    with pytest.raises(ApiRefused) as invalid:
        under.cluster.create_object(bad)
    assert invalid.value.status == 422 and "maxUnavailable" in str(invalid.value)
    with pytest.raises(NotFoundError):
        under.cluster.scale("Deployment", NS, "ghost", 2)


class Containers:
    """The runtime of the pods of image ``tool`` (``platformctl.emulator.simulation.pods.Runtime``): what it was told
    (start, SIGTERM, SIGKILL) per pod name; the test says when a container exits (``exit``)."""

    def __init__(self, sim: SimulatedCluster) -> None:
        self.sim = sim
        self.told: list[tuple[str, str]] = []
        self.running: dict[str, Any] = {}

    def runs(self, pod: Any) -> bool:
        return any(c.image == "tool" for c in pod.containers)

    def blocked(self, pod: Any) -> tuple[str, str] | None:
        return None

    def start(self, pod: Any) -> None:
        self.told.append(("start", pod.name))
        self.running[pod.name] = pod

    def stop(self, pod: Any) -> None:
        self.told.append(("SIGTERM", pod.name))

    def kill(self, pod: Any) -> bool:
        alive = self.running.pop(pod.name, None) is not None
        if alive:
            self.told.append(("SIGKILL", pod.name))
        return alive

    def exit(self, name: str, code: int) -> None:
        pod = self.running.pop(name)
        self.sim.container_exited(pod.namespace, pod.name, pod.uid, code)

    def log(self, pod: Any) -> str | None:
        return "".join(f"{what} {name}\n" for what, name in self.told if name == pod.name)


def _tool_job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    template = {"metadata": {"annotations": {"sim.platformctl.io/start-seconds": "2"}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 120,
                         "containers": [{"name": "rotate", "image": "tool"}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NS},
            "spec": {**spec, "template": template}}


def _pods_of(under: Under, job: str) -> list[Any]:
    return sorted((p for p in under.sim.list_pods(NS) if p.labels.get("job-name") == job), key=lambda p: p.created)


def test_a_jobs_failed_pods_are_judged_by_its_pod_failure_policy_and_backoff_limit(under: Under) -> None:
    containers = Containers(under.sim)
    under.sim.use_runtime(containers)
    rules = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
             {"action": "FailJob", "onExitCodes": {"containerName": "rotate", "operator": "In", "values": [1, 2]}}]
    under.cluster.create_object(_tool_job("crash", {"backoffLimit": 1, "podFailurePolicy": {"rules": rules}}))
    under.advance(10)
    [first] = _pods_of(under, "crash")
    containers.exit(first.name, 137)  # out of memory: counted, and tried once more
    under.advance(10)
    pods = _pods_of(under, "crash")
    assert [p.phase for p in pods] == ["Failed", "Running"]
    status = under.cluster.get_object("Job", NS, "crash")["status"]
    assert status["failed"] == 1 and status["active"] == 1 and "conditions" not in status
    container = pods[0].to_kube()["status"]["containerStatuses"][0]["state"]["terminated"]
    assert container["exitCode"] == 137 and container["reason"] == "Error"
    containers.exit(pods[1].name, 137)  # and again: past backoffLimit 1
    under.advance(10)
    status = under.cluster.get_object("Job", NS, "crash")["status"]
    assert status["failed"] == 2 and "active" not in status  # a 0 left out, as kube-apiserver leaves it
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [("FailureTarget", "BackoffLimitExceeded"),
                                                                         ("Failed", "BackoffLimitExceeded")]
    assert len(_pods_of(under, "crash")) == 2  # no more pods once it failed

    under.cluster.create_object(_tool_job("refused", {"backoffLimit": 1, "podFailurePolicy": {"rules": rules}}))
    under.advance(10)
    [pod] = _pods_of(under, "refused")
    containers.exit(pod.name, 2)  # what the program itself answered (bad input): the Job's outcome, at once
    under.advance(10)
    status = under.cluster.get_object("Job", NS, "refused")["status"]
    assert status["conditions"][-1]["type"] == "Failed" and status["conditions"][-1]["reason"] == "PodFailurePolicy"
    assert "failed with exit code 2 matching FailJob rule at index 1" in status["conditions"][-1]["message"]  # 1.32's words
    assert len(_pods_of(under, "refused")) == 1


def test_a_jobs_evicted_pod_is_sent_sigterm_and_replaced_once_it_has_ended_not_counted(under: Under) -> None:
    containers = Containers(under.sim)
    under.sim.use_runtime(containers)
    rules = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
             {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [130]}}]
    under.cluster.create_object(_tool_job("rotation", {"backoffLimit": 0, "podFailurePolicy": {"rules": rules}}))
    under.advance(10)
    [first] = _pods_of(under, "rotation")
    assert under.sim.evict(NS, first.name).allowed
    under.advance(30)  # SIGTERMed; still ending its step: not replaced while it runs (podReplacementPolicy Failed)
    assert containers.told == [("start", first.name), ("SIGTERM", first.name)]
    assert [p.name for p in _pods_of(under, "rotation")] == [first.name]
    assert under.cluster.get_object("Job", NS, "rotation")["status"]["terminating"] == 1
    containers.exit(first.name, 130)  # stopped at a safe point: 130, which FailJob names, but DisruptionTarget first
    under.advance(10)
    [second] = _pods_of(under, "rotation")
    assert second.name != first.name and second.phase == "Running"
    status = under.cluster.get_object("Job", NS, "rotation")["status"]
    assert status.get("failed", 0) == 0 and status["active"] == 1 and "conditions" not in status
    assert under.sim.evict(NS, second.name).allowed  # one that does not stop: SIGKILL once its grace period is over
    under.advance(119)
    assert containers.told[-1] == ("SIGTERM", second.name) and len(_pods_of(under, "rotation")) == 1
    under.advance(10)
    [third] = _pods_of(under, "rotation")
    assert third.name not in (first.name, second.name)
    assert containers.told[-3:] == [("SIGTERM", second.name), ("SIGKILL", second.name), ("start", third.name)]
    containers.exit(third.name, 0)
    under.advance(5)
    status = under.cluster.get_object("Job", NS, "rotation")["status"]
    assert status["succeeded"] == 1 and [c["type"] for c in status["conditions"]] == ["SuccessCriteriaMet", "Complete"]


def test_kubectl_logs_shows_what_a_container_the_runtime_ran_wrote(served: Served) -> None:
    sim = _sim()
    state = served.states["w"] = ClusterState(sim)
    served.kubeconfig.write_text(yaml.safe_dump(kubeconfig("test", served.url, list(served.states), "w")))
    containers = Containers(sim)
    sim.use_runtime(containers)
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not installed (.ci/run installs it)"

    def logs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([kubectl, "--kubeconfig", str(served.kubeconfig), "--context", "w", "logs", "-n", NS, *args],
                              capture_output=True, text=True, timeout=60)

    with served.cond:
        state.create_namespace({"metadata": {"name": NS}})
        sim.create_object(_tool_job("rotation", {}))
        sim.advance(1)
        state.tick()
    [pod] = [p for p in sim.list_pods(NS) if p.labels.get("job-name") == "rotation"]
    pending = logs(pod.name)
    assert pending.returncode == 1 and f'container "rotate" in pod "{pod.name}" is waiting to start' in pending.stderr
    with served.cond:
        sim.advance(10)
        state.tick()
        sim.evict(NS, pod.name)
        sim.advance(1)
    shown = logs(pod.name)
    assert shown.returncode == 0 and shown.stdout == f"start {pod.name}\nSIGTERM {pod.name}\n"
    assert logs(pod.name, "--tail", "1").stdout == f"SIGTERM {pod.name}\n"
    assert "not found" in logs("nobody").stderr


def test_a_jobs_selector_is_the_api_servers_to_make_and_then_fixed(under: Under) -> None:
    """As kube-apiserver: a Job is given a selector on its uid and its template the labels it selects (so
    `kubectl logs job/<name>` reads its own pod); a selector given without manualSelector is refused, one with it is
    kept and nothing is added; a selector is never changed afterwards."""
    template = {"metadata": {"labels": {"app": "batch"}, "annotations": {"sim.platformctl.io/run-seconds": "600"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}}
    made = under.cluster.create_object({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "own", "namespace": NS},
                                        "spec": {"template": template}})
    uid = made["metadata"]["uid"]
    assert made["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert made["spec"]["template"]["metadata"]["labels"] == {
        "app": "batch", "batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
        "batch.kubernetes.io/job-name": "own", "job-name": "own"}
    under.advance(10)
    assert [p.name for p in under.sim.list_pods(NS, f"batch.kubernetes.io/controller-uid={uid}")] == \
        [p.name for p in under.sim.list_pods(NS) if p.name.startswith("own-")] != []
    with pytest.raises(ApiRefused) as given:
        under.cluster.create_object({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "mine", "namespace": NS},
                                     "spec": {"selector": {"matchLabels": {"app": "batch"}}, "template": template}})
    assert given.value.status == 422 and "spec.selector" in str(given.value) and "not auto-generated" in str(given.value)
    manual = under.cluster.create_object({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "hand", "namespace": NS},
                                          "spec": {"manualSelector": True, "selector": {"matchLabels": {"app": "batch"}},
                                                   "template": template}})
    assert manual["spec"]["selector"] == {"matchLabels": {"app": "batch"}}
    assert manual["spec"]["template"]["metadata"]["labels"] == {"app": "batch"}
    changed = under.cluster.get_object("Job", NS, "own")
    changed["spec"]["selector"] = {"matchLabels": {"app": "batch"}}
    with pytest.raises(ApiRefused) as immutable:
        under.cluster.replace_object(changed)
    assert immutable.value.status == 422 and "spec.selector" in str(immutable.value)
