"""What the local region's AWS (moto 5.2.5) lacks and platformctl calls: AMI deprecation, user data in new
launch template versions, and Auto Scaling's launches of images that exist only (with the scaling activities
that say so).

EC2's ``EnableImageDeprecation`` / ``DisableImageDeprecation`` are not implemented in moto (its
EC2 responses raise ``NotImplementedError``), and ``ami prune`` deprecates every image before it
deregisters it. ``install()`` adds the two actions to moto's own AMI responses, storing the
deprecation time on moto's ``Ami`` model, whose ``DescribeImages`` serializer then returns it as
``DeprecationTime`` exactly as EC2 does (ISO 8601, seconds rounded to the minute). Nothing else of
moto is touched, and an action moto implements itself is left alone, so upgrading moto to a version
that has them retires this module. Only the local region and the tests call ``install()``; code that
talks to AWS never imports it.

``CreateLaunchTemplateVersion`` in moto stores the version's ``UserData`` as the raw text it was
sent, while ``CreateLaunchTemplate`` wraps it as moto's base64 type; an auto scaling group that then
launches from the new version fails moto's own assertion (a 500). ``stage deploy`` makes exactly such
versions, so ``install()`` has the new version's user data parsed as ``CreateLaunchTemplate`` parses
it. Data that is already parsed is left as it is, so a moto that fixes this makes it a no-op.

It also ignores ``SourceVersion``, where EC2 makes the new version a copy of the source with only what
``LaunchTemplateData`` names replaced ("the new version inherits the same launch parameters as the source version,
except for parameters that you specify", CreateLaunchTemplateVersion in the EC2 API Reference): a version made from
another with only a new image would launch instances of no type. ``install()`` merges the source's data under the
given data, as EC2 does.

EKS's ``UpdateClusterVersion`` (``POST /clusters/{name}/updates``) is not in moto either: ``stage deploy``
calls it when a stack file's ``kubernetesVersion`` goes up. As EKS does, it takes a control plane one minor
version up and refuses anything else (a skip, the same version, a downgrade) with
``InvalidParameterException``; the update is ``Successful`` at once (EKS takes minutes).

EC2's tags set as a resource is made: moto's ``CreateImage`` raises ``NotImplementedError`` for a ``snapshot``
``TagSpecification`` and its ``CopyImage`` ignores them all; as EC2 does ("the tags to apply to the new AMI and new
snapshots", CreateImage and CopyImage in the EC2 API Reference), ``install()`` puts them on the image and its
snapshot. An image build's role may remove only images and snapshots that carry its tags from the start.

EKS managed node groups, which moto stores without the Auto Scaling group and instances EKS makes for them, are
``platformctl.emulator.moto_eks``'s; ``install()`` installs it too.
"""

from __future__ import annotations

import functools
import re
import threading
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

_FORMAT = "%Y-%m-%dT%H:%M:%S.000Z"


def _deprecation_time(value: Any) -> str:
    at = value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    at = at.replace(tzinfo=at.tzinfo or UTC).astimezone(UTC)
    at = (at + timedelta(seconds=30)).replace(second=0, microsecond=0)  # EC2 rounds to the nearest minute
    return at.strftime(_FORMAT)


def _enable_image_deprecation(self: Any) -> Any:
    from moto.core.responses import ActionResult

    image_id = self._get_param("ImageId")
    deprecate_at = self._get_param("DeprecateAt")
    self.error_on_dryrun()
    image = self.ec2_backend.describe_images(ami_ids=[image_id])[0]  # raises InvalidAMIID.NotFound / .Unavailable
    image.deprecation_time = _deprecation_time(deprecate_at)
    return ActionResult({"Return": True})


def _disable_image_deprecation(self: Any) -> Any:
    from moto.core.responses import ActionResult

    image_id = self._get_param("ImageId")
    self.error_on_dryrun()
    image = self.ec2_backend.describe_images(ami_ids=[image_id])[0]
    image.deprecation_time = None
    return ActionResult({"Return": True})


