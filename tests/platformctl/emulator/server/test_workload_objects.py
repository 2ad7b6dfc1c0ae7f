"""Deployments, Jobs, CronJobs and DaemonSets through the cluster interface: the same calls against the simulator
in process and against the local region's API over HTTP (the official client), judged by the pods the
simulator runs. A rolling update keeps to maxSurge and maxUnavailable at every second of it."""

from __future__ import annotations

import copy
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
    assert job["succeeded"] == 3 and job["conditions"][0]["type"] == "Complete"
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
