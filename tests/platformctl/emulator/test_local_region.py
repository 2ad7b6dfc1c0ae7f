"""The local region: AWS resources in moto, nodes that follow the auto scaling groups' instances."""

from __future__ import annotations

import functools

import pytest

from infra.materialize import materialize
from platformctl.emulator.local_region import LocalRegion
from platformctl.kernel.topology import load_stage
from tests.infra.images import LOCK, image_for


@pytest.fixture(scope="module")
def region():  # type: ignore[no-untyped-def]
    with LocalRegion(load_stage("dev"), provisioner=functools.partial(materialize, image_lock=LOCK)) as r:
        r.wait_until_ready()
        yield r


def _group(region: LocalRegion, name: str) -> dict:
    return region.autoscaling().describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]


def test_every_node_is_an_instance_of_its_pools_group(region: LocalRegion) -> None:
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
            assert all(n.image == image_for(stage, pool) for n in nodes)


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


def test_terminated_instance_loses_its_node_and_the_replacement_boots_the_templates_image(region: LocalRegion) -> None:
    cluster = region.stage.member_clusters[0]
    pool = next(p for p in cluster.node_pools if p.name == "general")
    name = f"{cluster.name}-general"
    sim = region.cluster(cluster.name)
    region.ec2().create_launch_template_version(LaunchTemplateName=name, SourceVersion="1",
                                                LaunchTemplateData={"ImageId": "ami-0fresh000000000001",
                                                                    "InstanceType": pool.instance_type})
    victim = sim.list_nodes("eks.amazonaws.com/nodegroup=general")[0]
    region.autoscaling().terminate_instance_in_auto_scaling_group(InstanceId=victim.instance_id, ShouldDecrementDesiredCapacity=False)
    region.advance(region.sync_seconds)
    names = {n.name for n in sim.list_nodes("eks.amazonaws.com/nodegroup=general")}
    assert victim.name not in names
    fresh = [n for n in sim.list_nodes("eks.amazonaws.com/nodegroup=general") if n.image == "ami-0fresh000000000001"]
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
