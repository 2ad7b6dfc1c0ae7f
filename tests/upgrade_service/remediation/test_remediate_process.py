"""``platformctl remediate`` as its CronJob runs it: separate processes against the local region server.

Faults are injected with ``platformctl local fault`` (the region's kubelets stop, conditions turn True,
instances never join) and everything is checked from outside: nodes through the Kubernetes API,
instances and calls through the region's AWS (moto) and its record of calls, the simulator's event-log
invariants through the server's control endpoint, and decisions through ``remediate status``.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ami.manifest import MANIFEST_DIR
from platformctl.kernel.cluster.live import LiveCluster
from tests.process import region_fixture, region_now, run, wait_region
from tests.upgrade_service.running.test_rotate_run_process import asg, get, new_images, rotate

LEASE = "2"
POLICY = """\
conditions:
  - {type: Ready, unhealthyAfterSeconds: 120}
  - {type: DiskPressure, unhealthyAfterSeconds: 60}
  - {type: KernelDeadlock, unhealthyAfterSeconds: 60}
nodeStartupTimeoutSeconds: 600
drainTimeoutSeconds: 900
maxPerHour: 100
"""


def _files(info: dict[str, Any]) -> None:
    home = info["home"]
    (home / "remediation.yaml").write_text(POLICY)
    info["manifests"] = home / "manifests"  # for a rotation's new images
    info["manifests"].mkdir()
    for path in MANIFEST_DIR.glob("*.yaml"):
        (info["manifests"] / path.name).write_text(path.read_text())
    info["policy"] = str(home / "remediation.yaml")


pytestmark = pytest.mark.long  # killed at every step: minutes (tests/conftest.py starts it first)
region = region_fixture(prepare=_files)


def cli(region: dict[str, Any], *args: str, check: bool = True, env: dict[str, str] | None = None) -> Any:
    return run(region["home"], *args, check=check, env=env, timeout=600)


def remediate(region: dict[str, Any], cluster: str, *args: str, policy: str | None = None,
              env: dict[str, str] | None = None) -> Any:
    return cli(region, "remediate", "--context", cluster, "--policy", policy or region["policy"], "--lease-ttl", LEASE,
               "-o", "json", *args, check=False, env=env)


def answer(result: Any) -> dict[str, Any]:
    assert result.stdout, result.stderr
    return json.loads(result.stdout)["clusters"][0]


def nodes(region: dict[str, Any], cluster: str) -> list[Any]:
    return LiveCluster.from_kubeconfig(region["kubeconfig"], context=cluster).list_nodes()


def terminated(region: dict[str, Any]) -> Counter[str]:
    calls = get(region, "/platformctl/v1/aws-calls?action=TerminateInstanceInAutoScalingGroup")["calls"]
    return Counter(c["params"]["InstanceId"] for c in calls)


def no_harm(region: dict[str, Any], cluster: str) -> None:
    report = get(region, f"/platformctl/v1/clusters/{cluster}/invariants")
    assert report["budget_violations"] == [] and report["deleted_without_eviction"] == [], report
    assert report["lost_pods"] == [], report


def ready_status(region: dict[str, Any], cluster: str, node: str) -> str:
    return {n.name: n for n in nodes(region, cluster)}[node].condition("Ready").status


def busiest(region: dict[str, Any], cluster: str, pool: str = "general") -> str:
    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=cluster)
    candidates = [n for n in live.list_nodes() if n.pool == pool and n.ready and not n.unschedulable]
    return max(candidates, key=lambda n: len(live.list_pods(node_name=n.name))).name


def test_a_notready_node_is_replaced_within_one_run_past_its_threshold(region: dict[str, Any]) -> None:
    cluster = "dev-usw2a-01"
    node = busiest(region, cluster)
    instance = next(n.instance_id for n in nodes(region, cluster) if n.name == node)
    cli(region, "local", "fault", "node-notready", node)
    # Its Ready condition stays True until the node controller's grace period has passed (as on a real cluster): a
    # remediation started sooner sees a healthy node, and nothing pending.
    until = region_now(region) + 120
    while ready_status(region, cluster, node) == "True" and region_now(region) < until:
        time.sleep(0.1)
    assert ready_status(region, cluster, node) == "Unknown"  # as kubectl shows a node whose kubelet stopped
    patient = Path(region["home"]) / "patient.yaml"  # an hour of the cluster is 12 s of the wall: longer than a run
    patient.write_text(POLICY.replace("unhealthyAfterSeconds: 120", "unhealthyAfterSeconds: 3600"))
    first = answer(remediate(region, cluster, policy=str(patient)))
    assert first["status"] == "ok" and first["remediated"] == []  # not for long enough yet
    assert [p["subject"] for p in first["pending"]] == [node]
    wait_region(region, 120)  # unhealthyAfterSeconds since the condition turned Unknown
    result = remediate(region, cluster)
    out = answer(result)
    assert result.returncode == 0, out
    assert [(r["subject"], r["result"]) for r in out["remediated"]] == [(node, "replaced")]
    # The node leaves when the region's node sync sees its instance terminated (a virtual minute at most), as a cloud
    # node controller deletes the Node of a terminated instance: not necessarily before `remediate` has returned.
    until = region_now(region) + 120
    while node in (after := {n.name: n for n in nodes(region, cluster)}) and region_now(region) < until:
        time.sleep(0.1)
    assert node not in after
    assert after[out["remediated"][0]["replacement"]].ready
    assert terminated(region)[instance] == 1
    no_harm(region, cluster)
    status = json.loads(cli(region, "remediate", "status", "--context", cluster, "-o", "json").stdout)["clusters"][0]
    assert status["breaker"] == "closed" and status["remediations_last_hour"] == 1
    assert [r["kind"] for r in status["recent"]] == ["remediation-started", "remediation-finished"]


def test_an_instance_that_never_joined_is_replaced(region: dict[str, Any]) -> None:
    cluster, group_pool = "dev-usw2b-01", "dev-usw2b-01/general"
    cli(region, "local", "fault", "instance-no-join", group_pool)
    client = asg(region)
    group = next(g for g in client.describe_auto_scaling_groups()["AutoScalingGroups"]
                 if any(t["Key"] == "eks:cluster-name" and t["Value"] == cluster for t in g["Tags"])
                 and any(t["Key"] == "eks:nodegroup-name" and t["Value"] == "general" for t in g["Tags"]))
    before = {i["InstanceId"] for i in group["Instances"]}
    client.set_desired_capacity(AutoScalingGroupName=group["AutoScalingGroupName"], DesiredCapacity=group["DesiredCapacity"] + 1)
    wait_region(region, 120)
    members = client.describe_auto_scaling_groups(AutoScalingGroupNames=[group["AutoScalingGroupName"]])["AutoScalingGroups"][0]
    (silent,) = {i["InstanceId"] for i in members["Instances"]} - before
    assert silent not in {n.instance_id for n in nodes(region, cluster)}
    wait_region(region, 600)  # nodeStartupTimeoutSeconds
    out = answer(remediate(region, cluster))
    assert [(r["subject"], r["result"]) for r in out["remediated"]] == [(silent, "replaced")], out
    assert terminated(region)[silent] == 1
    replacement = {n.name: n for n in nodes(region, cluster)}[out["remediated"][0]["replacement"]]
    assert replacement.ready and replacement.instance_id not in before | {silent}


def test_forty_percent_broken_opens_the_breaker_and_nothing_is_touched(region: dict[str, Any]) -> None:
    cluster = "dev-usw2b-01"
    names = [n.name for n in nodes(region, cluster)]
    broken = names[: -(-len(names) * 4 // 10)]  # 40%, rounded up
    for name in broken:
        cli(region, "local", "fault", "node-condition", name, "DiskPressure", "--reason", "KubeletHasDiskPressure")
    wait_region(region, 90)
    calls = sum(terminated(region).values())
    result = remediate(region, cluster)
    out = answer(result)
    assert result.returncode == 1 and out["status"] == "breaker-open", out
    assert out["remediated"] == [] and all(d["action"] == "skip" for d in out["decisions"])
    assert not any(n.unschedulable for n in nodes(region, cluster))
    assert sum(terminated(region).values()) == calls
    status = json.loads(cli(region, "remediate", "status", "--context", cluster, "-o", "json").stdout)["clusters"][0]
    assert status["breaker"] == "open"
    assert sorted(u["subject"] for u in status["incident"]["unhealthy"]) == sorted(broken)
    assert all("DiskPressure True" in u["reason"] for u in status["incident"]["unhealthy"])
    text = cli(region, "remediate", "status", "--context", cluster).stdout
    assert "breaker open" in text and f"{len(broken)} of {len(names)} nodes unhealthy" in text
    cli(region, "local", "fault", "clear")
    healed = answer(remediate(region, cluster))
    assert healed["status"] == "ok" and healed["remediated"] == []
    status = json.loads(cli(region, "remediate", "status", "--context", cluster, "-o", "json").stdout)["clusters"][0]
    assert status["breaker"] == "closed"


def test_breaking_nodes_faster_than_max_per_hour_replaces_exactly_that_many_across_runs(region: dict[str, Any]) -> None:
    cluster = "dev-usw2a-01"
    policy = Path(region["home"]) / "two-an-hour.yaml"
    policy.write_text(POLICY.replace("maxPerHour: 100", "maxPerHour: 2") + "maxUnhealthy: 100%\nmaxUnhealthyPerZone: 100%\n")
    start = region_now(region)
    broken: set[str] = set()
    starts: list[float] = []
    skipped: list[bool] = []
    try:
        # Break two nodes before every run until a third remediation has started (the first hour's limit spent,
        # then the next hour's first slot): a run is minutes of the region's time (more when a node holds two pods
        # of a one-at-a-time workload: they leave one after the other, each settled), more on a loaded machine.
        while len(starts) < 3 and region_now(region) < start + 4 * 3600:
            healthy = [n.name for n in nodes(region, cluster) if n.pool == "general" and n.ready and n.name not in broken]
            for name in healthy[:2]:  # a node-problem-detector's condition: no taint, so capacity stays for the drains
                broken.add(name)
                cli(region, "local", "fault", "node-condition", name, "KernelDeadlock", "--reason", "AUFSUmountHung")
            wait_region(region, 70)
            began = region_now(region)
            out = answer(remediate(region, cluster, policy=str(policy)))  # a new process each time
            assert out["status"] == "ok", out
            status = json.loads(cli(region, "remediate", "status", "--context", cluster, "--last", "200", "-o", "json").stdout)
            recent = status["clusters"][0]["recent"]
            # the hour's slots this run found taken: still taken half an hour on, as the new process gets going
            spent = len([t for t in starts if t > began - 1800])
            starts = sorted(r["at"] for r in recent if r["kind"] == "remediation-started" and r["at"] >= start)
            if spent >= 2:  # it found broken nodes and no slot: it must say it skipped them for the limit
                skipped.append(any(r["kind"] == "skipped" and r["code"] == "rate-limit" and "maxPerHour 2" in r["why"]
                                   and r["at"] >= began for r in recent))
        # Broken faster than two an hour, and never more than two started in any hour (the limit slides: one run
        # may start two more once the first hour's slots have come free, so the count can pass three in one run).
        assert len(starts) >= 3 and len(broken) > 3, (starts, broken)
        assert all(b - a >= 3600 for a, b in zip(starts, starts[2:])), starts
        assert starts[2] - starts[0] >= 3600  # exactly two in the first hour: the third waited for its slot
        # Every run that began with the hour's slots spent said so (on a loaded machine a run can outlast the hour,
        # and the next finds its slots free again: then there is nothing to skip).
        assert all(skipped), skipped
        finished = [r for r in recent if r["kind"] == "remediation-finished" and r["at"] >= start]
        assert finished and all(r["result"] == "replaced" for r in finished)
        no_harm(region, cluster)
    finally:
        cli(region, "local", "fault", "clear")


KILL_AT = ["remediation:remediation-started", "call:cordon", "intent:evict", "call:evict", "remediation:drained",
           "intent:terminate", "call:terminate", "wait:replacement"]


def test_killed_mid_remediation_and_rerun_no_instance_is_terminated_twice_and_nothing_stays_cordoned(
        region: dict[str, Any]) -> None:
    cluster = "dev-usw2a-01"
    try:
        _kill_everywhere(region, cluster)
    finally:
        cli(region, "local", "fault", "clear")


def _kill_everywhere(region: dict[str, Any], cluster: str) -> None:
    kills = 0
    for point in KILL_AT:
        node = busiest(region, cluster)
        cli(region, "local", "fault", "node-condition", node, "DiskPressure")
        wait_region(region, 70)
        killed = remediate(region, cluster, env={"PLATFORMCTL_FAILPOINT": point})
        assert killed.returncode == -signal.SIGKILL, (point, killed.stdout, killed.stderr)
        kills += 1
        time.sleep(float(LEASE) + 0.3)  # the dead run's lease runs out
        again = remediate(region, cluster)
        assert again.returncode == 0, (point, again.stdout, again.stderr)
        assert node not in {n.name for n in nodes(region, cluster)}, point
    # Killed right after cordoning a node that then recovers: the next run gives it back.
    node = busiest(region, cluster)
    cli(region, "local", "fault", "node-condition", node, "DiskPressure")
    wait_region(region, 70)
    assert remediate(region, cluster, env={"PLATFORMCTL_FAILPOINT": "call:cordon"}).returncode == -signal.SIGKILL
    kills += 1
    assert {n.name: n for n in nodes(region, cluster)}[node].unschedulable
    cli(region, "local", "fault", "clear")
    time.sleep(float(LEASE) + 0.3)
    out = answer(remediate(region, cluster))
    assert [(r["subject"], r["result"]) for r in out["remediated"]] == [(node, "recovered")], out
    assert kills == len(KILL_AT) + 1
    assert max(terminated(region).values()) == 1  # no instance terminated twice, ever
    assert not any(n.unschedulable for n in nodes(region, cluster))
    no_harm(region, cluster)


def test_a_node_under_rotation_is_left_alone(region: dict[str, Any]) -> None:
    cluster = "dev-usw2a-01"
    new_images(region, "1.7.0")
    policy = Path(region["home"]) / "rotation.yaml"
    policy.write_text("maxInFlight: 2\ndurations: {nodeBootSeconds: 180, podStartSeconds: 20}\n")
    region_for_rotate = {**region, "policy": str(policy)}
    # The rotation dies with its first wave cordoned: the wave is open in its journal.
    died = rotate(region_for_rotate, "--max-waves", "1", env={"PLATFORMCTL_FAILPOINT": "phase:surged#1"})
    assert died.returncode == -signal.SIGKILL
    wave = [n for n in nodes(region, cluster) if n.unschedulable] or \
        [n for c in ("dev-usw2-host", "dev-usw2b-01") for n in nodes(region, c) if n.unschedulable]
    assert wave, "the rotation cordoned its first wave"
    target = wave[0]
    owner = next(c for c in ("dev-usw2a-01", "dev-usw2b-01", "dev-usw2-host") if target.name in {n.name for n in nodes(region, c)})
    cli(region, "local", "fault", "node-notready", target.name)
    wait_region(region, 200)
    out = answer(remediate(region, owner))
    assert out["remediated"] == []
    decision = next(d for d in out["decisions"] if d["subject"] == target.name)
    assert decision["action"] == "skip" and decision["why"].startswith("a rotation is handling it (wave 1 of rotation")
    assert target.name in {n.name for n in nodes(region, owner)}


@pytest.mark.parametrize(("policy", "says"), [
    ("conditions:\n  - {type: DiskPresure}\n", "conditions[0].type: unknown condition type 'DiskPresure' (did you mean DiskPressure?)"),
    ("conditions:\n  - {type: Ready, unhealthyAfterSeconds: -5}\n", "conditions[0].unhealthyAfterSeconds"),
    ("maxUnhealthy: 140%\n", "maxUnhealthy: a percentage cannot be over 100% (got '140%')"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(region: dict[str, Any], tmp_path: Path, policy: str,
                                                          says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(policy)
    before = len(get(region, "/platformctl/v1/aws-calls")["calls"])
    result = remediate(region, "dev-usw2a-01", policy=str(path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and f"{path}: {says}" in result.stderr, result.stderr
    assert len(get(region, "/platformctl/v1/aws-calls")["calls"]) == before
    wrong = cli(region, "local", "fault", "node-notready", "ip-10-99-99-99.us-west-2.compute.internal", check=False)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "no node" in wrong.stderr
