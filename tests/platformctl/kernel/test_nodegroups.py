"""The node-group seam's contract, on both implementations: EC2 Auto Scaling (boto3 against moto) and the
simulator's pools. A refused call is a ``NodeGroupError`` with Auto Scaling's error code, whichever answers."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from platformctl.emulator import moto_extensions
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.kernel.nodegroups import NodeGroupError, NodeGroups
from platformctl.kernel.nodegroups.aws import AutoScalingNodeGroups
from tests.clusters import cluster

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
        seam.add_capacity(name, 4)
    assert above.value.code == "ValidationError" and "above max value 3" in str(above.value)
    assert seam.describe(name).desired == 2  # refused: nothing changed
    with pytest.raises(NodeGroupError) as gone:
        seam.retire("i-0000000000000dead", replace=True)
    assert gone.value.code == "ValidationError" and "i-0000000000000dead" in str(gone.value)
    seam.add_capacity(name, 3)
    assert seam.describe(name).desired == 3


def test_both_implementations_say_which_instances_booted_an_image(groups: tuple[NodeGroups, str]) -> None:
    """How far an image reached, asked of the seam: the group's instances on its image, none on another."""
    seam, name = groups
    state = seam.describe(name)
    assert state.image is not None
    booted = seam.booted([state.image, "ami-00000000000000000"])
    assert set(booted.by_image) == {state.image} and booted.instances == sorted(state.instances)
    assert booted.builders == 0
    assert seam.booted(["ami-00000000000000000"]).instances == []


def test_ec2_counts_an_ended_instance_and_a_builder_apart(aws_groups: tuple[NodeGroups, str]) -> None:
    """On AWS a terminated instance still booted the image (EC2 lists it for a while); an image build's builder booted it
    to bake another image from it, which is no node it reached."""
    from platformctl.kernel.nodegroups import BUILDER_TAG

    seam, name = aws_groups
    state = seam.describe(name)
    assert state.image is not None
    ec2 = boto3.client("ec2", region_name=REGION)
    spec = [{"ResourceType": "instance", "Tags": [{"Key": BUILDER_TAG, "Value": "general"}]}]
    builder = ec2.run_instances(ImageId=state.image, MinCount=1, MaxCount=1, TagSpecifications=spec)["Instances"][0]["InstanceId"]
    ended = state.instances[0]
    seam.retire(ended, replace=False)
    ec2.terminate_instances(InstanceIds=[builder])
    booted = seam.booted([state.image])
    assert ended in booted.instances and builder not in booted.instances and booted.builders == 1
    assert len(booted.instances) == 2


def test_a_throttled_call_is_transient() -> None:
    assert NodeGroupError("SetDesiredCapacity: Throttling: Rate exceeded", "Throttling").transient
    assert not NodeGroupError("no auto scaling group 'x'", "ValidationError").transient


def test_a_group_busy_with_a_scaling_activity_is_asked_again_on_the_rotations_clock_and_a_termination_only_then() -> None:
    """botocore retries throttling, 5xx and resets itself; ``ScalingActivityInProgress`` and ``ResourceContention``
    (the group busy, nothing done) it does not: the seam asks again after a jittered wait on the caller's clock. A
    termination whose answer was lost is not asked again (it may have acted); one AWS refused as busy is."""
    from botocore.stub import Stubber

    from platformctl.kernel.clock import VirtualClock
    from platformctl.kernel.retry import Backoff

    clock = VirtualClock(1000.0)
    seam = AutoScalingNodeGroups(REGION, clock=clock, backoff=Backoff(attempts=4, base=2.0), seed=1)
    with Stubber(seam._asg) as stub:
        for code in ("ScalingActivityInProgress", "ResourceContention"):
            stub.add_client_error("set_desired_capacity", service_error_code=code, http_status_code=400)
        stub.add_response("set_desired_capacity", {}, {"AutoScalingGroupName": "general", "DesiredCapacity": 3,
                                                       "HonorCooldown": False})
        seam.add_capacity("general", 3)
        stub.assert_no_pending_responses()
        assert seam.retried == 2 and 1000.0 < clock.now() <= 1000.0 + 2.0 + 4.0  # full jitter: at most 2 s, then 4 s

        stub.add_client_error("terminate_instance_in_auto_scaling_group", service_error_code="ScalingActivityInProgress",
                              http_status_code=400)
        stub.add_response("terminate_instance_in_auto_scaling_group", {"Activity": {
            "ActivityId": "a", "AutoScalingGroupName": "general", "Cause": "c", "StartTime": "2026-11-27T00:00:00Z",
            "StatusCode": "InProgress"}})
        seam.retire("i-0123456789abcdef0", replace=True)
        stub.assert_no_pending_responses()
        assert seam.retried == 3

        stub.add_client_error("set_desired_capacity", service_error_code="Throttling", http_status_code=400)
        with pytest.raises(NodeGroupError) as throttled:  # botocore asked again already (its standard mode): not again
            seam.add_capacity("general", 3)
        assert throttled.value.code == "Throttling" and throttled.value.transient and seam.retried == 3

        for _ in range(4):  # busy on every attempt: the last answer is raised, typed and transient
            stub.add_client_error("set_desired_capacity", service_error_code="ScalingActivityInProgress",
                                  http_status_code=400)
        with pytest.raises(NodeGroupError) as busy:
            seam.add_capacity("general", 3)
        stub.assert_no_pending_responses()
        assert busy.value.code == "ScalingActivityInProgress" and busy.value.transient and seam.retried == 6


