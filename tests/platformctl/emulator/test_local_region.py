"""The local region: AWS resources in moto, nodes that follow the auto scaling groups' instances."""

from __future__ import annotations

import base64
import functools
import json
import re
from pathlib import Path

import boto3
import pytest

from ami.build import ImageStore
from ami.lock import newest_in_lock
from infra.materialize import materialize
from platformctl.app.images import BuildRequest, build
from platformctl.emulator.local_region import LocalRegion
from platformctl.kernel.topology import NodePool, Stage, load_stage


@pytest.fixture(scope="module")
def built_lock(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("images") / "images.lock.json"


@pytest.fixture(scope="module")
def region(built_lock: Path):  # type: ignore[no-untyped-def]
    """dev's region, its image tree built into its own EC2 first (EC2 launches only images it holds), as `local up`
    and the demo build it."""

    def build_tree(stage: Stage) -> None:
        build(BuildRequest(ImageStore(stage.region), built_lock, workers=2))

    with LocalRegion(load_stage("dev"), provisioner=functools.partial(materialize, image_lock=built_lock),
                     prepare=build_tree) as r:
        r.wait_until_ready()
        yield r


def image_for(stage: Stage, pool: NodePool, lock: Path) -> str | None:
    return stage.image_for(pool) or newest_in_lock(json.loads(lock.read_text()), pool.image_family, stage.region)


def _group(region: LocalRegion, name: str) -> dict:
    return region.autoscaling().describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def test_every_node_is_an_instance_of_its_pools_group(region: LocalRegion, built_lock: Path) -> None:
    stage = region.stage
    for cluster in stage.clusters():
        sim = region.cluster(cluster.name)
        for pool in cluster.node_pools:
            group = _group(region, f"{cluster.name}-{pool.name}")
            instances = {i["InstanceId"] for i in group["Instances"]}
            nodes = sim.list_nodes(f"eks.amazonaws.com/nodegroup={pool.name}")
            assert {n.instance_id for n in nodes} == instances
            assert len(nodes) == pool.desired_size
            assert all(n.ready and n.zone in cluster.zones and n.instance_type == pool.instance_type for n in nodes)
            assert all(n.image == image_for(stage, pool, built_lock) for n in nodes)


def test_member_cluster_pools_live_in_their_zone_only(region: LocalRegion) -> None:
    for member in region.stage.member_clusters:
        for pool in member.node_pools:
            group = _group(region, f"{member.name}-{pool.name}")
            assert group["AvailabilityZones"] == [member.zone]
            assert group["VPCZoneIdentifier"] == region.subnets[member.zone]
    host = region.stage.host_cluster
    group = _group(region, f"{host.name}-{host.node_pools[0].name}")
    assert sorted(group["AvailabilityZones"]) == sorted(host.zones)


def test_every_cluster_has_a_private_control_plane_over_two_zones_at_least(region: LocalRegion) -> None:
    eks = region._client("eks")
    assert sorted(eks.list_clusters()["clusters"]) == sorted(c.name for c in region.stage.clusters())
    zone_of = {subnet: zone for zone, subnet in region.subnets.items()}
    for cluster in region.stage.clusters():
        plane = eks.describe_cluster(name=cluster.name)["cluster"]
        vpc = plane["resourcesVpcConfig"]
        zones = {zone_of[s] for s in vpc["subnetIds"]}
        assert len(zones) >= 2 and set(cluster.zones) <= zones
        assert vpc["endpointPublicAccess"] is False and plane["tags"]["platformctl.io/stage"] == "dev"


def test_launch_templates_require_imdsv2_and_encrypt_volumes(region: LocalRegion) -> None:
    ec2 = region.ec2()
    for name in region.pools:
        version = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"][0]["LaunchTemplateData"]
        assert version["MetadataOptions"]["HttpTokens"] == "required"
        assert version["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
        assert all(b["Ebs"]["Encrypted"] for b in version["BlockDeviceMappings"])
        tags = {t["Key"]: t["Value"] for t in ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"][0]["Tags"]}
        assert tags["platformctl.io/stage"] == "dev" and tags["platformctl.io/node-pool"] in name


def new_image_version(region: LocalRegion, template: str, image: str) -> None:
    """A new version of ``template`` booting ``image``, as the program makes one: its user data names the image too."""
    ec2 = region.ec2()
    data = ec2.describe_launch_template_versions(LaunchTemplateName=template, Versions=["$Latest"])["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    old = data["ImageId"]
    user_data = base64.b64encode(base64.b64decode(data["UserData"]).replace(old.encode(), image.encode())).decode()
    ec2.create_launch_template_version(LaunchTemplateName=template, SourceVersion="$Latest",
                                       LaunchTemplateData={"ImageId": image, "InstanceType": data["InstanceType"],
                                                           "UserData": user_data})


def test_a_version_made_from_a_source_version_inherits_what_it_does_not_name_as_ec2s_do(region: LocalRegion) -> None:
    ec2 = region.ec2()
    name = f"{region.stage.member_clusters[0].name}-general"
    source = ec2.describe_launch_template_versions(LaunchTemplateName=name, Versions=["$Latest"])[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    ec2.create_launch_template(LaunchTemplateName="inherits", LaunchTemplateData=source)  # not the stage's own
    ec2.create_launch_template_version(LaunchTemplateName="inherits", SourceVersion="$Latest",
                                       LaunchTemplateData={"ImageId": "ami-12c6146b"})
    data = ec2.describe_launch_template_versions(LaunchTemplateName="inherits", Versions=["2"])[
        "LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data == {**source, "ImageId": "ami-12c6146b"}
    ec2.delete_launch_template(LaunchTemplateName="inherits")


def test_terminated_instance_loses_its_node_and_the_replacement_boots_the_templates_image(region: LocalRegion) -> None:
    cluster = region.stage.member_clusters[0]
    pool = next(p for p in cluster.node_pools if p.name == "general")
    name = f"{cluster.name}-general"
    sim = region.cluster(cluster.name)
    current = region.ec2().describe_launch_template_versions(LaunchTemplateName=name, Versions=["$Latest"])
    fresh_image = region.ec2().copy_image(SourceImageId=current["LaunchTemplateVersions"][0]["LaunchTemplateData"]["ImageId"],
                                          SourceRegion=region.stage.region, Name="fresh")["ImageId"]
    new_image_version(region, name, fresh_image)
    victim = sim.list_nodes("eks.amazonaws.com/nodegroup=general")[0]
    region.autoscaling().terminate_instance_in_auto_scaling_group(InstanceId=victim.instance_id, ShouldDecrementDesiredCapacity=False)
    region.advance(region.sync_seconds)
    names = {n.name for n in sim.list_nodes("eks.amazonaws.com/nodegroup=general")}
    assert victim.name not in names
    fresh = [n for n in sim.list_nodes("eks.amazonaws.com/nodegroup=general") if n.image == fresh_image]
    assert len(fresh) == 1 and not fresh[0].ready
    region.advance(pool.boot_seconds)
    assert sim.get_node(fresh[0].name).ready
    assert len(sim.list_nodes("eks.amazonaws.com/nodegroup=general")) == pool.desired_size


def test_deleted_node_object_re_registers_while_its_instance_runs(region: LocalRegion) -> None:
    sim = region.cluster(region.stage.member_clusters[1].name)
    node = sim.list_nodes()[0]
    sim.delete_node(node.name)
    region.advance(region.sync_seconds)
    assert sim.get_node(node.name).instance_id == node.instance_id
    region.advance(60)
    assert sim.get_node(node.name).ready


def test_vpc_and_subnets_are_tagged_per_stage_and_zone(region: LocalRegion) -> None:
    ec2 = region.ec2()
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [region.vpc_id]}])["Subnets"]
    assert len(subnets) == 2 * len(region.stage.zones)
    for subnet in subnets:
        tags = {t["Key"]: t["Value"] for t in subnet["Tags"]}
        assert tags["platformctl.io/stage"] == "dev" and tags["platformctl.io/tier"] in ("private", "public")


def test_a_node_carries_the_kubelets_labels_and_what_its_user_data_asks_and_nothing_else(region: LocalRegion) -> None:
    """EKS labels only managed node groups' nodes with its own (nodegroup, nodegroup-image, capacityType): a
    self-managed group's node is what its kubelet sets plus ``--node-labels`` and ``--register-with-taints``."""
    ec2 = region.ec2()
    seen = 0
    for sim in region.clusters.values():
        for node in sim.list_nodes():
            raw = ec2.describe_instance_attribute(InstanceId=node.instance_id, Attribute="userData")["UserData"]["Value"]
            text = base64.b64decode(raw).decode()
            asked = dict(kv.split("=", 1) for kv in re.search(r"--node-labels=([^'\"\n]+)", text).group(1).split(","))
            taints = re.search(r"--register-with-taints=([^'\"\n]+)", text)
            (inst,) = ec2.describe_instances(InstanceIds=[node.instance_id])["Reservations"][0]["Instances"]
            zone = inst["Placement"]["AvailabilityZone"]
            assert node.labels == {**asked, "kubernetes.io/hostname": node.name, "kubernetes.io/arch": "amd64",
                                   "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": inst["InstanceType"],
                                   "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": region.stage.region}
            assert asked["platformctl.io/image"] == inst["ImageId"] == node.image
            assert "eks.amazonaws.com/nodegroup-image" not in node.labels
            assert node.provider_id == f"aws:///{zone}/{inst['InstanceId']}"
            assert [f"{t.key}={t.value}:{t.effect}" for t in node.taints] == (taints.group(1).split(",") if taints else [])
            seen += 1
    assert seen == sum(len(sim.list_nodes()) for sim in region.clusters.values()) > 10


def test_an_instance_whose_user_data_the_kubelet_refuses_never_becomes_a_node(region: LocalRegion) -> None:
    """A label in the kubelet's own namespace that is not its own: the kubelet does not start, no node appears."""
    cluster = region.stage.member_clusters[1]
    name = f"{cluster.name}-general"
    sim = region.cluster(cluster.name)
    ec2 = region.ec2()
    data = ec2.describe_launch_template_versions(LaunchTemplateName=name, Versions=["$Latest"])["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    bad = base64.b64encode(base64.b64decode(data["UserData"]).replace(
        b"--node-labels=", b"--node-labels=node-role.kubernetes.io/worker=true,")).decode()
    ec2.create_launch_template_version(LaunchTemplateName=name, LaunchTemplateData={
        "ImageId": data["ImageId"], "InstanceType": data["InstanceType"], "UserData": bad})
    before = {n.name for n in sim.list_nodes("eks.amazonaws.com/nodegroup=general")}
    victim = sorted(before)[0]
    region.autoscaling().terminate_instance_in_auto_scaling_group(
        InstanceId=sim.get_node(victim).instance_id, ShouldDecrementDesiredCapacity=False)
    region.advance(600)
    after = {n.name for n in sim.list_nodes("eks.amazonaws.com/nodegroup=general")}
    assert after == before - {victim}  # the replacement instance runs, and never registers
    group = region.autoscaling().describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    assert len(group["Instances"]) == len(before)


def test_a_group_whose_template_boots_an_image_ec2_does_not_hold_records_failed_launches(region: LocalRegion) -> None:
    """EC2 launches only an image it holds; Auto Scaling takes the capacity asked for, fails each launch as a scaling
    activity (what ``DescribeScalingActivities`` shows an operator), and no instance appears."""
    from platformctl.kernel.nodegroups.aws import AutoScalingNodeGroups

    name = f"{region.stage.host_cluster.name}-system"  # the host's (the tests above use the members')
    missing = "ami-0123456789abcdef0"
    since = region.clock.now()
    new_image_version(region, name, missing)
    asg = region.autoscaling()
    before = _group(region, name)
    asg.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=before["DesiredCapacity"] + 1)  # accepted
    region.advance(60)
    after = _group(region, name)
    assert after["DesiredCapacity"] == before["DesiredCapacity"] + 1
    assert {i["InstanceId"] for i in after["Instances"]} == {i["InstanceId"] for i in before["Instances"]}
    (failed, *_) = asg.describe_scaling_activities(AutoScalingGroupName=name)["Activities"]
    assert failed["StatusCode"] == "Failed"
    assert failed["StatusMessage"] == f"The image id '[{missing}]' does not exist. Launching EC2 instance failed."
    groups = AutoScalingNodeGroups(region.stage.region)
    assert groups.failed_launches(name, since) == [failed["StatusMessage"]]
    assert groups.failed_launches(name, region.clock.now() + 1) == []  # none since
    # The template fixed (an image EC2 holds): the next launch succeeds, and what failed before it is past.
    held = _group(region, name)["Instances"][0]["InstanceId"]
    new_image_version(region, name, region.ec2().describe_instances(InstanceIds=[held])["Reservations"][0]["Instances"][0]["ImageId"])
    asg.set_desired_capacity(AutoScalingGroupName=name, DesiredCapacity=before["DesiredCapacity"] + 2)
    assert asg.describe_scaling_activities(AutoScalingGroupName=name)["Activities"][0]["StatusCode"] == "Successful"
    assert groups.failed_launches(name, since) == []


def test_a_stack_that_pins_an_image_its_region_does_not_hold_is_refused_before_anything_is_made() -> None:
    """Placeholder ids (`ami-0a1f00c0ffee00001`) once sat in three stack files: every instance would have failed
    InvalidAMIID.NotFound. Refused on one line naming the stack file and the key, nothing created."""
    from moto import mock_aws

    from platformctl.kernel.errors import PlatformError

    dev = load_stage("dev")
    pinned = dev.model_copy(update={"topology": dev.topology.model_copy(update={"images": {"general": "ami-0a1f00c0ffee00001"}})})
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=dev.region)
        vpcs = len(ec2.describe_vpcs()["Vpcs"])
        with pytest.raises(PlatformError) as refused:
            materialize(pinned, image_lock=Path(__file__))
        assert refused.value.file == dev.source and refused.value.field == "config.platformctl:topology.images.general"
        assert "ami-0a1f00c0ffee00001 does not exist in us-west-2" in str(refused.value)
        assert len(ec2.describe_vpcs()["Vpcs"]) == vpcs  # nothing made


