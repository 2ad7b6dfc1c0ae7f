"""The local region is made from the Pulumi program: what lands in AWS (moto) is what the program declares."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

import pytest
from moto import mock_aws

from infra.materialize import materialize
from infra.mocked import run_stage
from platformctl.emulator.local_region import Provisioned
from platformctl.kernel import aws
from platformctl.kernel.environment import FAKE_CREDENTIALS
from platformctl.kernel.topology import Stage, load_stage
from tests.infra.images import LOCK, hold, image_for, stack_config


@pytest.fixture(scope="module")
def made() -> Iterator[tuple[Stage, Provisioned, list[tuple[str, dict]]]]:
    stage = load_stage("staging")
    applied: list[tuple[str, dict]] = []
    with fake_keys(), mock_aws(config={"iam": {"load_aws_managed_policies": True}}):
        hold(LOCK)  # the images the stage boots, built in this account
        result = materialize(stage, kube_sink=lambda cluster, manifest: applied.append((cluster, manifest)), image_lock=LOCK)
        yield stage, result, applied


@contextlib.contextmanager
def fake_keys() -> Iterator[None]:
    """moto's keys in the environment, and no endpoint: boto3 in this process reaches moto's mock."""
    saved = {k: os.environ.get(k) for k in [*FAKE_CREDENTIALS, "AWS_ENDPOINT_URL"]}
    os.environ.update(FAKE_CREDENTIALS)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_the_groups_and_templates_in_aws_are_the_ones_the_program_declares(made) -> None:  # type: ignore[no-untyped-def]
    stage, result, _ = made
    declared = run_stage(stage.name, config=stack_config(stage.name))
    declared_groups = {r.inputs["name"] for r in declared.of_type("aws:autoscaling/group:Group")}
    asg, ec2 = aws.client("autoscaling", stage.region), aws.client("ec2", stage.region)
    groups = {g["AutoScalingGroupName"]: g for g in asg.describe_auto_scaling_groups()["AutoScalingGroups"]}
    assert set(groups) == declared_groups == set(result.pools)
    templates = {t["LaunchTemplateName"] for t in ec2.describe_launch_templates()["LaunchTemplates"]}
    assert templates == {r.inputs["name"] for r in declared.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    subnets = {s["SubnetId"]: s for s in ec2.describe_subnets()["Subnets"]}
    for member in stage.member_clusters:
        for pool in member.node_pools:
            group = groups[f"{member.name}-{pool.name}"]
            zones = {subnets[s]["AvailabilityZone"] for s in group["VPCZoneIdentifier"].split(",")}
            assert zones == {member.zone}
            assert (group["MinSize"], group["DesiredCapacity"], group["MaxSize"]) == (pool.min_size, pool.desired_size, pool.max_size)
            # AWS never rebalances zones behind the rotation's back (it would terminate instances without a drain)
            assert [p["ProcessName"] for p in group["SuspendedProcesses"]] == ["AZRebalance"]
            tags = {t["Key"]: t["Value"] for t in group["Tags"]}
            assert tags["platformctl.io/cluster"] == member.name and tags["platformctl.io/node-pool"] == pool.name
            version = ec2.describe_launch_template_versions(LaunchTemplateName=group["AutoScalingGroupName"])["LaunchTemplateVersions"][0]
            data = version["LaunchTemplateData"]
            assert data["ImageId"] == image_for(stage, pool)
            assert data["MetadataOptions"]["HttpTokens"] == "required" and data["MetadataOptions"]["HttpPutResponseHopLimit"] == 1
            assert all(m["Ebs"]["Encrypted"] for m in data["BlockDeviceMappings"])
            # the instances the group launched are in the member's zone, with the pool's image
            ids = [i["InstanceId"] for i in group["Instances"]]
            assert len(ids) == pool.desired_size
            for reservation in ec2.describe_instances(InstanceIds=ids)["Reservations"]:
                for instance in reservation["Instances"]:
                    assert instance["Placement"]["AvailabilityZone"] == member.zone
                    assert instance["ImageId"] == data["ImageId"]


def test_network_clusters_and_identities_exist_in_aws(made) -> None:  # type: ignore[no-untyped-def]
    stage, result, _ = made
    ec2, eks, iam = (aws.client(s, stage.region) for s in ("ec2", "eks", "iam"))
    [vpc] = ec2.describe_vpcs(Filters=[{"Name": "tag:platformctl.io/stage", "Values": [stage.name]}])["Vpcs"]
    assert vpc["VpcId"] == result.vpc_id and vpc["CidrBlock"] == stage.topology.vpc_cidr
    assert set(result.subnets) == set(stage.zones)
    assert len(ec2.describe_nat_gateways()["NatGateways"]) == len(stage.zones)
    assert sorted(eks.list_clusters()["clusters"]) == sorted(c.name for c in stage.clusters())
    subnet_zone = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.describe_subnets()["Subnets"]}
    host = eks.describe_cluster(name=stage.host_cluster.name)["cluster"]
    assert len({subnet_zone[s] for s in host["resourcesVpcConfig"]["subnetIds"]}) >= 3
    assert host["encryptionConfig"][0]["resources"] == ["secrets"]
    kms = aws.client("kms", stage.region)
    assert host["encryptionConfig"][0]["provider"]["keyArn"] in {k["KeyArn"] for k in kms.list_keys()["Keys"]}
    providers = iam.list_open_id_connect_providers()["OpenIDConnectProviderList"]
    assert len(providers) == len(list(stage.clusters()))
    node_role = f"{stage.member_clusters[0].name}-node"
    attached = {p["PolicyName"] for p in iam.list_attached_role_policies(RoleName=node_role)["AttachedPolicies"]}
    assert attached == {"AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly",
                        "AmazonSSMManagedInstanceCore"}
    assert result.outputs["clusters"][stage.host_cluster.name]["endpoint"] == host["endpoint"].rstrip("/")


def test_every_kubernetes_object_goes_to_its_cluster(made) -> None:  # type: ignore[no-untyped-def]
    stage, result, applied = made
    # the same objects, each once (the program's resources are made on several threads, so not in one order)
    assert sorted(map(json.dumps, applied)) == sorted(map(json.dumps, result.kubernetes))
    by_cluster: dict[str, set[tuple[str, str]]] = {}
    for cluster, manifest in applied:
        by_cluster.setdefault(cluster, set()).add((manifest["kind"], manifest["metadata"]["name"]))
    assert set(by_cluster) == {c.name for c in stage.clusters()}
    assert ("CronJob", "platformctl-rotate") in by_cluster[stage.host_cluster.name]
    for member in stage.member_clusters:
        assert {("PriorityClass", t) for t in ("reserved", "ondemand", "preemptible")} <= by_cluster[member.name]
    cron = next(m for c, m in applied if m["kind"] == "CronJob")
    assert isinstance(cron["spec"]["startingDeadlineSeconds"], int)  # numbers as the API wants them


def test_the_region_declares_the_tick_suspended_with_its_ledger() -> None:
    """What the local region asks (``release``): the tick declared in the host cluster, held, naming the region's
    ledger, whose table the stage that owns it makes."""
    release = {"ledger": "dynamodb://platformctl-release?region=us-west-2", "ownsLedger": True, "suspend": True}
    stage = load_stage("dev")  # (the module's account holds staging)
    applied: list[tuple[str, dict]] = []
    with fake_keys(), mock_aws(config={"iam": {"load_aws_managed_policies": True}}):
        hold(LOCK)
        materialize(stage, kube_sink=lambda cluster, manifest: applied.append((cluster, manifest)), image_lock=LOCK,
                    release=release)
        tables = aws.client("dynamodb", stage.region).list_tables()["TableNames"]
    [(cluster, tick)] = [(c, m) for c, m in applied
                         if m["kind"] == "CronJob" and m["metadata"]["name"] == "platformctl-release-tick"]
    assert cluster == stage.host_cluster.name and tick["spec"]["suspend"] is True
    args = tick["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--ledger") + 1] == release["ledger"]
    assert "platformctl-release" in tables
