"""`platformctl release tick` as the CronJob runs it, a new process each minute, against the local region with its
canary runners: a new image tree built, started as a candidate, entered, deployed, rotated, soaked and promoted, every
node on its images, and every decision replays, with the tick killed by SIGKILL at every step on the way (and inside
the rotation it runs) and run again: no deploy and no rotation repeated. Two ticks at once: one acts, the other exits
3 having done nothing."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ami.manifest import MANIFEST_DIR
from platformctl.app.demo.checkout import new_tree
from platformctl.kernel.cluster.live import LiveCluster
from tests.process import get, region_fixture, run, start, wait_region
from tests.release_pipeline.contract import rotation_results_keep_the_contract

POLICY = "strategy: surge\nmaxInFlight: 4\ndurations: {nodeBootSeconds: 180, podStartSeconds: 20}\n"
PIPELINE = ("stages:\n  - name: dev\n    rotationPolicy: rotation.yaml\n    soak: 30m\n    minResults: 20\n"
            "    passFor: 10m\n    deadline: 6h\n")
TTL = "4"  # the tick's lease (and its rotations'), wall seconds: a killed tick's lapses quickly

# Where the tick is killed, in the order one candidate's journey meets them: each entry written and the checkpoint
# not; each side effect begun (its intent written) and not made; made and not recorded; and inside the rotation.
FAILPOINTS = ["release:enter", "release:deploy", "release:call:deploy", "release:deployed", "release:rotate",
              "phase:surged", "call:terminate", "release:call:rotate", "release:rotated", "release:verdict",
              "release:promote"]


def _files(info: dict[str, Any]) -> None:
    (info["home"] / "rotation.yaml").write_text(POLICY)
    (info["home"] / "pipeline.yaml").write_text(PIPELINE)


pytestmark = pytest.mark.long  # killed at every step: minutes (tests/conftest.py starts it first)
region = region_fixture("--no-workloads", runners=True, prepare=_files)


def build_new_images(home: Path, version: str) -> None:
    run(home, "ami", "build", "--manifests", str(new_tree(MANIFEST_DIR, home / f"manifests-{version}", version)))


def release(home: Path, *args: str, **kwargs: Any) -> Any:
    return run(home, "release", *args, "--pipeline", str(home / "pipeline.yaml"), "--ledger", str(home / "ledger.db"),
               **kwargs)


def calls(region: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return list(get(region, f"/platformctl/v1/aws-calls?action={action}")["calls"])


def tick_until(region: dict[str, Any], done: Callable[[list[dict[str, Any]]], bool], failpoints: list[str],
               within: float = 900) -> list[str]:
    """Tick (the next failpoint armed, while one is left) until ``done(history)``; the failpoints the tick died at.

    Bounded by the wall (``within`` seconds), not by a count of ticks: how many a soak takes depends on how fast the
    machine lets the region's time pass, and a killed tick's lease lapses on the wall's. A tick that did nothing
    waits a minute of the region's time before the next, as the CronJob does."""
    home, pending, killed = region["home"], list(failpoints), []
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:
        env = {"PLATFORMCTL_FAILPOINT": pending[0]} if pending else None
        out = release(home, "tick", "--lease-ttl", TTL, "-o", "json", check=False, timeout=900, env=env)
        if out.returncode == -signal.SIGKILL:
            killed.append(pending.pop(0))
            continue
        if out.returncode == 3:  # the killed tick's lease, until it lapses; or this tick's, lost while it worked
            # (paused past its TTL on a busy machine): fenced, it stopped before its next write, and the next tick goes on
            assert ("another tick holds the lease" in out.stderr and "nothing done" in out.stderr
                    or "lost a stage's lease mid-tick, stopped before its next write" in out.stderr), out.stderr[-3000:]
            time.sleep(1)
            continue
        assert out.returncode == 0, out.stderr[-3000:]
        if done(json.loads(release(home, "history", "-o", "json").stdout)) and not pending:
            return killed
        if not json.loads(out.stdout)["steps"]:
            wait_region(region, 60)
    pytest.fail(f"not done in {within:.0f} s (killed at {killed})")


