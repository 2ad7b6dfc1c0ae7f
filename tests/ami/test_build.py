"""Image builds against moto: what is rebuilt and in which order, read from the account's state, not from logs."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from ami.build import ImageStore, build_images, plan_builds, tags_of, write_lock
from ami.manifest import load_manifests
from platformctl.cli import cli
from platformctl.kernel.errors import PlatformError
from tests.ami.accounts import COPY, REGION, build, bump, ec2, fail_on, images, running_builders


def test_first_build_builds_the_tree_parents_first_and_publishes(aws: None, folder: Path, tmp_path: Path) -> None:
    lock = tmp_path / "images.lock.json"
    build(folder, lock)
    built = images()
    assert {n: len(v) for n, v in built.items()} == {"base": 1, "general": 1, "ml": 1, "custom": 1}
    ids = {n: v[0]["ImageId"] for n, v in built.items()}
    # Each child was built from its parent's new image: parents before children.
    for child, parent in (("general", "base"), ("ml", "base"), ("custom", "general")):
        assert tags_of(built[child][0])["platformctl:base-image"] == ids[parent]
    source = boto3.client("ssm", region_name=REGION).get_parameter(
        Name="/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id")["Parameter"]["Value"]
    assert tags_of(built["base"][0])["platformctl:base-image"] == source
    tags = tags_of(built["ml"][0])
    assert (tags["platformctl:family"], tags["platformctl:version"], tags["accelerator"]) == ("ml", "3.0.2", "nvidia")
    ssm = boto3.client("ssm", region_name=REGION)
    for name, image_id in ids.items():
        version = load_manifests(folder).get(name).version
        assert ssm.get_parameter(Name=f"/platformctl/ami/{name}/{version}")["Parameter"]["Value"] == image_id
        assert ssm.get_parameter(Name=f"/platformctl/ami/{name}/latest")["Parameter"]["Value"] == image_id
    copies = {tags_of(i)["platformctl:name"]: i["ImageId"] for i in ec2(COPY).describe_images(Owners=["self"])["Images"]}
    assert set(copies) == set(ids)
    assert json.loads(lock.read_text())["images"]["custom"]["1.0.0"] == {REGION: ids["custom"], COPY: copies["custom"]}
    assert running_builders() == []
    snapshots = ec2().describe_snapshots(Filters=[{"Name": "tag:platformctl:name", "Values": ["ml"]}])["Snapshots"]
    assert len(snapshots) == 1


def test_a_second_build_builds_nothing(aws: None, folder: Path) -> None:
    build(folder)
    before = {n: [i["ImageId"] for i in v] for n, v in images().items()}
    again = build(folder)
    assert again["plan"].build == [] and set(again["plan"].unchanged) == set(before)
    assert {n: [i["ImageId"] for i in v] for n, v in images().items()} == before


def test_a_region_added_later_gets_copies_of_what_is_built_without_a_rebuild(aws: None, folder: Path,
                                                                              tmp_path: Path) -> None:
    """`ami build --copy-to R` on an up-to-date tree: nothing is rebuilt, and R gets a copy of every image it lacks
    (what `release start` advises when a stage's region has no image), which the lock file then names."""
    manifests = load_manifests(folder)
    home = ImageStore(REGION)
    build_images(manifests, plan_builds(manifests, home), home, workers=2)
    assert ec2(COPY).describe_images(Owners=["self"])["Images"] == []
    before = {n: [i["ImageId"] for i in v] for n, v in images().items()}
    store = ImageStore(REGION, [COPY])
    plan = plan_builds(manifests, store)
    assert plan.build == []
    report = build_images(manifests, plan, store, workers=2)
    assert {n: [i["ImageId"] for i in v] for n, v in images().items()} == before  # nothing rebuilt
    copies = {tags_of(i)["platformctl:name"]: i for i in ec2(COPY).describe_images(Owners=["self"])["Images"]}
    assert set(copies) == set(before)
    for name, copy in copies.items():  # a committed copy: the fingerprint and the image's own tags
        assert tags_of(copy)["platformctl:fingerprint"] == tags_of(images()[name][0])["platformctl:fingerprint"]
        assert tags_of(copy)["platformctl:version"] == manifests.get(name).version
    assert {i.name: i.copies for i in report.images} == {n: {COPY: c["ImageId"]} for n, c in copies.items()}
    lock = tmp_path / "images.lock.json"
    write_lock(lock, manifests, store, report.ids)
    assert json.loads(lock.read_text())["images"]["custom"]["1.0.0"] == {REGION: before["custom"][0],
                                                                         COPY: copies["custom"]["ImageId"]}
    again = build_images(manifests, plan_builds(manifests, store), store, workers=2)
    assert again.images == [] and len(ec2(COPY).describe_images(Owners=["self"])["Images"]) == len(copies)


def test_changing_base_rebuilds_everything_in_order(aws: None, folder: Path) -> None:
    build(folder)
    bump(folder, "base", "version: 1.5.0", "version: 1.6.0")
    result = build(folder)
    assert [(s.name, s.reason) for s in result["plan"].build] == [
        ("base", "changed content (version 1.5.0 -> 1.6.0)"), ("general", "parent base is rebuilt"),
        ("custom", "parent general is rebuilt"), ("ml", "parent base is rebuilt")]
    built = images()
    assert all(len(v) == 2 for v in built.values())
    newest = {n: v[-1] for n, v in built.items()}
    for child, parent in (("general", "base"), ("ml", "base"), ("custom", "general")):
        assert tags_of(newest[child])["platformctl:base-image"] == newest[parent]["ImageId"]


def test_changing_ml_rebuilds_only_ml(aws: None, folder: Path) -> None:
    build(folder)
    bump(folder, "ml", "kernelParameters: [pci=realloc]", "kernelParameters: [pci=realloc, iommu=pt]")
    result = build(folder)
    assert [(s.name, s.reason) for s in result["plan"].build] == [("ml", "changed content")]
    assert {n: len(v) for n, v in images().items()} == {"base": 1, "general": 1, "ml": 2, "custom": 1}


def test_a_new_source_image_rebuilds_from_the_root(aws: None, folder: Path) -> None:
    build(folder)
    other = ec2().describe_images(Owners=["amazon"], Filters=[{"Name": "name", "Values": ["amzn2-ami-hvm-*x86_64-gp2"]}])["Images"][0]
    bump(folder, "base", "  ssmParameter: /aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id",
         f"  ami: {other['ImageId']}")
    plan = plan_builds(load_manifests(folder), ImageStore(REGION))
    assert plan.build[0].name == "base" and plan.build[0].reason.startswith("changed content")
    assert [s.name for s in plan.build] == ["base", "general", "custom", "ml"]


@pytest.mark.parametrize("operation", ["CreateImage", "CopyImage"])
def test_a_failed_build_leaves_no_builder_and_no_half_published_parameter(aws: None, folder: Path, operation: str) -> None:
    undo = fail_on(operation)
    try:
        with pytest.raises(PlatformError, match=f"{operation} refused by the test"):
            build(folder)
    finally:
        undo()
    assert running_builders() == []
    assert images() == {}  # an image made before the failure is deregistered, its snapshot deleted
    assert ec2().describe_snapshots(Filters=[{"Name": "tag-key", "Values": ["platformctl:name"]}])["Snapshots"] == []
    assert boto3.client("ssm", region_name=REGION).get_parameters_by_path(Path="/platformctl", Recursive=True)["Parameters"] == []


def test_an_image_a_failed_build_cannot_remove_is_said_and_never_counted_as_built(aws: None, folder: Path) -> None:
    undo_copy, undo_remove = fail_on("CopyImage"), fail_on("DeregisterImage")
    said: list[str] = []
    manifests = load_manifests(folder)
    store = ImageStore(REGION, [COPY])
    try:
        with pytest.raises(PlatformError, match="CopyImage refused by the test"):
            build_images(manifests, plan_builds(manifests, store, ("base",)), store, workers=1, progress=said.append)
    finally:
        undo_copy()
        undo_remove()
    [left] = images()["base"]
    assert [line for line in said if line.startswith("could not remove")] == [
        f"could not remove {left['ImageId']} in {REGION}, which the failed build made: An error occurred (InternalError) "
        "when calling the DeregisterImage operation: DeregisterImage refused by the test (remove it by hand)"]
    assert "platformctl:fingerprint" not in tags_of(left)  # so the next build makes it again, never takes it as built
    assert [s.name for s in plan_builds(manifests, store).build][0] == "base"


def test_publishing_is_both_parameters_or_neither_and_a_rerun_completes_it(aws: None, folder: Path) -> None:
    undo = fail_on("PutParameter", lambda params: params.get("Name", "").endswith("/base/latest"))
    try:
        with pytest.raises(PlatformError):
            build(folder)
    finally:
        undo()
    ssm = boto3.client("ssm", region_name=REGION)
    assert ssm.get_parameters_by_path(Path="/platformctl", Recursive=True)["Parameters"] == []
    assert running_builders() == []
    result = build(folder)  # base's image is committed: the rerun publishes it and builds the rest
    assert [s.name for s in result["plan"].build] == ["general", "custom", "ml"]
    base = images()["base"]
    assert len(base) == 1
    assert ssm.get_parameter(Name="/platformctl/ami/base/latest")["Parameter"]["Value"] == base[0]["ImageId"]


def test_cli_plan_and_build_json(aws: None, folder: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    common = ["--manifests", str(folder), "--region", REGION]
    plan = json.loads(runner.invoke(cli, ["ami", "plan", *common, "-o", "json"]).stdout)
    assert [b["name"] for b in plan["build"]] == ["base", "general", "custom", "ml"] and plan["unchanged"] == []
    only = json.loads(runner.invoke(cli, ["ami", "plan", "ml", *common, "-o", "json"]).stdout)
    assert [b["name"] for b in only["build"]] == ["base", "ml"]  # ml needs its parent's image
    lock = tmp_path / "lock.json"
    built = json.loads(runner.invoke(cli, ["ami", "build", *common, "--lock-file", str(lock), "-o", "json"]).stdout)
    assert sorted(i["name"] for i in built["built"]) == ["base", "custom", "general", "ml"]
    again = json.loads(runner.invoke(cli, ["ami", "plan", *common, "-o", "json"]).stdout)
    assert again["build"] == [] and len(again["unchanged"]) == 4
    text = runner.invoke(cli, ["ami", "build", *common, "--lock-file", str(lock)]).stdout
    assert "nothing to build" in text


EKS_132 = "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id"
PLAIN = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-6.1-x86_64"


@pytest.mark.parametrize(("old", "new", "field", "said"), [
    # plain Amazon Linux 2023 (the shipped base until this was checked): no kubelet, no nodeadm, never a node
    (EKS_132, PLAIN, "base.yaml: source", "has no kubelet or nodeadm, and neither base nor its parents install both"),
    # the manifest's version and its source's kubelet disagree
    ('kubernetesVersion: "1.32"', 'kubernetesVersion: "1.31"', "base.yaml: kubernetesVersion",
     "1.31, but the image starts from the EKS-optimised image for 1.32"),
])
def test_a_tree_whose_images_could_not_join_a_cluster_is_refused_before_anything_is_built(
        aws: None, folder: Path, tmp_path: Path, old: str, new: str, field: str, said: str) -> None:
    bump(folder, "base", old, new)
    lock = tmp_path / "images.lock.json"
    out = CliRunner().invoke(cli, ["ami", "build", "--manifests", str(folder), "--lock-file", str(lock)])
    assert out.exit_code == 2 and field in out.output and said in out.output, out.output
    assert [line for line in out.output.splitlines() if "error" in line] == [out.output.strip().splitlines()[-1]]
    assert images() == {} and not lock.exists() and running_builders() == []


def test_a_plain_source_whose_tree_installs_kubelet_and_nodeadm_builds(aws: None, folder: Path) -> None:
    bump(folder, "base", EKS_132, PLAIN)
    bump(folder, "base", "packages: [", "packages: [kubelet, nodeadm, ")
    assert [s.name for s in build(folder)["plan"].build] == ["base", "general", "custom", "ml"]
    assert tags_of(images()["base"][0])["platformctl:kubernetes-version"] == "1.32"