def test_an_instance_of_an_image_without_a_kubelet_runs_and_never_becomes_a_node(region: LocalRegion) -> None:
    """Plain Amazon Linux 2023 (what ami/manifests/base.yaml once started from) has no kubelet and no nodeadm: EC2
    launches it, nodeadm never reads the NodeConfig, no node registers, as on EKS."""
    cluster = region.stage.member_clusters[1]
    name = f"{cluster.name}-system"
    sim = region.cluster(cluster.name)
    ec2 = region.ec2()
    plain = region._client("ssm").get_parameter(
        Name="/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-6.1-x86_64")["Parameter"]["Value"]
    if not ec2.describe_images(Filters=[{"Name": "image-id", "Values": [plain]}])["Images"]:
        plain = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]  # any image of Amazon's that EC2 holds
    new_image_version(region, name, plain)
    before = {n.name for n in sim.list_nodes("eks.amazonaws.com/nodegroup=system")}
    victim = sorted(before)[0]
    region.autoscaling().terminate_instance_in_auto_scaling_group(
        InstanceId=sim.get_node(victim).instance_id, ShouldDecrementDesiredCapacity=False)
    region.advance(900)
    group = _group(region, name)
    fresh = [i["InstanceId"] for i in group["Instances"] if i["InstanceId"] not in {sim.get_node(n).instance_id for n in before - {victim}}]
    assert len(fresh) == 1  # launched: EC2 holds the image
    (inst,) = ec2.describe_instances(InstanceIds=fresh)["Reservations"][0]["Instances"]
    assert inst["ImageId"] == plain and inst["State"]["Name"] == "running"
    assert {n.name for n in sim.list_nodes("eks.amazonaws.com/nodegroup=system")} == before - {victim}