def _parsing_user_data(create_version: Any) -> Any:
    def create_version_with_user_data(self: Any, data: dict[str, Any], description: str) -> Any:
        from moto.ec2.utils import parse_user_data

        raw = data.get("UserData")
        if type(raw) is str:  # not yet moto's base64 type
            data = {**data, "UserData": parse_user_data(raw)}
        return create_version(self, data, description)

    create_version_with_user_data.platformctl_patched = True  # type: ignore[attr-defined]  # a mark on a function object
    return create_version_with_user_data


def _from_source_version(create: Any) -> Any:
    def creating(self: Any) -> Any:
        import copy

        source = self._get_param("SourceVersion")
        if source:
            name, template_id = self._get_param("LaunchTemplateName"), self._get_param("LaunchTemplateId")
            template = (self.ec2_backend.get_launch_template_by_name(name) if name
                        else self.ec2_backend.get_launch_template(template_id))
            base = copy.deepcopy(template.get_version(source).data)
            given = self._get_param

            def merged(key: str, default: Any = None) -> Any:
                found = given(key, default)
                return {**base, **(found or {})} if key == "LaunchTemplateData" else found

            self._get_param = merged
        return create(self)

    creating.platformctl_patched = True  # type: ignore[attr-defined]
    return creating


def _minor(version: str) -> int:
    major, _, minor = str(version).partition(".")
    return int(major) * 1000 + int(minor or 0)


def _update_cluster_version(self: Any) -> Any:
    import uuid

    from moto.core.responses import ActionResult
    from moto.eks.exceptions import InvalidParameterException, ResourceNotFoundException

    name = self._get_param("name")
    version = str(self._get_param("version"))
    cluster = self.eks_backend.clusters.get(name)
    if cluster is None:
        raise ResourceNotFoundException(clusterName=name, nodegroupName=None, fargateProfileName=None, addonName=None,
                                        message=f"No cluster found for name: {name}.")
    if _minor(version) != _minor(cluster.version) + 1:
        raise InvalidParameterException(clusterName=name, nodegroupName=None, fargateProfileName=None, addonName=None,
                                        message=f"Unsupported Kubernetes minor version update from {cluster.version} to {version}")
    cluster.version = version
    update = {"id": str(uuid.uuid4()), "status": "Successful", "type": "VersionUpdate",
              "params": [{"type": "Version", "value": version}, {"type": "PlatformVersion", "value": "eks.1"}],
              "createdAt": datetime.now(UTC), "errors": []}
    return ActionResult({"update": update})


def _bounded_set_desired_capacity(set_desired_capacity: Any) -> Any:
    """Auto Scaling refuses a desired capacity outside the group's bounds (moto takes any): ``ValidationError: New
    SetDesiredCapacity value 9 is above max value 8 for the AutoScalingGroup.``"""
    from moto.autoscaling.exceptions import ValidationError

    def bounded(self: Any) -> Any:
        group = self.autoscaling_backend.autoscaling_groups.get(self._get_param("AutoScalingGroupName"))
        desired = self._get_int_param("DesiredCapacity")
        if group is not None and desired is not None:
            if desired > group.max_size:
                raise ValidationError(f"New SetDesiredCapacity value {desired} is above max value {group.max_size} for "
                                      "the AutoScalingGroup.")
            if desired < group.min_size:
                raise ValidationError(f"New SetDesiredCapacity value {desired} is below min value {group.min_size} for "
                                      "the AutoScalingGroup.")
        return set_desired_capacity(self)

    bounded.platformctl_patched = True  # type: ignore[attr-defined]  # a mark on a function object
    return bounded


def _known_instance(terminate: Any) -> Any:
    """Auto Scaling answers an instance no group has with a ValidationError (moto fails with an internal error)."""
    from moto.autoscaling.exceptions import ValidationError

    def checked(self: Any) -> Any:
        instance_id = self._get_param("InstanceId")
        if not any(s.instance.id == instance_id for g in self.autoscaling_backend.autoscaling_groups.values()
                   for s in g.instance_states):
            raise ValidationError(f"Instance Id not found - No managed instance found for instance ID: {instance_id}")
        return terminate(self)

    checked.platformctl_patched = True  # type: ignore[attr-defined]  # a mark on a function object
    return checked


