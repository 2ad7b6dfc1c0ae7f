"""The whole pipeline on `platformctl local up --stage all`: every stage in its own AWS region of one moto, on one
virtual clock, each cluster with its canary runner pod running as a process, from an operator's checkout whose stack files
shrink the stages. `release tick` runs as the CronJob runs it, a new process each time.

A good candidate, which also carries a Kubernetes version bump committed to every stack file, reaches `prod` with every
node of every stage on its images; the bump travels with it, each stage's control planes upgraded only when it enters
there. A bad one (its images fail every container, `local fault bad-image`) is stopped in the first stage by first
light: one node a pool of the first cluster booted it, only the canaries' pods ran there, no workload was evicted, none
in a later stage's region; halted and rolled back (every node of `dev` on the last good candidate's images again). (A
rollback whose rotation fails: test_trust.py.) What is checked is what an operator would see: kubectl's nodes and
version, EC2's instances and EKS's clusters, the ledger's JSON."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest
import yaml
from markupsafe import escape

from ami.manifest import MANIFEST_DIR
from platformctl.app.demo.checkout import SPEED, commit_checkout, new_tree, write_files
from platformctl.kernel.cluster.live import LiveCluster
from platformctl.kernel.nodegroups import BUILDER_TAG
from tests.process import region_fixture, run
from tests.release_pipeline.contract import rotation_results_keep_the_contract

pytestmark = [pytest.mark.process, pytest.mark.long]

STAGES = ("dev", "staging", "prod-canary", "prod")
# demo-pipeline's files: two nodes a wave behind the canary gate, short soaks judged by the canary verdict


region = region_fixture("--speed", SPEED, "--no-workloads", stage="all", canaries=True, checkout=True,
                        prepare=lambda info: write_files(info["home"]), timeout=900)


def pl(region: dict[str, Any], *args: str, **kwargs: Any) -> Any:
    return run(region["home"], "--infra-dir", str(region["infra"]), *args, **kwargs)


def release(region: dict[str, Any], *args: str, **kwargs: Any) -> Any:
    home = region["home"]
    return pl(region, "release", *args, "--pipeline", str(home / "pipeline.yaml"), "--ledger", str(home / "ledger.db"),
              **kwargs)


def build(region: dict[str, Any], version: str) -> None:
    """The checkout's image tree with the base at ``version`` (as demo-pipeline makes it), built into every stage."""
    tree = new_tree(MANIFEST_DIR, region["home"] / f"manifests-{version}", version)
    pl(region, "ami", "build", "--manifests", str(tree))


def status(region: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(release(region, "status", "-o", "json").stdout))


