"""First light: before wave 1, one node per pool boots the new image, only the canaries' pods run on it, and the canary
gate judges it before any workload moves.

The gate is the real one (``e2e_canary.verdict.canary_gate`` over the state store) and the canaries are the real
node-pool canary (``e2e_canary.runner.Runner``), run once each time the gate is asked, as the demo runs them; what is
checked is the simulator's event log (which instances booted the new image, what was scheduled on them, what was
evicted), the node groups, and the run's report.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from e2e_canary.definitions import parse_canary
from e2e_canary.runner import Runner
from e2e_canary.verdict import Verdict, canary_gate
from platformctl.emulator import simulator as sim_events
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel import failpoints
from platformctl.kernel.cluster.model import LABEL_IMAGE
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import NEW, OLD, cluster
from tests.upgrade_service.rotation import NO_HARM, harm, new_image, service
from upgrade_service.journal.rotation import FIRST_LIGHT_KEY, control, read_state
from upgrade_service.planning.policy import parse_policy
from upgrade_service.running.execute import Executor
from upgrade_service.running.gate import CanaryVerdict, Question
from upgrade_service.running.run_types import EXIT_HALTED, Options, Outcome, Target
from upgrade_service.running.runs import abort_cluster

CANARY = parse_canary({"name": "node-pool", "kind": "node-pool", "podsPerArm": 5, "deadline": 120}, "node-pool")
POLICY = {"maxInFlight": 2, "healthGate": {"canary": {"window": "30m"}}, "firstLight": {"minResults": 10}}
POLL = 60.0  # the gate is asked (and the canary run) once a minute: a canary period


def serving(nodes: int = 4, max_size: int | None = None, pools: dict[str, int] | None = None) -> SimulatedCluster:
    pools = pools or {"general": nodes}
    sim = cluster(pools, max_size=max_size)
    for pool, count in pools.items():
        service(sim, f"web-{pool}", count, min_available=count - 1, node_selector={"eks.amazonaws.com/nodegroup": pool})
    sim.run_until_settled()
    new_image(sim)
    return sim


def gate(sim: SimulatedCluster, store: SQLiteStore) -> CanaryVerdict:
    runner = Runner("dev", "test", sim, store)
    judge = canary_gate(store, 1800.0)

    def ask(question: Question) -> Verdict:
        runner.run(CANARY)
        return judge(dataclasses.replace(question, now=sim.now()))

    return ask


def executor(sim: SimulatedCluster, tmp_path: Path, policy: dict[str, Any] | None = None) -> Executor:
    store = SQLiteStore(tmp_path / "state.db")
    return Executor(Target("test", sim, SimulatedNodeGroups(sim)), parse_policy(policy or POLICY, "policy.yaml"), store,
                    Options(stage="dev", canary=gate(sim, store), gate_poll_seconds=POLL))


def rotate(sim: SimulatedCluster, tmp_path: Path, policy: dict[str, Any] | None = None) -> Outcome:
    return executor(sim, tmp_path, policy).run()


def booted(sim: SimulatedCluster, image: str) -> list[str]:
    """The nodes that ever registered on ``image``, from the event log."""
    return [e.name for e in sim.events if e.kind == sim_events.NODE_ADDED and e.detail == image]


def scheduled_on(sim: SimulatedCluster, nodes: list[str]) -> list[tuple[float, str]]:
    """When, and in which namespace, every pod ever scheduled on ``nodes`` was (a canary's namespace is
    ``canary-<name>-<attempt>``)."""
    return [(e.time, e.namespace) for e in sim.events if e.kind == sim_events.POD_SCHEDULED and e.detail[1] in nodes]


def evictions(sim: SimulatedCluster) -> list[float]:
    return [e.time for e in sim.events if e.kind == sim_events.POD_EVICTED]


def test_a_bad_image_boots_one_node_per_pool_no_workload_moves_and_the_node_is_terminated(tmp_path: Path) -> None:
    sim = serving(pools={"general": 4, "batch": 3})
    sim.set_image_fault(NEW, None)  # its pods fail to start (CreateContainerError)
    outcome = rotate(sim, tmp_path)
    assert (outcome.status, outcome.exit_code) == ("halted", EXIT_HALTED), outcome.reason
    report = outcome.report
    assert report is not None and report["halted"]["reason"] == "first-light-fail"
    lit = report["first_light"]
    assert lit["verdict"] == "fail" and NEW in lit["reason"] and set(lit["nodes"]) == {"general", "batch"}
    assert all(f"{pool} ({node}, {NEW})" in lit["reason"] for pool, node in lit["nodes"].items())  # it names them
    new_nodes = booted(sim, NEW)
    assert sorted(new_nodes) == sorted(lit["nodes"].values())  # exactly one instance a pool booted it
    assert evictions(sim) == []  # no workload moved
    there = scheduled_on(sim, new_nodes)
    assert there and all(ns.startswith(f"{CANARY.namespace}-") for _, ns in there), there  # only the canaries' pods
    sim.advance(600)
    assert not [n for n in sim.list_nodes() if n.image == NEW]  # terminated, their capacity given back
    assert {p: sim.pool(p).desired for p in ("general", "batch")} == {"general": 4, "batch": 3}
    assert not any(n.unschedulable for n in sim.list_nodes()) and report["nodes_rotated"] == 0
    assert harm(sim) == NO_HARM


def test_a_bad_image_is_halted_within_two_canary_periods_of_its_node_turning_ready(tmp_path: Path) -> None:
    sim = serving()
    sim.set_image_fault(NEW, None)
    outcome = rotate(sim, tmp_path)
    ready = next(e.time for e in sim.events if e.kind == sim_events.NODE_READY and e.name in booted(sim, NEW))
    halted = read_state(SQLiteStore(tmp_path / "state.db"), "test").halted
    assert outcome.status == "halted" and halted is not None
    assert halted.at - ready <= 2 * (POLL + CANARY.deadline), halted.at - ready


def test_a_slow_image_is_halted_by_first_light_on_its_pods_startup(tmp_path: Path) -> None:
    sim = serving()
    sim.set_image_fault(NEW, 8.0)  # pods start, 8 s slower
    outcome = rotate(sim, tmp_path)
    assert outcome.report is not None and outcome.report["halted"]["reason"] == "first-light-fail", outcome.reason
    assert "pod_startup_seconds" in outcome.reason or "startup" in outcome.reason
    assert len(booted(sim, NEW)) == 1 and evictions(sim) == []


def test_a_good_image_passes_first_light_and_its_node_joins_the_pool_as_the_first_waves_capacity(tmp_path: Path) -> None:
    sim = serving()
    outcome = rotate(sim, tmp_path)
    assert outcome.status == "done", outcome.reason
    report = outcome.report
    assert report is not None and report["first_light"]["verdict"] == "pass"
    first = report["first_light"]["nodes"]["general"]
    # four nodes replaced by four on the new image: the first-light node is one of them, no extra instance
    assert len(booted(sim, NEW)) == 4 and sorted(n.image for n in sim.list_nodes()) == [NEW] * 4
    node = sim.get_node(first)
    assert not any(t.key == FIRST_LIGHT_KEY for t in node.taints) and not node.unschedulable
    judged = read_state(SQLiteStore(tmp_path / "state.db"), "test").first_light
    assert judged is not None and judged.judged is not None and judged.judged.at <= min(evictions(sim))
    # until its judgement only the canaries' pods ran on it; the workloads' came after, with the first wave
    before = [ns for t, ns in scheduled_on(sim, [first]) if t <= judged.judged.at]
    assert before and all(ns.startswith(f"{CANARY.namespace}-") for ns in before), before
    assert harm(sim) == NO_HARM and sim.pool("general").desired == 4


@pytest.mark.parametrize("strategy", ["surge", "replace"])
def test_in_a_full_group_first_light_replaces_the_least_disruptive_node_and_a_bad_image_still_boots_once(
        tmp_path: Path, strategy: str) -> None:
    sim = serving(max_size=4)
    service(sim, "kv", 1, kind="StatefulSet", annotations={"platformctl.io/rotation": "one-at-a-time",
                                                           "platformctl.io/settle-seconds": "60"})
    sim.run_until_settled()
    kv_node = next(p.node_name for p in sim.list_pods(namespace="app") if p.name.startswith("kv"))
    sim.set_image_fault(NEW, None)
    outcome = rotate(sim, tmp_path, {**POLICY, "strategy": strategy, "minZoneCapacityPercent": 75})
    assert outcome.report is not None and outcome.report["halted"]["reason"] == "first-light-fail", outcome.reason
    lit = outcome.report["first_light"]
    replaced = read_state(SQLiteStore(tmp_path / "state.db"), "test").first_light
    assert replaced is not None and replaced.started.replaces["general"] != kv_node  # not the one-at-a-time pod's node
    assert len(booted(sim, NEW)) == 1 and list(lit["nodes"].values()) == booted(sim, NEW)
    # the replaced node's pods were evicted under their budget and went to the old nodes, never to the new image
    moved = {e.detail[0] for e in sim.events if e.kind == sim_events.POD_EVICTED}
    assert len(moved) == 1 and all(ns.startswith(f"{CANARY.namespace}-") for _, ns in scheduled_on(sim, booted(sim, NEW)))
    sim.advance(600)
    assert not [n for n in sim.list_nodes() if n.image == NEW] and sim.pool("general").desired == 3  # one short, said
    assert harm(sim) == NO_HARM


@pytest.mark.parametrize("strategy", ["surge", "replace"])
def test_in_a_full_group_a_good_image_passes_first_light_and_the_rotation_finishes(tmp_path: Path, strategy: str) -> None:
    sim = serving(max_size=4)
    service(sim, "kv", 2, kind="StatefulSet", annotations={"platformctl.io/rotation": "one-at-a-time",
                                                           "platformctl.io/settle-seconds": "60"})
    sim.run_until_settled()
    outcome = rotate(sim, tmp_path, {**POLICY, "strategy": strategy, "minZoneCapacityPercent": 75})
    assert outcome.status == "done", outcome.reason
    assert outcome.report is not None and outcome.report["first_light"]["verdict"] == "pass"
    assert sorted(n.image for n in sim.list_nodes()) == [NEW] * 4 and len(booted(sim, NEW)) == 4
    assert harm(sim) == NO_HARM and sim.pool("general").desired == 4


def test_first_light_needs_a_health_gate_said_before_anything_is_touched() -> None:
    from platformctl.kernel.errors import PlatformError

    with pytest.raises(PlatformError) as raised:
        parse_policy({"firstLight": {}}, "policy.yaml")
    assert raised.value.field == "firstLight" and "healthGate" in str(raised.value)


@pytest.mark.parametrize("killed_at", ["call:set-desired", "intent:taint", "call:taint", "wait:first-light",
                                       "call:untaint", "call:terminate"])
def test_a_first_light_killed_at_any_step_and_run_again_boots_no_second_node(tmp_path: Path, killed_at: str) -> None:
    sim = serving()
    bad = killed_at == "call:terminate"  # a failing first light is killed while it puts its node out
    if bad:
        sim.set_image_fault(NEW, None)
    with failpoints.killed_at(killed_at), pytest.raises(failpoints.Killed):
        rotate(sim, tmp_path)
    sim.advance(60)
    outcome = rotate(sim, tmp_path)
    if bad:  # the judgement stands: halted again, the node put out
        assert outcome.report is not None and outcome.report["halted"]["reason"] == "first-light-fail", outcome.reason
        sim.advance(600)
        assert len(booted(sim, NEW)) == 1 and not [n for n in sim.list_nodes() if n.image == NEW]
        assert sim.pool("general").desired == 4
    else:
        assert outcome.status == "done", outcome.reason
        assert len(booted(sim, NEW)) == 4, booted(sim, NEW)  # the first-light node once, then the waves' three
    assert harm(sim) == NO_HARM


def abort(sim: SimulatedCluster, tmp_path: Path) -> SQLiteStore:
    """`rotate abort` of the killed run; then its first-light node is gone and its group back to its size."""
    store = SQLiteStore(tmp_path / "state.db")
    control(store, "test", "abort", "operator", "not tonight", sim.now())
    result = abort_cluster(store, "test", lambda: Target("test", sim, SimulatedNodeGroups(sim)), "operator", wait=False)
    assert result.done, result
    sim.advance(600)
    assert not [n for n in sim.list_nodes() if n.image == NEW] and sim.pool("general").desired == 4
    return store


def test_an_abort_during_first_light_leaves_no_first_light_node(tmp_path: Path) -> None:
    sim = serving()
    with failpoints.killed_at("wait:first-light"), pytest.raises(failpoints.Killed):
        rotate(sim, tmp_path)
    store = abort(sim, tmp_path)
    assert read_state(store, "test").status == "aborted"
    assert [n.image for n in sim.list_nodes()] == [OLD] * 4


def test_pods_that_landed_on_a_first_light_node_in_a_crash_before_its_taint_are_evicted_before_it_is_put_out(
        tmp_path: Path) -> None:
    sim = serving()
    with failpoints.killed_at("call:set-desired"), pytest.raises(failpoints.Killed):
        rotate(sim, tmp_path)  # killed with the group raised, before the new node was tainted
    sim.advance(300)  # the node boots untainted while nobody runs: a workload lands on it
    service(sim, "late", 2, node_selector={LABEL_IMAGE: NEW}, min_available=0)  # pinned to the new image
    sim.run_until_settled()
    fresh = booted(sim, NEW)
    assert len(fresh) == 1
    on_it = [p for p in sim.list_pods(node_name=fresh[0]) if p.namespace == "app"]
    assert len(on_it) == 2
    abort(sim, tmp_path)
    evicted = {e.name for e in sim.events if e.kind == sim_events.POD_EVICTED}
    assert {p.name for p in on_it} <= evicted  # moved through the eviction API, never lost with the node
    assert harm(sim) == NO_HARM


def test_first_light_that_reads_its_gates_answer_only_after_the_timeout_asks_again_and_judges_by_that(
        tmp_path: Path) -> None:
    """The rotation asked the gate in time (too few results yet: inconclusive) and then stalled past firstLight.timeout
    while the canaries went on running. The answer it holds is from before the deadline, so it asks once more and
    judges the results the canaries had by then. Before, it halted "stayed inconclusive" on the stale answer."""
    sim = serving()
    store = SQLiteStore(tmp_path / "state.db")
    runner = Runner("dev", "test", sim, store)
    judge = canary_gate(store, 1800.0)
    answers: list[str] = []

    def ask(question: Question) -> Verdict:
        runner.run(CANARY)
        verdict = judge(dataclasses.replace(question, now=sim.now()))
        answers.append(verdict.verdict)
        if len(answers) == 1:  # the process stalls for 15 minutes; the canary runner does not
            for _ in range(15):
                sim.advance(POLL)
                runner.run(CANARY)
        return verdict

    policy = {**POLICY, "firstLight": {"minResults": 10, "timeout": "10m"}}
    outcome = Executor(Target("test", sim, SimulatedNodeGroups(sim)), parse_policy(policy, "policy.yaml"), store,
                       Options(stage="dev", canary=ask, gate_poll_seconds=POLL)).run()
    assert answers[:2] == ["inconclusive", "pass"]  # first light's two asks (the waves' gates ask after it)
    assert outcome.status == "done", outcome.reason
    assert outcome.report is not None and outcome.report["first_light"]["verdict"] == "pass"
    assert harm(sim) == NO_HARM and sorted(n.image for n in sim.list_nodes()) == [NEW] * 4
