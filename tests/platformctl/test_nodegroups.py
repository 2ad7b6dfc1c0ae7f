"""The node-group seam's contract, on both implementations: EC2 Auto Scaling (boto3 against moto) and the
simulator's pools. A refused call is a ``NodeGroupError`` with Auto Scaling's error code, whichever answers."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from platformctl import moto_extensions
from platformctl.nodegroups import NodeGroupError, NodeGroups
from platformctl.nodegroups.aws import AutoScalingNodeGroups
from platformctl.nodegroups.simulated import SimulatedNodeGroups
from tests.upgrade_service.rotation import cluster

REGION = "us-east-1"


@pytest.fixture
def aws_groups(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[NodeGroups, str]]:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    moto_extensions.install()  # as the local region does: Auto Scaling's bounds on a desired capacity
    with mock_aws():
        ec2 = boto3.client("ec2", region_name=REGION)
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        ec2.create_launch_template(LaunchTemplateName="general", LaunchTemplateData={"ImageId": image,
                                                                                     "InstanceType": "m5.large"})
        boto3.client("autoscaling", region_name=REGION).create_auto_scaling_group(
            AutoScalingGroupName="general", LaunchTemplate={"LaunchTemplateName": "general", "Version": "$Latest"},
            MinSize=0, MaxSize=3, DesiredCapacity=2, AvailabilityZones=[f"{REGION}a"],
            Tags=[{"Key": "eks:cluster-name", "Value": "c1", "PropagateAtLaunch": True}])
        yield AutoScalingNodeGroups(REGION), "general"


@pytest.fixture
def sim_groups() -> tuple[NodeGroups, str]:
    return SimulatedNodeGroups(cluster({"general": 2}, max_size=3)), "general"


@pytest.fixture(params=["aws", "simulated"])
def groups(request: pytest.FixtureRequest) -> tuple[NodeGroups, str]:
    return request.getfixturevalue("aws_groups" if request.param == "aws" else "sim_groups")  # type: ignore[no-any-return]


def test_both_implementations_describe_a_group_and_refuse_the_same_calls_the_same_way(groups: tuple[NodeGroups, str]) -> None:
    seam, name = groups
    assert isinstance(seam, NodeGroups)
    state = seam.describe(name)
    assert (state.desired, state.max_size, state.room, len(state.instances)) == (2, 3, 1, 2)
    with pytest.raises(NodeGroupError) as unknown:
        seam.describe("no-such-group")
    assert unknown.value.code == "ValidationError" and "no-such-group" in str(unknown.value)
    assert not unknown.value.transient
    with pytest.raises(NodeGroupError) as above:
        seam.set_desired(name, 4)
    assert above.value.code == "ValidationError" and "above max value 3" in str(above.value)
    assert seam.describe(name).desired == 2  # refused: nothing changed
    with pytest.raises(NodeGroupError) as gone:
        seam.terminate("i-0000000000000dead", decrement=False)
    assert gone.value.code == "ValidationError" and "i-0000000000000dead" in str(gone.value)
    seam.set_desired(name, 3)
    assert seam.describe(name).desired == 3


def test_a_throttled_call_is_transient() -> None:
    assert NodeGroupError("SetDesiredCapacity: Throttling: Rate exceeded", "Throttling").transient
    assert not NodeGroupError("no auto scaling group 'x'", "ValidationError").transient