def tick_until(region: dict[str, Any], done: Any, within: float = 1800,
               each: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Tick until ``done(status)``, for up to ``within`` seconds of the wall (how many ticks that takes depends on
    how fast the machine lets the region's time pass, so not a count of them)."""
    said = []
    give_up = time.monotonic() + within
    now: dict[str, Any] = {}
    while time.monotonic() < give_up:
        out = release(region, "tick", check=False, timeout=900)
        assert out.returncode in (0, 3), out.stderr[-3000:]
        said.append(out.stdout.strip())
        now = status(region)
        if each is not None:
            each(now)
        if done(now):
            return now
    where = {name: {k: s.get(k) for k in ("current", "step", "waiting_for", "since")}
             for name, s in (now.get("stages") or {}).items()}  # why it waits, as status says it
    pytest.fail("the pipeline did not get there:\n" + "\n".join(said[-15:]) + "\n" + json.dumps(where, indent=1))


def nodes_by_stage(region: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each stage's nodes and the image each booted, as kubectl shows them."""
    out: dict[str, dict[str, str]] = {s: {} for s in STAGES}
    for c in region["clusters"]:
        for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=c["name"]).list_nodes():
            out[c["stage"]][f"{c['name']}/{n.name}"] = n.image or ""
    return out


def kubectl(region: dict[str, Any], context: str, *args: str, stdin: str | None = None) -> str:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is not installed (.ci/run installs it)"
    out = subprocess.run([binary, "--kubeconfig", region["kubeconfig"], "--context", context, *args], input=stdin,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def bump_kubernetes(region: dict[str, Any], version: str) -> None:
    """Every stage's stack file at Kubernetes ``version``, committed: a change the next candidate carries."""
    for path in sorted(region["infra"].glob("Pulumi.*.yaml")):
        data = yaml.safe_load(path.read_text())
        data["config"]["platformctl:kubernetesVersion"] = version
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    commit_checkout(region["infra"], f"Kubernetes {version}")


def control_planes(region: dict[str, Any]) -> dict[str, set[str]]:
    """Each stage's control plane versions, as its EKS answers."""
    out: dict[str, set[str]] = {s: set() for s in STAGES}
    for c in region["clusters"]:
        eks = boto3.client("eks", endpoint_url=region["aws_endpoint"], region_name=region["by_stage"][c["stage"]]["region"],
                           aws_access_key_id="testing", aws_secret_access_key="testing")
        out[c["stage"]].add(eks.describe_cluster(name=c["name"])["cluster"]["version"])
    return out


def images_of(candidate: dict[str, Any], stage: str) -> set[str]:
    return {i["id"] for i in candidate["stages"][stage]["images"].values()}


def booted(region: dict[str, Any], stage: str, images: set[str]) -> list[str]:
    """Every instance, in any state, that booted one of ``images`` in the stage's AWS region: EC2's own answer."""
    where = region["by_stage"][stage]["region"]
    ec2 = boto3.client("ec2", endpoint_url=region["aws_endpoint"], region_name=where, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    pages = ec2.get_paginator("describe_instances").paginate(Filters=[{"Name": "image-id", "Values": sorted(images)}])
    # not an image build's builder: it booted a parent image to bake a child, and ran no workload
    return [i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]
            if BUILDER_TAG not in {t["Key"] for t in i.get("Tags", [])}]


def test_the_region_holds_every_stage_each_in_its_own_aws_region_with_its_canary_runners(region: dict[str, Any]) -> None:
    assert region["stages"] == list(STAGES)
    assert {region["by_stage"][s]["region"] for s in STAGES} == {"us-west-2", "us-east-2", "us-east-1"}
    assert {c["stage"] for c in region["clusters"]} == set(STAGES)
    # the canary runner Deployment the program puts in every cluster, its pod run by the cluster's kubelet
    runners = region["canary_runners"]
    assert sorted(r["cluster"] for r in runners) == sorted(c["name"] for c in region["clusters"])
    assert all(r["running"] for r in runners), runners
    for stage in STAGES:
        # each cluster's runner pod writes to its stage's own store, which the operator's commands read
        give_up = time.monotonic() + 120
        while True:
            verdict = json.loads(pl(region, "canary", "verdict", "--stage", stage, check=False).stdout)
            recorded = sum(r["experiment"] for r in verdict["results"].values())
            if recorded or time.monotonic() > give_up:
                break
            time.sleep(2)
        assert verdict["state"] == region["by_stage"][stage]["state"]
        assert recorded > 0, (stage, verdict["results"])
    # kubectl reaches a cluster of every stage through the one kubeconfig
    by_stage = nodes_by_stage(region)
    assert all(by_stage[s] for s in STAGES)


def test_a_good_candidate_reaches_prod_and_a_bad_one_is_stopped_in_dev_by_first_light(
        region: dict[str, Any]) -> None:
    build(region, "9.1.0")
    assert control_planes(region) == dict.fromkeys(STAGES, {"1.32"})
    bump_kubernetes(region, "1.33")
    good = json.loads(release(region, "start", "--note", "base 9.1, Kubernetes 1.33", "-o", "json").stdout)
    assert {good["stages"][s]["kubernetes_version"] for s in STAGES} == {"1.33"}
    seen: list[tuple[dict[str, set[str]], dict[str, tuple[str | None, str | None]]]] = []

    def travel(now: dict[str, Any]) -> None:
        seen.append((control_planes(region), {s: (now["stages"][s]["current"], now["stages"][s]["last_good"]) for s in STAGES}))

    now = tick_until(region, lambda s: s["stages"]["prod"]["last_good"] == good["id"], each=travel)
    assert all(now["stages"][s]["last_good"] == good["id"] for s in STAGES)
    # The bump travelled with the candidate: a stage's control planes moved only once it had entered there, never ahead
    # of an earlier stage's, and at some tick dev ran 1.33 while prod still ran 1.32.
    for versions, where in seen:
        for i, stage in enumerate(STAGES):
            if versions[stage] != {"1.32"}:
                assert versions[stage] == {"1.33"} and good["id"] in where[stage], (stage, versions, where)
                assert all(versions[s] == {"1.33"} for s in STAGES[:i]), versions
    assert any(v["dev"] == {"1.33"} and v["prod"] == {"1.32"} for v, _ in seen)
    assert control_planes(region) == dict.fromkeys(STAGES, {"1.33"})
    for c in region["clusters"]:  # kubectl sees the new version: the API server's, and every node's kubelet (all rotated)
        server = json.loads(kubectl(region, c["name"], "version", "-o", "json"))["serverVersion"]
        assert (server["major"], server["minor"]) == ("1", "33"), server
        kubelets = {n["status"]["nodeInfo"]["kubeletVersion"]
                    for n in json.loads(kubectl(region, c["name"], "get", "nodes", "-o", "json"))["items"]}
        assert kubelets == {"v1.33.0-eks"}, (c["name"], kubelets)
    # The rotations waited for the canary gate before a second wave: the new image's node-pool results take
    # a round or two of the canaries to gather (what `release history` keeps of each cluster's rotation report).
    rotated = [e for e in json.loads(release(region, "history", "-o", "json").stdout)
               if e["candidate"] == good["id"] and e["decision"] == "rotated"]
    # (The last tick's rotation report: a rotation re-planned after nodes were blocked reports its last run only.)
    assert {e["stage"] for e in rotated} == set(STAGES)
    held = {e["stage"]: [s for c in e["inputs"]["result"]["clusters"] for s in c["gate_seconds"][1:]] for e in rotated}
    # First light held each cluster's first wave until the canaries had judged its node of each pool.
    lit = {e["stage"]: [c["first_light"] for c in e["inputs"]["result"]["clusters"] if c.get("first_light")] for e in rotated}
    assert all(f["verdict"] == "pass" for fs in lit.values() for f in fs), lit
    assert max([s for waits in held.values() for s in waits] + [f["seconds"] or 0 for fs in lit.values() for f in fs]) >= 60, \
        (held, lit)
    # Every node of every stage runs the candidate's images (the stage's own copies, in its own AWS region).
    nodes = nodes_by_stage(region)
    for stage in STAGES:
        assert set(nodes[stage].values()) <= images_of(good, stage), (stage, nodes[stage])

    build(region, "9.2.0")
    bad = json.loads(release(region, "start", "--note", "base 9.2, broken", "-o", "json").stdout)
    for ami in sorted(set().union(*(images_of(bad, s) for s in STAGES))):  # broken wherever it is copied
        pl(region, "local", "fault", "bad-image", ami)
    now = tick_until(region, lambda s: s["candidates"][bad["id"]]["status"] == "halted")
    now = tick_until(region, lambda s: s["stages"]["dev"]["step"] == "idle", within=300)  # rolled back
    assert now["stages"]["dev"]["last_good"] == good["id"]
    history = json.loads(release(region, "history", "-o", "json").stdout)
    mine = [e for e in history if e["candidate"] == bad["id"]]
    assert {e["stage"] for e in mine} == {None, "dev"}, mine  # never entered a later stage
    halt = next(e for e in mine if e["decision"] == "halt")
    rolled = next(e for e in mine if e["decision"] == "rolled-back")
    assert rolled["inputs"]["result"]["status"] == "finished", rolled["inputs"]["result"]
    # First light stopped it: in the one cluster that began, one node a pool booted the bad images, the canaries' pods
    # failed there, the run halted before its first wave and no workload was evicted; its evidence is in the ledger.
    assert "first-light" in halt["inputs"]["decision"]["unmet"], halt["inputs"]["decision"]
    clusters = halt["inputs"]["result"]["clusters"]
    started = [c for c in clusters if c.get("first_light")]
    assert len(started) == 1 and started[0]["first_light"]["verdict"] == "fail", clusters
    assert "CreateContainerError" in started[0]["first_light"]["reason"] or "failure_rate" in started[0]["first_light"]["reason"]
    assert all(c["waves"] == [] and c["evictions"] == 0 for c in clusters), clusters
    pools = started[0]["first_light"]["pools"]
    launched = booted(region, "dev", images_of(bad, "dev"))
    # EC2's instances that booted the bad images as nodes (an image build's builders boot a parent image, and are told
    # apart by their tag): one a pool of that cluster, fewer than what its first wave would have been had it had none.
    assert len(launched) == len(pools) == started[0]["first_light"]["nodes"], (launched, pools)
    assert started[0]["planned_first_wave"] >= 1
    for stage in STAGES[1:]:
        assert booted(region, stage, images_of(bad, stage)) == [], stage
    counted = now["candidates"][bad["id"]]
    assert counted["instances_booted_by_stage"] == {"dev": len(launched), "staging": 0, "prod-canary": 0, "prod": 0}
    assert counted["instances_booted_first_light_by_stage"]["dev"] == len(launched)
    assert counted["instances_booted_in_waves_by_stage"]["dev"] == 0
    # dev is back on the good candidate's images, node by node; the later stages never moved.
    nodes = nodes_by_stage(region)
    for stage in STAGES:
        assert set(nodes[stage].values()) <= images_of(good, stage), (stage, nodes[stage])
    # what the application layer's adapter answered holds the contract the reconciler's fake holds to
    assert rotation_results_keep_the_contract(history) >= 1 + 4 + 1  # the halt, the good one's rotations, the rollback
    # every decision replays to the same outcome
    for entry in history:
        if entry["decision"] in ("enter", "promote", "halt", "soak"):
            assert release(region, "replay", entry["id"], check=False).returncode == 0, entry
    # The dashboard people decide from, exported from these stores: the halted candidate with its reason and how many
    # instances booted it, and dev's canaries charted per image, the bad image's success rate its own line.
    page = region["home"] / "dashboard.html"
    home = region["home"]
    pl(region, "dashboard", "--export", str(page), "--pipeline", str(home / "pipeline.yaml"), "--ledger", str(home / "ledger.db"))
    html = page.read_text()
    assert str(escape(counted["reason"])) in html
    assert re.search(rf'data-candidate="{bad["id"]}">.*?<td><b>{len(launched)}</b></td>', html, re.S)
    found = re.search(r'<script type="application/json" id="figures">(.*?)</script>', html, re.S)
    assert found
    figures = json.loads(found.group(1))
    drawn = {t["name"] for t in figures["dev-success"]["data"]}
    assert images_of(good, "dev") & drawn and images_of(bad, "dev") & drawn, drawn