def test_a_candidate_is_carried_through_dev_with_the_tick_killed_at_every_step_and_nothing_is_done_twice(
        region: dict[str, Any]) -> None:
    home = region["home"]
    build_new_images(home, "9.1.0")
    made = json.loads(release(home, "start", "--note", "base 9.1", "-o", "json").stdout)
    cid, images = made["id"], set(i["id"] for i in made["stages"]["dev"]["images"].values())
    old = {n.instance_id for c in region["clusters"]
           for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=c["name"]).list_nodes()}
    versions_before, terminated_before = len(calls(region, "CreateLaunchTemplateVersion")), Counter(
        c["params"]["InstanceId"] for c in calls(region, "TerminateInstanceInAutoScalingGroup"))
    killed = tick_until(region, lambda h: "promote" in [e["decision"] for e in h], FAILPOINTS)
    history = json.loads(release(home, "history", "-o", "json").stdout)
    said = [e["decision"] for e in history if e["candidate"] == cid]
    assert killed == FAILPOINTS, (killed, said)
    assert "promote" in said, [(e["decision"], e["reason"]) for e in history][-6:]
    for step in ("enter", "deploy", "deployed", "rotate", "rotated", "promote"):
        assert said.count(step) == 1, (step, said)  # each step recorded once, however many ticks died on the way
    # No deploy repeated: one new launch template version per template, ever. No rotation repeated: every old
    # instance terminated, and none twice.
    made_versions = calls(region, "CreateLaunchTemplateVersion")[versions_before:]
    templates = Counter(c["params"].get("LaunchTemplateId") or c["params"].get("LaunchTemplateName") for c in made_versions)
    assert made_versions and max(templates.values()) == 1, templates
    terminated = Counter(c["params"]["InstanceId"] for c in calls(region, "TerminateInstanceInAutoScalingGroup"))
    assert set(terminated - terminated_before) == old and max(terminated.values()) == 1
    for cluster in region["clusters"]:
        live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=cluster["name"])
        assert {n.image for n in live.list_nodes()} <= images, cluster["name"]  # every node on the candidate's images
    status = json.loads(release(home, "status", "-o", "json").stdout)
    assert status["stages"]["dev"]["last_good"] == cid and status["stages"]["dev"]["current"] is None
    # Every instance that booted the candidate's new images, terminated ones too (from EC2 and the ledger).
    now_on_it = sum(len(LiveCluster.from_kubeconfig(region["kubeconfig"], context=c["name"]).list_nodes())
                    for c in region["clusters"])
    assert status["candidates"][cid]["instances_booted"] >= now_on_it > 0
    assert status["candidates"][cid]["instances_booted_by_stage"]["dev"] == status["candidates"][cid]["instances_booted"]
    # what the application layer's adapter answered holds the contract the reconciler's fake holds to
    assert rotation_results_keep_the_contract(history) == 1  # the one rotation, rotated
    rotated = next(e for e in history if e["decision"] == "rotated")
    promoted = next(e for e in history if e["decision"] == "promote")
    assert promoted["at"] - rotated["at"] >= 1800  # soaked from the end of the rotation, on the region's clock
    for entry in history:
        if entry["decision"] in ("enter", "soak", "promote"):
            again = release(home, "replay", entry["id"], check=False)
            assert again.returncode == 0, again.stdout


def test_two_ticks_at_once_never_both_act(region: dict[str, Any]) -> None:
    from platformctl.kernel.state import open_store
    from release_pipeline.ledger import stage_lease

    home = region["home"]
    build_new_images(home, "9.2.0")
    cid = json.loads(release(home, "start", "--note", "base 9.2", "-o", "json").stdout)["id"]
    for _ in range(10):  # up to the rotation: the next tick runs it, holding the tick's lease for a while
        release(home, "tick", "--lease-ttl", TTL)
        if json.loads(release(home, "status", "-o", "json").stdout)["stages"]["dev"]["step"] == "rotating":
            break
    store = open_store(str(home / "ledger.db"))
    first = start(home, "release", "tick", "--pipeline", str(home / "pipeline.yaml"), "--ledger", str(home / "ledger.db"),
                  "--lease-ttl", "60", "-o", "json")
    try:
        deadline = time.monotonic() + 120
        while store.lease(stage_lease("dev")) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        first.send_signal(signal.SIGSTOP)  # stopped while it holds the lease, in the middle of its rotation
        status = json.loads(release(home, "status", "-o", "json").stdout)
        lease = status["stages"]["dev"]["tick_lease"]
        assert lease["live"] and lease["holder"], lease
        second = release(home, "tick", "--lease-ttl", TTL, "-o", "json", check=False)
        assert second.returncode == 3 and "another tick holds the lease of every stage" in second.stderr, second
        first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=600)
        assert first.returncode == 0, err[-3000:]
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
    said = [e["decision"] for e in json.loads(release(home, "history", "-o", "json").stdout) if e["candidate"] == cid]
    assert said.count("rotate") == 1 and said.count("rotated") == 1, said  # one tick rotated, once


