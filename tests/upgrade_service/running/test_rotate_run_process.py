"""``platformctl rotate run`` as a scheduled job runs it: a separate process against the local region server.

The region (``local up``) is a separate process too. Each test moves the stage onto new images the
way an operator does — change a manifest, ``ami build``, ``stage deploy`` — and then checks what the
rotation did from the outside only: nodes through the Kubernetes API, groups and their launch
templates through AWS (the region's moto), the simulator's event log and the region's record of
AWS calls through the server's control endpoints.
"""

from __future__ import annotations

import json
import random
import re
import signal
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pytest

from platformctl.kernel.cluster.live import LiveCluster
from platformctl.kernel.state import open_store
from platformctl.kernel.state.frozen import HandFreeze, record_frozen
from platformctl.kernel.state.sqlite import SQLiteStore
from platformctl.kernel.topology import load_stage
from tests.process import get, new_images, region_fixture, run, start
from tests.upgrade_service.rotation import overlapping_waves

STAGE = load_stage("dev")
CLUSTERS = [c.name for c in STAGE.clusters()]
TAINT_KEY = "platformctl.io/rotation"
LEASE = "2"  # seconds: a killed run's lease is taken over this soon


def _policy(info: dict[str, Any]) -> None:
    policy = info["home"] / "policy.yaml"
    policy.write_text("maxInFlight: 3\ndurations: {nodeBootSeconds: 180, podStartSeconds: 20}\n")
    info["policy"] = str(policy)
    info["groups"] = desired(info)


pytestmark = pytest.mark.long  # killed at every step: minutes (tests/conftest.py starts it first)
region = region_fixture(prepare=_policy)


