"""The rotation executor against a simulated cluster whose pools are its auto scaling groups.

Every assertion reads what a user would observe: the simulator's event log (evictions, budgets,
cordons, pods lost or deleted), the nodes and pools as they are afterwards, and the journal in the
state store (through ``rotate status``'s report), never the executor's own return value alone.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from platformctl.emulator import simulator as sim_events
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import NEW, OLD, cluster
from tests.upgrade_service.rotation import NO_HARM, events, executor, harm, new_image, rotate, service, serving
from upgrade_service.journal.rotation import control, read_state
from upgrade_service.running.report import build_report
from upgrade_service.running.run_types import EXIT_DONE, EXIT_HALTED, EXIT_PAUSED, TAINT


def nodes_on(sim, image):
    return sorted(n.name for n in sim.list_nodes() if n.image == image)


def test_a_surge_rotation_replaces_every_node_once_and_hurts_no_application(tmp_path: Path) -> None:
    sim = cluster({"general": 4, "system": 2})
    service(sim, "web", 6, min_available=5)
    service(sim, "api", 4, min_available=3)
    sim.run_until_settled()
    before = {n.name for n in sim.list_nodes()}
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2})
    assert (outcome.status, outcome.exit_code) == ("done", EXIT_DONE)
    assert harm(sim) == NO_HARM
    assert nodes_on(sim, OLD) == [] and len(nodes_on(sim, NEW)) == 6
    assert not ({n.name for n in sim.list_nodes()} & before)
    assert all(not n.unschedulable and TAINT not in n.taints for n in sim.list_nodes())
    assert {p: sim.pool(p).desired for p in sim.pool_names()} == {"general": 4, "system": 2}  # surge given back
    happened = events(sim)
    assert happened[sim_events.NODE_DELETED] == 6 and happened[sim_events.NODE_CORDONED] == 6
    assert happened[sim_events.POD_EVICTED] == 10  # every service pod moved once, none twice
    # The report is built from the journal: the same from any process.
    report = build_report(read_state(SQLiteStore(tmp_path / "state.db"), "test"))
    assert report == outcome.report
    assert report["nodes_rotated"] == 6 and report["evictions"] == 10 and report["pods_disrupted_more_than_once"] == 0
    assert [len(w["nodes"]) for w in report["waves"]] == [2, 2, 2]
    assert all(w["actual_seconds"] > 0 and w["estimated_seconds"] > 0 for w in report["waves"])
    assert report["lowest_budget_headroom"]["headroom"] >= 0


def test_every_wave_is_cordoned_before_its_first_eviction_and_surged_nodes_are_ready_first(tmp_path: Path) -> None:
    sim = serving(4, replicas=8, min_available=6)
    assert rotate(sim, tmp_path, {"maxInFlight": 2}).status == "done"
    log = sim.events
    cordoned: dict[str, float] = {e.name: e.time for e in log if e.kind == sim_events.NODE_CORDONED}
    ready_new = sorted(e.time for e in log if e.kind == sim_events.NODE_READY)
    evicted_from: dict[str, list[float]] = {}
    node_of = {e.detail[0]: e.detail[1] for e in log if e.kind == sim_events.POD_SCHEDULED}
    for e in log:
        if e.kind == sim_events.POD_EVICTED:
            evicted_from.setdefault(node_of[e.detail[0]], []).append(e.time)
    for node, times in evicted_from.items():
        assert cordoned[node] <= min(times)
        # surge: two new nodes were Ready before the first pod of a wave left
        assert sum(1 for t in ready_new if t <= min(times)) >= 2


def test_replace_terminates_without_decrement_and_waits_for_the_replacement(tmp_path: Path) -> None:
    sim = serving(4)
    outcome = rotate(sim, tmp_path, {"strategy": "replace", "maxInFlight": 1, "minZoneCapacityPercent": 50})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    assert sim.pool("general").desired == 4 and len(nodes_on(sim, NEW)) == 4
    # Never more nodes than the group's size: replace adds no capacity, the group replaces what goes.
    alive = most = 0
    for e in sim.events:
        alive += {sim_events.NODE_ADDED: 1, sim_events.NODE_DELETED: -1}.get(e.kind, 0)
        most = max(most, alive)
    assert most == 4


def test_a_group_at_its_max_size_rotates_without_surging(tmp_path: Path) -> None:
    sim = cluster({"general": 3}, max_size=3)
    service(sim, "web", 3, min_available=2)
    sim.run_until_settled()
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 1})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    assert sim.pool("general").desired == 3 and len(sim.list_nodes()) == 3


def test_outdated_nodes_carry_the_prefer_no_schedule_taint_until_they_go(tmp_path: Path) -> None:
    sim = serving(4, replicas=8)
    run = executor(sim, tmp_path, {"maxInFlight": 1, "healthGate": {"command": [sys.executable, "-c",
                   "import json; print(json.dumps({'verdict': 'pass', 'reason': 'ok'}))"]}})
    seen: list[int] = []
    run._progress = lambda view: seen.append(sum(TAINT in n.taints for n in sim.list_nodes() if n.image == OLD))
    assert run.run().status == "done"
    assert max(seen) == 4  # every outdated node was tainted at the start of the run
    assert all(TAINT not in n.taints for n in sim.list_nodes())
    assert build_report(read_state(SQLiteStore(tmp_path / "state.db"), "test"))["pods_disrupted_more_than_once"] == 0


def test_a_drain_whose_evicted_pod_has_nowhere_to_go_fails_its_node_within_a_minute_and_halts(tmp_path: Path) -> None:
    sim = cluster({"general": 3})
    service(sim, "web", 3, min_available=2)
    sim.run_until_settled()
    stuck = sim.list_nodes()[0].name
    # Two pods pinned to one node under a budget that lets one go: the second can never follow,
    # since its replacement can only run on the (cordoned) node it is leaving.
    service(sim, "pinned", 2, min_available=1, node_selector={"kubernetes.io/hostname": stuck})
    sim.run_until_settled()
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 1, "drainTimeoutSeconds": 3600})
    assert (outcome.status, outcome.exit_code) == ("halted", EXIT_HALTED)
    assert "maxFailedNodes 0" in outcome.reason and stuck in outcome.reason
    failed = outcome.report["nodes_failed"]
    assert [f["node"] for f in failed] == [stuck]
    # It says which budget, which pod, and what the scheduler said, as the pod's PodScheduled condition says it.
    reason = failed[0]["reason"]
    assert "PodDisruptionBudget app/pinned" in reason and "pod app/pinned-" in reason
    assert "0/4 nodes are available" in reason and "node(s) didn't match Pod's node affinity/selector" in reason
    # Noticed within a minute of the first eviction, not after drainTimeoutSeconds.
    first = min(e.time for e in sim.events if e.kind == sim_events.POD_EVICTED and e.name.startswith("pinned-"))
    assert max(e.time for e in sim.events) - first < 3600
    halted = read_state(SQLiteStore(tmp_path / "state.db"), "test").halted
    assert halted is not None and halted.at - first <= 60
    node = sim.get_node(stuck)
    assert node.unschedulable and node.image == OLD  # cordoned, reported, never forced
    assert harm(sim) == NO_HARM
    assert outcome.report["cordoned_by_this_run"] == [stuck]
    # The plan saw it coming: the node is planned alone, and the plan says why its drain will wait.
    plan = read_state(SQLiteStore(tmp_path / "state.db"), "test").first_plan
    assert plan is not None and any("app/pinned" in w for w in plan.warnings)


def test_a_drain_that_waits_on_pods_that_start_slowly_fails_the_node_after_drain_timeout_seconds(tmp_path: Path) -> None:
    sim = cluster({"general": 3})
    # Two pods a node under a budget that lets one go at a time, and every new pod takes an hour to start: the
    # second pod of the first node waits on the first's replacement, which is scheduled and starting. That is
    # slow, not stuck: the drain waits for it until drainTimeoutSeconds.
    service(sim, "slow", 6, min_available=5, start=3600)
    sim.run_until_settled(max_seconds=8000)
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 1, "drainTimeoutSeconds": 600})
    assert (outcome.status, outcome.exit_code) == ("halted", EXIT_HALTED)
    failed = outcome.report["nodes_failed"]
    assert len(failed) == 1 and "drainTimeoutSeconds 600" in failed[0]["reason"]
    assert "app/slow" in failed[0]["reason"]  # says which budget held it
    assert "Unschedulable" not in failed[0]["reason"]
    assert harm(sim) == NO_HARM


def test_max_failed_nodes_lets_the_run_go_on_and_end_incomplete(tmp_path: Path) -> None:
    sim = cluster({"general": 3})
    sim.run_until_settled()
    stuck = sim.list_nodes()[0].name
    service(sim, "pinned", 2, min_available=1, node_selector={"kubernetes.io/hostname": stuck})
    sim.run_until_settled()
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 1, "drainTimeoutSeconds": 300, "maxFailedNodes": 1})
    assert (outcome.status, outcome.exit_code) == ("incomplete", EXIT_HALTED)
    assert nodes_on(sim, OLD) == [stuck] and len(nodes_on(sim, NEW)) == 3
    # The stuck node's surged stand-in stays, and the report says so.
    assert sim.pool("general").desired == 4 and outcome.report["capacity_kept"] == {"general": 1}
    assert "1 failed" in outcome.reason and harm(sim) == NO_HARM


def test_a_bad_image_halts_the_rotation_before_anything_is_drained(tmp_path: Path) -> None:
    sim = serving(4)
    sim.broken_images.add(NEW)  # nodes booted from it never turn Ready
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2, "nodeReadyTimeoutSeconds": 600})
    assert (outcome.status, outcome.exit_code) == ("halted", EXIT_HALTED)
    assert "new nodes not Ready on the target image within nodeReadyTimeoutSeconds 600" in outcome.reason
    assert "0 of 2 new nodes Ready on ami-0new" in outcome.reason
    assert events(sim)[sim_events.POD_EVICTED] == 0  # nobody's pod moved onto the bad image
    assert len(nodes_on(sim, NEW)) == 2  # exactly the first wave's surge booted it
    assert not any(n.unschedulable for n in sim.list_nodes() if n.image == OLD)  # given back until someone decides
    assert outcome.report["halted"]["reason"] == "new-node-not-ready"


def _gate(tmp_path: Path, *verdicts: str) -> list[str]:
    """A gate command answering the given verdicts in turn (the last one from then on)."""
    script = tmp_path / "gate.py"
    state = tmp_path / "gate-count"
    script.write_text(textwrap.dedent(f"""
        import json, pathlib
        count = pathlib.Path({str(state)!r})
        n = int(count.read_text()) if count.exists() else 0
        count.write_text(str(n + 1))
        verdicts = {list(verdicts)!r}
        print(json.dumps({{"verdict": verdicts[min(n, len(verdicts) - 1)], "reason": f"check {{n + 1}}"}}))
    """))
    return [sys.executable, str(script)]


def test_a_failing_gate_halts_before_the_next_wave(tmp_path: Path) -> None:
    sim = serving(4)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2, "healthGate": {"command": _gate(tmp_path, "pass", "fail")}})
    assert (outcome.status, outcome.exit_code) == ("halted", EXIT_HALTED)
    assert outcome.reason == "the health gate says fail before wave 2: check 2"
    assert len(nodes_on(sim, NEW)) == 2 and len(nodes_on(sim, OLD)) == 2  # one wave went, the next did not start
    assert [w["finished"] for w in outcome.report["waves"]] == [True]


def test_an_inconclusive_gate_is_waited_for_then_halts(tmp_path: Path) -> None:
    sim = cluster({"general": 2})
    sim.run_until_settled()
    new_image(sim)
    start = sim.now()
    outcome = rotate(sim, tmp_path, {"gateTimeoutSeconds": 600, "healthGate": {"command": _gate(tmp_path, "inconclusive")}},
                     gate_poll_seconds=60)
    assert outcome.status == "halted" and "stayed inconclusive for gateTimeoutSeconds 600 before wave 1" in outcome.reason
    assert 600 <= sim.now() - start < 700
    assert int((tmp_path / "gate-count").read_text()) == 11  # asked every minute for ten minutes
    assert nodes_on(sim, OLD) == sorted(n.name for n in sim.list_nodes())


def test_a_gate_that_cannot_answer_is_inconclusive_not_a_pass(tmp_path: Path) -> None:
    sim = cluster({"general": 2})
    sim.run_until_settled()
    new_image(sim)
    crash = [sys.executable, "-c", "import sys; sys.exit('database is down')"]
    outcome = rotate(sim, tmp_path, {"gateTimeoutSeconds": 0, "healthGate": {"command": crash}})
    assert outcome.status == "halted" and "exited 1 without a verdict: database is down" in outcome.reason


def test_a_gate_that_crashed_or_answered_an_error_status_never_passes_whatever_it_said() -> None:
    import http.server
    import threading

    from upgrade_service.planning.policy import HealthGate
    from upgrade_service.running.gate import ask

    said_pass = 'import json, sys; print(json.dumps({"verdict": "pass", "reason": "looks fine"})); sys.exit(1)'
    verdict = ask(HealthGate(command=(sys.executable, "-c", said_pass)), {"cluster": "c"})
    assert verdict.verdict == "inconclusive" and "exited 1 after printing 'pass'" in verdict.reason
    said_fail = 'import json, sys; print(json.dumps({"verdict": "fail", "reason": "broken"})); sys.exit(3)'
    assert ask(HealthGate(command=(sys.executable, "-c", said_fail)), {"cluster": "c"}).verdict == "fail"

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"verdict": "pass", "reason": "fine"}).encode()
            self.send_response(503 if "down" in self.path else 200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        down = ask(HealthGate(url=f"{base}/down"), {"cluster": "c"})
        assert down.verdict == "inconclusive" and "HTTP 503 with a body that says pass" in down.reason
        assert ask(HealthGate(url=f"{base}/ok"), {"cluster": "c"}).verdict == "pass"
    finally:
        server.shutdown()


def test_mutating_calls_are_paced_under_max_mutations_per_minute(tmp_path: Path) -> None:
    sim = cluster({"general": 4})
    service(sim, "web", 40, cpu=100)
    sim.run_until_settled()
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 4, "maxMutationsPerMinute": 12})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    mutations = sorted(e.time for e in sim.events if e.kind in (sim_events.POD_EVICTED, sim_events.EVICTION_REFUSED,
                                                                 sim_events.NODE_CORDONED, sim_events.NODE_UNCORDONED))
    # No minute of the run saw more than the limit (a full bucket at the start allows one burst of 12).
    worst = max(sum(1 for t in mutations if start <= t < start + 60) for start in mutations)
    assert worst <= 12 * 2
    assert mutations[-1] - mutations[0] >= (len(mutations) - 12) / 12 * 60 - 60


def test_one_at_a_time_workloads_lose_one_pod_at_a_time_and_settle(tmp_path: Path) -> None:
    sim = cluster({"general": 2})
    service(sim, "kv", 2, kind="StatefulSet", start=60, annotations={"platformctl.io/rotation": "one-at-a-time",
                                                                     "platformctl.io/settle-seconds": "300"})
    sim.run_until_settled()
    both = {p.node_name for p in sim.list_pods(namespace="app")}
    assert len(both) == 2
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    log = [e for e in sim.events if e.namespace == "app"]
    evicted = [e for e in log if e.kind == sim_events.POD_EVICTED]
    assert len(evicted) == 2 and len(outcome.report["waves"]) == 2  # never both of its nodes in one wave
    # The second pod left only after the first was back Ready, and the settle time had passed.
    ready_again = min(e.time for e in log if e.kind == sim_events.POD_READY and e.time > evicted[0].time)
    assert evicted[1].time >= ready_again + 300


def test_wait_for_completion_pods_finish_before_their_node_goes(tmp_path: Path) -> None:
    from tests.platformctl.emulator.helpers import template

    sim = cluster({"general": 2})
    job = template("batch", "train", run=1800, start=10)
    job = job.__class__(**{**{f: getattr(job, f) for f in job.__dataclass_fields__},
                           "annotations": {**job.annotations, "platformctl.io/rotation": "wait-for-completion"}})
    sim.create_workload("Job", job, 1, completions=1)
    sim.run_until_settled()
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    batch = [e for e in sim.events if e.namespace == "batch"]
    assert not any(e.kind == sim_events.POD_EVICTED for e in batch)  # it finished on its own
    assert any(e.kind == sim_events.POD_SUCCEEDED for e in batch)


def test_pause_stops_after_the_current_wave_and_resume_lets_the_next_run_go_on(tmp_path: Path) -> None:
    sim = serving(4)
    run = executor(sim, tmp_path, {"maxInFlight": 1})
    paused = []

    def pause_during_wave_one(view):
        if view.phase == "drain" and not paused:
            paused.append(control(run.store, "test", "pause", "oncall@example", "investigating", sim.now()))

    run._progress = pause_during_wave_one
    outcome = run.run()
    assert (outcome.status, outcome.exit_code) == ("paused", EXIT_PAUSED)
    assert len(nodes_on(sim, NEW)) == 1  # the wave in flight finished; no other started
    assert not any(n.unschedulable for n in sim.list_nodes())
    again = executor(sim, tmp_path, {"maxInFlight": 1}).run()
    assert again.status == "paused" and "paused by oncall@example: investigating" in again.reason
    assert len(nodes_on(sim, NEW)) == 1
    control(run.store, "test", "resume", "oncall@example", "", sim.now())
    final = executor(sim, tmp_path, {"maxInFlight": 1}).run()
    assert final.status == "done" and len(nodes_on(sim, NEW)) == 4 and harm(sim) == NO_HARM
    assert [w["wave"] for w in final.report["waves"]] == [1, 2, 3, 4]  # one run, continued


def test_abort_uncordons_and_untaints_what_the_run_held(tmp_path: Path) -> None:
    sim = serving(3)
    run = executor(sim, tmp_path, {"maxInFlight": 1})

    def abort_in_drain(view):
        if view.phase == "drain" and run.state.abort is None:
            control(run.store, "test", "abort", "oncall@example", "wrong image", sim.now())

    run._progress = abort_in_drain
    outcome = run.run()
    assert outcome.status == "aborted" and outcome.reason == "aborted by oncall@example: wrong image"
    assert not any(n.unschedulable or TAINT in n.taints for n in sim.list_nodes())
    assert outcome.report["cordoned_by_this_run"] == [] and outcome.report["tainted_by_this_run"] == []
    assert harm(sim) == NO_HARM
    # The surge it made stays (lowering the group would let it pick which instance goes) and is reported;
    # the next run spends it before surging again, and gives it back.
    assert sim.pool("general").desired == 4 and outcome.report["capacity_kept"] == {"general": 1}
    final = executor(sim, tmp_path, {"maxInFlight": 1}).run()
    assert final.status == "done" and nodes_on(sim, OLD) == [] and harm(sim) == NO_HARM
    assert sim.pool("general").desired == 3 and final.report["capacity_kept"] == {}


def test_targets_no_group_launches_are_refused_before_anything_changes(tmp_path: Path) -> None:
    sim = cluster({"general": 2})
    sim.run_until_settled()
    new_image(sim, "ami-0launched")
    before = list(sim.events)
    with pytest.raises(PlatformError) as err:
        rotate(sim, tmp_path, {"targets": {"general": "ami-0typo"}})
    assert str(err.value).startswith("policy.yaml: targets.general: pool general should run ami-0typo, but its auto "
                                     "scaling group general launches ami-0launched")
    assert sim.events == before
    assert read_state(SQLiteStore(tmp_path / "state.db"), "test").run is None  # nothing journalled


def test_nodes_failing_mid_run_are_replanned_around(tmp_path: Path) -> None:
    sim = serving(4)
    run = executor(sim, tmp_path, {"maxInFlight": 1})
    failed = []

    def an_instance_fails(view):
        if view.wave == 2 and not failed:
            victim = next(n for n in sim.list_nodes() if n.image == OLD and n.name not in view.in_flight)
            failed.append(victim.name)
            sim.terminate_instance(victim.name)  # its group replaces it, on the new image

    run._progress = an_instance_fails
    outcome = run.run()
    assert outcome.status == "done" and nodes_on(sim, OLD) == []
    assert outcome.report["nodes_rotated"] == 3  # the failed one was not rotated again
    assert len(outcome.report["waves"]) == 3


def test_a_second_run_on_the_cluster_exits_at_once(tmp_path: Path) -> None:
    from platformctl.kernel.state.lease import LeaseKeeper
    from upgrade_service.running.run_types import EXIT_LEASE_HELD
    from upgrade_service.running.runs import run_cluster

    sim = cluster({"general": 2})
    sim.run_until_settled()
    new_image(sim)
    store = SQLiteStore(tmp_path / "state.db")
    held = LeaseKeeper(store, "rotation/test", "other-host:42:abc", ttl=60)
    held.acquire()
    from platformctl.emulator.nodegroups import SimulatedNodeGroups
    from upgrade_service.planning.policy import parse_policy
    from upgrade_service.running.run_types import Options, Target

    outcome = run_cluster(Target("test", sim, SimulatedNodeGroups(sim)), parse_policy({}, "p.yaml"), store, Options(), "me")
    assert (outcome.status, outcome.exit_code) == ("lease-held", EXIT_LEASE_HELD)
    assert "another rotation of test is running (lease held by other-host:42:abc" in outcome.reason
    assert nodes_on(sim, NEW) == []
    held.release()
    assert run_cluster(Target("test", sim, SimulatedNodeGroups(sim)), parse_policy({}, "p.yaml"), store, Options(), "me").status == "done"
    json.dumps(outcome.to_dict())  # machine-readable as is


def test_a_node_remediation_is_replacing_is_left_to_it(tmp_path: Path) -> None:
    """Remediation's open work is read before every plan: the rotation neither cordons nor drains nor terminates a
    node whose replacement remediation has started (its replacement boots the target image anyway)."""
    from upgrade_service.journal.remediation import STARTED
    from upgrade_service.remediation.remediate import Log

    sim = serving(4, replicas=4, min_available=3)
    new_image(sim)
    broken = sorted(n.name for n in sim.list_nodes())[0]
    log = Log(SQLiteStore(tmp_path / "state.db"), "test", sim.clock)
    log.write(STARTED, id="test-r1", subject=broken, node=broken, instance=sim.get_node(broken).instance_id,
              group="general", pool="general", zone="us-east-1a", reason="Ready=False for 300 s", since=0.0, members=[],
              kubelet_gone_since=None, surged=False)
    on_broken = sorted(p.uid for p in sim.list_pods(node_name=broken))
    run = executor(sim, tmp_path, {"maxInFlight": 2})
    read = run.read(first=True)
    assert broken not in {n.name for n in read.nodes} and broken not in read.outdated
    assert any(broken in w and "remediation test-r1" in w for w in read.warnings)
    outcome = run.run()
    assert outcome.status == "done"
    assert broken in {n.name for n in sim.list_nodes()} and not sim.get_node(broken).unschedulable  # untouched
    assert all(e.name != broken for e in sim.events if e.kind == sim_events.NODE_CORDONED)
    assert on_broken and set(on_broken) <= {p.uid for p in sim.list_pods(node_name=broken)}  # none of its pods evicted


def test_a_workload_deleted_during_a_wave_is_not_waited_for(tmp_path: Path) -> None:
    """A user deletes an application while its pods are being moved: the wave does not wait for pods that nothing
    will ever recreate (before, the run halted after podReadyTimeoutSeconds)."""
    sim = serving(4, replicas=4, min_available=3)
    new_image(sim)
    run = executor(sim, tmp_path, {"maxInFlight": 2})
    waited = run._wait_pods_ready

    def deleted_first(owners, *timeout):
        for namespace in {o.namespace for o in owners.values()}:
            sim.delete_namespace(namespace)  # the moment the wave starts waiting on the evicted pods
        return waited(owners, *timeout)

    run._wait_pods_ready = deleted_first  # type: ignore[method-assign]
    before = sim.now()
    outcome = run.run()
    assert outcome.status == "done", outcome.reason
    assert sim.now() - before < 900  # well inside podReadyTimeoutSeconds: it did not wait for them
    assert nodes_on(sim, OLD) == []


def settled_one_at_a_time(sim, name: str, settle: float) -> list[float]:
    """Evictions of ``name``'s pods, checked to be one at a time: each after the last evicted pod's successor was
    Ready and had settled ``settle`` seconds. Returns the eviction times."""
    evicted = [(e.time, e.name) for e in sim.events if e.kind == sim_events.POD_EVICTED and e.name.startswith(f"{name}-")]
    ready: dict[str, list[float]] = {}
    for e in sim.events:
        if e.kind == sim_events.POD_READY and e.name.startswith(f"{name}-"):
            ready.setdefault(e.name, []).append(e.time)
    for (before, pod), (after, _) in zip(evicted, evicted[1:], strict=False):
        back = min(t for t in ready[pod] if t > before)  # the StatefulSet's pod of the same name, Ready again
        assert after >= back + settle, f"{pod} was Ready again at {back}; the next was evicted at {after}"
    return [t for t, _ in evicted]


ONE_AT_A_TIME = {"platformctl.io/rotation": "one-at-a-time", "platformctl.io/settle-seconds": "300"}


def test_two_pods_of_a_one_at_a_time_workload_on_one_node_leave_one_after_the_other_each_settled(tmp_path: Path) -> None:
    sim = cluster({"kv": 2})
    service(sim, "kv", 4, kind="StatefulSet", annotations=ONE_AT_A_TIME, node_selector={"eks.amazonaws.com/nodegroup": "kv"})
    sim.run_until_settled()
    assert sorted(len([p for p in sim.list_pods(node_name=n.name) if p.labels.get("app") == "kv"])
                  for n in sim.list_nodes()) == [2, 2]
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 1})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    assert len(settled_one_at_a_time(sim, "kv", 300)) == 4


def test_with_nodes_that_boot_in_seconds_a_twelve_node_wave_is_well_under_half_of_one_node_at_a_time(tmp_path: Path) -> None:
    """Waits watch the cluster: a wave moves on the moment its new nodes are Ready, its nodes are drained and its
    pods are back, so a rotation's time is what the cluster takes, not a multiple of a poll interval."""
    durations = {}
    for name, in_flight, poll in (("wave", 12, 5.0), ("one-at-a-time", 1, 1.0)):
        sim = cluster({"general": 12}, boot=2.0)
        service(sim, "web", 24, min_available=18, grace=2, start=1)
        sim.run_until_settled()
        new_image(sim)
        start = sim.now()
        (tmp_path / name).mkdir()
        outcome = rotate(sim, tmp_path / name, {"maxInFlight": in_flight, "durations": {"nodeBootSeconds": 2,
                                                                                       "podStartSeconds": 1}},
                         poll_seconds=poll)
        assert outcome.status == "done" and harm(sim) == NO_HARM
        assert outcome.report["refused_evictions"] == 0 and outcome.report["pods_disrupted_more_than_once"] == 0
        durations[name] = sim.now() - start
    assert durations["wave"] < 0.5 * durations["one-at-a-time"], durations


