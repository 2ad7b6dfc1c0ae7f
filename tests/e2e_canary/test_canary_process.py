"""`platformctl canary run` and `canary verdict` as separate processes against the local region server:
a healthy stage passes, each fault fails the matching canary with a reason that names it, a runner killed
mid-check leaves nothing behind once the next run has reaped, and bad input is one line, exit 2."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
import pytest
from prometheus_client.parser import text_string_to_metric_families

from platformctl.kernel.cluster.live import LiveCluster
from tests.process import new_images, region_fixture, region_now, run, start

CLUSTER = "dev-usw2a-01"


def _canaries(info: dict[str, Any]) -> None:
    canaries = info["home"] / "canaries"
    canaries.mkdir()
    (canaries / "node-pool.yaml").write_text("name: node-pool\nkind: node-pool\npodsPerArm: 8\ndeadline: 2m\ninterval: 1m\n")
    (canaries / "service.yaml").write_text("name: service\nkind: service\ndeadline: 3m\nscaleTo: 4\n")
    (canaries / "batch.yaml").write_text("name: batch\nkind: batch\ndeadline: 3m\nparallelism: 3\nrunSeconds: 10\n")
    (canaries / "cron.yaml").write_text("name: cron\nkind: cron\ndeadline: 3m\nschedule: '* * * * *'\ntoleranceSeconds: 30\n")
    (canaries / "daemon.yaml").write_text("name: daemon\nkind: daemon\ndeadline: 3m\nreadyDeadlineSeconds: 2m\n")
    info["canaries"] = str(canaries)


# 60x, not the default 300x: the runner's own work moves the region's clock at its pace, and a check's deadline (2 to 3
# minutes here) must not pass while a busy machine holds the runner (3 min at 300x is 0.6 s of wall time). What nobody
# waits through is skipped either way.
region = region_fixture("--no-workloads", "--speed", "60", prepare=_canaries)


def canary(region: dict[str, Any], *args: str, env: dict[str, str] | None = None) -> Any:
    return run(region["home"], "canary", "run", "--stage", "dev", "--cluster", CLUSTER, "--canaries", region["canaries"],
               "--lease-ttl", "2", *args, check=False, env=env, timeout=300)


def results(out: Any) -> list[dict[str, Any]]:
    report = json.loads(out.stdout)
    return [r for c in report["clusters"] for a in c["canaries"] for r in a["results"]]


def start_runner(region: dict[str, Any], *args: str) -> Any:
    """The cluster's runner as its Deployment runs it, on its own: returned once it has recorded a result, as a runner
    that runs for months always has when a rotation begins (a runner not yet started holds no clock, and a rotation
    waiting for its gate would skip the region's time past the runner's first check)."""
    from e2e_canary.results import results as recorded
    from platformctl.kernel.state import open_store

    begun = region_now(region)
    runner = start(region["home"], "canary", "run", "--stage", "dev", "--cluster", CLUSTER, "--canaries", region["canaries"],
                   "--lease-ttl", "2", *args)
    store = open_store(region["state"])
    deadline = time.monotonic() + 120
    while not recorded(store, "dev", begun, region_now(region) + 1, cluster=CLUSTER):
        assert runner.poll() is None and time.monotonic() < deadline, "the canary runner recorded no result"
        time.sleep(0.2)
    return runner


def images(region: dict[str, Any]) -> dict[str, str]:
    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER)
    return {n.pool: n.image for n in live.list_nodes()}  # type: ignore[misc]


def test_a_healthy_stage_passes(region: dict[str, Any]) -> None:
    times: list[float] = []
    for _ in range(3):
        out = canary(region, "--once", "-o", "json")
        rows = results(out)
        times += [r["at"] for r in rows]
        assert out.returncode == 0, [(r["canary"], r["outcome"], r["reason"]) for r in rows if r["outcome"] != "ok"]
        assert rows and {r["outcome"] for r in rows} == {"ok"}
        assert {r["pool"] for r in rows if r["canary_kind"] == "node-pool"} == set(images(region))
    kinds = {r["canary_kind"] for r in rows}
    assert kinds == {"node-pool", "service", "batch", "cron", "daemon"}
    service = next(r for r in rows if r["canary"] == "service")
    assert service["metrics"]["min_available"] >= 2 and service["metrics"]["roll_seconds"] > 0
    daemon = [r for r in rows if r["canary"] == "daemon"]
    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER)
    assert sorted(r["image"] for r in daemon) == sorted(n.image for n in live.list_nodes() if not n.unschedulable)
    window = str(int(max(times) - min(times)) + 60)  # the three runs, in the region's time (a busy machine slows them)
    verdict = run(region["home"], "canary", "verdict", "--stage", "dev", "--baseline", images(region)["ml"], "--window",
                  window, check=False)
    assert verdict.returncode == 0, verdict.stdout
    said = json.loads(verdict.stdout)
    assert said["verdict"] == "pass"  # node-pool decides an image; the daemon's one ml node is too little to
    assert "daemon: too little data" in said["reason"]  # decide, and it is said
    only = run(region["home"], "canary", "verdict", "--stage", "dev", "--canary", "node-pool", check=False)
    assert set(json.loads(only.stdout)["canaries"]) == {"node-pool"}
    missing = run(region["home"], "canary", "verdict", "--stage", "dev", "--canary", "web", check=False)
    assert missing.returncode == 2 and "--canary: no result of canary 'web' in stage dev" in missing.stderr


def test_a_bad_image_fails_its_arm_with_the_kubelets_reason_and_the_verdict_names_it(region: dict[str, Any]) -> None:
    bad = images(region)["general"]  # the system pool boots it too: every arm of it must fail
    good = next(image for image in images(region).values() if image != bad)
    run(region["home"], "local", "fault", "bad-image", bad)
    for _ in range(3):
        out = canary(region, "--once", "-o", "json")
        assert out.returncode == 1
        rows = results(out)
        not_failed = [(r["canary"], r["outcome"], r["reason"]) for r in rows if r["image"] == bad and r["outcome"] != "fail"]
        assert not not_failed and any(r["image"] == bad for r in rows), not_failed
        assert {r["outcome"] for r in rows if r["image"] and r["image"] != bad} == {"ok"}  # node-pool and daemon rows
        assert all("CreateContainerError" in r["reason"] for r in rows if r["image"] == bad)
        # Every kind says why. (A CronJob that fired late, as on a machine too busy to keep the region's clock, is the
        # cron canary measuring what it measures, whatever the image: it says so in its own words.)
        unexplained = [(r["canary"], r["reason"]) for r in rows if r["outcome"] == "fail" and "CreateContainerError" not in r["reason"]
                       and not (r["canary_kind"] == "cron" and "after its schedule" in r["reason"])]
        assert not unexplained, unexplained
    verdict = run(region["home"], "canary", "verdict", "--stage", "dev", "--baseline", good, "--window", "20m", check=False)
    said = json.loads(verdict.stdout)
    assert verdict.returncode == 1 and said["verdict"] == "fail" and bad in said["reason"]
    run(region["home"], "local", "fault", "clear")


def test_api_errors_fail_the_canary_naming_the_503(region: dict[str, Any]) -> None:
    run(region["home"], "local", "fault", "api-errors", CLUSTER, "100%")
    times: list[float] = []
    try:
        for _ in range(3):  # one failed attempt is not evidence at the verdict's alpha; three in a row are
            out = canary(region, "--once", "-o", "json")
            assert out.returncode == 1
            rows = results(out)
            times += [r["at"] for r in rows]
            assert rows and {r["outcome"] for r in rows} == {"fail"} and all("503" in r["reason"] for r in rows)
            assert {r["canary_kind"] for r in rows} == {"node-pool", "service", "batch", "cron", "daemon"}
    finally:
        run(region["home"], "local", "fault", "clear")
    window = str(int(max(times) - min(times)) + 1)  # the faulty runs' span, in the region's time
    verdict = run(region["home"], "canary", "verdict", "--stage", "dev", "--window", window, check=False)
    said = json.loads(verdict.stdout)
    assert verdict.returncode == 1 and said["verdict"] == "fail" and "failure_rate" in said["reason"], said["reason"]


def test_a_slow_image_passes_each_check_and_fails_the_verdict_on_startup_latency(region: dict[str, Any]) -> None:
    slow = images(region)["ml"]
    good = images(region)["general"]
    run(region["home"], "local", "fault", "slow-start", slow, "20")
    times: list[float] = []
    try:
        for _ in range(3):
            out = canary(region, "--once", "-o", "json")
            times += [r["at"] for r in results(out)]  # every canary's: the verdict's window ends at the newest result
            rows = [r for r in results(out) if r["canary_kind"] == "node-pool"]
            assert {r["outcome"] for r in rows} == {"ok"}  # slow is not broken: every pod started
            assert min(r["metrics"]["pod_startup_seconds"] for r in rows if r["image"] == slow) >= 20
    finally:
        run(region["home"], "local", "fault", "clear")
    window = str(int(max(times) - min(times)) + 60)  # the three runs, in the region's time
    verdict = run(region["home"], "canary", "verdict", "--stage", "dev", "--baseline", good, "--window", window, check=False)
    said = json.loads(verdict.stdout)
    assert verdict.returncode == 1 and said["verdict"] == "fail", said["reason"]
    assert slow in said["reason"] and "pod_startup_seconds" in said["reason"], said["reason"]


def _canary_namespaces(region: dict[str, Any], cluster: str = CLUSTER) -> list[str]:
    url = f"{region['kubernetes_endpoint']}/clusters/{cluster}/api/v1/namespaces?labelSelector=platformctl.io/canary"
    with urllib.request.urlopen(url, timeout=30) as response:
        return [n["metadata"]["name"] for n in json.loads(response.read())["items"]
                if n.get("status", {}).get("phase") != "Terminating"]


def test_a_runner_killed_mid_check_leaves_nothing_once_the_next_run_reaps(region: dict[str, Any]) -> None:
    slow = images(region)["general"]
    run(region["home"], "local", "fault", "slow-start", slow, "90")  # so that the kill lands mid-check
    proc = start(region["home"], "canary", "run", "--stage", "dev", "--cluster", CLUSTER, "--canaries", region["canaries"],
                 "--lease-ttl", "2", "--once")
    try:
        deadline = time.monotonic() + 60
        while not _canary_namespaces(region) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        # what the dead runner's checks had made when it died (its canaries run at once: some may have begun since
        # the look above, and a request it sent before the kill may reach a busy server after it), namespaces and
        # pods, is still there once it is gone
        left, deadline = _canary_namespaces(region), time.monotonic() + 15
        while time.monotonic() < deadline:
            time.sleep(0.5)
            again = _canary_namespaces(region)
            if again == left:
                break
            left = again
        assert left, "the kill landed mid-check"
        time.sleep(1.0)
        assert _canary_namespaces(region) == left  # nobody cleans up after it
    finally:
        run(region["home"], "local", "fault", "clear")
    time.sleep(2.3)  # its lease runs out
    out = canary(region, "--once", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["clusters"][0]["reaped"] == left
    assert _canary_namespaces(region) == []
    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER)
    time.sleep(0.5)
    assert not [p for p in live.list_pods(label_selector="platformctl.io/canary") if not p.terminating]
    for path in ("apis/apps/v1/deployments", "apis/apps/v1/replicasets", "apis/apps/v1/daemonsets", "apis/batch/v1/jobs",
                 "apis/batch/v1/cronjobs", "apis/policy/v1/poddisruptionbudgets"):
        url = f"{region['kubernetes_endpoint']}/clusters/{CLUSTER}/{path}?labelSelector=platformctl.io/canary"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert json.loads(response.read())["items"] == [], path  # no canary object of any kind remains


def test_every_cluster_of_a_stage_has_its_canaries_at_once_and_sigterm_cleans_up_each(
        region: dict[str, Any], tmp_path: Path) -> None:
    # A CronJob's check waits for its schedule: a runner that carried the stage's clusters one after another would
    # make each next cluster's CronJob wait for a later minute, as if one cluster's canaries held up another's.
    (tmp_path / "cron.yaml").write_text("name: cron\nkind: cron\ndeadline: 3m\nschedule: '* * * * *'\ntoleranceSeconds: 30\n")
    out = run(region["home"], "canary", "run", "--stage", "dev", "--canaries", str(tmp_path), "--lease-ttl", "2", "--once",
              "-o", "json", check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    clusters = [c["name"] for c in region["clusters"]]
    firsts = {c["cluster"]: min(r["at"] for a in c["canaries"] for r in a["results"]) for c in json.loads(out.stdout)["clusters"]}
    assert sorted(firsts) == sorted(clusters) and len(clusters) == 3
    # At once, the first firings are at most one schedule minute apart (a CronJob made just before a minute's turn and
    # one made just after it); carried one after another, each cluster's check waits for a later minute than the one
    # before it ended in, and the third fires two minutes or more after the first.
    assert max(firsts.values()) - min(firsts.values()) < 100, firsts
    # Stopped as a Deployment's pod is, mid-check on every cluster: each check ends and deletes its namespace.
    proc = start(region["home"], "canary", "run", "--stage", "dev", "--canaries", str(tmp_path), "--lease-ttl", "2",
                 "--metrics-port", "0")
    try:
        deadline = time.monotonic() + 120
        at_once = False  # read once a round: a check that ends between the loop's look and a second look is no failure
        while not at_once and time.monotonic() < deadline:
            at_once = all(_canary_namespaces(region, c) for c in clusters)
            time.sleep(0 if at_once else 0.05)
        assert at_once, "every cluster's check under way at once"
    finally:
        proc.send_signal(signal.SIGTERM)
        said, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert {c: _canary_namespaces(region, c) for c in clusters} == dict.fromkeys(clusters, []), said[-3000:] + err[-3000:]


def test_bad_input_is_one_line_exit_2(region: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "web.yaml").write_text("name: web\nkind: webapp\n")
    out = run(region["home"], "canary", "run", "--stage", "dev", "--once", "--canaries", str(tmp_path), check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and f"{tmp_path / 'web.yaml'}: kind:" in out.stderr
    out = run(region["home"], "canary", "run", "--stage", "dev", "--cluster", "dev-usw2z-01", "--once", check=False)
    assert out.returncode == 2 and "no cluster 'dev-usw2z-01'" in out.stderr
    with socket.socket() as taken:  # the metrics port in use: said before any cluster is touched
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        out = run(region["home"], "canary", "run", "--stage", "dev", "--cluster", CLUSTER, "--canaries", region["canaries"],
                  "--metrics-port", port, check=False)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and f"--metrics-port: cannot serve metrics on 127.0.0.1:{port}" \
        in out.stderr, out.stderr
    assert _canary_namespaces(region) == []


# A 10-minute window, so that the earlier tests' failing canaries (their bad and slow images, their 503s) are out of it;
# the judge asks 10 results an arm, what 10 minutes hold at the shipped node-pool canary's pace (a window that could
# not hold its judge's minimum is refused: test_gate_window.py); this module's runner gives far more.
JUDGE = "minSamples: 10\nminAttempts: 10\n"
GATED = ("maxInFlight: 2\nhealthGate: {canary: {window: 10m, config: judge.yaml}}\ngateTimeoutSeconds: 3600\n"
         "durations: {nodeBootSeconds: 180, podStartSeconds: 20}\n")


def _bad_images(region: dict[str, Any], version: str) -> list[str]:
    """A new image tree deployed to the stage, whose images the cluster boots fail every container; returns them."""
    images = new_images(region, version)
    bad = sorted({ami for key, ami in images.items() if key.startswith(f"{CLUSTER}/")})
    for ami in bad:
        run(region["home"], "local", "fault", "bad-image", ami)
    return bad


def test_a_rotation_onto_a_bad_image_with_the_canary_gate_halts_after_its_first_wave(region: dict[str, Any]) -> None:
    """The loop DESIGN.md names: how few nodes ever boot a bad image before it is stopped. The runner runs on its
    own, as its Deployment does; the rotation asks the canary verdict before every wave. (Last in this module: it
    moves the cluster's pools onto new images.)"""
    home = region["home"]
    before = {n.instance_id for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER).list_nodes()}
    bad = _bad_images(region, "9.0.0")
    policy = home / "canary-gate.yaml"
    policy.write_text(GATED)
    (home / "judge.yaml").write_text(JUDGE)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    runner = start_runner(region, "--metrics-port", str(port))
    try:
        out = run(home, "rotate", "run", "--context", CLUSTER, "--policy", str(policy), "-o", "json", check=False, timeout=600)
        # Scraped as Prometheus scrapes, every few seconds, until the runner has judged the bad image's node: a rotation
        # halted by the evicted pods' own failures may end before the runner's next node-pool round reaches it.
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
                    scraped = {s.name: s for s in text_string_to_metric_families(response.read().decode())}
            except OSError:  # the runner still starting (not listening yet), or a scrape cut short: scraped again
                assert runner.poll() is None and time.monotonic() < deadline, "the canary runner never served /metrics"
                time.sleep(2)
                continue
            failed = sum(x.value for x in scraped["platformctl_canary_attempts"].samples if x.name.endswith("_total")
                         and x.labels["canary"] == "node-pool" and x.labels["outcome"] == "fail")
            if failed > 0 or time.monotonic() > deadline:
                break
            time.sleep(2)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.communicate(timeout=120)
        run(home, "local", "fault", "clear")
    if not out.stdout.strip():
        pytest.fail(f"rotate run exited {out.returncode} with nothing on stdout:\n{out.stderr[-6000:]}")
    said = json.loads(out.stdout)["clusters"][0]
    assert out.returncode == 1 and said["status"] == "halted", out.stdout[-2000:]
    # Halted after its first wave, naming the image: by the canary gate before wave 2, or (when a pod the wave
    # evicted, such as the canary runner's own, landed on a new node) by its pods not starting there.
    assert len(said["report"]["waves"]) == 1 and any(ami in said["reason"] for ami in bad), said["reason"]
    assert "before wave 2" in said["reason"] or "CreateContainerError" in said["reason"], said["reason"]
    # Every instance the rotation launched booted a bad image: exactly the first wave's surge, no more.
    ec2 = boto3.client("ec2", endpoint_url=region["aws_endpoint"], region_name=region["region"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    launched = [i["InstanceId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
                if i["ImageId"] in bad and {"Key": "eks:cluster-name", "Value": CLUSTER} in i.get("Tags", [])]
    assert len(launched) == len(said["report"]["waves"][0]["nodes"]) <= 2, launched  # the first wave's, nothing after
    # What Prometheus scraped from the runner meanwhile: the failures, the latency histogram, the verdict.
    attempts = {(x.labels["canary"], x.labels["outcome"]): x.value for x in scraped["platformctl_canary_attempts"].samples
                if x.name.endswith("_total")}
    assert attempts[("node-pool", "ok")] > 0 and attempts[("node-pool", "fail")] > 0
    # every canary's series exists from the start, whether or not its check has ended yet
    assert {c for c, _ in attempts} == {"node-pool", "service", "batch", "cron", "daemon"}
    assert {o for _, o in attempts} == {"ok", "fail", "timeout", "disrupted", "infra_error"}
    counts = [x.value for x in scraped["platformctl_canary_pod_startup_seconds"].samples if x.name.endswith("_count")]
    assert sum(counts) > 0
    assert {x.labels["phase"] for x in scraped["platformctl_canary_phase_seconds"].samples} == {"scheduled", "started", "ready"}
    assert {x.labels["cluster"] for x in scraped["platformctl_canary_verdict"].samples} == {CLUSTER}
    assert all(x.value >= 0 for x in scraped["platformctl_canary_seconds_since_last_success"].samples)
    after = LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER).list_nodes()
    assert len({n.instance_id for n in after} & before) >= len(before) - 2  # the rest never left the old image
    assert not [n for n in after if n.unschedulable]  # the halted run left nothing cordoned


def test_first_light_against_the_local_region_boots_one_node_a_pool_and_only_the_canaries_pods_run_there(
        region: dict[str, Any]) -> None:
    """First light with the canary runner running on its own, as its Deployment does: a bad image boots exactly one
    instance a pool of the cluster, its node is judged by the canary gate and terminated, and kubectl's Scheduled
    events show that no pod but the canaries' was ever placed on it. (After the first-wave test, whose halted run it
    aborts first, as an operator would; it moves nothing.)"""
    home = region["home"]
    # The first-wave test's run halted after its wave: an operator ends it before a rotation onto other images.
    run(home, "rotate", "abort", "--context", CLUSTER, "--reason", "halted on a bad image", check=False)
    nodes = LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER).list_nodes()
    pools = {n.labels["eks.amazonaws.com/nodegroup"] for n in nodes}
    bad = _bad_images(region, "9.1.0")
    policy = home / "first-light.yaml"
    policy.write_text(GATED + "firstLight: {minResults: 5, timeout: 1h}\n")
    (home / "judge.yaml").write_text(JUDGE)
    runner = start_runner(region, "--metrics-port", "0")
    try:
        out = run(home, "rotate", "run", "--context", CLUSTER, "--policy", str(policy), "-o", "json", check=False, timeout=600)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.communicate(timeout=120)
        run(home, "local", "fault", "clear")
    said = json.loads(out.stdout)["clusters"][0]
    report = said["report"]
    assert out.returncode == 1 and report["halted"]["reason"] == "first-light-fail", said["reason"]
    lit = report["first_light"]
    assert set(lit["nodes"]) == pools and any(ami in lit["reason"] for ami in bad), lit
    assert report["waves"] == [] and report["evictions"] == 0
    ec2 = boto3.client("ec2", endpoint_url=region["aws_endpoint"], region_name=region["region"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    launched = {i["InstanceId"]: i["State"]["Name"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
                if i["ImageId"] in bad and {"Key": "eks:cluster-name", "Value": CLUSTER} in i.get("Tags", [])}
    assert sorted(launched) == sorted(lit["instances"].values()), (launched, lit)  # one a pool, nothing else
    assert set(launched.values()) <= {"shutting-down", "terminated"}
    binary = shutil.which("kubectl")
    assert binary is not None
    events = json.loads(subprocess.run([binary, "--kubeconfig", region["kubeconfig"], "--context", CLUSTER, "get", "events",
                                        "-A", "--field-selector", "reason=Scheduled", "-o", "json"],
                                       capture_output=True, text=True, timeout=120, check=True).stdout)["items"]
    there = [e["involvedObject"]["namespace"] for e in events
             if any(e["message"].endswith(f" to {node}") for node in lit["nodes"].values())]
    assert there and all(ns.startswith("canary-") for ns in there), there  # the canaries' own namespaces