def asg(region: dict[str, Any]) -> Any:
    return boto3.client("autoscaling", endpoint_url=region["aws_endpoint"], region_name=region["region"],
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def desired(region: dict[str, Any]) -> dict[str, int]:
    groups = asg(region).describe_auto_scaling_groups()["AutoScalingGroups"]
    return {g["AutoScalingGroupName"]: g["DesiredCapacity"] for g in groups}


def rotate(region: dict[str, Any], *args: str, env: dict[str, str] | None = None, check: bool = False) -> Any:
    return run(region["home"], "rotate", "run", "--stage", "dev", "--policy", region["policy"], "--lease-ttl", LEASE,
               *args, env=env, check=check, timeout=600)


def world(region: dict[str, Any]) -> dict[str, Any]:
    """The region as its users see it, from outside."""
    nodes = {c: LiveCluster.from_kubeconfig(region["kubeconfig"], context=c).list_nodes() for c in CLUSTERS}
    invariants = {c: get(region, f"/platformctl/v1/clusters/{c}/invariants") for c in CLUSTERS}
    terminated = Counter(call["params"]["InstanceId"] for call in
                         get(region, "/platformctl/v1/aws-calls?action=TerminateInstanceInAutoScalingGroup")["calls"])
    return {"nodes": nodes, "invariants": invariants, "terminated": terminated, "desired": desired(region)}


def assert_rotated_without_harm(region: dict[str, Any], images: dict[str, str], before: dict[str, Any]) -> None:
    after = world(region)
    for cluster, nodes in after["nodes"].items():
        for node in nodes:
            pool = node.labels["eks.amazonaws.com/nodegroup"]
            assert node.image == images[f"{cluster}/{pool}"], f"{cluster} {node.name} still runs {node.image}"
            assert not node.unschedulable, f"{node.name} left cordoned"
            assert all(t.key != TAINT_KEY for t in node.taints), f"{node.name} left tainted"
        report = after["invariants"][cluster]
        assert report["budget_violations"] == [] and report["lost_pods"] == []
        assert report["deleted_without_eviction"] == []
    assert after["desired"] == region["groups"]  # surged capacity given back
    old = {n.instance_id for nodes in before["nodes"].values() for n in nodes}
    newly = after["terminated"] - before["terminated"]
    assert set(newly) == old  # every old instance terminated
    assert max(after["terminated"].values()) == 1  # and none of them twice, ever


def test_a_stage_rotation_moves_every_node_onto_its_template_with_no_harm_and_one_run_at_a_time(region: dict[str, Any]) -> None:
    images = new_images(region, "1.5.0")
    before = world(region)
    # A freeze set by hand on dev (`release freeze`: its tick writes it where the stage's jobs read it): the scheduled
    # job, and a run by hand, start no wave and move nothing; they wait as outside-window (exit 0) and name it.
    store = open_store(json.loads(run(region["home"], "rotate", "status", "--stage", "dev", "-o", "json").stdout)["state"])
    record_frozen(store, "dev", [HandFreeze("incident 4711", 0.0, None, "alice")], 0.0)
    try:
        held = rotate(region, "-o", "json")
        first = json.loads(held.stdout)["clusters"][0]
        assert held.returncode == 0 and first["status"] == "outside-window", held.stdout[-2000:]
        assert "freeze by hand (alice: incident 4711; until unfrozen by hand)" in first["reason"], first["reason"]
        assert world(region)["terminated"] == before["terminated"] and desired(region) == region["groups"]
        other = rotate(region, "--state", str(region["home"] / "elsewhere.db"), "-o", "json")  # journalled elsewhere
        said = json.loads(other.stdout)["clusters"][0]
        assert other.returncode == 0 and said["status"] == "outside-window", other.stdout[-2000:]
        assert "freeze by hand (alice: incident 4711" in said["reason"] and world(region)["terminated"] == before["terminated"]
        planned = json.loads(run(region["home"], "rotate", "plan", "--stage", "dev", "--policy", region["policy"],
                                 "-o", "json").stdout)
        assert all("freeze by hand (alice: incident 4711" in c["closed_now"] for c in planned["clusters"].values()), planned
        one = json.loads(run(region["home"], "rotate", "plan", "--context", "dev-usw2a-01", "--policy", region["policy"],
                             "-o", "json").stdout)  # one cluster of the stage: its freezes too
        assert "freeze by hand (alice: incident 4711" in one["closed_now"], one
    finally:
        record_frozen(store, "dev", [], 1.0)  # unfrozen: the next tick says none is left
        store.close()
    # A policy with no targets follows the launch templates: a dry run and a plan read them from AWS, change nothing.
    dry = json.loads(rotate(region, "--dry-run", "-o", "json").stdout)
    for cluster in dry["clusters"]:
        pools = {n.labels["eks.amazonaws.com/nodegroup"] for n in before["nodes"][cluster["cluster"]]}
        assert cluster["targets"] == {p: images[f"{cluster['cluster']}/{p}"] for p in pools}
        assert cluster["plan"]["nodes_to_rotate"] == len(before["nodes"][cluster["cluster"]])
    planned = json.loads(run(region["home"], "rotate", "plan", "--stage", "dev", "--policy", region["policy"], "-o", "json").stdout)
    assert sum(c["nodes_to_rotate"] for c in planned["clusters"].values()) == sum(len(v) for v in before["nodes"].values())
    assert world(region)["terminated"] == before["terminated"] and get(region, "/platformctl/v1/clusters/dev-usw2a-01/invariants")[
        "events"].get("NodeCordoned", 0) == before["invariants"]["dev-usw2a-01"]["events"].get("NodeCordoned", 0)
    # The scheduled job and an operator start a rotation at the same moment: exactly one goes ahead.
    runs = [start(region["home"], "rotate", "run", "--stage", "dev", "--policy", region["policy"], "--lease-ttl", LEASE,
                  "-o", "json") for _ in range(2)]
    done = sorted(((p.wait(timeout=600), p.communicate()) for p in runs), key=lambda r: r[0])
    assert [code for code, _ in done] == [0, 3], [err for _, (_, err) in done]
    out = done[0][1][0]
    assert "another rotation of dev-usw2a-01 is running" in json.loads(done[1][1][0])["clusters"][0]["reason"]
    assert_rotated_without_harm(region, images, before)
    result = json.loads(out)
    assert [c["status"] for c in result["clusters"]] == ["done"] * 3
    # One zone at a time, the host cluster last: each cluster's first wave starts after the one before finished.
    order = [c["cluster"] for c in result["clusters"]]
    assert order == ["dev-usw2a-01", "dev-usw2b-01", "dev-usw2-host"]
    status = json.loads(run(region["home"], "rotate", "status", "--stage", "dev", "-o", "json").stdout)
    by_name = {c["cluster"]: c for c in status["clusters"]}
    assert all(by_name[c]["status"] == "done" and by_name[c]["lease"] is None for c in CLUSTERS)
    spans = [(by_name[c]["waves"][0]["started"], by_name[c]["waves"][-1]["finished_at"]) for c in order]
    assert spans[0][1] <= spans[1][0] and spans[1][1] <= spans[2][0]
    assert sum(by_name[c]["nodes_rotated"] for c in CLUSTERS) == sum(len(v) for v in before["nodes"].values())


# Where a crash test kills `rotate run` (SIGKILL, at a named failpoint), in the order a wave meets them, so
# that each resumed run dies again a little further into the same wave: every phase of a wave, right after
# each kind of call, and inside each wait.
FAILPOINTS = [
    "call:cordon#1", "intent:set-desired#1", "call:set-desired#1", "phase:surged#1", "wait:new-nodes#1",
    "phase:new-nodes-ready#1", "intent:evict#1", "call:evict#1", "drained#1", "phase:drain-done#1",
    "intent:terminate#1", "call:terminate#1", "phase:terminated#1", "wave-finished#1",
]  # each happens in every wave, so every resumed run meets its failpoint before the rotation is over
KILLS = 22


def test_a_rotation_killed_at_any_moment_resumes_and_still_does_no_harm(region: dict[str, Any]) -> None:
    images = new_images(region, "1.6.0")
    before = world(region)
    one_at_a_time = Path(region["home"]) / "one-node-waves.yaml"  # more waves: more moments to die in
    one_at_a_time.write_text(Path(region["policy"]).read_text().replace("maxInFlight: 3", "maxInFlight: 1"))
    args = ("--policy", str(one_at_a_time))
    kills = 0
    where: Counter[str] = Counter()  # the journal's last word when each kill landed
    state = Path(region["state"])  # the region's own store, which every command against it uses by default
    points = iter(FAILPOINTS * 4)
    finished = False
    while kills < KILLS and not finished:
        result = rotate(region, *args, env={"PLATFORMCTL_FAILPOINT": next(points)})
        if result.returncode == -signal.SIGKILL:
            kills += 1
            where[_last_word(state)] += 1
            time.sleep(float(LEASE) + 0.3)  # the dead run's lease runs out
        else:
            assert result.returncode == 0, result.stderr
            finished = "done" in result.stdout or _rotated(region, images)
    # And kills at moments nobody chose: a timer, not a failpoint.
    rng = random.Random(4)
    for _ in range(4):
        if finished:
            break
        proc = start(region["home"], "rotate", "run", "--stage", "dev", *args, "--lease-ttl", LEASE)
        time.sleep(rng.uniform(1.5, 4.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
            proc.communicate(timeout=60)
            where[_last_word(state)] += 1
            time.sleep(float(LEASE) + 0.3)
        else:
            proc.communicate(timeout=60)
    final = rotate(region, *args, "-o", "json")
    assert final.returncode == 0, final.stderr
    assert kills >= 20, where
    # Spread over every phase: after a cordon, mid-drain, right after a termination call, waiting for new nodes.
    assert {"intent terminate", "intent set-desired", "intent evict", "phase surged", "phase drain-done",
            "phase terminated"} <= set(where), where
    assert len(where) >= 10, where
    overlapped = sum(overlapping_waves(SQLiteStore(state), c) for c in CLUSTERS)
    assert overlapped, "no wave drained while an earlier one was still open: the kills never met overlapping waves"
    assert_rotated_without_harm(region, images, before)


def _rotated(region: dict[str, Any], images: dict[str, str]) -> bool:
    return all(n.image == images[f"{c}/{n.labels['eks.amazonaws.com/nodegroup']}"]
               for c in CLUSTERS for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=c).list_nodes())


def _last_word(db: Path) -> str:
    """The newest record of any rotation journal: where the run was when it died."""
    with sqlite3.connect(db) as conn:
        (data,) = conn.execute("SELECT data FROM records WHERE stream LIKE 'rotation/%' ORDER BY time DESC LIMIT 1").fetchone()
    d = json.loads(data)
    return f"{d['kind']} {d.get('op') or d.get('phase') or ''}".strip()


def test_pause_resume_and_abort_work_from_other_processes(region: dict[str, Any]) -> None:
    images = new_images(region, "1.7.0")
    before = world(region)
    home = region["home"]
    running = start(home, "rotate", "run", "--stage", "dev", "--policy", region["policy"], "-o", "json")
    _wait_for(home, lambda status: status["dev-usw2a-01"].get("waves"))
    run(home, "rotate", "pause", "--stage", "dev", "--reason", "checking a dashboard")
    out, err = running.communicate(timeout=600)
    assert running.returncode == 4, err
    # The first zone's cluster stopped after the wave it was in; the rest of the stage never started.
    assert [(c["cluster"], c["status"]) for c in json.loads(out)["clusters"]] == [("dev-usw2a-01", "paused")]
    status = json.loads(run(home, "rotate", "status", "--stage", "dev", "-o", "json").stdout)
    assert {c["cluster"]: c["paused"]["reason"] for c in status["clusters"]} == dict.fromkeys(CLUSTERS, "checking a dashboard")
    assert rotate(region).returncode == 4  # the scheduled job does not override a pause
    run(home, "rotate", "resume", "--stage", "dev")
    again = run(home, "rotate", "resume", "--stage", "dev", check=False)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "nothing is paused" in again.stderr
    # Go on, then abort from another process mid-way: what the run held is given back. The health gate passes
    # one wave and then cannot tell, which holds the run (asking again and again) until the abort arrives.
    count = home / "gate-count"
    gate = home / "gate.py"
    gate.write_text(f"import json, pathlib\np = pathlib.Path({str(count)!r})\nn = int(p.read_text()) if p.exists() else 0\n"
                    f"p.write_text(str(n + 1))\nprint(json.dumps({{'verdict': 'pass' if n < 1 else 'inconclusive', "
                    f"'reason': 'dashboards loading'}}))\n")
    gated = home / "gated.yaml"
    gated.write_text(Path(region["policy"]).read_text() + f"gateTimeoutSeconds: 86400\nhealthGate: {{command: [{sys.executable}, {gate}]}}\n")
    running = start(home, "rotate", "run", "--stage", "dev", "--policy", str(gated), "-o", "json")
    deadline = time.monotonic() + 180
    while not (count.exists() and count.read_text().strip() and int(count.read_text()) >= 3):
        assert time.monotonic() < deadline and running.poll() is None, running.communicate()
        time.sleep(0.2)
    run(home, "rotate", "abort", "--stage", "dev", "--reason", "wrong image")
    out, err = running.communicate(timeout=600)
    assert running.returncode == 1, err
    outcomes = json.loads(out)["clusters"]
    assert outcomes[-1]["status"] == "aborted" and outcomes[-1]["reason"].endswith("wrong image")
    assert all(o["status"] == "done" for o in outcomes[:-1])  # clusters before it finished; none after it began
    for cluster in CLUSTERS:
        nodes = LiveCluster.from_kubeconfig(region["kubeconfig"], context=cluster).list_nodes()
        assert not any(n.unschedulable or any(t.key == TAINT_KEY for t in n.taints) for n in nodes)
    nothing = run(home, "rotate", "abort", "--context", outcomes[-1]["cluster"], check=False)
    assert nothing.returncode == 2 and "no rotation is in progress" in nothing.stderr
    # A maintenance window: one wave, then exit 0; the stage goes no further than the cluster it stopped in.
    window = rotate(region, "--max-waves", "1", "-o", "json")
    assert window.returncode == 0, window.stderr
    outcomes = json.loads(window.stdout)["clusters"]
    stopped = outcomes[-1]
    assert stopped["status"] == "partial" and stopped["reason"].startswith("stopped after 1 wave as --max-waves asked")
    assert len(stopped["report"]["waves"]) == 1 and all(o["status"] == "done" for o in outcomes[:-1])
    status = json.loads(run(home, "rotate", "status", "--stage", "dev", "-o", "json").stdout)
    assert {c["cluster"]: c["status"] for c in status["clusters"]}[stopped["cluster"]] == "partial"
    left = [n for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=stopped["cluster"]).list_nodes()
            if n.image != images[f"{stopped['cluster']}/{n.labels['eks.amazonaws.com/nodegroup']}"]]
    assert left and not any(n.unschedulable for n in left)  # what is left waits, schedulable, for the next run
    # A new run finishes the job.
    assert rotate(region).returncode == 0
    assert_rotated_without_harm(region, images, before)


def _wait_for(home: Path, condition: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = json.loads(run(home, "rotate", "status", "--stage", "dev", "-o", "json").stdout)
        if condition({c["cluster"]: c for c in status["clusters"]}):
            return
        time.sleep(0.2)
    raise AssertionError("the rotation never got there")


def test_a_rotation_through_api_faults_on_every_verb_finishes_with_no_harm(region: dict[str, Any]) -> None:
    """Every cluster's API server answers 5% of every request but a watch (reads, patches, deletes, evictions) 503:
    the calls are asked again and the rotation finishes as it would on a quiet day."""
    images = new_images(region, "1.8.0")
    before = world(region)
    for cluster in CLUSTERS:
        run(region["home"], "local", "fault", "api-errors", cluster, "5%", "--verbs", "all")
    try:
        out = rotate(region, "-o", "json")
    finally:
        run(region["home"], "local", "fault", "clear")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert [c["status"] for c in json.loads(out.stdout)["clusters"]] == ["done"] * 3
    assert_rotated_without_harm(region, images, before)


def test_a_two_minute_outage_of_every_api_server_is_waited_out_and_the_run_finishes_with_no_harm(
        region: dict[str, Any]) -> None:
    """Every cluster's API server answers every request but a watch 503 for two minutes of the region's time (`local
    fault api-errors … --for 2m`: from its first 503), as while EKS scales or upgrades a control plane, and the
    scheduled run starts in it. Longer than one call's retries: each cluster's run, when its turn comes, waits for
    its API (journalled as a wait, which `rotate status` shows while it lasts), asks again every 30 s, and goes on once
    it answers. One run, exit 0, every node rotated, nothing harmed."""
    home = region["home"]
    images = new_images(region, "1.9.0")
    before = world(region)
    with sqlite3.connect(region["state"]) as conn:  # what the store held before (nothing, when no run came first)
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'records'").fetchone()
        (seen,) = conn.execute("SELECT MAX(time) FROM records").fetchone() if exists else (None,)
    for cluster in CLUSTERS:
        run(home, "local", "fault", "api-errors", cluster, "100%", "--verbs", "all", "--for", "2m")
    try:
        out = rotate(region, "-o", "json")
        faults = get(region, "/platformctl/v1/faults")["faults"]
    finally:
        run(home, "local", "fault", "clear")
    assert out.returncode == 0, out.stderr[-3000:]
    assert [c["status"] for c in json.loads(out.stdout)["clusters"]] == ["done"] * 3
    assert sorted(f["cluster"] for f in faults if f["kind"] == "api-errors" and f.get("for") == 120) == sorted(CLUSTERS)
    with sqlite3.connect(region["state"]) as conn:  # each cluster's journal: it waited for its API, and said why
        records = conn.execute("SELECT stream, data FROM records WHERE time > ?", (seen or 0,)).fetchall()
    waited = {stream.removeprefix("rotation/") for stream, data in records
              if stream.startswith("rotation/") and json.loads(data)["kind"] == "waiting" and not json.loads(data).get("nodes")
              and "503" in json.loads(data)["reason"]}
    assert waited == set(CLUSTERS), waited
    assert_rotated_without_harm(region, images, before)


def test_bad_input_is_one_line_exit_2_and_changes_nothing(region: dict[str, Any], tmp_path: Path) -> None:
    home = region["home"]
    state = tmp_path / "state.db"
    bad_policy = tmp_path / "bad.yaml"
    bad_policy.write_text("maxInFlight: 0\n")
    typo = tmp_path / "typo.yaml"
    typo.write_text("targets: {general: ami-0typo}\n")
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(re.sub(r"server: http://127\.0\.0\.1:\d+", "server: http://127.0.0.1:9",
                                  Path(region["kubeconfig"]).read_text()))
    before = world(region)
    cases = [
        (["rotate", "run", "--context", "dev-usw2a-01", "--policy", str(bad_policy)], "bad.yaml: maxInFlight"),
        (["rotate", "run", "--context", "dev-usw2z-99", "--policy", region["policy"]], "dev-usw2z-99"),
        (["rotate", "run", "--context", "dev-usw2a-01", "--kubeconfig", str(unreachable), "--policy", region["policy"]],
         "cannot reach the Kubernetes API at http://127.0.0.1:9"),
        (["rotate", "run", "--context", "dev-usw2a-01", "--policy", region["policy"], "--state", str(tmp_path / "no" / "s.db")],
         "folder"),
        (["rotate", "run", "--context", "dev-usw2a-01", "--policy", str(typo), "--state", str(state)],
         "typo.yaml: targets.general: pool general should run ami-0typo"),
        (["rotate", "resume", "--context", "dev-usw2a-01", "--state", str(state)], f"no state store at {state}"),
        (["rotate", "run", "--policy", region["policy"]], "give exactly one of --context NAME or --stage NAME"),
    ]
    for args, message in cases:
        result = run(home, *args, check=False)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    after = world(region)
    assert after["terminated"] == before["terminated"] and after["desired"] == before["desired"]
    assert all(not n.unschedulable for nodes in after["nodes"].values() for n in nodes)
    assert not state.exists()  # every mistake found before the store is made


# A first light killed at each of its steps in turn (SIGKILL), each run resuming the last one's journal: in this order
# each run meets its point (the first wait comes right after the groups are raised, before any node registers).
FIRST_LIGHT_POINTS = ["intent:set-desired#1", "call:set-desired#1", "wait:first-light#1", "intent:taint#1",
                      "call:taint#1", "intent:untaint#1", "call:untaint#1"]
FIRST = "dev-usw2a-01"  # the stage's first cluster: one zone at a time, the host last


def _first_light_policy(region: dict[str, Any]) -> str:
    """The region's policy with first light, judged by a gate command that passes (the canaries are another test's)."""
    home = Path(region["home"])
    gate = home / "pass.py"
    gate.write_text("import json\nprint(json.dumps({'verdict': 'pass', 'reason': 'the first-light node is fine'}))\n")
    policy = home / "first-light.yaml"
    policy.write_text(Path(region["policy"]).read_text() + f"healthGate: {{command: [{sys.executable}, {gate}]}}\n"
                      "firstLight: {pools: all, minResults: 1, timeout: 10m}\n")
    return str(policy)


def _booted(region: dict[str, Any], images: set[str]) -> list[str]:
    """Every instance, in any state, that booted one of ``images`` as a node (not an image build's builder): EC2's own
    answer."""
    from platformctl.kernel.nodegroups import BUILDER_TAG

    ec2 = boto3.client("ec2", endpoint_url=region["aws_endpoint"], region_name=region["region"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "image-id", "Values": sorted(images)}])
    return sorted(i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]
                  if BUILDER_TAG not in {t["Key"] for t in i.get("Tags", [])})