_now: Any = None  # the region's clock (epoch seconds), once use_clock has set it; wall time before
ACTIVITIES_KEPT = 100  # a group's newest scaling activities, as DescribeScalingActivities pages them


def _stamp() -> datetime:
    import time

    return datetime.fromtimestamp(_now() if _now is not None else time.time(), UTC)


def _record(group: Any, activity: dict[str, Any]) -> None:
    kept = group.__dict__.setdefault("platformctl_activities", [])
    kept.insert(0, activity)
    del kept[ACTIVITIES_KEPT:]


def _launching_held_images(replace: Any) -> Any:
    """Auto Scaling launches only an image EC2 holds, and from its launch template version: a launch template whose
    image does not exist fails each launch as a *scaling activity* (``StatusCode: Failed``, ``StatusMessage: The image
    id '[ami-…]' does not exist. Launching EC2 instance failed.``) while the API call that asked for capacity
    succeeds; moto launches whatever id it is given. Each launch, failed or successful, is an activity
    ``DescribeScalingActivities`` answers, newest first."""

    def launching(self: Any, count_needed: int, propagated_tags: dict[str, str]) -> Any:
        image = self.image_id
        before = {s.instance.id for s in self.instance_states}
        cause = (f"At {_stamp():%Y-%m-%dT%H:%M:%SZ} an instance was started in response to a difference between desired "
                 f"and actual capacity, increasing the capacity from {len(before)} to {len(before) + count_needed}.")
        if image and image not in self.autoscaling_backend.ec2_backend.amis:
            message = f"The image id '[{image}]' does not exist. Launching EC2 instance failed."
            _record(self, {"ActivityId": str(uuid.uuid4()), "AutoScalingGroupName": self.name,
                           "Description": f"Launching a new EC2 instance.  Status Reason: {message}", "Cause": cause,
                           "StartTime": _stamp(), "EndTime": _stamp(), "StatusCode": "Failed", "StatusMessage": message,
                           "Progress": 100, "Details": "{}"})
            return None
        out = replace(self, count_needed, propagated_tags)
        # EC2 tags an instance with the launch template version it was launched from (aws:ec2launchtemplate:version):
        # the group's ($Latest, $Default or a number, resolved now); moto names the template's default version whatever
        # the group launched (it launched the image and user data of the group's version all the same).
        template = self.ec2_launch_template
        launched = str(template.get_version(self.launch_template_version).number) if template is not None else None
        for state in self.instance_states:
            if state.instance.id not in before and launched is not None:
                state.instance.add_tags({"aws:ec2launchtemplate:id": template.id, "aws:ec2launchtemplate:version": launched})
            if state.instance.id not in before:
                _record(self, {"ActivityId": str(uuid.uuid4()), "AutoScalingGroupName": self.name,
                               "Description": f"Launching a new EC2 instance: {state.instance.id}", "Cause": cause,
                               "StartTime": _stamp(), "EndTime": _stamp(), "StatusCode": "Successful", "Progress": 100,
                               "Details": "{}"})
        return out

    launching.platformctl_patched = True  # type: ignore[attr-defined]
    return launching


def _describe_scaling_activities(self: Any) -> Any:
    """A group's activities, newest first, paged by ``MaxRecords`` (default 100) and ``NextToken``."""
    from moto.autoscaling.exceptions import ValidationError
    from moto.core.responses import ActionResult

    names = [self._get_param("AutoScalingGroupName")] if self._get_param("AutoScalingGroupName") else \
        list(self.autoscaling_backend.autoscaling_groups)
    found = []
    for name in names:
        group = self.autoscaling_backend.autoscaling_groups.get(name)
        if group is not None:
            found += group.__dict__.get("platformctl_activities", [])
    limit = self._get_int_param("MaxRecords") or 100
    if not 1 <= limit <= 100:
        raise ValidationError("MaxRecords must be between 1 and 100")
    start = int(self._get_param("NextToken") or 0)
    page = found[start:start + limit]
    result: dict[str, Any] = {"Activities": page}
    if start + limit < len(found):
        result["NextToken"] = str(start + limit)
    return ActionResult(result)