ROLLBACK_FAILPOINTS = ["release:halt", "release:rollback-deploy", "release:call:rollback-deploy",
                       "release:rollback-deployed", "release:rollback-rotate", "release:call:rollback-rotate",
                       "release:rolled-back"]


def test_a_tick_killed_at_every_step_of_a_rollback_finishes_it_once(region: dict[str, Any]) -> None:
    home = region["home"]
    tick_until(region, lambda h: json.loads(release(home, "status", "-o", "json").stdout)["stages"]["dev"]["step"] == "idle", [])
    good = json.loads(release(home, "status", "-o", "json").stdout)["stages"]["dev"]["last_good"]
    assert good is not None
    build_new_images(home, "9.3.0")
    bad = json.loads(release(home, "start", "--note", "base 9.3, broken", "-o", "json").stdout)
    for ami in {i["id"] for i in bad["stages"]["dev"]["images"].values()}:
        run(home, "local", "fault", "bad-image", ami)
    versions_before = len(calls(region, "CreateLaunchTemplateVersion"))
    killed = tick_until(region, lambda h: any(e["decision"] == "rolled-back" and e["candidate"] == bad["id"] for e in h),
                        ROLLBACK_FAILPOINTS)
    assert killed == ROLLBACK_FAILPOINTS
    said = [e["decision"] for e in json.loads(release(home, "history", "-o", "json").stdout) if e["candidate"] == bad["id"]]
    for step in ("halt", "rollback-deploy", "rollback-deployed", "rollback-rotate", "rolled-back"):
        assert said.count(step) == 1, (step, said)  # each recorded once, however many ticks died on the way
    rolled = [e for e in json.loads(release(home, "history", "-o", "json").stdout) if e["decision"] == "rolled-back"][-1]
    assert rolled["inputs"]["done"] is True and rolled["inputs"]["rollback_to"] == good
    # One deploy of the bad images and one back: a launch template version each, per template, never more.
    made = calls(region, "CreateLaunchTemplateVersion")[versions_before:]
    templates = Counter(c["params"].get("LaunchTemplateId") or c["params"].get("LaunchTemplateName") for c in made)
    assert made and max(templates.values()) <= 2, templates
    good_images = {i["id"] for i in json.loads(release(home, "status", "-o", "json").stdout)["candidates"][good]["images"]["dev"].values()}
    for cluster in region["clusters"]:
        live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=cluster["name"])
        assert {n.image for n in live.list_nodes()} <= good_images, cluster["name"]  # every node back on the good ones
    status = json.loads(release(home, "status", "-o", "json").stdout)
    assert status["stages"]["dev"]["step"] == "idle" and status["candidates"][bad["id"]]["status"] == "halted"


