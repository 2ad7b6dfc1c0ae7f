"""The node-group seam on EKS managed node groups (``ManagedNodeGroups``), against moto with the local region's EKS:
a managed group is backed by an Auto Scaling group and a launch template of EKS's own, sized through EKS, and its nodes
register with the labels EKS's user data asks for. Then a remediation in the local region, on a cluster whose nodes a
managed node group owns, replaces a broken node through it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from platformctl.app.nodegroups import node_groups
from platformctl.emulator import moto_extensions
from platformctl.emulator.local_region import LocalRegion, Provisioned
from platformctl.emulator.moto_eks import LABEL_CAPACITY_TYPE
from platformctl.emulator.simulation import events as sim_events
from platformctl.kernel import aws
from platformctl.kernel.cluster.model import LABEL_NODEGROUP, LABEL_NODEGROUP_IMAGE
from platformctl.kernel.nodeadm import read_user_data
from platformctl.kernel.nodegroups import NodeGroupError, NodeGroups
from platformctl.kernel.nodegroups.eks import ManagedNodeGroups
from platformctl.kernel.state.sqlite import SQLiteStore
from platformctl.kernel.topology import Stage, load_stage
from upgrade_service.remediation.policy import parse_remediation_policy
from upgrade_service.remediation.remediate import EXIT_OK, run

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/nodes"


def eks_image(region: str, version: str = "1.32") -> str:
    name = f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/x86_64/standard/recommended/image_id"
    return str(aws.client("ssm", region).get_parameter(Name=name)["Parameter"]["Value"])


def cluster_with_a_managed_group(region: str, cluster: str, name: str = "general", *, desired: int = 2,
                                 maximum: int = 3, **extra: Any) -> tuple[str, str]:
    """An EKS cluster in a new VPC and one managed node group: (its subnet, the Auto Scaling group EKS made for it)."""
    ec2 = aws.client("ec2", region)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone=f"{region}a")["Subnet"]["SubnetId"]
    eks = aws.client("eks", region)
    eks.create_cluster(name=cluster, version="1.32", roleArn=ROLE, resourcesVpcConfig={"subnetIds": [subnet]})
    made = eks.create_nodegroup(clusterName=cluster, nodegroupName=name, nodeRole=ROLE, subnets=[subnet],
                                scalingConfig={"minSize": 0, "maxSize": maximum, "desiredSize": desired}, **extra)
    return subnet, made["nodegroup"]["resources"]["autoScalingGroups"][0]["name"]


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    moto_extensions.install()
    with mock_aws():
        moto_extensions.publish_eks_optimized_images(REGION)
        yield


@pytest.fixture
def managed(account: None) -> tuple[ManagedNodeGroups, str]:
    _, asg = cluster_with_a_managed_group(REGION, "c1", instanceTypes=["m5.large"], labels={"team": "search"},
                                          taints=[{"key": "dedicated", "value": "search", "effect": "NO_SCHEDULE"}])
    return ManagedNodeGroups(REGION), asg


def test_eks_backs_a_managed_group_with_an_auto_scaling_group_whose_instances_join_with_its_labels(
        managed: tuple[ManagedNodeGroups, str]) -> None:
    seam, asg = managed
    assert isinstance(seam, NodeGroups)
    state = seam.describe("c1/general")
    assert (state.desired, state.min_size, state.max_size, state.room, len(state.instances)) == (2, 0, 3, 1, 2)
    assert state.image == eks_image(REGION) and state.instance_type == "m5.large"
    group = aws.client("autoscaling", REGION).describe_auto_scaling_groups(AutoScalingGroupNames=[asg])["AutoScalingGroups"][0]
    tags = {t["Key"]: t["Value"] for t in group["Tags"]}
    assert asg.startswith("eks-general-") and tags["eks:cluster-name"] == "c1" and tags["eks:nodegroup-name"] == "general"
    assert sorted(i["InstanceId"] for i in group["Instances"]) == sorted(state.instances)
    raw = aws.client("ec2", REGION).describe_instance_attribute(InstanceId=state.instances[0], Attribute="userData")
    config = read_user_data(raw["UserData"]["Value"])  # what nodeadm on the instance reads
    assert config.cluster == "c1"
    assert config.labels == {LABEL_NODEGROUP: "general", LABEL_NODEGROUP_IMAGE: state.image,
                             LABEL_CAPACITY_TYPE: "ON_DEMAND", "team": "search"}
    assert [(t.key, t.value, t.effect) for t in config.taints] == [("dedicated", "search", "NoSchedule")]
    assert seam.cluster_groups("c1") == ["c1/general"]
    owned = seam.instances([*state.instances, "i-0000000000000dead"])
    assert sorted(owned) == sorted(state.instances) and {s.group for s in owned.values()} == {"c1/general"}
    assert seam.booted([state.image]).instances == sorted(state.instances)
    assert seam.failed_launches("c1/general", 0) == []
    assert isinstance(node_groups(REGION, kind="eks-managed"), ManagedNodeGroups)


def test_capacity_is_raised_through_eks_and_a_retired_node_lowers_it_or_is_replaced(
        managed: tuple[ManagedNodeGroups, str]) -> None:
    seam, _ = managed
    eks = aws.client("eks", REGION)

    def sizes() -> tuple[int, int]:
        said = eks.describe_nodegroup(clusterName="c1", nodegroupName="general")["nodegroup"]["scalingConfig"]["desiredSize"]
        return said, len(seam.describe("c1/general").instances)

    with pytest.raises(NodeGroupError) as above:
        seam.add_capacity("c1/general", 4)
    assert above.value.code == "InvalidParameterException" and "desiredSize can't be greater than maxSize" in str(above.value)
    assert sizes() == (2, 2)  # refused: nothing changed
    seam.add_capacity("c1/general", 3)
    assert sizes() == (3, 3)
    seam.add_capacity("c1/general", 3)  # asked again (a journalled intent after a crash): the same count
    assert sizes() == (3, 3)
    first, second, *_ = seam.describe("c1/general").instances
    seam.retire(first, replace=False)
    assert sizes() == (2, 2) and first not in seam.describe("c1/general").instances
    assert seam.instances([first]) == {} or seam.instances([first])[first].leaving
    seam.retire(second, replace=True)
    after = seam.describe("c1/general")
    assert after.desired == 2 and len(after.instances) == 2 and second not in after.instances
    with pytest.raises(NodeGroupError) as gone:
        seam.retire("i-0000000000000dead", replace=True)
    assert gone.value.code == "ValidationError" and "i-0000000000000dead" in str(gone.value)


def test_a_group_that_is_not_there_and_an_image_the_region_cannot_boot_are_refused_as_eks_refuses_them(
        managed: tuple[ManagedNodeGroups, str]) -> None:
    seam, _ = managed
    for name in ("c1/nope", "c9/general", "general"):
        with pytest.raises(NodeGroupError) as unknown:
            seam.describe(name)
        assert unknown.value.code == "ResourceNotFoundException" and not unknown.value.transient
    eks = aws.client("eks", REGION)
    subnet = eks.describe_nodegroup(clusterName="c1", nodegroupName="general")["nodegroup"]["subnets"]
    with pytest.raises(eks.exceptions.InvalidParameterException, match="AL2_x86_64"):
        eks.create_nodegroup(clusterName="c1", nodegroupName="old", nodeRole=ROLE, subnets=subnet, amiType="AL2_x86_64")
    assert eks.list_nodegroups(clusterName="c1")["nodegroups"] == ["general"]  # refused: not made


def test_a_custom_image_in_the_callers_launch_template_gets_no_user_data_merged(account: None) -> None:
    """With a custom AMI (``amiType`` CUSTOM) EKS merges nothing: the instance boots with the caller's user data, so its
    labels are the caller's to write."""
    ec2 = aws.client("ec2", REGION)
    image = eks_image(REGION)
    from platformctl.kernel.nodeadm import render_user_data

    mine = render_user_data("c1", "https://c1.example", "Q0E=", "172.20.0.0/16", {"mine": "yes"})
    ec2.create_launch_template(LaunchTemplateName="mine", LaunchTemplateData={"ImageId": image, "InstanceType": "m5.large",
                                                                              "UserData": mine})
    cluster_with_a_managed_group(REGION, "c1", launchTemplate={"name": "mine", "version": "1"})
    nodegroup = aws.client("eks", REGION).describe_nodegroup(clusterName="c1", nodegroupName="general")["nodegroup"]
    assert nodegroup["amiType"] == "CUSTOM"
    state = ManagedNodeGroups(REGION).describe("c1/general")
    raw = ec2.describe_instance_attribute(InstanceId=state.instances[0], Attribute="userData")
    assert state.image == image and read_user_data(raw["UserData"]["Value"]).labels == {"mine": "yes"}


