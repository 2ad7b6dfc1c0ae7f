"""Pod startup latency and its phases, read from pods as the local region's API serves them (slow-start on one
image), and from pods that never start or were evicted."""

from __future__ import annotations

from typing import Any

from e2e_canary.measure import NotStarted, Startup, startup
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.model import Container, Pod, Resources, parse_pod
from tests import clusters


def cluster() -> SimulatedCluster:
    return clusters.cluster({"old": 1, "new": 1}, images={"old": "ami-old", "new": "ami-new"}, boot=180.0, name="c")


def pod(name: str, pool: str) -> Pod:
    return Pod("canary", name, "", labels={"app": name}, node_selector={"eks.amazonaws.com/nodegroup": pool},
               containers=(Container("main", "pause", Resources(10, 1 << 20)),), requests=Resources(10, 1 << 20),
               annotations={"sim.platformctl.io/start-seconds": "2"})


def test_phases_from_the_pod_as_the_api_shows_it_and_a_slow_image_is_slower() -> None:
    sim = cluster()
    sim.set_image_fault("ami-new", 30.0)
    sim.create_pod(pod("a", "old"))
    sim.create_pod(pod("b", "new"))
    sim.advance(60)
    # Read back through the API's own form (what a live cluster's client parses), not the simulator's object.
    old, new = (parse_pod(sim.get_pod("canary", n).to_kube()) for n in ("a", "b"))
    a, b = startup(old), startup(new)
    assert isinstance(a, Startup) and isinstance(b, Startup)
    # A start varies about the pod's 2 s (whole seconds, as the API stamps them); the slow image adds its 30 s.
    assert 1 <= a.seconds <= 4 and a.scheduled == 0 and a.started == a.seconds and a.ready == 0
    assert 31 <= b.seconds <= 34 and b.started == b.seconds
    assert startup(old, observed_running=old.created + 5).seconds == 5  # the watch saw it later: the SLI's clock
    assert startup(old, pull_seconds=0.5).seconds == a.seconds - 0.5  # image pulling is not the platform's latency


def test_a_pod_that_never_starts_has_a_reason_not_a_latency_and_evicted_is_disrupted() -> None:
    sim = cluster()
    sim.set_image_fault("ami-new", None)
    sim.create_pod(pod("stuck", "new"))
    sim.create_pod(pod("gone", "old"))
    sim.advance(60)
    assert startup(parse_pod(sim.get_pod("canary", "stuck").to_kube())) == NotStarted("waiting: CreateContainerError")
    sim.evict("canary", "gone")
    assert startup(parse_pod(sim.get_pod("canary", "gone").to_kube())) == NotStarted("disrupted", "EvictionByEvictionAPI")
    assert startup(Pod("canary", "p", "u")) == NotStarted("unscheduled")


def test_the_disruption_target_condition_says_who_took_the_pod_away() -> None:
    """Evicted by a drain and deleted by the taint manager are both the platform's doing, told apart by the
    pod's DisruptionTarget reason as the API shows it."""
    sim = cluster()
    sim.create_pod(pod("drained", "old"))
    sim.create_pod(pod("stranded", "new"))
    sim.advance(60)
    sim.evict("canary", "drained")

    def target(name: str) -> list[dict[str, Any]]:
        return [c for c in sim.get_pod("canary", name).to_kube()["status"]["conditions"] if c["type"] == "DisruptionTarget"]

    assert [c["reason"] for c in target("drained")] == ["EvictionByEvictionAPI"]
    node = sim.get_pod("canary", "stranded").node_name
    assert node is not None and target("stranded") == []
    sim.stop_kubelet(node)
    sim.advance(400)  # the node monitor's grace, then the taint manager after the default 300 s toleration
    assert [c["reason"] for c in target("stranded")] == ["DeletionByTaintManager"]
    seen = parse_pod(sim.get_pod("canary", "stranded").to_kube())
    assert startup(seen) == NotStarted("disrupted", "DeletionByTaintManager")