def test_a_termination_whose_answer_was_lost_is_not_asked_again_and_a_read_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.exceptions import EndpointConnectionError

    from platformctl.kernel.clock import VirtualClock
    from platformctl.kernel.retry import Backoff

    seam = AutoScalingNodeGroups(REGION, clock=VirtualClock(1000.0), backoff=Backoff(attempts=3), seed=1)
    calls: list[str] = []

    def lost(name: str, then: object = None) -> object:
        def call(**kwargs: object) -> object:
            calls.append(name)
            if calls.count(name) == 1 or then is None:
                raise EndpointConnectionError(endpoint_url="https://autoscaling.us-east-1.amazonaws.com")
            return then
        return call

    monkeypatch.setattr(seam._asg, "terminate_instance_in_auto_scaling_group", lost("terminate"))
    with pytest.raises(NodeGroupError) as unreachable:
        seam.retire("i-0123456789abcdef0", replace=True)
    assert unreachable.value.code == "Unreachable" and calls == ["terminate"]  # it may have acted: not again
    monkeypatch.setattr(seam._asg, "set_desired_capacity", lost("set", {}))
    seam.add_capacity("general", 3)  # idempotent: asked again
    assert calls == ["terminate", "set", "set"] and seam.retried == 1


def test_an_aws_that_does_not_answer_is_a_transient_fault_mid_rotation_and_a_one_line_error_at_the_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from platformctl.kernel.errors import PlatformError, is_transient

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    seam = AutoScalingNodeGroups(REGION, quick=True)
    with pytest.raises(PlatformError, match="AWS_ENDPOINT_URL: cannot reach AWS Auto Scaling"):
        seam.probe()
    with pytest.raises(NodeGroupError) as lost:
        seam.retire("i-0123456789abcdef0", replace=True)
    assert lost.value.code == "Unreachable" and is_transient(lost.value)


def test_an_instance_ec2_does_not_show_yet_is_a_member_launched_now_and_the_others_are_read(
        aws_groups: tuple[NodeGroups, str]) -> None:
    """EC2 is eventually consistent: Auto Scaling may name an instance DescribeInstances does not know yet. Asked for
    by id, EC2 refuses the whole call (InvalidInstanceID.NotFound); the seam reads the others and calls the new one
    launched just now (what a node-startup timeout counts from), so a remediation pass is not lost to it."""
    import time

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    seam, name = aws_groups
    before = {m.instance_id: m for m in seam.members(name)}
    assert len(before) == 2
    hidden = sorted(before)[0]
    backend = ec2_backends[DEFAULT_ACCOUNT_ID][REGION]
    for reservation in backend.reservations.values():  # EC2 does not show it yet; Auto Scaling does
        reservation.instances = [i for i in reservation.instances if i.id != hidden]
    ec2 = boto3.client("ec2", region_name=REGION)
    with pytest.raises(ec2.exceptions.ClientError, match="InvalidInstanceID.NotFound"):
        ec2.describe_instances(InstanceIds=sorted(before))
    asked = time.time()
    after = {m.instance_id: m for m in seam.members(name)}
    assert set(after) == set(before)
    other = sorted(before)[1]
    assert after[other] == before[other]  # read from EC2 as before
    assert after[hidden].launched >= asked and after[hidden].zone == before[hidden].zone


def test_a_launch_template_whose_user_data_labels_another_image_is_refused_by_name(
        aws_groups: tuple[NodeGroups, str]) -> None:
    """The program writes the image a version boots into its user data (``platformctl.io/image``), which is what a
    self-managed node carries on EKS; a version made by hand with only a new ``ImageId`` would register its nodes as
    the old image, and a rotation would wait for them forever: the seam says so instead."""
    from platformctl.kernel.errors import PlatformError
    from platformctl.kernel.nodeadm import registration_labels, render_user_data

    groups, name = aws_groups
    ec2 = boto3.client("ec2", region_name=REGION)
    image = groups.describe(name).image
    assert image is not None
    data = render_user_data("c1", "https://c1.example", "Y2E=", "172.20.0.0/16",
                            registration_labels("c1", name, "general", image))
    ec2.create_launch_template_version(LaunchTemplateName=name, LaunchTemplateData={
        "ImageId": image, "InstanceType": "m5.large", "UserData": data})
    assert groups.describe(name).image == image  # label and image agree: read as before
    ec2.create_launch_template_version(LaunchTemplateName=name, SourceVersion="$Latest", LaunchTemplateData={
        "ImageId": "ami-0fresh000000000001", "InstanceType": "m5.large", "UserData": data})
    with pytest.raises(PlatformError, match=f"launches ami-0fresh000000000001, but .* platformctl.io/image={image}"):
        groups.describe(name)
