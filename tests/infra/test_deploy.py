"""``stage deploy`` in the local region: the program again, against what it made last time, changing what `pulumi up` would."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from ami.lock import newest_in_lock
from infra.deploy import LocalDeployer
from infra.materialize import materialize
from platformctl.emulator import moto_extensions
from platformctl.kernel import aws
from platformctl.kernel.environment import FAKE_CREDENTIALS
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import load_stage
from tests.infra.images import LOCK, hold

STAGE = load_stage("dev")


@pytest.fixture
def region(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalDeployer, Path]]:
    for key, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    moto_extensions.install()
    lock = tmp_path / "images.lock.json"
    lock.write_text(LOCK.read_text())
    with mock_aws(config={"iam": {"load_aws_managed_policies": True}}):
        hold(LOCK)
        made = materialize(STAGE, image_lock=lock)
        checkpoint = tmp_path / "stack.json"
        checkpoint.write_text(json.dumps({"stage": "dev", "resources": made.checkpoint}))
        yield LocalDeployer(checkpoint, "the local region"), lock


def versions(name: str) -> list[dict]:
    ec2 = aws.client("ec2", STAGE.region)
    return sorted(ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"],
                  key=lambda v: v["VersionNumber"])


def test_deploying_the_same_images_changes_nothing(region: tuple[LocalDeployer, Path]) -> None:
    deployer, lock = region
    result = deployer.deploy(STAGE, lock)
    assert {c.action for c in result.changes} == {"unchanged"}
    assert len(versions("dev-usw2a-01-general")) == 1


def test_a_launch_template_version_made_by_hand_in_ec2_is_put_back_by_the_next_deploy(region: tuple[LocalDeployer, Path]) -> None:
    """As ``pulumi up --refresh`` would: the stack's record says the template is unchanged, EC2 says its newest version
    (what the group, on $Latest, launches) boots another image; the deploy makes the program's data newest again."""
    deployer, lock = region
    ec2 = aws.client("ec2", STAGE.region)
    [first] = versions("dev-usw2a-01-general")
    ec2.create_launch_template_version(LaunchTemplateName="dev-usw2a-01-general", SourceVersion="1",
                                       LaunchTemplateData={"ImageId": "ami-0ge0000000000220"})  # by hand
    result = deployer.deploy(STAGE, lock)
    [put_back] = [c for c in result.changes if c.action == "update"]
    assert put_back.name == "dev-usw2a-01-general" and "ImageId ami-0ge0000000000220 -> ami-0ge0000000000210" in put_back.detail
    newest = versions("dev-usw2a-01-general")[-1]
    assert newest["VersionNumber"] == 3 and newest["LaunchTemplateData"]["ImageId"] == first["LaunchTemplateData"]["ImageId"]
    assert newest["LaunchTemplateData"]["UserData"] == first["LaunchTemplateData"]["UserData"]
    assert {c.action for c in deployer.deploy(STAGE, lock).changes} == {"unchanged"}  # and then nothing to put back