def _rotate_first(region: dict[str, Any], policy: str, failpoint: str | None = None) -> Any:
    return run(region["home"], "rotate", "run", "--context", FIRST, "--policy", policy, "--lease-ttl", LEASE,
               env={"PLATFORMCTL_FAILPOINT": failpoint} if failpoint else None, check=False, timeout=600)


def test_a_first_light_killed_at_each_step_boots_one_node_a_pool_and_an_abort_leaves_none(region: dict[str, Any]) -> None:
    images = new_images(region, "1.8.0")
    pools = {n.labels["eks.amazonaws.com/nodegroup"] for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=FIRST).list_nodes()}
    mine = {images[f"{FIRST}/{p}"] for p in pools}
    policy = _first_light_policy(region)
    # Killed at each step of first light, then once more at the first wave's first cordon: first light is over (passed),
    # and no wave has raised a group yet.
    for point in [*FIRST_LIGHT_POINTS, "call:cordon#1"]:
        result = _rotate_first(region, policy, point)
        assert result.returncode == -signal.SIGKILL, (point, result.returncode, result.stderr[-500:])
        time.sleep(float(LEASE) + 0.3)  # the dead run's lease runs out
    assert len(_booted(region, mine)) == len(pools), (_booted(region, mine), pools)  # one instance a pool, however killed
    status = json.loads(run(region["home"], "rotate", "status", "--context", FIRST, "-o", "json").stdout)
    lit = status["clusters"][0]["first_light"]
    assert lit["verdict"] == "pass" and set(lit["nodes"]) == pools, lit
    nodes = LiveCluster.from_kubeconfig(region["kubeconfig"], context=FIRST).list_nodes()
    assert not any(t.key == "platformctl.io/first-light" for n in nodes for t in n.taints)
    assert _rotate_first(region, policy).returncode == 0  # the killed run's waves finish
    # A new image, and an abort while its first-light nodes boot: they are terminated, their capacity given back,
    # nothing else moved.
    images = new_images(region, "1.9.0")
    lit_up = {images[f"{FIRST}/{p}"] for p in pools}
    result = _rotate_first(region, policy, "wait:first-light#1")
    assert result.returncode == -signal.SIGKILL, result.stderr[-500:]
    assert len(_booted(region, lit_up)) == len(pools)
    run(region["home"], "rotate", "abort", "--context", FIRST, "--reason", "not tonight")
    ec2 = boto3.client("ec2", endpoint_url=region["aws_endpoint"], region_name=region["region"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    found = ec2.describe_instances(InstanceIds=_booted(region, lit_up))["Reservations"]
    states = {i["InstanceId"]: i["State"]["Name"] for r in found for i in r["Instances"]}
    assert set(states.values()) <= {"shutting-down", "terminated"}, states
    assert desired(region) == region["groups"]
    nodes = LiveCluster.from_kubeconfig(region["kubeconfig"], context=FIRST).list_nodes()
    ours = ("platformctl.io/first-light", TAINT_KEY)
    assert not any(n.unschedulable or any(t.key in ours for t in n.taints) for n in nodes if n.image not in lit_up)
    # The next run lights them again and rotates the cluster, harming nothing.
    assert _rotate_first(region, policy).returncode == 0
    nodes = LiveCluster.from_kubeconfig(region["kubeconfig"], context=FIRST).list_nodes()
    assert {n.image for n in nodes} <= lit_up and not any(n.unschedulable or any(t.key in ours for t in n.taints) for n in nodes)
    invariants = get(region, f"/platformctl/v1/clusters/{FIRST}/invariants")
    assert invariants["budget_violations"] == [] and invariants["lost_pods"] == []
    # (now and then the region records a remediation CronJob's own pod as deleted without eviction, by no client's
    # DELETE: an emulator question of its own, noted; no workload's pod ever is)
    assert [p for p in invariants["deleted_without_eviction"] if not p.startswith("platformctl-system/")] == []
    assert desired(region) == region["groups"]
