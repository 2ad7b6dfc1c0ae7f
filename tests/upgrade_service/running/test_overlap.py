"""Waves that overlap: the next wave drains while earlier waves' replacements boot, their pods start and their
one-at-a-time workloads settle, with every limit holding at every instant of the simulator's event log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from platformctl.emulator import simulator as sim_events
from platformctl.emulator.invariants import one_at_a_time_breaches
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import NEW, OLD, cluster
from tests.upgrade_service.rotation import NO_HARM, harm, new_image, overlapping_waves, rotate, service
from upgrade_service.journal.rotation import read_state

REPLACE = {"strategy": "replace", "maxInFlight": 4, "minZoneCapacityPercent": 50,
           "durations": {"nodeBootSeconds": 120, "podStartSeconds": 10}}
ONE_PER_NODE = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "kv"}}, "topologyKey": "kubernetes.io/hostname"}]}}}


def replace_cluster() -> SimulatedCluster:
    """Twelve nodes, six with a pod of a one-at-a-time store (never two on a node): a wave takes one of them at most,
    so waves are smaller than maxInFlight and the replacements' boot is what overlapping saves."""
    sim = cluster({"general": 12})
    service(sim, "web", 16, min_available=14)
    service(sim, "kv", 6, kind="StatefulSet", cpu=200, spec=ONE_PER_NODE,
            annotations={"platformctl.io/rotation": "one-at-a-time"})
    sim.run_until_settled()
    new_image(sim)
    return sim


def most_out_of_service(sim: SimulatedCluster, since: float) -> int:
    """The most nodes out of service at any instant from ``since``, from the event log: nodes cordoned and not yet
    gone, and new nodes that joined and are not Ready yet."""
    cordoned: set[str] = set()
    booting: set[str] = set()
    most = 0
    for e in sim.events:
        if e.kind == sim_events.NODE_ADDED and e.time >= since:  # the cluster's first nodes join Ready
            booting.add(e.name)
        elif e.kind == sim_events.NODE_READY:
            booting.discard(e.name)
        elif e.kind == sim_events.NODE_CORDONED:
            cordoned.add(e.name)
        elif e.kind == sim_events.NODE_DELETED:
            cordoned.discard(e.name)
            booting.discard(e.name)
        if e.time >= since:
            most = max(most, len(cordoned) + len(booting))
    return most


def overlapping(tmp_path: Path) -> int:
    return overlapping_waves(SQLiteStore(tmp_path / "state.db"), "test")


def run(tmp_path: Path, policy: dict[str, Any]) -> tuple[SimulatedCluster, float, float]:
    sim = replace_cluster()
    start = sim.now()
    outcome = rotate(sim, tmp_path, policy)
    assert outcome.status == "done", outcome.reason
    assert harm(sim) == NO_HARM
    assert not [n for n in sim.list_nodes() if n.image == OLD] and all(n.image == NEW for n in sim.list_nodes())
    return sim, start, sim.now() - start


def test_replace_waves_drain_while_earlier_replacements_boot_within_max_in_flight_at_every_instant(tmp_path: Path) -> None:
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    sim, start, overlapped = run(tmp_path / "on", REPLACE)
    assert overlapping(tmp_path / "on") >= 2
    assert most_out_of_service(sim, start) <= REPLACE["maxInFlight"]
    report = read_state(SQLiteStore(tmp_path / "on" / "state.db"), "test")
    assert report.first_plan is not None
    # The same cluster, each wave finished before the next: what overlapping saves, in the cluster's own time.
    _, _, one_by_one = run(tmp_path / "off", {**REPLACE, "overlapWaves": False})
    assert overlapping(tmp_path / "off") == 0
    assert overlapped < 0.8 * one_by_one, (overlapped, one_by_one)
    # The plan said so beforehand, within the executor's own time.
    estimate = report.first_plan.estimated_seconds
    assert 0.85 <= overlapped / estimate <= 1.15, (overlapped, estimate)