def test_a_stack_lock_left_behind_makes_a_deploy_busy_and_a_deploy_gives_back_only_its_own(
        region: tuple[LocalDeployer, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The local region's stack lock, as Pulumi's self-managed backends keep one: a lock a killed deploy left makes the
    next one ``DeployLocked`` (its holder and time as the file says them) with nothing changed; ``cancel`` clears it;
    a deploy gives its own lock back when it ends, and not one taken after its own was cleared."""
    import infra.deploy
    from platformctl.kernel.deployer import DeployLocked

    deployer, lock = region
    deployer.stack_lock.write_text(json.dumps({"id": "x", "pid": 4242, "username": "ops", "hostname": "laptop",
                                               "timestamp": "2026-11-27T03:01:09Z"}))
    before = deployer.checkpoint.read_text()
    with pytest.raises(DeployLocked) as locked:
        deployer.deploy(STAGE, lock)
    assert locked.value.since == datetime(2026, 11, 27, 3, 1, 9, tzinfo=UTC).timestamp()
    assert locked.value.taken_by("ops@laptop (pid 4242)") and not locked.value.taken_by("ops@laptop (pid 424)")
    assert deployer.checkpoint.read_text() == before and len(versions("dev-usw2a-01-general")) == 1
    deployer.cancel(STAGE)
    deployer.deploy(STAGE, lock)
    assert not deployer.stack_lock.exists()

    real = infra.deploy.run_stage

    def cleared_and_taken_meanwhile(*args: Any, **kwargs: Any) -> Any:
        deployer.stack_lock.write_text(json.dumps({"id": "another", "pid": 1, "username": "root", "hostname": "tick"}))
        return real(*args, **kwargs)

    monkeypatch.setattr(infra.deploy, "run_stage", cleared_and_taken_meanwhile)
    deployer.deploy(STAGE, lock)
    assert json.loads(deployer.stack_lock.read_text())["id"] == "another"


def test_a_new_image_is_a_new_launch_template_version_that_new_instances_boot(region: tuple[LocalDeployer, Path]) -> None:
    deployer, lock = region
    was = deployer.deployed(STAGE)  # what the release pipeline records before a deploy (a rollback may go back to it)
    assert was.images["dev-usw2a-01/general"] == "ami-0ge0000000000210" and len(was.images) == sum(len(c.node_pools) for c in STAGE.clusters())
    data = json.loads(lock.read_text())
    data["images"]["general"]["2.2.0"] = {"us-west-2": "ami-0ge0000000000220"}
    lock.write_text(json.dumps(data))
    hold(lock)  # built in this account, as `ami build` leaves it
    result = deployer.deploy(STAGE, lock)
    assert deployer.deployed(STAGE).images == result.images
    updated = sorted(c.name for c in result.changes if c.action == "update")
    general = sorted(f"{c.name}-{p.name}" for c in STAGE.clusters() for p in c.node_pools if p.image_family == "general")
    assert updated == general  # the general family's pools, and nothing else
    assert {c.action for c in result.changes} == {"update", "unchanged"}
    assert result.images["dev-usw2a-01/general"] == "ami-0ge0000000000220" and result.images["dev-usw2a-01/ml"] == "ami-0m10000000000302"
    new = versions("dev-usw2a-01-general")
    assert [v["LaunchTemplateData"]["ImageId"] for v in new] == ["ami-0ge0000000000210", "ami-0ge0000000000220"]
    assert new[1]["DefaultVersion"] is True
    assert len(versions("dev-usw2a-01-ml")) == 1
    # The group, on $Latest, launches the new image; its existing instances keep theirs until rotated.
    asg = aws.client("autoscaling", STAGE.region)
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["dev-usw2a-01-general"])["AutoScalingGroups"][0]
    before = {i["InstanceId"] for i in group["Instances"]}
    asg.set_desired_capacity(AutoScalingGroupName="dev-usw2a-01-general", DesiredCapacity=group["DesiredCapacity"] + 1)
    after = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["dev-usw2a-01-general"])["AutoScalingGroups"][0]
    ec2 = aws.client("ec2", STAGE.region)
    images = {i["InstanceId"]: i["ImageId"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}
    assert {images[i["InstanceId"]] for i in after["Instances"] if i["InstanceId"] not in before} == {"ami-0ge0000000000220"}
    assert {images[i] for i in before} == {"ami-0ge0000000000210"}
    # Deploying again is a no-op: the checkpoint holds what the last deploy made.
    assert {c.action for c in deployer.deploy(STAGE, lock).changes} == {"unchanged"}


def test_a_change_the_region_cannot_make_is_one_line_and_the_checkpoint_stays_usable(region: tuple[LocalDeployer, Path],
                                                                                     tmp_path: Path) -> None:
    deployer, lock = region
    source = Path(STAGE.source).read_text().replace("vpcCidr: 10.10.0.0/16", "vpcCidr: 10.20.0.0/16")
    changed_file = tmp_path / "Pulumi.dev.yaml"
    changed_file.write_text(source)
    from platformctl.kernel.topology import parse_stage_file

    changed = parse_stage_file(changed_file, "dev")
    with pytest.raises(PlatformError) as err:
        deployer.deploy(changed, lock)
    assert "aws:ec2/vpc:Vpc dev-vpc changed (cidrBlock)" in str(err.value) and "\n" not in str(err.value)
    assert {c.action for c in deployer.deploy(STAGE, lock).changes} == {"unchanged"}
    assert os.path.getsize(deployer.checkpoint) > 0


def test_a_release_candidates_deploy_sets_its_images_over_a_stages_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stage that pins its images in its stack file: a deploy by hand keeps them; the pipeline's deploy (``over_pins``)
    boots the candidate's, the lock file's, and a deploy by hand afterwards would put the pins back."""
    shipped = load_stage("staging")
    held = json.loads(LOCK.read_text())["images"]
    pinned = {f: newest_in_lock({"images": held}, f, shipped.region) for f in ("general", "ml", "custom")}
    staging = shipped.model_copy(update={"topology": shipped.topology.model_copy(update={"images": pinned})})
    for key, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    moto_extensions.install()
    data = json.loads(LOCK.read_text())
    for versions_of in data["images"].values():
        for regions in versions_of.values():
            regions[staging.region] = next(iter(regions.values())).replace("ami-0", "ami-e")
    lock = tmp_path / "images.lock.json"
    lock.write_text(json.dumps(data))
    with mock_aws(config={"iam": {"load_aws_managed_policies": True}}):
        hold(LOCK)
        hold(lock)
        made = materialize(staging, image_lock=lock)
        checkpoint = tmp_path / "stack.json"
        checkpoint.write_text(json.dumps({"stage": "staging", "resources": made.checkpoint}))
        deployer = LocalDeployer(checkpoint, "the local region")
        pins = set(staging.topology.images.values())
        by_hand = deployer.deploy(staging, lock)
        assert set(by_hand.images.values()) <= pins and {c.action for c in by_hand.changes} == {"unchanged"}
        released = deployer.deploy(staging, lock, over_pins=True)
        assert set(released.images.values()).isdisjoint(pins) and all(i.startswith("ami-e") for i in released.images.values())
        ec2 = aws.client("ec2", staging.region)
        pool = f"{staging.member_clusters[0].name}-general"
        latest = ec2.describe_launch_template_versions(LaunchTemplateName=pool, Versions=["$Latest"])["LaunchTemplateVersions"][0]
        assert latest["LaunchTemplateData"]["ImageId"] == released.images[f"{staging.member_clusters[0].name}/general"]


def with_version(tmp_path: Path, version: str) -> Any:
    """The dev stage from a copy of its stack file that names ``version``."""
    from platformctl.kernel.topology import parse_stage_file

    text = Path(STAGE.source).read_text()
    lines = [line for line in text.splitlines(keepends=True) if "platformctl:kubernetesVersion" not in line]
    text = "".join(lines).replace("config:\n", f"config:\n  platformctl:kubernetesVersion: \"{version}\"\n", 1)
    path = tmp_path / f"v{version}" / "Pulumi.dev.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return parse_stage_file(path, "dev")


def test_a_kubernetes_version_bump_upgrades_each_control_plane_in_place_and_never_back(
        region: tuple[LocalDeployer, Path], tmp_path: Path) -> None:
    """EKS upgrades a control plane one minor version at a time and never downgrades one: a deploy of a stack file one
    version up upgrades every cluster of the stage (nothing replaced, no node touched); a skip or a step back is one
    line naming the cluster and AWS's answer; a rollback's deploy keeps the version the clusters have."""
    deployer, lock = region
    eks = aws.client("eks", STAGE.region)
    names = [c.name for c in STAGE.clusters()]
    assert {eks.describe_cluster(name=n)["cluster"]["version"] for n in names} == {"1.32"}
    assert set(deployer.deployed(STAGE).kubernetes_versions.values()) == {"1.32"}
    result = deployer.deploy(with_version(tmp_path, "1.33"), lock)
    bumped = sorted(c.name for c in result.changes if c.action == "update")
    assert bumped == sorted(names) and all(c.detail == "version 1.32 -> 1.33" for c in result.changes if c.action == "update")
    assert {eks.describe_cluster(name=n)["cluster"]["version"] for n in names} == {"1.33"}
    assert deployer.deployed(STAGE).kubernetes_versions == dict.fromkeys(names, "1.33")
    assert len(versions("dev-usw2a-01-general")) == 1  # no launch template, no node moved
    for refused in ("1.32", "1.35"):
        with pytest.raises(PlatformError) as err:
            deployer.deploy(with_version(tmp_path, refused), lock)
        assert f"Unsupported Kubernetes minor version update from 1.33 to {refused}" in str(err.value)
        assert "\n" not in str(err.value)
    assert {eks.describe_cluster(name=n)["cluster"]["version"] for n in names} == {"1.33"}
    # A rollback to a stack file of 1.32 names the version it keeps: nothing changes.
    kept = deployer.deploy(with_version(tmp_path, "1.32"), lock, kubernetes_version="1.33")
    assert {c.action for c in kept.changes} == {"unchanged"}


def test_a_locked_pulumi_stack_is_a_transient_one_line_fault_naming_its_holder_and_any_other_failure_its_error_line() -> None:
    """What the Automation API raises when ``pulumi up`` fails (its own typed errors, built from the CLI's output as it
    builds them): a stack a killed update left locked is busy (the tick tries again next tick), never a traceback."""
    from pulumi.automation._cmd import CommandResult
    from pulumi.automation.errors import CommandError, ConcurrentUpdateError

    from infra.deploy import pulumi_failure
    from platformctl.kernel.deployer import DeployLocked
    from platformctl.kernel.errors import is_transient

    stderr = ("error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or "
              "delete the lock file with `pulumi cancel`.\n  s3://platformctl-pulumi-state/.pulumi/locks/organization/"
              "platformctl/dev/ec3a6b52.json: created by root@platformctl-release-tick-29123-x7 (pid 7) at "
              "2026-11-27T03:01:09Z\n")
    taken = datetime(2026, 11, 27, 3, 1, 9, tzinfo=UTC).timestamp()
    locked = pulumi_failure("dev", ConcurrentUpdateError(CommandResult("", stderr, 255)), now=taken + 5 * 3600 + 12 * 60)
    assert isinstance(locked, DeployLocked) and is_transient(locked)
    assert "\n" not in str(locked) and "created by root@platformctl-release-tick-29123-x7 (pid 7) at 2026-11-27T03:01:09Z" in str(locked)
    assert locked.since == taken and "at 2026-11-27T03:01:09Z, 5h12m ago)" in str(locked)  # the lock's age: a killed tick's, or someone's
    assert "`platformctl stage cancel --stage dev` (as `pulumi cancel`)" in str(locked)
    # whose lock: the holder a tick recorded before its deploy, not one that only begins the same way
    assert locked.taken_by("root@platformctl-release-tick-29123-x7") and locked.taken_by("root@platformctl-release-tick-29123-x7 (pid 7)")
    assert not locked.taken_by("root@platformctl-release-tick-29123-x") and not locked.taken_by("root@platformctl-release-tick-29123-x7 (pid 8)")
    # a backend line with no time: the holder as said, no age
    bare = pulumi_failure("dev", ConcurrentUpdateError(CommandResult("", "error: the stack is currently locked by 1 lock(s).\n"
                                                                         "  dev.json: created by ci@runner\n", 255)), now=taken)
    assert isinstance(bare, DeployLocked) and bare.since is None and "(dev.json: created by ci@runner)" in str(bare)

    failed = pulumi_failure("dev", CommandError(CommandResult("Updating (dev)\n", "warning: x\nerror: update failed\n", 255)))
    assert str(failed) == "stage dev: pulumi up failed: error: update failed" and not is_transient(failed)
    denied = pulumi_failure("dev", CommandError(CommandResult("", "error: aws:eks:Cluster dev-host: AccessDenied\n"
                                                                  "error: update failed\n", 255)))
    assert str(denied) == "stage dev: pulumi up failed: error: aws:eks:Cluster dev-host: AccessDenied"


def test_a_pulumi_up_past_its_limit_is_interrupted_and_said_and_one_within_it_answers(tmp_path: Path) -> None:
    """The deploy's limit, as the deployer keeps it around the Automation API's ``pulumi up``: past it the CLI (this
    process's child named ``pulumi``) is sent SIGINT, Pulumi's own signal to cancel an update and give its lock back,
    and the deploy is a transient fault; a deploy within it answers, or raises, as it did."""
    import shutil
    import signal
    import subprocess
    import time

    from infra.deploy import within
    from platformctl.kernel.errors import Unavailable, is_transient

    pulumi = tmp_path / "pulumi"  # a child process whose command is `pulumi` (sleep's program under that name)
    shutil.copy(shutil.which("sleep") or "/bin/sleep", pulumi)
    ended: list[int] = []
    with pytest.raises(Unavailable) as late:
        within(lambda: ended.append(subprocess.run([str(pulumi), "600"]).returncode), 1.0, "dev", grace=60.0)
    assert ended == [-signal.SIGINT]
    # a CLI that a loaded machine started only after the limit had passed is cancelled too, not killed a grace later
    with pytest.raises(Unavailable):
        within(lambda: (time.sleep(1.5), ended.append(subprocess.run([str(pulumi), "600"]).returncode)), 1.0, "dev",
               grace=60.0)
    assert ended == [-signal.SIGINT, -signal.SIGINT]
    assert str(late.value) == "stage dev: pulumi up ran past its limit of 1s and was interrupted" and is_transient(late.value)
    assert within(lambda: "up", 60.0, "dev") == "up"
    with pytest.raises(ValueError):
        within(lambda: int("x"), 60.0, "dev")


@pytest.mark.parametrize(("kubelet", "refused"), [("1.33", True), ("1.28", True), ("1.29", False), ("1.32", False)])
def test_a_deploy_whose_image_runs_a_kubelet_its_control_planes_do_not_support_is_refused_before_anything(
        region: tuple[LocalDeployer, Path], kubelet: str, refused: bool) -> None:
    """dev's control planes run 1.32: a kubelet may be up to three minor versions older, never newer (Kubernetes'
    version skew policy); the image's version is the one `ami build` tagged it with."""
    deployer, lock = region
    data = json.loads(lock.read_text())
    data["images"]["general"]["2.2.0"] = {"us-west-2": "ami-0d0e00000000220a"}
    lock.write_text(json.dumps(data))
    hold(lock)
    ec2 = aws.client("ec2", STAGE.region)
    ec2.create_tags(Resources=["ami-0d0e00000000220a"], Tags=[{"Key": "platformctl:kubernetes-version", "Value": kubelet}])
    before = versions("dev-usw2a-01-general")
    if refused:
        with pytest.raises(PlatformError) as error:
            deployer.deploy(STAGE, lock)
        assert error.value.file == STAGE.source and error.value.field == "config.platformctl:kubernetesVersion"
        assert f"runs kubelet {kubelet}, and dev's control planes run 1.32" in str(error.value)
        assert versions("dev-usw2a-01-general") == before  # nothing made
    else:
        deployer.deploy(STAGE, lock)
        assert versions("dev-usw2a-01-general")[-1]["LaunchTemplateData"]["ImageId"] == "ami-0d0e00000000220a"
