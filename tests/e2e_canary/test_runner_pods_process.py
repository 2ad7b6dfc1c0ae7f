"""The canary runner as the Pulumi program deploys it, on `platformctl local up`: the Deployment
`platformctl-canary/platformctl-canary-runner` of every cluster, its pod run by the cluster's kubelet as a process
(`canary run --cluster C`, its canaries and kubeconfig from the ConfigMap the program wrote, its state table the
stage's store). What is checked is what an operator sees: kubectl's pods and their metrics, and the stage's results,
at the throughput each canary's definition promises a cluster (the node-pool canary's five pods an arm every three
minutes), which is what the canary gate's window is sized for."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from typing import Any

import pytest

from e2e_canary.definitions import CANARY_DIR, load_canaries
from e2e_canary.results import results
from platformctl.kernel.state import open_store
from tests.process import region_fixture, region_now, wait_region

pytestmark = [pytest.mark.process]

# At the region's default pace (300x) three minutes of a cluster's time are 0.6 wall seconds, less than an attempt's
# work takes on a loaded 2-core machine (the runner starts the next attempt late, and the window holds one fewer). At
# 60x (3 wall seconds) CI of f69e42d still saw 35 an arm against 40, beside the all-stages test on a slow day: at 30x
# they are 6 wall seconds, an attempt's work fits in its interval as it does on a real cluster (idle time still
# skips), and what is measured is the runner's schedule, not the machine's load.
region = region_fixture("--no-workloads", "--speed", "30", canaries=True)
NAMESPACE = "platformctl-canary"


def kubectl(region: dict[str, Any], context: str, *args: str) -> Any:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is not installed (.ci/run installs it)"
    out = subprocess.run([binary, "--kubeconfig", region["kubeconfig"], "--context", context, "-n", NAMESPACE, *args,
                          "-o", "json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def runner_pod(region: dict[str, Any], cluster: str) -> dict[str, Any]:
    [pod] = kubectl(region, cluster, "get", "pods", "-l", "app.kubernetes.io/name=platformctl-canary-runner")["items"]
    return dict(pod)


def test_every_cluster_runs_its_runner_pod_at_the_throughput_its_canaries_promise(region: dict[str, Any]) -> None:
    clusters = [c["name"] for c in region["clusters"]]
    store = open_store(region["state"])
    begun = region_now(region)
    wait_region(region, 1800)  # the shipped gate's window
    now = region_now(region)
    node_pool = next(c for c in load_canaries(CANARY_DIR) if c.kind == "node-pool")
    # an attempt an interval plus jitter after the last one started: at least this many pods an arm in the window
    promised = int((now - begun) // (node_pool.interval + node_pool.jitter)) * node_pool.pods_per_arm
    for cluster in clusters:
        pod = runner_pod(region, cluster)
        assert pod["status"]["phase"] == "Running" and pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod
        [container] = kubectl(region, cluster, "get", "deployment", "platformctl-canary-runner")["spec"]["template"][
            "spec"]["containers"]
        assert container["args"][:6] == ["canary", "run", "--stage", "dev", "--cluster", cluster]
        # its metrics on the spec's port, at its own address (a pod's network is its own)
        port = container["ports"][0]["containerPort"]
        [address] = [r["address"] for r in json.loads(_status(region))["canary_runners"] if r["cluster"] == cluster]
        with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=30) as response:
            assert f'cluster="{cluster}"' in response.read().decode()
        rows = results(store, "dev", begun, now, cluster=cluster)
        assert {r.canary for r in rows} == {c.name for c in load_canaries(CANARY_DIR)}, cluster
        arms: dict[tuple[str, str], int] = {}
        for r in rows:
            if r.canary == node_pool.name:
                arms[(r.pool or "", r.image or "")] = arms.get((r.pool or "", r.image or ""), 0) + 1
        assert arms and min(arms.values()) >= promised, (cluster, promised, arms)


def test_a_runner_whose_process_dies_is_restarted_in_its_pod_and_records_again(region: dict[str, Any]) -> None:
    cluster = region["clusters"][0]["name"]
    before = runner_pod(region, cluster)
    [pid] = [r["pid"] for r in json.loads(_status(region))["canary_runners"] if r["cluster"] == cluster]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        pod = runner_pod(region, cluster)
        status = pod["status"]["containerStatuses"][0]
        if status["restartCount"] >= 1:
            break
        assert time.monotonic() < deadline, status
        wait_region(region, 5)
    # the same pod, its container started again by the kubelet (restartPolicy Always), not a new pod
    assert pod["metadata"]["uid"] == before["metadata"]["uid"]
    # Its predecessor's lease (wall time: whether a process is alive) holds it off until it lapses; meanwhile each
    # start says so and exits 3, and the kubelet backs off. Then it records again.
    again, store = region_now(region), open_store(region["state"])
    deadline = time.monotonic() + 150
    while not results(store, "dev", again, region_now(region), cluster=cluster):
        assert time.monotonic() < deadline, "the restarted runner recorded nothing"
        wait_region(region, 60)
    log = open(next(r["log"] for r in json.loads(_status(region))["canary_runners"] if r["cluster"] == cluster)).read()
    assert f"{cluster}: not run: another runner holds its lease (" in log
    events = kubectl(region, cluster, "get", "events")["items"]  # each start after the first was held back
    assert any(e["involvedObject"]["name"] == pod["metadata"]["name"] and e["reason"] == "BackOff" and
               "Back-off restarting failed container runner" in e["message"] for e in events), [e["message"] for e in events]


def _status(region: dict[str, Any]) -> str:
    from tests.process import run

    return str(run(region["home"], "local", "status", "-o", "json").stdout)