EKS_ACCOUNT = "602401143452"  # the account that owns the EKS-optimised AMIs
EKS_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33")
EKS_VARIANTS = (("x86_64", "standard"), ("x86_64", "nvidia"), ("arm64", "standard"))
EKS_PARAMETER = "/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{arch}/{variant}/recommended/image_id"


def publish_eks_optimized_images(region: str) -> None:
    """What every AWS region holds and moto does not: the EKS-optimised Amazon Linux 2023 AMIs (kubelet, containerd
    and nodeadm installed, owned by EKS's account) and the public SSM parameters that name them
    (``/aws/service/eks/optimized-ami/<version>/amazon-linux-2023/<arch>/<variant>/recommended/image_id``, as
    docs.aws.amazon.com/eks/latest/userguide/retrieve-ami-id.html lists them). Made in moto's own stores, as moto seeds
    its default AMIs and ``/aws/service/ami-amazon-linux-latest`` parameters; idempotent."""
    import hashlib

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami
    from moto.ssm.models import Parameter, ssm_backends

    ec2 = ec2_backends[DEFAULT_ACCOUNT_ID][region]
    parameters = ssm_backends[DEFAULT_ACCOUNT_ID][region]._parameters
    for version in EKS_VERSIONS:
        for arch, variant in EKS_VARIANTS:
            name = EKS_PARAMETER.format(version=version, arch=arch, variant=variant)
            if dict.get(parameters, name):
                continue
            image = "ami-0" + hashlib.sha256(f"{region}/{name}".encode()).hexdigest()[:16]
            ami = Ami(ec2, image, name=f"amazon-eks-node-al2023-{arch}-{variant}-{version}-v20251120",
                      description=f"EKS-optimized Kubernetes node based on Amazon Linux 2023, (k8s: {version}.0)",
                      owner_id=EKS_ACCOUNT, owner_alias="amazon", public=True, architecture=arch,
                      virtualization_type="hvm", root_device_name="/dev/xvda", root_device_type="ebs",
                      region_name=region)
            ami.platformctl_kubelet = version
            ec2.amis[image] = ami
            defaultdict.__getitem__(parameters, name).append(Parameter(
                account_id=DEFAULT_ACCOUNT_ID, name=name, value=image, parameter_type="String", description=None,
                allowed_pattern=None, keyid=None, last_modified_date=datetime.now(UTC), version=1, data_type="text"))


def _installs(script: str, package: str) -> bool:
    """Whether a provisioning script installs ``package`` (``dnf``/``yum install … package …``)."""
    return any(re.search(rf"\b(dnf|yum)\b.*\binstall\b.*(\s|^){re.escape(package)}(-[0-9][^\s]*)?(\s|$)", line)
               for line in script.splitlines())


