"""`canary verdict` on a fresh stage with the shipped canaries running as the Pulumi program runs them (one runner
per cluster, on their own): it is inconclusive at first, passes within the slowest canary's evidence window, and a
bad image still fails it."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from e2e_canary.results import results
from e2e_canary.verdict import stage_verdict
from platformctl.kernel.cluster.live import LiveCluster
from platformctl.kernel.state import open_store
from tests.process import region_fixture, run

region = region_fixture(runners=True)


def verdict(region: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    out = run(region["home"], "canary", "verdict", "--stage", "dev", check=False)
    assert out.returncode in (0, 1, 3), out.stderr
    return out.returncode, json.loads(out.stdout)


def wait_for(region: dict[str, Any], wanted: str, wall_seconds: float, naming: str = "") -> list[dict[str, Any]]:
    said: list[dict[str, Any]] = []
    deadline = time.monotonic() + wall_seconds
    while time.monotonic() < deadline:
        said.append(verdict(region)[1])
        if said[-1]["verdict"] == wanted and naming in said[-1]["reason"]:
            return said
        time.sleep(5)  # a command every few seconds, as a person or a dashboard asks: no load the runners must share
    pytest.fail(f"no {wanted} in {wall_seconds} s: the last verdict said {said[-1]['reason'] if said else None}")


def test_a_healthy_fresh_stage_passes_within_its_slowest_canarys_evidence_window(region: dict[str, Any]) -> None:
    said = wait_for(region, "pass", 300)
    assert {s["verdict"] for s in said[:-1]} <= {"inconclusive"}  # never a fail on the way, never a pass on too little
    passed = said[-1]
    canaries = passed["canaries"]
    assert set(canaries) == {"node-pool", "service", "batch", "cron", "daemon"}
    # Each canary says which window it used; the 5- and 10-minute canaries need more than 30 minutes of it.
    assert all(c["window_seconds"] % 1800 == 0 and c["window"] for c in canaries.values())
    assert max(c["window_seconds"] for c in canaries.values()) > 1800
    assert passed["evidence_window_seconds"] == max(c["window_seconds"] for c in canaries.values())
    assert all(c["metrics"]["failure_rate"]["experiment"]["n"] >= 20 for c in canaries.values())
    # It passed within the slowest canary's window of the first result, give or take one window. When: the verdict
    # taken again over the stored results minute by minute of the region's time, as `canary verdict` takes it (the
    # region skips idle time, so between two polls of this test it may move hours: the polls do not say when).
    rows = results(open_store(passed["state"]), "dev", since=0, until=passed["at"])
    first = min(r.at for r in rows)
    at, verdicts = first, []
    while at <= passed["at"]:
        verdicts.append((at, stage_verdict([r for r in rows if r.at <= at], at, 1800).verdict))
        if verdicts[-1][1] == "pass":
            break
        at += 60
    if verdicts[-1][1] != "pass":  # the minutes stepped over the instant it passed: take that instant itself
        verdicts.append((passed["at"], stage_verdict(rows, passed["at"], 1800).verdict))
    assert "fail" not in {v for _, v in verdicts}, [t for t, v in verdicts if v == "fail"][:3]
    assert verdicts[-1][1] == "pass" and verdicts[-1][0] - first <= passed["evidence_window_seconds"] + 1800, \
        (verdicts[-1][0] - first, passed["reason"])


def test_a_bad_image_still_fails_the_verdict_naming_the_canary(region: dict[str, Any]) -> None:
    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context="dev-usw2a-01")
    bad = next(n.image for n in live.list_nodes() if n.pool == "general")
    run(region["home"], "local", "fault", "bad-image", bad)
    try:
        # The first fail may be a slower check beside the pods that cannot start (the region's clock runs 300x on
        # two busy cores); the failed results arrive when their checks give up, and the reason then names them.
        seen = wait_for(region, "fail", 300, naming="CreateContainerError")
    finally:
        run(region["home"], "local", "fault", "clear")
    said = seen[-1]
    assert all(s["verdict"] != "pass" for s in seen[1:])  # once the image is bad, never a pass again
    failed = [name for name, c in said["canaries"].items() if c["verdict"] == "fail"]
    assert failed and said["reason"].startswith(f"canary {failed[0]} over ")
    assert any("CreateContainerError" in f["reason"] and bad in f["reason"]
               for c in said["canaries"].values() for f in c["failures"])  # the kubelet's reason, with the image