def test_a_template_changed_outside_the_pipeline_is_drift_within_a_tick_nothing_boots_it_and_a_deploy_puts_it_back(
        region: dict[str, Any]) -> None:
    """An operator's ``pulumi up`` with another lock, as EC2 keeps it: a new launch template version of one pool whose
    image (and the image its user data labels the nodes) is not the one dev's last good candidate carries."""
    import base64

    import boto3

    from tests.upgrade_service.running.test_own_eviction_process import host

    home = region["home"]
    tick_until(region, lambda h: json.loads(release(home, "status", "-o", "json").stdout)["stages"]["dev"]["step"] == "idle", [])
    status = json.loads(release(home, "status", "-o", "json").stdout)
    good = status["stages"]["dev"]["last_good"]
    expected = {family: image["id"] for family, image in status["candidates"][good]["images"]["dev"].items()}
    # Another lock's images are refused by a deploy by hand, before anything: the stage runs what was promoted.
    (home / "other.lock.json").write_text('{"images": {}}')
    versions_before = len(calls(region, "CreateLaunchTemplateVersion"))
    refused = run(home, "stage", "deploy", "--stage", "dev", "--lock-file", str(home / "other.lock.json"), check=False)
    assert refused.returncode == 2 and "--lock-file" in refused.stderr and good in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and len(calls(region, "CreateLaunchTemplateVersion")) == versions_before

    ec2 = boto3.client("ec2", region_name="us-west-2", endpoint_url=region["aws_endpoint"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    member = next(c["name"] for c in region["clusters"] if c["name"] != host(region))  # a member, with a general pool
    template = f"{member}-general"
    latest = ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=["$Latest"])["LaunchTemplateVersions"][0]
    own = {i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]}
    other = sorted(own - set(expected.values()))[0]  # an image the region holds (an earlier build)
    was = latest["LaunchTemplateData"]["ImageId"]

    def booted_it() -> set[str]:
        found = ec2.describe_instances(Filters=[{"Name": "image-id", "Values": [other]}])["Reservations"]
        return {i["InstanceId"] for r in found for i in r["Instances"]}

    before = booted_it()
    data = base64.b64decode(latest["LaunchTemplateData"]["UserData"]).decode().replace(was, other)
    ec2.create_launch_template_version(LaunchTemplateName=template, SourceVersion=str(latest["VersionNumber"]),
                                       LaunchTemplateData={"ImageId": other, "UserData": base64.b64encode(data.encode()).decode()})
    out = release(home, "tick", "--lease-ttl", TTL, "-o", "json")  # one tick
    drift = [e for e in json.loads(release(home, "history", "-o", "json").stdout) if e["decision"] == "drift"][-1]
    assert drift["stage"] == "dev" and drift["inputs"]["drift"] == [
        {"cluster": member, "pool": "general", "family": "general", "found": other, "expected": expected["general"]}], out.stdout
    said = release(home, "status", check=False)
    assert said.returncode == 4 and template.removesuffix("-general") in said.stdout and other in said.stdout, said.stdout
    # The stage's rotation (as its CronJob runs it) rotates nothing onto the drifted image: 0 instances boot it.
    rotated = run(home, "rotate", "run", "--stage", "dev", "--policy", str(home / "rotation.yaml"), "-o", "json")
    assert "did not promote to the stage" in rotated.stdout, rotated.stdout
    assert booted_it() == before  # none since the template changed (an earlier build's instances stay listed)
    # A deploy by hand puts back what was promoted; the next tick says the drift is over.
    put_back = json.loads(run(home, "stage", "deploy", "--stage", "dev", "-o", "json").stdout)
    assert put_back["promoted"]["candidate"] == good and put_back["images"][f"{member}/general"] == expected["general"]
    newest = ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=["$Latest"])["LaunchTemplateVersions"][0]
    assert newest["LaunchTemplateData"]["ImageId"] == expected["general"]
    release(home, "tick", "--lease-ttl", TTL, "-o", "json")
    drift = [e for e in json.loads(release(home, "history", "-o", "json").stdout) if e["decision"] == "drift"][-1]
    assert drift["inputs"]["drift"] == [] and release(home, "status", check=False).returncode == 0

    # The tick's deploy recorded what each group launched once it was made: its launch template and that version's
    # settings. A version made by hand with the same image and another label in its user data is drift too, named with
    # the settings that differ, and the stage's rotation rolls none of it out.
    launches = put_back["promoted"]["launches"]
    assert template in launches and launches[template]["settings"].get("UserData"), launches
    latest = ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=["$Latest"])["LaunchTemplateVersions"][0]
    data = base64.b64decode(latest["LaunchTemplateData"]["UserData"]).replace(b"--node-labels=", b"--node-labels=team=search,")
    ec2.create_launch_template_version(LaunchTemplateName=template, SourceVersion=str(latest["VersionNumber"]),
                                       LaunchTemplateData={"UserData": base64.b64encode(data).decode()})
    release(home, "tick", "--lease-ttl", TTL, "-o", "json")
    drift = [e for e in json.loads(release(home, "history", "-o", "json").stdout) if e["decision"] == "drift"][-1]
    assert drift["inputs"]["drift"] == [{"cluster": member, "pool": "general", "family": "general", "found": expected["general"],
                                         "expected": expected["general"], "settings": ["UserData"]}], drift
    said = release(home, "status", check=False)
    assert said.returncode == 4 and "UserData" in said.stdout, said.stdout
    terminated = len(calls(region, "TerminateInstanceInAutoScalingGroup"))
    rotated = json.loads(run(home, "rotate", "run", "--stage", "dev", "--policy", str(home / "rotation.yaml"), "-o", "json").stdout)
    assert len(calls(region, "TerminateInstanceInAutoScalingGroup")) == terminated, rotated  # 0 nodes moved
    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=member)
    assert not any(n.labels.get("team") == "search" for n in live.list_nodes())
    run(home, "stage", "deploy", "--stage", "dev", "-o", "json")  # put back: the candidate's own user data
    release(home, "tick", "--lease-ttl", TTL, "-o", "json")
    drift = [e for e in json.loads(release(home, "history", "-o", "json").stdout) if e["decision"] == "drift"][-1]
    assert drift["inputs"]["drift"] == [] and release(home, "status", check=False).returncode == 0