# ---------------------------------------------------------------- in the local region

MEMBER = "dev-usw2a-01"


def managed_member(stage: Stage) -> Provisioned:
    """A provisioner that makes one member cluster whose general pool is a managed node group of three nodes."""
    subnet, asg = cluster_with_a_managed_group(stage.region, MEMBER, desired=3, maximum=5, instanceTypes=["m6i.4xlarge"])
    vpc = aws.client("ec2", stage.region).describe_subnets(SubnetIds=[subnet])["Subnets"][0]["VpcId"]
    template = aws.client("autoscaling", stage.region).describe_auto_scaling_groups(
        AutoScalingGroupNames=[asg])["AutoScalingGroups"][0]["LaunchTemplate"]["LaunchTemplateName"]
    return Provisioned(vpc, {f"{stage.region}a": subnet}, {asg: (MEMBER, "general", template)})


def test_a_remediation_replaces_a_broken_node_of_a_managed_node_group_through_eks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with LocalRegion(load_stage("dev"), provisioner=managed_member) as region:
        sim = region.cluster(MEMBER)
        region.advance(300)
        nodes = sim.list_nodes()
        assert len(nodes) == 3 and all(n.ready for n in nodes)
        image = eks_image(region.stage.region)
        assert {(n.labels[LABEL_NODEGROUP], n.image, n.labels[LABEL_CAPACITY_TYPE]) for n in nodes} == \
            {("general", image, "ON_DEMAND")}  # as EKS labels a managed group's nodes: the toolkit reads them
        broken = nodes[0].name
        sim.stop_kubelet(broken)
        region.advance(400)
        groups = ManagedNodeGroups(region.stage.region)
        policy = parse_remediation_policy({}, "remediation.yaml")
        outcome = run(MEMBER, sim, groups, policy, SQLiteStore(tmp_path / "state.db"), "tester")
        assert (outcome.status, outcome.exit_code) == ("ok", EXIT_OK), outcome.reason
        assert [r["result"] for r in outcome.remediated] == ["replaced"]
        region.advance(60)
        after = sim.list_nodes()
        assert broken not in {n.name for n in after} and len(after) == 3 and all(n.ready for n in after)
        assert outcome.remediated[0]["replacement"] in {n.name for n in after}
        said = aws.client("eks", region.stage.region).describe_nodegroup(clusterName=MEMBER, nodegroupName="general")
        assert said["nodegroup"]["scalingConfig"]["desiredSize"] == 3  # surged to 4 through EKS, back to 3 with the retired node
        asg = said["nodegroup"]["resources"]["autoScalingGroups"][0]["name"]
        activities = aws.client("autoscaling", region.stage.region).describe_scaling_activities(AutoScalingGroupName=asg)
        launched = [a for a in activities["Activities"] if a["Description"].startswith("Launching")]
        assert len(launched) == 4  # the group's three, then the surge node that stood in before the drain
        assert sum(e.kind == sim_events.NODE_CORDONED for e in sim.events) == 1