def test_a_one_at_a_time_workload_moved_by_an_open_wave_keeps_its_next_pod_until_the_last_has_settled(tmp_path: Path) -> None:
    sim = cluster({"general": 6})
    service(sim, "web", 12, min_available=10)
    service(sim, "kv", 6, kind="StatefulSet", start=30, cpu=200,
            annotations={"platformctl.io/rotation": "one-at-a-time", "platformctl.io/settle-seconds": "200"})
    sim.run_until_settled()
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    assert overlapping(tmp_path) >= 1  # the waves did overlap
    kv = [e for e in sim.events if e.namespace == "app" and e.name.startswith("kv-")]
    evicted = [e for e in kv if e.kind == sim_events.POD_EVICTED]
    assert len(evicted) == 6
    # Each kv pod left only after the one before it was Ready again and had settled, whichever wave moved it.
    for before, after in zip(evicted, evicted[1:], strict=False):
        back = min(e.time for e in kv if e.kind == sim_events.POD_READY and e.time > before.time)
        assert after.time >= back + 200, (before.name, after.name)


def test_under_surge_the_next_waves_new_nodes_boot_while_this_wave_drains_and_every_one_is_given_back(tmp_path: Path) -> None:
    def surge_cluster() -> SimulatedCluster:
        sim = cluster({"general": 8}, boot=180)
        service(sim, "web", 16, min_available=14, start=20)
        sim.run_until_settled()
        new_image(sim)
        return sim

    took = {}
    for overlap in (True, False):
        sim = surge_cluster()
        start = sim.now()
        folder = tmp_path / str(overlap)
        folder.mkdir()
        outcome = rotate(sim, folder, {"maxInFlight": 2, "overlapWaves": overlap})
        assert outcome.status == "done" and harm(sim) == NO_HARM
        took[overlap] = sim.now() - start
        added = [e for e in sim.events if e.kind == sim_events.NODE_ADDED and e.time >= start]
        assert len(added) == 8  # one new node for each old one, never one more
        assert sim.pool("general").desired == 8  # what was raised, ahead or not, was given back
        if overlap:
            # A wave whose new nodes were raised with the wave before it drains as it starts: no boot to wait for.
            state = read_state(SQLiteStore(folder / "state.db"), "test")
            evicted = [e.time for e in sim.events if e.kind == sim_events.POD_EVICTED]
            waits = [min(t for t in evicted if t >= w.started.at) - w.started.at for w in state.waves.values()]
            assert any(w.started.groups["general"].ahead for w in state.waves.values())
            assert waits[0] >= 180 and min(waits) < 180, waits
    assert took[True] < 0.8 * took[False], took


def test_a_wave_whose_pods_are_back_and_only_settle_holds_nothing_but_its_own_workloads_next_pods(tmp_path: Path) -> None:
    # The system pool (first, by poolOrder) carries a one-at-a-time store that settles 900 s after each move; the
    # general pool's first wave may start once system's last wave has its new node Ready and its pods back, without
    # waiting out that settle time, which no pod of general is subject to.
    sim = cluster({"system": 2, "general": 2})
    system = {"eks.amazonaws.com/nodegroup": "system"}
    service(sim, "kv", 2, kind="StatefulSet", start=30, cpu=3000, node_selector=system,
            annotations={"platformctl.io/rotation": "one-at-a-time", "platformctl.io/settle-seconds": "900"})
    service(sim, "web", 2, cpu=3000, node_selector={"eks.amazonaws.com/nodegroup": "general"}, min_available=1)
    sim.run_until_settled()
    new_image(sim)
    general = {n.name for n in sim.list_nodes() if n.labels["eks.amazonaws.com/nodegroup"] == "general"}
    before = sim.list_pods()
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2, "poolOrder": {"general": ["system"]}})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    first_general = min(e.time for e in sim.events if e.kind == sim_events.NODE_CORDONED and e.name in general)
    kv = [e for e in sim.events if e.namespace == "app" and e.name.startswith("kv-")]
    evicted = [e.time for e in kv if e.kind == sim_events.POD_EVICTED]
    back = max(e.time for e in kv if e.kind == sim_events.POD_READY and e.time > max(evicted))
    assert len(evicted) == 2 and evicted[1] >= min(e.time for e in kv if e.kind == sim_events.POD_READY
                                                   and e.time > evicted[0]) + 900  # the store settled between moves
    assert back <= first_general < back + 120  # poolOrder held; the settle did not hold general
    assert one_at_a_time_breaches(sim.events, before, lambda p: 900.0 if p.name.startswith("kv-") else None) == []
    assert sim.now() <= back + 900 + 30  # the run ended once the store's last move had settled