def test_a_drain_spends_a_budgets_room_and_never_asks_past_it(tmp_path: Path) -> None:
    sim = cluster({"general": 2})
    service(sim, "web", 6, min_available=5)  # three pods a node, one disruption at a time
    sim.run_until_settled()
    new_image(sim)
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    assert events(sim)[sim_events.EVICTION_REFUSED] == 0  # it never asked the API for an eviction the budget had no room for
    assert outcome.report["refused_evictions"] == 0 and outcome.report["evictions"] == 6


def test_an_eviction_refused_because_another_client_spent_the_budget_is_counted_backed_off_and_retried(tmp_path: Path) -> None:
    sim = cluster({"general": 2})
    service(sim, "web", 6, min_available=5)
    sim.run_until_settled()
    new_image(sim)
    evict = sim.evict
    raced: list[str] = []

    def someone_else_first(namespace: str, name: str):
        if not raced:  # another operator's `kubectl drain` spends the budget's one disruption a moment earlier
            other = next(p for p in sim.list_pods(namespace=namespace) if p.name != name and p.ready and not p.terminating)
            assert evict(namespace, other.name).allowed
            raced.append(other.name)
        return evict(namespace, name)

    sim.evict = someone_else_first  # type: ignore[method-assign]
    outcome = rotate(sim, tmp_path, {"maxInFlight": 2})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    refused = [e for e in sim.events if e.kind == sim_events.EVICTION_REFUSED]
    assert len(refused) == 1 and refused[0].detail[0] == 429
    assert outcome.report["refused_evictions"] == 1  # the report reads the refusal, as `rotate status` shows it
    assert outcome.report["waves"][0]["refused_evictions"] == 1


