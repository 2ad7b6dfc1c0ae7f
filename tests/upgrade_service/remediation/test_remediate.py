"""Node remediation against a simulated cluster whose pools are its auto scaling groups.

Faults are injected the way they show on a real cluster (the simulator's kubelet stops posting, a
condition turns True); what is asserted is what an operator would see: the event log (cordons,
evictions, deletions, nodes gone), the nodes afterwards, and the records in the state store that
``remediate status`` reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from platformctl.emulator import simulator as sim_events
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import cluster
from tests.upgrade_service.rotation import NO_HARM, events, harm, service
from upgrade_service.journal import rotation as rj
from upgrade_service.journal.remediation import read_state
from upgrade_service.remediation.health import assess
from upgrade_service.remediation.policy import parse_remediation_policy
from upgrade_service.remediation.remediate import EXIT_FAILED, EXIT_OK, Outcome, Remediator, run


def remediate(sim: SimulatedCluster, tmp_path: Path, policy: dict[str, Any] | None = None) -> Outcome:
    store = SQLiteStore(tmp_path / "state.db")
    return run("test", sim, SimulatedNodeGroups(sim), parse_remediation_policy(policy or {}, "remediation.yaml"), store,
               "tester")


def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "state.db")


def busy(nodes: int = 5, replicas: int = 10) -> SimulatedCluster:
    sim = cluster({"general": nodes})
    service(sim, "web", replicas, min_available=replicas - 2)
    sim.run_until_settled()
    return sim


def with_pods(sim: SimulatedCluster) -> str:
    return max(sim.list_nodes(), key=lambda n: len(sim.list_pods(node_name=n.name))).name


def test_a_notready_node_is_replaced_once_past_its_threshold_without_harm(tmp_path: Path) -> None:
    sim = busy()
    broken = with_pods(sim)
    assert sim.list_pods(node_name=broken)
    sim.stop_kubelet(broken)
    sim.advance(120)
    node = sim.get_node(broken)
    assert node.condition("Ready").status == "Unknown" and not node.ready  # the node controller's verdict
    assert {t.key for t in node.taints} == {"node.kubernetes.io/unreachable"}
    assert all(not p.ready for p in sim.list_pods(node_name=broken))  # marked not Ready, still there
    early = remediate(sim, tmp_path)
    assert early.exit_code == EXIT_OK and not early.remediated
    assert [p["subject"] for p in early.pending] == [broken]
    sim.advance(260)  # past unhealthyAfterSeconds 300 from when Ready went Unknown (50 s after the kubelet stopped)
    outcome = remediate(sim, tmp_path)
    assert (outcome.status, outcome.exit_code) == ("ok", EXIT_OK), outcome.reason
    assert [r["result"] for r in outcome.remediated] == ["replaced"]
    replacement = outcome.remediated[0]["replacement"]
    assert broken not in {n.name for n in sim.list_nodes()}
    assert sim.get_node(replacement).ready
    assert harm(sim) == NO_HARM
    happened = events(sim)
    assert happened[sim_events.NODE_CORDONED] == 1 and happened[sim_events.NODE_DELETED] == 1
    sim.run_until_settled()
    assert sum(p.ready for p in sim.list_pods(namespace="app")) == 10
    state = read_state(store(tmp_path), "test")
    assert len(state.started_at) == 1 and not state.open
    assert [r["result"] for r in state.recent if r["kind"] == "remediation-finished"] == ["replaced"]


def test_before_the_taint_manager_acts_unready_pods_leave_through_the_eviction_api(tmp_path: Path) -> None:
    sim = busy()
    broken = with_pods(sim)
    on_it = {p.uid for p in sim.list_pods(node_name=broken)}
    sim.stop_kubelet(broken)
    sim.advance(180)  # Ready Unknown for 130 s; the taint manager would act at 300
    outcome = remediate(sim, tmp_path, {"conditions": [{"type": "Ready", "unhealthyAfterSeconds": 120}]})
    assert [r["result"] for r in outcome.remediated] == ["replaced"], outcome.reason
    evicted = {e.detail[0] for e in sim.events if e.kind == sim_events.POD_EVICTED}
    assert on_it <= evicted  # every pod of the node went through the eviction API
    assert not any(e.kind == sim_events.POD_TAINT_EVICTED for e in sim.events)
    assert harm(sim) == NO_HARM


def test_too_many_broken_at_once_opens_the_breaker_and_touches_nothing(tmp_path: Path) -> None:
    sim = busy(nodes=5)
    names = [n.name for n in sim.list_nodes()][:2]  # 40% of the cluster
    for name in names:
        sim.stop_kubelet(name)
    sim.advance(400)
    before = len(sim.events)
    outcome = remediate(sim, tmp_path)
    assert (outcome.status, outcome.exit_code) == ("breaker-open", EXIT_FAILED)
    assert "cluster: 2 of 5 nodes unhealthy, more than maxUnhealthy 20% (1)" in outcome.reason
    touched = [e for e in sim.events[before:] if e.kind in (sim_events.NODE_CORDONED, sim_events.POD_EVICTED, sim_events.NODE_DELETED)]
    assert touched == []
    state = read_state(store(tmp_path), "test")
    assert state.incident is not None and sorted(state.incident.subjects) == sorted(names)
    assert all("Ready Unknown" in u["reason"] for u in state.incident.unhealthy)
    again = remediate(sim, tmp_path)  # still open: exit 1 again, the incident recorded once
    assert again.exit_code == EXIT_FAILED
    assert sum(1 for r in read_state(store(tmp_path), "test").recent if r["kind"] == "breaker-open") == 1
    sim.restore_node(names[1])  # one comes back: one broken node is a node problem again
    cleared = remediate(sim, tmp_path)
    assert cleared.exit_code == EXIT_OK and [r["subject"] for r in cleared.remediated] == [names[0]]
    assert read_state(store(tmp_path), "test").incident is None


def test_a_zone_failing_together_is_an_az_event(tmp_path: Path) -> None:
    sim = cluster({"a": 4}, zone="us-east-1a")
    from platformctl.emulator.simulator import NodePoolSpec

    for zone in ("us-east-1b", "us-east-1c"):
        sim.add_pool(NodePoolSpec(f"p{zone[-1]}", zone, "m6i.2xlarge", "ami-0old", 4, 120, "general", {}, (), "us-east-1"))
    sim.run_until_settled()
    zone_a = [n.name for n in sim.list_nodes() if n.zone == "us-east-1a"]
    for name in zone_a[:2]:  # 2 of 12 in the cluster (under 20%), but half of one zone
        sim.stop_kubelet(name)
    sim.advance(400)
    outcome = remediate(sim, tmp_path, {"maxUnhealthy": "20%", "maxUnhealthyPerZone": "30%"})
    assert outcome.status == "breaker-open"
    assert "zone us-east-1a: 2 of 4 nodes unhealthy, more than maxUnhealthyPerZone 30% (1)" in outcome.reason


def test_the_hourly_limit_holds_across_separate_runs(tmp_path: Path) -> None:
    sim = busy(nodes=8, replicas=8)
    policy = {"maxPerHour": 2, "maxUnhealthy": "50%", "maxUnhealthyPerZone": None,
              "conditions": [{"type": "DiskPressure", "unhealthyAfterSeconds": 60}]}
    replaced = []
    start = sim.now()
    while sim.now() < start + 3600:
        healthy = [n.name for n in sim.list_nodes() if n.ready and n.condition("DiskPressure").status == "False"]
        sim.set_node_condition(healthy[0], "DiskPressure", "True", "KubeletHasDiskPressure")  # one more every 10 minutes
        sim.advance(600)
        outcome = remediate(sim, tmp_path, policy)  # a new process each time: the count lives in the store
        replaced += [r["subject"] for r in outcome.remediated if r["result"] == "replaced"]
        assert outcome.exit_code == EXIT_OK
    assert len(replaced) == 2
    state = read_state(store(tmp_path), "test")
    skips = [r for r in state.recent if r["kind"] == "skipped"]
    assert skips and all(r["code"] == "rate-limit" for r in skips)
    assert "maxPerHour 2" in skips[0]["why"]
    assert harm(sim) == NO_HARM


def test_a_node_in_a_rotation_wave_is_left_to_the_rotation(tmp_path: Path) -> None:
    sim = busy()
    broken = with_pods(sim)
    s = store(tmp_path)
    s.append(rj.stream_of("test"), {"kind": rj.RUN_STARTED, "run": "r1", "at": sim.now()})
    s.append(rj.stream_of("test"), {"kind": rj.WAVE_STARTED, "run": "r1", "wave": 1, "nodes": [broken],
                                    "instances": {broken: sim.get_node(broken).instance_id}, "at": sim.now()})
    sim.stop_kubelet(broken)
    sim.advance(400)
    outcome = remediate(sim, tmp_path)
    assert outcome.exit_code == EXIT_OK and not outcome.remediated
    assert [d["why"] for d in outcome.decisions] == ["a rotation is handling it (wave 1 of rotation r1)"]
    assert events(sim)[sim_events.NODE_CORDONED] == 0


def test_a_rotations_first_light_node_is_left_to_its_judgement_until_it_passes(tmp_path: Path) -> None:
    """A node a rotation tainted to light a new image is the rotation's: broken, it is first light's verdict on the
    image (the gate waits for it), not remediation's to replace. Once judged passed it is its pool's like any other,
    remediation's again while the run goes on (or sits halted for days)."""
    from upgrade_service.journal.records import FirstLightJudged, FirstLightStarted, RunStarted

    sim = busy()
    lit = with_pods(sim)
    journal = rj.Journal(store(tmp_path), "test", sim.clock)
    journal.append(RunStarted(run="r1", holder="rotation"))
    journal.append(FirstLightStarted(pools={"general": "general"}, images={"general": "ami-new"}))
    instance = sim.get_node(lit).instance_id
    key = journal.intent("taint", node=lit, key=rj.FIRST_LIGHT_KEY, instance=instance, first_light="general")
    journal.done(key)
    assert journal.state.first_light is not None and journal.state.first_light.nodes == {"general": lit}
    sim.stop_kubelet(lit)
    sim.advance(400)  # past unhealthyAfterSeconds 300
    held = remediate(sim, tmp_path)
    assert held.exit_code == EXIT_OK and not held.remediated
    assert [d["why"] for d in held.decisions] == ["a rotation is handling it (first light of rotation r1, pool general)"]
    assert events(sim)[sim_events.NODE_CORDONED] == 0 and lit in {n.name for n in sim.list_nodes()}
    journal.append(FirstLightJudged("pass", "canaries ok", {"general": lit}, {"general": instance}))
    assert journal.state.open
    replaced = remediate(sim, tmp_path)
    assert [r["result"] for r in replaced.remediated] == ["replaced"], replaced.reason
    assert lit not in {n.name for n in sim.list_nodes()}