def kubelet_of(region: str, image: str, seen: frozenset[str] = frozenset()) -> str | None:
    """The Kubernetes version of the kubelet an image runs that joins a cluster through nodeadm, or None: an EKS-
    optimised image's own; an image made (``CreateImage``) from an instance, what that instance booted, or what its
    provisioning script installed (``kubelet`` and ``nodeadm``, at the ``platformctl:kubernetes-version`` the image is
    tagged with); a copy (``CopyImage``), its source's. Plain Amazon Linux has neither: its instances never join."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends

    ami = ec2_backends[DEFAULT_ACCOUNT_ID][region].amis.get(image)
    if ami is None or image in seen:
        return None
    if getattr(ami, "platformctl_kubelet", None):
        return str(ami.platformctl_kubelet)
    if getattr(ami, "platformctl_copy_of", None):
        source_region, source = ami.platformctl_copy_of
        return kubelet_of(source_region, source, seen | {image})
    instance = getattr(ami, "instance", None)
    if instance is None:
        return None
    inherited = kubelet_of(region, instance.image_id, seen | {image})
    if inherited:
        return inherited
    raw = instance.user_data[0] if isinstance(instance.user_data, list) and instance.user_data else instance.user_data
    script = _text(raw)
    if _installs(script, "kubelet") and _installs(script, "nodeadm"):
        tags = {t.get("key"): t.get("value") for t in ami.get_tags()}
        return str(tags.get("platformctl:kubernetes-version") or "unknown")
    return None


def _text(raw: Any) -> str:
    import base64

    if raw is None:
        return ""
    if isinstance(raw, bytes):
        raw = raw.decode(errors="replace")
    text = str(raw)
    try:
        return base64.b64decode(text, validate=True).decode(errors="replace")
    except ValueError:
        return text


def _snapshots_tagged(create_image: Any) -> Any:
    """``CreateImage``'s ``TagSpecifications`` of type ``snapshot`` put on the image's snapshots, as EC2 does (moto
    raises NotImplementedError for them)."""

    def creating(self: Any, instance_id: str, name: str, description: str, tag_specifications: list[dict[str, Any]]) -> Any:
        snapshot = [t for spec in tag_specifications if spec.get("ResourceType") == "snapshot" for t in spec["Tags"]]
        ami = create_image(self, instance_id, name, description,
                           [spec for spec in tag_specifications if spec.get("ResourceType") != "snapshot"])
        made = getattr(ami, "ebs_snapshot", None)
        if snapshot and made is not None:
            self.create_tags([made.id], {t["Key"]: t.get("Value", "") for t in snapshot})
        return ami

    creating.platformctl_patched = True  # type: ignore[attr-defined]
    return creating


def _copy_tagged(copy_image: Any) -> Any:
    """``CopyImage``'s ``TagSpecifications`` put on the copy and its snapshots as they are made, as EC2 does; moto
    ignores them."""

    def copying(self: Any) -> Any:
        result = copy_image(self)
        copy = result.result["ImageId"]
        snapshot = getattr(self.ec2_backend.amis[copy], "ebs_snapshot", None)
        for spec in self._get_param("TagSpecifications", []):
            tags = {t["Key"]: t.get("Value", "") for t in spec.get("Tags") or spec.get("Tag") or []}
            made = {"image": [copy], "snapshot": [snapshot.id] if snapshot is not None else []}.get(spec.get("ResourceType"), [])
            if tags and made:
                self.ec2_backend.create_tags(made, tags)
        return result

    copying.platformctl_patched = True  # type: ignore[attr-defined]
    return copying


def _remembering_the_source(copy_image: Any) -> Any:
    """A copied image (``CopyImage``) runs what its source runs; moto keeps no link from the copy to it."""

    def copying(self: Any, source_image_id: str, source_region: str, *args: Any, **kwargs: Any) -> Any:
        ami = copy_image(self, source_image_id, source_region, *args, **kwargs)
        ami.platformctl_copy_of = (source_region, source_image_id)
        return ami

    copying.platformctl_patched = True  # type: ignore[attr-defined]
    return copying


_TAGS = threading.RLock()


def _one_at_a_time(method: Any) -> Any:
    """EC2's tags, read and written one call at a time: moto's ``describe_tags`` walks every resource's tags while
    another thread's ``create_tags`` adds to them ("dictionary changed size during iteration"), which images built
    concurrently (``ami build --workers``) against one account do; EC2 itself answers them all."""

    @functools.wraps(method)
    def serialized(*args: Any, **kwargs: Any) -> Any:
        with _TAGS:
            return method(*args, **kwargs)

    serialized.platformctl_patched = True  # type: ignore[attr-defined]
    return serialized


def install() -> None:
    """Add the missing EC2 and EKS actions to moto, and Auto Scaling's bounds on a desired capacity (idempotent)."""
    from moto.autoscaling.responses import AutoScalingResponse
    from moto.ec2.models.amis import Ami
    from moto.ec2.models.launch_templates import LaunchTemplate
    from moto.ec2.responses.amis import AmisResponse

    if not getattr(AutoScalingResponse.set_desired_capacity, "platformctl_patched", False):
        AutoScalingResponse.set_desired_capacity = _bounded_set_desired_capacity(AutoScalingResponse.set_desired_capacity)
    terminate = AutoScalingResponse.terminate_instance_in_auto_scaling_group
    if not getattr(terminate, "platformctl_patched", False):
        AutoScalingResponse.terminate_instance_in_auto_scaling_group = _known_instance(terminate)

    from moto.autoscaling.models import FakeAutoScalingGroup

    replace = FakeAutoScalingGroup.replace_autoscaling_group_instances
    if not getattr(replace, "platformctl_patched", False):
        FakeAutoScalingGroup.replace_autoscaling_group_instances = _launching_held_images(replace)
    if not getattr(AutoScalingResponse.describe_scaling_activities, "platformctl_patched", False):
        _describe_scaling_activities.platformctl_patched = True  # type: ignore[attr-defined]
        AutoScalingResponse.describe_scaling_activities = _describe_scaling_activities

    if not getattr(LaunchTemplate.create_version, "platformctl_patched", False):
        LaunchTemplate.create_version = _parsing_user_data(LaunchTemplate.create_version)
    from moto.ec2.responses.launch_templates import LaunchTemplates

    if not getattr(LaunchTemplates.create_launch_template_version, "platformctl_patched", False):
        LaunchTemplates.create_launch_template_version = _from_source_version(LaunchTemplates.create_launch_template_version)

    import moto.eks.urls as eks_urls
    from moto.eks.responses import EKSResponse

    if not hasattr(EKSResponse, "update_cluster_version"):
        EKSResponse.update_cluster_version = _update_cluster_version
    eks_urls.url_paths.setdefault("{0}/clusters/(?P<name>[^/]+)/updates$", eks_urls.response.dispatch)
    from platformctl.emulator import moto_eks

    moto_eks.install()  # managed node groups backed by Auto Scaling groups, as EKS backs them

    from moto.ec2.models.tags import TagBackend

    for name in ("create_tags", "delete_tags", "delete_tag_keys", "describe_tags"):
        method = getattr(TagBackend, name)
        if not getattr(method, "platformctl_patched", False):
            setattr(TagBackend, name, _one_at_a_time(method))

    from moto.ec2.models.amis import AmiBackend

    if not getattr(AmiBackend.copy_image, "platformctl_patched", False):
        AmiBackend.copy_image = _remembering_the_source(AmiBackend.copy_image)
    if not getattr(AmiBackend.create_image, "platformctl_patched", False):
        AmiBackend.create_image = _snapshots_tagged(AmiBackend.create_image)
    if not getattr(AmisResponse.copy_image, "platformctl_patched", False):
        AmisResponse.copy_image = _copy_tagged(AmisResponse.copy_image)

    if not hasattr(Ami, "deprecation_time"):
        Ami.deprecation_time = None
    for name, action in (("enable_image_deprecation", _enable_image_deprecation),
                         ("disable_image_deprecation", _disable_image_deprecation)):
        if not hasattr(AmisResponse, name):
            setattr(AmisResponse, name, action)


def use_clock(now: Any) -> None:
    """Stamp new EC2 instances' ``LaunchTime`` with ``now()`` (epoch seconds): the local region's virtual
    time, so that an instance's age reads the same in EC2 as its node's in Kubernetes (moto stamps wall time,
    which in a region running at 300 times wall time would make every instance look brand new)."""
    import moto.ec2.models.instances as instances

    global _now
    _now = now

    def virtual_utcnow() -> datetime:
        return datetime.fromtimestamp(now(), UTC).replace(tzinfo=None)  # naive UTC, as moto's own

    instances.utcnow = virtual_utcnow