def _away_intervals(sim, ns: str) -> list[tuple[float, float, str]]:
    """Each eviction in ``ns`` to its successor's Ready (a StatefulSet's pods keep their names), with the pod."""
    out, left = [], {}
    for e in sim.events:
        if e.namespace != ns:
            continue
        if e.kind == sim_events.POD_EVICTED:
            left[e.name] = e.time
        elif e.kind == sim_events.POD_READY and e.name in left:
            out.append((left.pop(e.name), e.time, e.name))
    assert not left, left
    return out


@pytest.mark.parametrize("scope", ["workload", "namespace"])
def test_a_rule_moves_each_controller_it_matches_on_its_own_unless_its_scope_is_the_namespace(tmp_path: Path,
                                                                                              scope: str) -> None:
    from platformctl.emulator.invariants import one_at_a_time_breaches

    sim = cluster({"general": 4})
    for name in ("kv-a", "kv-b"):  # one pod a node: each eviction waits for its successor to be placed and Ready
        service(sim, name, 2, kind="StatefulSet", start=60, cpu=3000)  # no budget: the rule alone holds them
    sim.run_until_settled()
    before = sim.list_pods(namespace="app")
    assert len({p.node_name for p in before}) == 4
    new_image(sim)
    rule = {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["kv-a", "kv-b"]}]},
            "mode": "one-at-a-time", "settleSeconds": 120, **({"scope": scope} if scope == "namespace" else {})}
    outcome = rotate(sim, tmp_path, {"maxInFlight": 4, "workloadRules": [rule]})
    assert outcome.status == "done" and harm(sim) == NO_HARM
    # Each StatefulSet lost one pod at a time and waited its settle time, whatever the scope.
    assert one_at_a_time_breaches(sim.events, before, lambda p: 120.0) == []
    away = _away_intervals(sim, "app")
    assert len(away) == 4
    overlapping = [(a, b) for a in away for b in away if a < b and a[0] < b[1] and b[0] < a[1]]
    if scope == "workload":
        # The two stores are independent: each moves its pods one at a time, side by side.
        assert overlapping and all(a[2].rsplit("-", 1)[0] != b[2].rsplit("-", 1)[0] for a, b in overlapping)
    else:
        # One queue for the namespace: never two of the four away at once, each after the last settled.
        assert not overlapping
        ordered = sorted(away)
        assert all(nxt[0] >= prev[1] + 120 for prev, nxt in zip(ordered, ordered[1:]))