def test_force_deletes_only_where_the_policy_says_and_the_kubelet_is_gone(tmp_path: Path) -> None:
    # Pods of a budget that wants all of them, tolerating an unreachable node forever (as stateful systems
    # that manage their own failover do): the eviction API refuses them once their node is gone (the budget
    # is not whole) and the taint manager never deletes them, so only deleting them frees the node.
    from platformctl.kernel.cluster.model import Toleration

    sim = cluster({"general": 3})
    service(sim, "db", 3, min_available=3,
            tolerations=(Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),))
    sim.run_until_settled()
    node = with_pods(sim)
    sim.stop_kubelet(node)
    sim.advance(100)  # Ready Unknown for 50 s: before the taint manager's 300 s
    policy = {"conditions": [{"type": "Ready", "unhealthyAfterSeconds": 30}], "drainTimeoutSeconds": 60,
              "maxUnhealthy": 1, "maxUnhealthyPerZone": None}
    held = remediate(sim, tmp_path, policy)
    assert held.exit_code == EXIT_FAILED and [r["result"] for r in held.remediated] == ["drain-failed"]
    assert sim.get_node(node).unschedulable  # stays cordoned, reported
    assert harm(sim)["deleted"] == []
    forced = remediate(sim, tmp_path, {**policy, "forceAfterSeconds": 60})
    assert [r["result"] for r in forced.remediated] == ["replaced"], forced.reason
    deleted = harm(sim)["deleted"]
    assert deleted and all(d.startswith("app/db-") for d in deleted) and harm(sim)["violations"] == []
    assert events(sim)[sim_events.NODE_DELETED] == 1
    assert sim.pool("general").desired == 3  # one surge, given back by the termination: as many nodes as before


