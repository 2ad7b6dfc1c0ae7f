"""A run that died leaves work half done: the next run, or an abort, finishes it from the journal and the world.

The executor is stopped at a failpoint by ``failpoints.killed_at`` (in process, a ``BaseException`` stands in for
SIGKILL: the run stops where it stands, and nothing it would journal afterwards is written). What is checked is
what an operator sees: the simulator's event log, the nodes, and the journal through ``rotate status``'s fold.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from platformctl.emulator import simulator as sim_events
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.kernel import failpoints
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import cluster
from tests.upgrade_service.rotation import NO_HARM, executor, harm, new_image, service
from upgrade_service.journal import rotation as j
from upgrade_service.running.run_types import TAINT, Target
from upgrade_service.running.runs import abort_cluster

SETTLE = 300
ONE_AT_A_TIME = {"platformctl.io/rotation": "one-at-a-time", "platformctl.io/settle-seconds": str(SETTLE)}


def kv_cluster():
    """Two nodes, a StatefulSet of two one-at-a-time replicas (one a node) that settles 300 s after each move."""
    sim = cluster({"general": 2})
    service(sim, "kv", 2, kind="StatefulSet", start=20, annotations=ONE_AT_A_TIME)
    sim.run_until_settled()
    assert len({p.node_name for p in sim.list_pods(namespace="app")}) == 2
    new_image(sim)
    return sim


def evictions_settled(sim) -> list[tuple[float, float]]:
    """For each eviction of a kv pod after the first: (when the previous one's successor was Ready, when it came)."""
    evicted = [(e.time, e.name) for e in sim.events if e.kind == sim_events.POD_EVICTED]
    ready = [(e.time, e.name) for e in sim.events if e.kind == sim_events.POD_READY]
    out = []
    for (before, pod), (after, _) in zip(evicted, evicted[1:], strict=False):
        back = min(t for t, name in ready if name == pod and t > before)
        out.append((back, after))
    return out


@pytest.mark.parametrize("killed_at", ["call:evict", "drained", "phase:drain-done"])
def test_a_resumed_run_keeps_a_one_at_a_time_workloads_settle_time(tmp_path: Path, killed_at: str) -> None:
    sim = kv_cluster()
    with failpoints.killed_at(killed_at), pytest.raises(failpoints.Killed):
        executor(sim, tmp_path, {"maxInFlight": 1}).run()
    sim.advance(60)  # the scheduler restarts the job a minute later
    outcome = executor(sim, tmp_path, {"maxInFlight": 1}).run()
    assert outcome.status == "done" and harm(sim) == NO_HARM
    pairs = evictions_settled(sim)
    assert len(pairs) == 1
    back, next_eviction = pairs[0]
    assert next_eviction >= back + SETTLE, f"the second pod went {next_eviction - back:.0f} s after the first was back"


@pytest.mark.parametrize("killed_at", ["call:evict", "drained", "phase:drain-done"])
def test_a_run_journalled_when_a_rule_held_its_namespace_resumed_by_one_that_holds_each_controller_keeps_the_settle(
        tmp_path: Path, killed_at: str) -> None:
    # A run journals its one-at-a-time workloads by key: a rule's used to be the rule in the namespace, and a run
    # killed then and resumed by a platformctl that keys each controller on its own must still hold the next pod.
    sim = kv_cluster()
    rule = {"selector": {"matchLabels": {"app": "kv"}}, "mode": "one-at-a-time", "settleSeconds": SETTLE}
    with failpoints.killed_at(killed_at), pytest.raises(failpoints.Killed):
        executor(sim, tmp_path, {"maxInFlight": 1, "workloadRules": [{**rule, "scope": "namespace"}]}).run()
    journalled = j.read_state(SQLiteStore(tmp_path / "state.db"), "test")
    assert {w for wave in journalled.waves.values() for w in (*wave.in_flight, *wave.settling)} <= \
        {"workloadRules[0] in namespace app"}
    sim.advance(60)
    outcome = executor(sim, tmp_path, {"maxInFlight": 1, "workloadRules": [rule]}).run()
    assert outcome.status == "done" and harm(sim) == NO_HARM
    pairs = evictions_settled(sim)
    assert len(pairs) == 1
    back, next_eviction = pairs[0]
    assert next_eviction >= back + SETTLE, f"the second pod went {next_eviction - back:.0f} s after the first was back"


def test_abort_after_a_kill_between_a_cordon_and_its_record_leaves_no_node_cordoned(tmp_path: Path) -> None:
    sim = cluster({"general": 4})
    service(sim, "web", 8, min_available=6)
    sim.run_until_settled()
    new_image(sim)
    store = SQLiteStore(tmp_path / "state.db")
    with failpoints.killed_at("call:cordon", 2), pytest.raises(failpoints.Killed):
        executor(sim, tmp_path, {"maxInFlight": 2}).run()
    cordoned = [n.name for n in sim.list_nodes() if n.unschedulable]
    state = j.read_state(store, "test")
    assert len(cordoned) == 2 and len(state.cordoned) == 1  # the journal knows of one: the second was never confirmed
    assert any(i["op"] == "cordon" for i in state.pending.values())
    j.control(store, "test", "abort", "tester", "wrong image", sim.now())
    result = abort_cluster(store, "test", lambda: Target("test", sim, SimulatedNodeGroups(sim)), "tester", wait=False)
    assert result.done and result.held == [], result
    assert not any(n.unschedulable or TAINT in n.taints for n in sim.list_nodes())
    after = j.read_state(store, "test")
    assert not after.open and not after.pending and after.cordoned == set() and after.tainted == set()
    assert harm(sim) == NO_HARM


def test_abort_while_a_dead_runs_lease_is_live_says_when_or_waits_for_it(tmp_path: Path) -> None:
    from platformctl.kernel.state.lease import LeaseKeeper

    sim = cluster({"general": 2})
    sim.run_until_settled()
    new_image(sim)
    store = SQLiteStore(tmp_path / "state.db")
    with failpoints.killed_at("call:cordon", 1), pytest.raises(failpoints.Killed):
        executor(sim, tmp_path, {"maxInFlight": 1}).run()
    dead = LeaseKeeper(store, j.stream_of("test"), "dead-run", 1.0)
    dead.acquire()
    dead._stop.set()  # it stops renewing, as a killed process does
    j.control(store, "test", "abort", "tester", "", sim.now())
    connect = lambda: Target("test", sim, SimulatedNodeGroups(sim))  # noqa: E731
    told = abort_cluster(store, "test", connect, "tester", wait=False)
    assert not told.done and "dead-run" in told.result and "lapses at" in told.result
    assert told.exit_code == 1 and sum(n.unschedulable for n in sim.list_nodes()) == 1
    waited = abort_cluster(store, "test", connect, "tester", wait=True, poll=0.05)
    assert waited.done and not any(n.unschedulable or TAINT in n.taints for n in sim.list_nodes())


def test_a_control_is_told_by_its_typed_action_and_a_word_this_version_does_not_know_is_not_acted_on(
        tmp_path: Path) -> None:
    """Pause, resume and abort are three actions (each its own, in a set or a comparison); a control record whose action
    is missing or unknown (a newer writer's) leaves the run as it was instead of stopping the journal's readers."""
    from upgrade_service.journal.records import ControlAction

    assert len({ControlAction.PAUSE, ControlAction.RESUME, ControlAction.ABORT}) == 3
    assert ControlAction.PAUSE != ControlAction.ABORT and ControlAction("abort") is ControlAction.ABORT
    store = SQLiteStore(tmp_path / "state.db")
    j.control(store, "test", ControlAction.PAUSE, "tester", "look first", 1.0)
    paused = j.read_state(store, "test").paused
    assert paused is not None and paused.action is ControlAction.PAUSE and paused.by == "tester"
    store.append(j.stream_of("test"), {"kind": "control", "at": 2.0, "action": "hibernate", "by": "newer"})
    store.append(j.stream_of("test"), {"kind": "control", "at": 3.0, "by": "older"})
    assert j.read_state(store, "test").paused == paused
    j.control(store, "test", ControlAction.RESUME, "tester", "", 4.0)
    assert j.read_state(store, "test").paused is None
