"""``ami prune`` against moto: what it keeps, what it retires, and in which order, read from the account."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError
from click.testing import CliRunner

from ami.build import ImageStore, tags_of
from ami.prune import PruneReport, prune_images
from platformctl.cli import cli
from platformctl.kernel.topology import default_infra_dir
from tests.ami.accounts import COPY, REGION, build, bump, ec2, fail_on, images

WEEK = timedelta(days=7)


def now() -> datetime:
    return datetime.now(UTC)


def release_ml(folder: Path, times: int) -> None:
    """Build the tree, then ``times`` new patch versions of ml: ml has ``times + 1`` versions."""
    build(folder)
    for _ in range(times):
        version = yaml.safe_load((folder / "ml.yaml").read_text())["version"]
        major, minor, patch = version.split(".")
        bump(folder, "ml", f"version: {version}", f"version: {major}.{minor}.{int(patch) + 1}")
        build(folder)


def prune(at: datetime | None = None, **kwargs: Any) -> PruneReport:
    options: dict[str, Any] = {"keep": 2, "grace": WEEK} | kwargs
    return prune_images(ImageStore(REGION, [COPY]), now=at or now(), **options)


def ml_ids(region: str = REGION) -> dict[str, str]:
    """ml version -> image id, of the images still registered."""
    return {tags_of(i)["platformctl:version"]: i["ImageId"] for i in images(region).get("ml", [])}


def registered(region: str = REGION) -> dict[str, dict[str, Any]]:
    return {i["ImageId"]: i for group in images(region).values() for i in group}


def snapshot_ids(region: str = REGION) -> set[str]:
    return {s["SnapshotId"] for s in ec2(region).describe_snapshots(OwnerIds=["self"])["Snapshots"]}


def snapshots_of(image: dict[str, Any]) -> set[str]:
    return {m["Ebs"]["SnapshotId"] for m in image["BlockDeviceMappings"] if "Ebs" in m}


def parameter(name: str) -> str | None:
    try:
        return boto3.client("ssm", region_name=REGION).get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError:
        return None


def record_calls() -> tuple[list[tuple[str, str]], Callable[[], None]]:
    """(operation, image id) of every image-changing EC2 call made by clients created from now on."""
    calls: list[tuple[str, str]] = []

    def record(params: dict, model: Any, **_: object) -> None:
        if model.name in ("EnableImageDeprecation", "DisableImageDeprecation", "DeregisterImage"):
            calls.append((model.name, params["ImageId"]))

    session = boto3._get_default_session()
    session.events.register("before-parameter-build.ec2.*", record)
    return calls, lambda: session.events.unregister("before-parameter-build.ec2.*", record)


def test_retention_deprecates_first_and_deregisters_after_the_grace_period(aws: None, folder: Path) -> None:
    release_ml(folder, 4)  # ml 3.0.2 .. 3.0.6
    before = ml_ids()
    old = [before[v] for v in ("3.0.2", "3.0.3", "3.0.4")]
    copies = ml_ids(COPY)
    others = {i["ImageId"] for name, group in images().items() if name != "ml" for i in group}
    registered_before = set(registered())

    first = prune()
    assert {d.image_id for d in first.of("deprecate")} == set(old) | {copies[v] for v in ("3.0.2", "3.0.3", "3.0.4")}
    after = registered()
    assert set(after) == registered_before  # nothing deregistered yet
    assert all(after[i].get("DeprecationTime") for i in old)
    assert not any(after[i].get("DeprecationTime") for i in set(after) - set(old))
    assert all(registered(COPY)[copies[v]].get("DeprecationTime") for v in ("3.0.2", "3.0.3", "3.0.4"))

    waiting = prune(now() + timedelta(days=3))
    assert {d.image_id for d in waiting.of("wait")} >= set(old) and not waiting.of("deregister")
    assert set(old) <= set(registered())

    old_snapshots = {s for i in old for s in snapshots_of(after[i])}
    done = prune(now() + WEEK + timedelta(minutes=2))
    assert {d.image_id for d in done.of("deregister")} == {d.image_id for d in first.of("deprecate")}
    assert ml_ids() == {"3.0.5": before["3.0.5"], "3.0.6": before["3.0.6"]}
    assert set(ml_ids(COPY)) == {"3.0.5", "3.0.6"}
    assert others <= set(registered())  # base, general and custom have one version each: all kept
    assert not old_snapshots & snapshot_ids()
    assert {s["snapshot"] for s in done.snapshots_deleted if s["region"] == REGION} == old_snapshots
    assert len([s for s in done.snapshots_deleted if s["region"] == COPY]) == 3
    for version in ("3.0.2", "3.0.3", "3.0.4"):
        assert parameter(f"/platformctl/ami/ml/{version}") is None
    assert parameter("/platformctl/ami/ml/3.0.5") == before["3.0.5"]
    assert parameter("/platformctl/ami/ml/latest") == before["3.0.6"]

    again = prune(now() + WEEK * 3)
    assert not again.of("deprecate") and not again.of("deregister") and not again.snapshots_deleted


def test_every_image_is_deprecated_before_it_is_deregistered_even_with_no_grace(aws: None, folder: Path) -> None:
    release_ml(folder, 2)
    calls, stop = record_calls()
    try:
        report = prune(keep=1, grace=timedelta(0))
    finally:
        stop()
    gone = {d.image_id for d in report.of("deregister")}
    assert len(gone) == 4  # ml 3.0.2 and 3.0.3, here and in the copy region
    assert not gone & set(registered()) and not gone & set(registered(COPY))
    for image_id in gone:
        ops = [op for op, i in calls if i == image_id]
        assert ops == ["EnableImageDeprecation", "DeregisterImage"]


def _old_ml_launch_template(old: str, new: str) -> None:
    """A launch template whose version 1 boots ``old`` and whose $Latest and $Default boot ``new``; an ASG pinned to
    version 1."""
    client = ec2()
    subnet = client.describe_subnets()["Subnets"][0]
    template = client.create_launch_template(LaunchTemplateName="ml-pool", LaunchTemplateData={"ImageId": old})
    client.create_launch_template_version(LaunchTemplateName="ml-pool", LaunchTemplateData={"ImageId": new})
    client.modify_launch_template(LaunchTemplateName="ml-pool", DefaultVersion="2")  # only the group uses version 1
    boto3.client("autoscaling", region_name=REGION).create_auto_scaling_group(
        AutoScalingGroupName="ml-pool", MinSize=0, MaxSize=1, DesiredCapacity=0, VPCZoneIdentifier=subnet["SubnetId"],
        LaunchTemplate={"LaunchTemplateId": template["LaunchTemplate"]["LaunchTemplateId"], "Version": "1"})


REFERENCES: dict[str, Callable[[str, str, Path], dict[str, Any]]] = {
    "launch template $Latest": lambda old, new, tmp: (
        ec2().create_launch_template(LaunchTemplateName="pinned", LaunchTemplateData={"ImageId": old}), {})[1],
    "auto scaling group on an older template version": lambda old, new, tmp: (_old_ml_launch_template(old, new), {})[1],
    "running instance": lambda old, new, tmp: (
        ec2().run_instances(ImageId=old, MinCount=1, MaxCount=1, InstanceType="g5.xlarge"), {})[1],
    "lock file": lambda old, new, tmp: (
        (tmp / "lock.json").write_text(json.dumps({"images": {"ml": {"3.0.2": {REGION: old}}}})),
        {"lock_files": [tmp / "lock.json"]})[1],
    "stack file pin": lambda old, new, tmp: (
        (tmp / "Pulumi.staging.yaml").write_text((default_infra_dir() / "Pulumi.staging.yaml").read_text().replace(
            "    vpcCidr: 10.20.0.0/16\n", f"    vpcCidr: 10.20.0.0/16\n    images:\n      ml: {old}\n")),
        {"stack_files": [tmp / "Pulumi.staging.yaml"]})[1],
}


@pytest.mark.parametrize("reference", sorted(REFERENCES))
def test_a_referenced_image_and_its_copies_are_never_retired(aws: None, folder: Path, tmp_path: Path, reference: str) -> None:
    release_ml(folder, 2)  # ml 3.0.2, 3.0.3, 3.0.4
    ids, copies = ml_ids(), ml_ids(COPY)
    extra = REFERENCES[reference](ids["3.0.2"], ids["3.0.4"], tmp_path)

    report = prune(keep=1, grace=timedelta(0), **extra)

    kept = {d.image_id: d.reason for d in report.of("keep")}
    assert ids["3.0.2"] in kept and copies["3.0.2"] in kept
    assert set(ml_ids()) == {"3.0.2", "3.0.4"} and set(ml_ids(COPY)) == {"3.0.2", "3.0.4"}
    assert not registered()[ids["3.0.2"]].get("DeprecationTime")
    assert parameter("/platformctl/ami/ml/3.0.2") == ids["3.0.2"]
    assert parameter("/platformctl/ami/ml/3.0.3") is None


def test_a_deprecated_image_referenced_again_is_restored_not_deregistered(aws: None, folder: Path) -> None:
    release_ml(folder, 2)
    old, copy = ml_ids()["3.0.2"], ml_ids(COPY)["3.0.2"]
    prune(keep=1)
    assert registered()[old].get("DeprecationTime")
    ec2().create_launch_template(LaunchTemplateName="rollback", LaunchTemplateData={"ImageId": old})

    report = prune(now() + WEEK * 2, keep=1)

    assert {d.image_id: d.region for d in report.of("restore")} == {old: REGION, copy: COPY}
    assert old in registered() and not registered()[old].get("DeprecationTime")
    assert copy in registered(COPY) and not registered(COPY)[copy].get("DeprecationTime")
    assert "launch template rollback" in report.of("restore")[0].reason


def test_a_superseded_build_of_a_kept_version_is_retired(aws: None, folder: Path) -> None:
    build(folder)
    first = {n: g[0]["ImageId"] for n, g in images().items()}
    bump(folder, "base", "chrony]", "chrony, htop]")  # the whole tree is rebuilt, no version changes
    build(folder)
    rebuilt = {n: g[-1]["ImageId"] for n, g in images().items()}
    assert all(first[n] != rebuilt[n] for n in first)

    report = prune(grace=timedelta(0))

    gone = {d.image_id: d.reason for d in report.of("deregister") if d.region == REGION}
    assert set(gone) == set(first.values())
    assert all("superseded" in reason for reason in gone.values())
    assert set(registered()) == set(rebuilt.values())


def test_a_build_that_never_committed_is_retired_after_a_day(aws: None, folder: Path) -> None:
    build(folder)
    client = ec2()
    builder = client.run_instances(ImageId=images()["base"][0]["ImageId"], MinCount=1, MaxCount=1)["Instances"][0]
    half = client.create_image(InstanceId=builder["InstanceId"], Name="platformctl-general-9.9.9-killed",
                               TagSpecifications=[{"ResourceType": "image", "Tags": [
                                   {"Key": "platformctl:name", "Value": "general"},
                                   {"Key": "platformctl:version", "Value": "9.9.9"}]}])["ImageId"]
    client.terminate_instances(InstanceIds=[builder["InstanceId"]])

    assert half in {d.image_id for d in prune(grace=timedelta(0)).of("keep")}  # maybe a build in progress
    report = prune(now() + timedelta(days=2), grace=timedelta(0))
    assert [d.image_id for d in report.of("deregister")] == [half]
    assert half not in registered()


def test_snapshots_left_by_an_interrupted_prune_are_deleted_by_the_next(aws: None, folder: Path) -> None:
    release_ml(folder, 1)
    old = registered()[ml_ids()["3.0.2"]]
    undo = fail_on("DeleteSnapshot")
    try:
        with pytest.raises(ClientError):
            prune(keep=1, grace=timedelta(0))
    finally:
        undo()
    assert old["ImageId"] not in registered() and snapshots_of(old) <= snapshot_ids()

    report = prune(keep=1, grace=timedelta(0))
    assert not snapshots_of(old) & snapshot_ids()
    assert {s["image"] for s in report.snapshots_deleted} >= {old["ImageId"]}


def test_cli_prune_dry_run_json_changes_nothing_then_prunes(aws: None, folder: Path, tmp_path: Path) -> None:
    release_ml(folder, 2)
    ids = ml_ids()
    runner = CliRunner()
    args = ["ami", "prune", "--keep", "1", "--grace", "0", "--region", REGION, "--copy-to", COPY,
            "--lock-file", str(tmp_path / "none.json"), "-o", "json"]
    (tmp_path / "none.json").write_text('{"images": {}}')

    dry = runner.invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.output)
    assert plan["dry_run"] is True
    assert {d["image_id"] for d in plan["deregister"] if d["region"] == REGION} == {ids["3.0.2"], ids["3.0.3"]}
    assert set(ml_ids()) == {"3.0.2", "3.0.3", "3.0.4"} and not any(i.get("DeprecationTime") for i in registered().values())

    real = runner.invoke(cli, args)
    assert real.exit_code == 0, real.output
    def same(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:  # the deprecation time is the run's own minute
        return [{k: v for k, v in e.items() if k != "deprecation_time"} for e in entries]

    assert same(json.loads(real.output)["deregister"]) == same(plan["deregister"])  # what the dry run said it would do
    assert set(ml_ids()) == {"3.0.4"}


@pytest.mark.parametrize(("args", "message"), [
    (["--lock-file", "{tmp}/bad.json"], "bad.json: not valid JSON"),
    (["--lock-file", "{tmp}/missing.json"], "missing.json: cannot read the lock file"),
    (["--lock-file", "{tmp}/list.json"], "list.json: images.ml.3.0.2: expected a mapping of region -> image id"),
    (["--stack-file", "{tmp}/Pulumi.dev.yaml"], "Pulumi.dev.yaml"),
    (["--grace", "a while"], "'a while' is not a duration"),
    (["--keep", "0"], "--keep"),
    (["mll"], "no image named 'mll' was ever built here (images: base, custom, general, ml)"),
])
def test_cli_prune_bad_input_is_one_line_exit_2_and_changes_nothing(aws: None, folder: Path, tmp_path: Path,
                                                                    args: list[str], message: str) -> None:
    release_ml(folder, 1)  # without the mistake, ml 3.0.2 would be deregistered
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text('{"images": {"ml": {"3.0.2": ["ami-0123"]}}}')
    (tmp_path / "Pulumi.dev.yaml").write_text("config:\n  aws:region: us-west-2\n")
    before = {i: img.get("DeprecationTime") for i, img in registered().items()}

    result = CliRunner().invoke(cli, ["ami", "prune", "--keep", "1", "--grace", "0", "--region", REGION,
                                      *[a.format(tmp=tmp_path) for a in args]])

    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert {i: img.get("DeprecationTime") for i, img in registered().items()} == before