@pytest.mark.parametrize(("document", "field", "says"), [
    ({"conditions": [{"type": "DiskPresure"}]}, "conditions[0].type", "did you mean DiskPressure"),
    ({"conditions": [{"type": "Ready", "unhealthyAfterSeconds": -5}]}, "conditions[0].unhealthyAfterSeconds", "greater than or equal to 0"),
    ({"maxUnhealthy": "140%"}, "maxUnhealthy", "over 100%"),
    ({"maxPerHour": -1}, "maxPerHour", "greater than or equal to 0"),
])
def test_policy_mistakes_name_the_field(document: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(PlatformError) as caught:
        parse_remediation_policy(document, "remediation.yaml")
    assert caught.value.file == "remediation.yaml" and caught.value.field == field
    assert says in str(caught.value)


def test_a_custom_condition_counts_once_declared() -> None:
    sim = busy(nodes=3, replicas=3)
    name = sim.list_nodes()[0].name
    sim.set_node_condition(name, "GPUUnhealthy", "True", "XidError", "Xid 79: fallen off the bus")
    sim.advance(400)
    policy = parse_remediation_policy({"customConditionTypes": ["GPUUnhealthy"],
                                       "conditions": [{"type": "GPUUnhealthy", "unhealthyAfterSeconds": 60}]}, "p.yaml")
    groups = SimulatedNodeGroups(sim)
    nodes = sim.list_nodes()
    seen = assess(nodes, {"general": groups.members("general")}, {n.name: "general" for n in nodes}, sim.now(), policy)
    assert [p.subject for p in seen.unhealthy] == [name]
    assert "GPUUnhealthy True (XidError: Xid 79: fallen off the bus)" in seen.unhealthy[0].reason
    assert Remediator  # the class the CLI drives


def test_remediation_evicts_a_one_at_a_time_workloads_pods_one_after_the_other_each_settled(tmp_path: Path) -> None:
    from tests.upgrade_service.running.test_execute import ONE_AT_A_TIME, settled_one_at_a_time

    sim = cluster({"kv": 2})
    service(sim, "kv", 4, kind="StatefulSet", annotations=ONE_AT_A_TIME, node_selector={"eks.amazonaws.com/nodegroup": "kv"})
    sim.run_until_settled()
    broken = sim.list_nodes()[0].name
    assert len([p for p in sim.list_pods(node_name=broken) if p.labels.get("app") == "kv"]) == 2
    sim.set_node_condition(broken, "DiskPressure", "True", "KubeletHasDiskPressure")  # its kubelet still answers
    sim.advance(400)
    outcome = remediate(sim, tmp_path, {"conditions": [{"type": "DiskPressure", "unhealthyAfterSeconds": 60}]})
    assert (outcome.status, outcome.exit_code) == ("ok", EXIT_OK), outcome.reason
    assert harm(sim) == NO_HARM
    assert len(settled_one_at_a_time(sim, "kv", 300)) == 2


def training_job_on_a_pressured_node() -> tuple[SimulatedCluster, str]:
    """A half-hour training job on a node whose disk fills (its kubelet still answers)."""
    from tests.platformctl.emulator.helpers import template

    sim = cluster({"general": 2})
    sim.create_workload("Job", template("batch", "train", run=1800, start=10), 1, completions=1)
    sim.run_until_settled()
    (node,) = {p.node_name for p in sim.list_pods(namespace="batch") if p.node_name}
    sim.set_node_condition(node, "DiskPressure", "True", "KubeletHasDiskPressure")
    sim.advance(120)
    return sim, node


def test_remediation_waits_for_a_wait_for_completion_job_its_policy_names_while_the_kubelet_answers(tmp_path: Path) -> None:
    """The remediation policy's workloadRules are the rotation policy's: a training job the operator's rule says to
    wait for finishes on the node before remediation replaces it (its kubelet still answers), never evicted."""
    sim, broken = training_job_on_a_pressured_node()
    rules = {"conditions": [{"type": "DiskPressure", "unhealthyAfterSeconds": 60}], "drainTimeoutSeconds": 3600,
             "workloadRules": [{"selector": {"matchLabels": {"app": "train"}}, "mode": "wait-for-completion",
                                "maxWaitSeconds": 3600}]}
    outcome = remediate(sim, tmp_path, rules)
    assert (outcome.status, outcome.exit_code) == ("ok", EXIT_OK), outcome.reason
    assert [r["result"] for r in outcome.remediated] == ["replaced"]
    batch = [e for e in sim.events if e.namespace == "batch"]
    assert not any(e.kind == sim_events.POD_EVICTED for e in batch)  # it finished where it ran
    finished = min(e.time for e in batch if e.kind == sim_events.POD_SUCCEEDED)
    gone = min(e.time for e in sim.events if e.kind == sim_events.NODE_DELETED and e.name == broken)
    assert finished <= gone
    assert harm(sim) == NO_HARM
    # Without the rule the same job is evicted at once: the rule is what made remediation wait.
    again, _ = training_job_on_a_pressured_node()
    del rules["workloadRules"]
    (tmp_path / "plain").mkdir()
    assert remediate(again, tmp_path / "plain", rules).exit_code == EXIT_OK
    assert any(e.kind == sim_events.POD_EVICTED for e in again.events if e.namespace == "batch")


def test_the_remediation_policy_checks_workload_rules_as_the_rotation_policy_does() -> None:
    with pytest.raises(PlatformError) as caught:
        parse_remediation_policy({"workloadRules": [{"selector": {}, "mode": "one-at-a-time"}]}, "remediation.yaml")
    assert (caught.value.file, caught.value.field) == ("remediation.yaml", "workloadRules[0].selector")
    with pytest.raises(PlatformError) as caught:
        parse_remediation_policy({"workloadRules": [{"selector": {"matchLabels": {"a": "b"}}, "mode": "skip",
                                                     "settleSeconds": 5}]}, "remediation.yaml")
    assert caught.value.field == "workloadRules[0].settleSeconds"


@pytest.mark.parametrize(("pool", "percent", "allowed"), [(3, "30%", 1), (2, "10%", 1), (3, "34%", 1), (3, "67%", 2)])
def test_a_percentage_limit_on_a_small_pool_never_rounds_below_one_node(tmp_path: Path, pool: int, percent: str,
                                                                        allowed: int) -> None:
    """30% of three nodes rounds down to none: a lone broken node of a small pool would open the breaker at once
    and never be replaced. The limit never falls below one node; one more than it allows opens the breaker."""
    from upgrade_service.remediation.policy import allowed as allowed_of

    assert allowed_of(percent, pool) == allowed
    sim = cluster({"general": pool})
    sim.run_until_settled()
    policy = {"maxUnhealthyPerPool": percent, "maxUnhealthy": "100%", "maxUnhealthyPerZone": "100%",
              "conditions": [{"type": "DiskPressure", "unhealthyAfterSeconds": 60}]}
    names = [n.name for n in sim.list_nodes()]
    parsed = parse_remediation_policy(policy, "remediation.yaml")
    groups = SimulatedNodeGroups(sim)

    def breaker() -> list[str]:
        nodes = sim.list_nodes()
        return assess(nodes, {"general": groups.members("general")}, {n.name: "general" for n in nodes}, sim.now(),
                      parsed).breaker

    for name in names[:allowed]:
        sim.set_node_condition(name, "DiskPressure", "True", "KubeletHasDiskPressure")
    sim.advance(120)
    assert breaker() == []
    sim.set_node_condition(names[allowed], "DiskPressure", "True", "KubeletHasDiskPressure")
    sim.advance(120)
    assert breaker() == [f"pool general: {allowed + 1} of {pool} nodes unhealthy, more than maxUnhealthyPerPool "
                         f"{percent} ({allowed})"]