def test_an_inconclusive_answer_read_only_after_the_gate_timeout_is_asked_again_not_halted_on(tmp_path: Path) -> None:
    """The executor asked the gate within gateTimeoutSeconds, and its process then stalled (a throttled pod, a paused
    node) until the timeout had passed. The answer it holds describes the window before the deadline: it asks once more
    and goes by that answer. Before, it halted "stayed inconclusive" on the stale answer of a gate that had passed."""
    from e2e_canary.verdict import Verdict
    from upgrade_service.running.gate import Question

    sim = cluster({"general": 2})
    sim.run_until_settled()
    new_image(sim)
    asked: list[float] = []

    def canary(question: Question) -> Verdict:
        asked.append(sim.now())
        if len(asked) == 1:
            sim.advance(900)  # the process stalls after its first answer, past gateTimeoutSeconds 600
            return Verdict("inconclusive", "too few results yet")
        return Verdict("pass", "every canary passed")

    outcome = rotate(sim, tmp_path, {"gateTimeoutSeconds": 600, "healthGate": {"canary": {"window": "30m"}}},
                     canary=canary, gate_poll_seconds=60)
    assert outcome.status == "done", outcome.reason
    assert asked[1] - asked[0] >= 900  # the second ask came after the stall, and it was judged by its answer
    assert nodes_on(sim, NEW) == sorted(n.name for n in sim.list_nodes())
