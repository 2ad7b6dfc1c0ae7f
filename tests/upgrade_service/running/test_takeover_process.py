"""A run that lost its lease stops acting: real processes, paused by SIGSTOP past their lease, on the local region.

The first ``rotate run`` is paused mid-rotation (as an operating system or a frozen VM pauses a process)
for longer than its lease's TTL. A second run takes the lease over and finishes the rotation. The
first is then continued: it must notice, before anything else, that its lease may have expired, and
exit non-zero having changed nothing more: the region's record of AWS calls and the cluster's event
log show no side effect after the second run finished. And a stage run interrupted by Ctrl-C stops
every cluster at its next safe point, journals it, and exits with its leases released and nothing
acting.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from typing import Any

import pytest

from platformctl.kernel.cluster.live import LiveCluster
from tests.process import get, new_images, region_fixture, run, start

CLUSTER = "dev-usw2a-01"
LEASE = "2"
MUTATING_AWS = {"SetDesiredCapacity", "TerminateInstanceInAutoScalingGroup"}
MUTATING_KUBE = ("NodeCordoned", "NodeUncordoned", "PodEvicted", "EvictionRefused")


def _policy(info: dict[str, Any]) -> None:
    policy = info["home"] / "policy.yaml"
    policy.write_text("maxInFlight: 1\ndurations: {nodeBootSeconds: 180, podStartSeconds: 20}\n")
    info["policy"] = str(policy)


region = region_fixture(prepare=_policy)


def side_effects(region: dict[str, Any]) -> dict[str, Any]:
    """Every change a client made, as the region recorded it: AWS's mutating calls and the cluster's events."""
    calls = get(region, "/platformctl/v1/aws-calls")["calls"]
    events = get(region, f"/platformctl/v1/clusters/{CLUSTER}/invariants")["events"]
    return {"aws": Counter(c["action"] for c in calls if c["action"] in MUTATING_AWS),
            "kube": {kind: events.get(kind, 0) for kind in MUTATING_KUBE}}


def status(region: dict[str, Any]) -> dict[str, Any]:
    return json.loads(run(region["home"], "rotate", "status", "--context", CLUSTER, "-o", "json").stdout)["clusters"][0]


def test_a_run_paused_past_its_lease_and_taken_over_changes_nothing_once_continued(region: dict[str, Any]) -> None:
    home = region["home"]
    new_images(region, "3.0.0")
    args = ("rotate", "run", "--context", CLUSTER, "--policy", region["policy"], "--lease-ttl", LEASE, "-o", "json")
    first = start(home, *args)
    deadline = time.monotonic() + 120
    while not status(region).get("waves"):  # in its first wave: it has cordoned, surged or is draining
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.2)
    first.send_signal(signal.SIGSTOP)
    try:
        time.sleep(float(LEASE) + 1.5)  # its lease runs out while it cannot renew
        second = run(home, *args, check=False, timeout=600)
        assert second.returncode == 0, second.stderr[-2000:]
        took = json.loads(second.stdout)["clusters"][0]
        assert took["status"] == "done", took["reason"]
        settled = side_effects(region)
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=120)
    assert first.returncode != 0, (out, err)
    said = json.loads(out)["clusters"][0]
    # Whichever notices first once it runs again, its own clock or the store's answer to a renewal, it stops.
    assert said["status"] == "lost-lease", said
    assert "may have expired" in said["reason"] or "is no longer held" in said["reason"], said
    time.sleep(1.0)
    assert side_effects(region) == settled  # not one call or event after the takeover finished
    terminated = Counter(c["params"]["InstanceId"] for c in get(region, "/platformctl/v1/aws-calls")["calls"]
                         if c["action"] == "TerminateInstanceInAutoScalingGroup")
    assert max(terminated.values()) == 1  # no instance terminated twice
    invariants = get(region, f"/platformctl/v1/clusters/{CLUSTER}/invariants")
    assert (invariants["budget_violations"], invariants["lost_pods"], invariants["deleted_without_eviction"]) == ([], [], [])
    # The journal has the second run's records only, after the takeover: the first wrote nothing more.
    final = status(region)
    assert final["status"] == "done" and final["holder"] != said.get("report", {}).get("holder")


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_stops_every_cluster_of_a_stage_at_a_safe_point_and_releases_the_leases_last(region: dict[str, Any],
                                                                                            stop: str) -> None:
    """Ctrl-C (twice: the second does not let the leases go while a cluster still acts), or the SIGTERM a pod gets when
    a drain evicts it (its rotation Job's own node, say), stops the run at a safe point (exit 130) and the next run
    goes on from there."""
    home = region["home"]
    new_images(region, "3.1.0" if stop == "ctrl-c" else "3.2.0")
    running = start(home, "rotate", "run", "--stage", "dev", "--policy", region["policy"], "--lease-ttl", LEASE, "-o", "json")
    deadline = time.monotonic() + 120
    while not status(region).get("waves") or status(region)["status"] == "done":
        assert time.monotonic() < deadline and running.poll() is None, running.communicate()
        time.sleep(0.2)
    if stop == "ctrl-c":
        running.send_signal(signal.SIGINT)
        time.sleep(0.3)
        running.send_signal(signal.SIGINT)  # a second Ctrl-C does not let the leases go while a cluster still acts
    else:
        running.send_signal(signal.SIGTERM)  # kubelet's, once, the grace period before its SIGKILL
    out, err = running.communicate(timeout=300)
    assert running.returncode == 130, (out, err)
    outcome = json.loads(out)["clusters"]
    assert outcome[-1]["status"] == "interrupted" and "interrupted after wave" in outcome[-1]["reason"]
    after = side_effects(region)
    time.sleep(2.0)
    assert side_effects(region) == after  # nothing acts once the process is gone
    said = status(region)
    assert said["status"] == "halted" and said["halted"]["reason"] == "interrupted" and said["lease"] is None
    assert run(home, "rotate", "run", "--context", CLUSTER, "--policy", region["policy"], "--lease-ttl", LEASE,
               check=False, timeout=600).returncode == 0  # the next run goes on from there
    nodes = LiveCluster.from_kubeconfig(region["kubeconfig"], context=CLUSTER).list_nodes()
    assert not any(n.unschedulable for n in nodes)
