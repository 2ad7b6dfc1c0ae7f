"""Node groups as EC2 Auto Scaling groups, through the project's boto3 clients.

What a group boots now is read from AWS, not assumed: its launch template version (``$Latest``,
``$Default`` or a number, also inside a mixed-instances policy) or launch configuration, and the
``ImageId`` in it (an SSM ``resolve:ssm:`` reference is resolved as EC2 would resolve it at launch).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from platformctl.kernel import aws
from platformctl.kernel.clock import Clock, WallClock
from platformctl.kernel.cluster.model import LABEL_IMAGE
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.nodeadm import WontJoin, read_user_data
from platformctl.kernel.nodegroups import (
    BUILDER_TAG,
    Booted,
    GroupState,
    InstanceState,
    LabelledOtherwise,
    LaunchSpec,
    Member,
    NodeGroupError,
)
from platformctl.kernel.retry import NEVER, Backoff, retrying

# What botocore's standard retries leave to the caller: the group busy with a scaling activity or another caller (AWS
# did nothing: asked again even for a termination; EKS's ResourceInUseException is a managed node group busy with
# another update), and no answer after botocore's own attempts.
BUSY = frozenset({"ScalingActivityInProgress", "ResourceContention", "ResourceInUseException"})
CLUSTER_TAG = "eks:cluster-name"  # on every group of an EKS cluster's nodes, as EKS and the stage's program tag them
# What EC2 tags an instance it launches from a launch template with (the "aws:" prefix is EC2's own: nobody else's).
TEMPLATE_ID_TAG, TEMPLATE_VERSION_TAG = "aws:ec2launchtemplate:id", "aws:ec2launchtemplate:version"


class AutoScalingNodeGroups:
    def __init__(self, region: str | None = None, quick: bool = False, clock: Clock | None = None,
                 backoff: Backoff | None = None, seed: int | None = None, target: aws.AwsTarget | None = None) -> None:
        """``quick``: one attempt on short timeouts (``aws.QUICK``), for a report that must not hang on an AWS it cannot
        reach; a rotation's calls keep botocore's retries (throttling, 5xx, resets) and add their own, on ``clock``
        (the rotation's), for what botocore does not retry: a group busy with a scaling activity
        (``ScalingActivityInProgress``, ``ResourceContention``) and an AWS that did not answer after botocore's.
        ``target``: which AWS (the local region's, ``region_client.aws_target``), else the command's environment's."""
        # Made here, once: boto3's default session is not safe to make clients from on several threads.
        self.region = region
        config = aws.QUICK if quick else None
        self._asg = aws.client("autoscaling", region, config, target)
        self._ec2 = aws.client("ec2", region, config, target)
        self._versions: dict[tuple[str, str], LaunchSpec | None] = {}  # a version never changes: read once
        self._ssm = aws.client("ssm", region, config, target)
        self.backoff = NEVER if quick else (backoff or Backoff())
        self._clock: Clock = clock or WallClock()
        self._rng = random.Random(seed)
        self.retried = 0  # calls asked again, for reports and tests

    def _call(self, fn: Any, acts: bool = False, **kwargs: Any) -> Any:
        """One call, asked again while AWS's answer is transient: a read or an idempotent write (a desired capacity) on
        every transient answer, one that ``acts`` (a termination) only when AWS said it did nothing."""

        def again(exc: Exception) -> bool:  # botocore has retried throttling and 5xx already: not again on top of it
            return isinstance(exc, NodeGroupError) and exc.code in (BUSY if acts else BUSY | {"Unreachable"})

        def count() -> None:
            self.retried += 1

        return retrying(lambda: self._once(fn, **kwargs), again, self.backoff, self._clock, self._rng, retried=count)

    @staticmethod
    def _once(fn: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as NoConnection

        try:
            return fn(**kwargs)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise NodeGroupError(f"{exc.operation_name}: {error.get('Code', '')}: {error.get('Message', '')}",
                                 error.get("Code", "")) from None
        except (NoConnection, HTTPClientError) as exc:  # no answer after botocore's own retries: may pass by itself
            raise NodeGroupError(f"cannot reach AWS Auto Scaling ({exc})", "Unreachable") from None
        except Exception as exc:
            from botocore.exceptions import BotoCoreError, NoCredentialsError, NoRegionError, PartialCredentialsError

            if isinstance(exc, (NoCredentialsError, PartialCredentialsError, NoRegionError)):  # the operator's to mend
                raise PlatformError(f"cannot call AWS ({exc})", field="AWS credentials") from None
            if isinstance(exc, BotoCoreError):  # anything else botocore says: the call failed, named, not retried
                raise NodeGroupError(f"AWS Auto Scaling: {exc}", type(exc).__name__) from None
            raise

    def probe(self) -> None:
        """One cheap call, so that an unreachable or unauthorised AWS is a one-line error before anything changes."""
        try:
            self._once(self._asg.describe_auto_scaling_groups, MaxRecords=1)  # botocore's retries, none of ours
        except NodeGroupError as exc:
            if exc.code == "Unreachable":
                raise PlatformError(str(exc), field="AWS_ENDPOINT_URL") from None
            raise PlatformError(f"AWS Auto Scaling refused the first call ({exc})", field="AWS credentials") from None

    def instances(self, instance_ids: Sequence[str]) -> dict[str, InstanceState]:
        out: dict[str, InstanceState] = {}
        ids = list(dict.fromkeys(instance_ids))
        for start in range(0, len(ids), 50):  # the API's limit per call
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {"InstanceIds": ids[start:start + 50], "MaxRecords": 50}
                if token:
                    kwargs["NextToken"] = token
                page = self._call(self._asg.describe_auto_scaling_instances, **kwargs)
                for inst in page["AutoScalingInstances"]:
                    out[inst["InstanceId"]] = InstanceState(inst["InstanceId"], inst["AutoScalingGroupName"], inst["LifecycleState"])
                token = page.get("NextToken")
                if not token:
                    break
        return out

    def describe(self, group: str) -> GroupState:
        found = self._call(self._asg.describe_auto_scaling_groups, AutoScalingGroupNames=[group])["AutoScalingGroups"]
        if not found:
            raise NodeGroupError(f"no auto scaling group {group!r}", "ValidationError")
        g = found[0]
        members = tuple(i["InstanceId"] for i in g.get("Instances", [])
                        if not i["LifecycleState"].startswith(("Terminat", "Detach")))
        image, instance_type, launch = self._launch_data(g)
        return GroupState(g["AutoScalingGroupName"], g["DesiredCapacity"], g["MinSize"], g["MaxSize"], members, image,
                          instance_type, launch)

    def _launch_data(self, group: dict[str, Any]) -> tuple[str | None, str | None, LaunchSpec | None]:
        """(image, instance type, launch template version) of what the group launches now, from its launch template or
        configuration."""
        launch = None
        spec = group.get("LaunchTemplate") or \
            ((group.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}).get("LaunchTemplateSpecification")
        if spec:
            ref = {"LaunchTemplateId": spec["LaunchTemplateId"]} if spec.get("LaunchTemplateId") else \
                {"LaunchTemplateName": spec["LaunchTemplateName"]}
            versions = self._call(self._ec2.describe_launch_template_versions, **ref,
                                  Versions=[str(spec.get("Version") or "$Default")])["LaunchTemplateVersions"]
            data = versions[0]["LaunchTemplateData"] if versions else {}
            if versions:
                launch = LaunchSpec.of(versions[0]["LaunchTemplateId"], str(versions[0]["VersionNumber"]), data)
            image, instance_type = data.get("ImageId"), data.get("InstanceType")
            labelled = _image_label(data.get("UserData"))
            overrides = ((group.get("MixedInstancesPolicy") or {}).get("LaunchTemplate") or {}).get("Overrides") or []
            if overrides and overrides[0].get("InstanceType"):
                instance_type = overrides[0]["InstanceType"]  # the first override is the type tried first
        elif group.get("LaunchConfigurationName"):
            configs = self._call(self._asg.describe_launch_configurations,
                                 LaunchConfigurationNames=[group["LaunchConfigurationName"]])["LaunchConfigurations"]
            image, instance_type = (configs[0]["ImageId"], configs[0].get("InstanceType")) if configs else (None, None)
            labelled = None
        else:
            return None, None, None
        if image and image.startswith("resolve:ssm:"):
            name = image.removeprefix("resolve:ssm:")
            image = self._call(self._ssm.get_parameter, Name=name)["Parameter"]["Value"]
        if labelled is not None and labelled != image:
            # Its nodes would register as the other image: a rotation would wait for new nodes "on the image" forever.
            raise LabelledOtherwise(
                f"auto scaling group {group['AutoScalingGroupName']} launches {image}, but its launch template's user "
                f"data labels the nodes {LABEL_IMAGE}={labelled} (a version made by hand? make versions with the "
                "stage's program, which writes both)", image=str(image), labelled=labelled, field="LaunchTemplateData.UserData")
        return image, instance_type, launch

    def _described(self, instance_ids: Sequence[str]) -> Iterator[dict[str, Any]]:
        """EC2's instances of ``instance_ids`` it shows now, asked with an ``instance-id`` filter (200 ids a call, the
        most one filter takes; by id, one EC2 does not show yet would fail the whole call)."""
        ids = sorted(set(instance_ids))
        for start in range(0, len(ids), 200):
            kwargs: dict[str, Any] = {"Filters": [{"Name": "instance-id", "Values": ids[start:start + 200]}]}
            while True:
                answer = self._call(self._ec2.describe_instances, **kwargs)
                for reservation in answer["Reservations"]:
                    yield from reservation["Instances"]
                if not answer.get("NextToken"):
                    break
                kwargs["NextToken"] = answer["NextToken"]

    def launched_with(self, instance_ids: Sequence[str]) -> dict[str, LaunchSpec]:
        """From the ``aws:ec2launchtemplate:id``/``:version`` tags EC2 puts on an instance it launches from a template,
        each version read once (a version never changes) by ``DescribeLaunchTemplateVersions``."""
        launched: dict[str, tuple[str, str]] = {}
        for inst in self._described(instance_ids):
            tags = {t["Key"]: t["Value"] for t in inst.get("Tags") or []}
            if tags.get(TEMPLATE_ID_TAG) and tags.get(TEMPLATE_VERSION_TAG):
                launched[inst["InstanceId"]] = (tags[TEMPLATE_ID_TAG], tags[TEMPLATE_VERSION_TAG])
        out: dict[str, LaunchSpec] = {}
        for instance, (template, version) in launched.items():
            if (template, version) not in self._versions:
                try:
                    found = self._call(self._ec2.describe_launch_template_versions, LaunchTemplateId=template,
                                       Versions=[version])["LaunchTemplateVersions"]
                except NodeGroupError:  # a template since deleted (or another account's): nothing to compare with
                    found = []
                self._versions[(template, version)] = \
                    LaunchSpec.of(template, version, found[0]["LaunchTemplateData"]) if found else None
            spec = self._versions[(template, version)]
            if spec is not None:
                out[instance] = spec
        return out


    def add_capacity(self, group: str, to: int) -> None:
        """``SetDesiredCapacity``: idempotent, so asked again on any transient answer."""
        self._call(self._asg.set_desired_capacity, AutoScalingGroupName=group, DesiredCapacity=to, HonorCooldown=False)

    def retire(self, instance_id: str, replace: bool) -> None:
        """``TerminateInstanceInAutoScalingGroup``, its desired capacity lowered with it unless ``replace``."""
        self._call(self._asg.terminate_instance_in_auto_scaling_group, acts=True, InstanceId=instance_id,
                   ShouldDecrementDesiredCapacity=not replace)

    def cluster_groups(self, cluster: str) -> list[str]:
        names: list[str] = []
        kwargs: dict[str, Any] = {"Filters": [{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}]}
        while True:
            page = self._call(self._asg.describe_auto_scaling_groups, **kwargs)
            names += [g["AutoScalingGroupName"] for g in page["AutoScalingGroups"]]
            if not page.get("NextToken"):
                return sorted(names)
            kwargs["NextToken"] = page["NextToken"]

    def members(self, group: str) -> list[Member]:
        """The group's instances with their launch times. EC2 is eventually consistent: an instance Auto Scaling has
        just launched may not be in DescribeInstances yet, and asking for it by id (``InstanceIds``) would fail the
        whole call with ``InvalidInstanceID.NotFound``. They are asked for with an ``instance-id`` filter, which
        answers with those EC2 shows; one it does not show yet is a member launched just now."""
        import time

        found = self._call(self._asg.describe_auto_scaling_groups, AutoScalingGroupNames=[group])["AutoScalingGroups"]
        if not found:
            raise NodeGroupError(f"no auto scaling group {group!r}", "ValidationError")
        live = [i for i in found[0].get("Instances", []) if not i["LifecycleState"].startswith(("Terminat", "Detach"))]
        lifecycle = {i["InstanceId"]: i["LifecycleState"] for i in live}
        out: dict[str, Member] = {}
        for inst in self._described(sorted(lifecycle)):
            if inst["InstanceId"] in lifecycle:
                out[inst["InstanceId"]] = Member(inst["InstanceId"], lifecycle[inst["InstanceId"]], inst["LaunchTime"].timestamp(),
                                                 (inst.get("Placement") or {}).get("AvailabilityZone"))
        now = time.time()
        for i in live:
            if i["InstanceId"] not in out:  # not in EC2's answer yet: launched a moment ago
                out[i["InstanceId"]] = Member(i["InstanceId"], i["LifecycleState"], now, i.get("AvailabilityZone"))
        return sorted(out.values(), key=lambda m: m.instance_id)

    def failed_launches(self, group: str, since: float) -> list[str]:
        page = self._call(self._asg.describe_scaling_activities, AutoScalingGroupName=group, MaxRecords=20)
        out = []
        for activity in page.get("Activities", []):  # newest first
            started = activity.get("StartTime")
            if started is not None and started.timestamp() < since:
                break
            if activity.get("StatusCode") == "Successful":
                break  # the group launched since: what failed before it (a zone short of capacity) has passed
            if activity.get("StatusCode") in ("Failed", "Cancelled"):
                out.append(activity.get("StatusMessage") or activity.get("Description") or activity["StatusCode"])
        return out

    def booted(self, images: Sequence[str]) -> Booted:
        """EC2's DescribeInstances filtered by ``image-id``, page by page (terminated instances stay listed for about an
        hour after they end: the release pipeline also keeps what it saw in its ledger)."""
        found: dict[str, set[str]] = {}
        builders = 0
        ids = sorted(set(images))
        for start in range(0, len(ids), 200):  # a filter takes at most 200 values
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {"Filters": [{"Name": "image-id", "Values": ids[start:start + 200]}], "MaxResults": 1000}
                if token:
                    kwargs["NextToken"] = token
                page = self._call(self._ec2.describe_instances, **kwargs)
                for i in (i for r in page["Reservations"] for i in r["Instances"]):
                    if any(t.get("Key") == BUILDER_TAG for t in i.get("Tags") or []):
                        builders += 1
                        continue
                    found.setdefault(i["ImageId"], set()).add(i["InstanceId"])
                token = page.get("NextToken")
                if not token:
                    break
        return Booted({image: tuple(sorted(v)) for image, v in sorted(found.items())}, builders)


def _image_label(user_data: str | None) -> str | None:
    """The image a launch template version's user data labels its nodes with (``platformctl.io/image``), if any."""
    try:
        return read_user_data(user_data).labels.get(LABEL_IMAGE)
    except WontJoin:
        return None
