"""EKS managed node groups as EKS runs them, which moto (5.2.5) does not: an Auto Scaling group and a launch template of
EKS's own behind each node group, kept in step with it.

moto's ``CreateNodegroup`` stores the node group and names an Auto Scaling group (``resources.autoScalingGroups``)
that does not exist: no instance ever launches, and a backend that calls it would be tested against a fake that only
agrees. ``install()`` makes what EKS makes (docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html,
``launch-templates.html``), in moto's own stores:

- a launch template ``eks-<uuid>`` (EKS copies the caller's launch template into one of its own): the caller's data,
  the image (the caller's ``ImageId`` for a custom AMI, ``amiType`` ``CUSTOM``; else the EKS-optimised AL2023 image
  of the cluster's version, from its public SSM parameter), the first instance type, and user data. For an EKS image,
  EKS writes the nodeadm ``NodeConfig`` (the cluster, its endpoint and CA, ``--node-labels`` with the node group's
  labels and EKS's own: ``eks.amazonaws.com/nodegroup``, ``eks.amazonaws.com/nodegroup-image``,
  ``eks.amazonaws.com/capacityType``, and ``eks.amazonaws.com/sourceLaunchTemplateId``/``Version`` when a launch
  template was given; ``--register-with-taints`` with its taints) after the caller's own user data parts. For a custom
  AMI it merges nothing: the caller's user data is what the instance gets, labels and all;
- an Auto Scaling group ``eks-<nodegroup>-<uuid>`` over the node group's subnets, sized by its ``scalingConfig`` and
  tagged ``eks:cluster-name`` and ``eks:nodegroup-name`` (propagated to its instances), as EKS tags it.

``UpdateNodegroupConfig``'s ``scalingConfig`` is checked as EKS checks it (``InvalidParameterException``:
"desiredSize can't be greater than maxSize", "Minimum capacity 3 can't be greater than desired size 2") and then sets
the group's sizes; ``DescribeNodegroup`` answers the group's desired size as its Auto Scaling group has it (a caller that
terminates an instance with ``ShouldDecrementDesiredCapacity``, as Cluster Autoscaler does for a managed node group,
lowers it: "the desiredSize parameter is altered by the Cluster Autoscaler", NodegroupScalingConfig in the EKS API
Reference); ``DeleteNodegroup`` deletes the group and its instances.

Left out: an Amazon Linux 2, Bottlerocket or Windows ``amiType`` (the local region holds AL2023 images only:
``CreateNodegroup`` refuses them here, naming why), and ``UpdateNodegroupVersion``, with which EKS rolls a group onto a
new image itself.
"""

from __future__ import annotations

import base64
import email
import email.policy
from typing import Any

from platformctl.kernel.cluster.model import LABEL_NODEGROUP, LABEL_NODEGROUP_IMAGE, Taint
from platformctl.kernel.nodeadm import CONTENT_TYPE, render_user_data

LABEL_CAPACITY_TYPE = "eks.amazonaws.com/capacityType"
LABEL_SOURCE_TEMPLATE_ID = "eks.amazonaws.com/sourceLaunchTemplateId"
LABEL_SOURCE_TEMPLATE_VERSION = "eks.amazonaws.com/sourceLaunchTemplateVersion"
# amiType -> the EKS-optimised AL2023 image's (architecture, variant) in its SSM parameter
AMI_TYPES = {"AL2023_x86_64_STANDARD": ("x86_64", "standard"), "AL2023_ARM_64_STANDARD": ("arm64", "standard"),
             "AL2023_x86_64_NVIDIA": ("x86_64", "nvidia")}
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def _backends(account_id: str, region: str) -> tuple[Any, Any, Any]:
    from moto.autoscaling.models import autoscaling_backends
    from moto.ec2.models import ec2_backends
    from moto.ssm.models import ssm_backends

    return ec2_backends[account_id][region], autoscaling_backends[account_id][region], ssm_backends[account_id][region]


def _invalid(message: str) -> Exception:
    from moto.eks.exceptions import InvalidParameterException

    return InvalidParameterException(clusterName=None, nodegroupName=None, fargateProfileName=None, addonName=None,
                                     message=message)


def _check_sizes(config: dict[str, Any]) -> None:
    low, desired, high = config.get("minSize"), config.get("desiredSize"), config.get("maxSize")
    if desired is not None and high is not None and desired > high:
        raise _invalid("desiredSize can't be greater than maxSize")
    if low is not None and desired is not None and low > desired:
        raise _invalid(f"Minimum capacity {low} can't be greater than desired size {desired}")


def _source_template(ec2: Any, given: dict[str, Any] | None) -> tuple[Any, Any]:
    """The caller's launch template and the version the node group uses (its default when none is named)."""
    if not given:
        return None, None
    template = ec2.describe_launch_templates(template_ids=[given["id"]])[0] if given.get("id") else \
        ec2.describe_launch_templates(template_names=[given["name"]])[0]
    version = template.get_version(given.get("version") or template.default_version_number)
    return template, version


def _user_data_parts(raw: Any) -> list[tuple[str, str]]:
    """The (content type, body) parts of a MIME multi-part user data document (base64, as a launch template holds it);
    a document that is not multi-part is one part of its own type."""
    if not raw:
        return []
    text = base64.b64decode(str(raw)).decode("utf-8", "replace")
    message = email.message_from_string(text, policy=email.policy.compat32)
    if not message.is_multipart():
        return [("text/x-shellscript" if text.startswith("#!") else "text/plain", text)]
    return [(part.get_content_type(), str(part.get_payload())) for part in message.walk() if not part.is_multipart()]


def _merged(parts: list[tuple[str, str]], eks_part: str) -> str:
    """The caller's parts, then EKS's NodeConfig part, as one multi-part document (base64)."""
    ours = base64.b64decode(eks_part).decode()
    body = ours[ours.index("--//\n") + len("--//\n"):ours.rindex("--//--")]
    text = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n"
    for content_type, payload in parts:
        text += f"--//\nContent-Type: {content_type}\n\n{payload.rstrip()}\n"
    text += "--//\n" + body + "--//--\n"
    return base64.b64encode(text.encode()).decode()


def _back(backend: Any, nodegroup: Any, ami_type_given: str | None, version_given: str | None) -> None:
    """Make the node group's launch template and Auto Scaling group, as EKS does when it creates one."""
    from moto.ec2.utils import parse_user_data

    ec2, autoscaling, ssm = _backends(backend.account_id, backend.region_name)
    cluster = backend.clusters[nodegroup.cluster_name]
    nodegroup.version = version_given or cluster.version  # EKS: the cluster's, unless named (moto: a fixed 1.19)
    source, version = _source_template(ec2, nodegroup.launch_template)
    data: dict[str, Any] = dict(version.data) if version is not None else {}
    custom = bool(data.get("ImageId"))
    if custom:
        if ami_type_given not in (None, "CUSTOM"):
            raise _invalid("You cannot specify an AMI Type other than CUSTOM, when specifying an image id in your "
                           "launch template.")
        nodegroup.ami_type = "CUSTOM"
        image = data["ImageId"]
    else:
        ami_type = ami_type_given or "AL2023_x86_64_STANDARD"  # EKS's default from Kubernetes 1.30
        if ami_type not in AMI_TYPES:
            raise _invalid(f"amiType {ami_type} is not one the local region can boot (it holds the EKS-optimised "
                           f"Amazon Linux 2023 images only: {', '.join(AMI_TYPES)})")
        nodegroup.ami_type = ami_type
        arch, variant = AMI_TYPES[ami_type]
        version_of = nodegroup.version
        name = f"/aws/service/eks/optimized-ami/{version_of}/amazon-linux-2023/{arch}/{variant}/recommended/image_id"
        found = ssm.get_parameter(name)
        if found is None:
            raise _invalid(f"no EKS-optimised image for Kubernetes {version_of} ({name})")
        image = found.value
        labels = {**nodegroup.labels, LABEL_NODEGROUP: nodegroup.nodegroup_name, LABEL_NODEGROUP_IMAGE: image,
                  LABEL_CAPACITY_TYPE: nodegroup.capacity_type}
        if source is not None:
            labels |= {LABEL_SOURCE_TEMPLATE_ID: source.id, LABEL_SOURCE_TEMPLATE_VERSION: str(version.number)}
        taints = [Taint(t["key"], t.get("value") or "", EFFECTS.get(t.get("effect", ""), t.get("effect", "")))
                  for t in nodegroup.taints]
        cidr = (cluster.kubernetes_network_config or {}).get("serviceIpv4Cidr") or "172.20.0.0/16"
        ours = render_user_data(cluster.name, cluster.endpoint, cluster.certificate_authority["data"], cidr, labels, taints)
        caller = [(t, p) for t, p in _user_data_parts(data.get("UserData")) if t != CONTENT_TYPE or p]
        data["UserData"] = _merged(caller, ours) if caller else ours
    data["ImageId"] = image
    data["InstanceType"] = data.get("InstanceType") or nodegroup.instance_types[0]
    if data.get("UserData"):
        data["UserData"] = parse_user_data(str(data["UserData"]))
    template = ec2.create_launch_template(f"eks-{nodegroup.uuid}", f"EKS managed node group {nodegroup.nodegroup_name}",
                                          data, {})
    try:
        _group(autoscaling, nodegroup, template)
    except Exception:
        ec2.delete_launch_template(template.name, None)  # refused: nothing of it is left
        raise


def _group(autoscaling: Any, nodegroup: Any, template: Any) -> None:
    nodegroup.scaling_config = dict(nodegroup.scaling_config)  # moto shares its default's dict between groups
    sizes = nodegroup.scaling_config
    group = f"eks-{nodegroup.nodegroup_name}-{nodegroup.uuid}"
    tags = [{"ResourceId": group, "ResourceType": "auto-scaling-group", "Key": key, "Value": value,
             "PropagateAtLaunch": key.startswith("eks:")}
            for key, value in (("eks:cluster-name", nodegroup.cluster_name),
                               ("eks:nodegroup-name", nodegroup.nodegroup_name),
                               (f"kubernetes.io/cluster/{nodegroup.cluster_name}", "owned"),
                               ("k8s.io/cluster-autoscaler/enabled", "true"),
                               (f"k8s.io/cluster-autoscaler/{nodegroup.cluster_name}", "owned"))]
    autoscaling.create_auto_scaling_group(
        name=group, availability_zones=[], desired_capacity=sizes["desiredSize"], max_size=sizes["maxSize"],
        min_size=sizes["minSize"], launch_config_name=None,
        launch_template={"LaunchTemplateId": template.id, "Version": "1"},
        vpc_zone_identifier=",".join(nodegroup.subnets), default_cooldown=None, health_check_period=None,
        health_check_type=None, load_balancers=[], target_group_arns=[], placement_group=None,
        termination_policies=[], tags=tags)
    nodegroup.resources = {**nodegroup.resources, "autoScalingGroups": [{"name": group}]}


def _group_of(backend: Any, nodegroup: Any) -> Any:
    _, autoscaling, _ = _backends(backend.account_id, backend.region_name)
    names = [g["name"] for g in nodegroup.resources.get("autoScalingGroups", [])]
    return autoscaling.autoscaling_groups.get(names[0]) if names else None


def _creating(create: Any) -> Any:
    def creating(self: Any, *args: Any, **kwargs: Any) -> Any:
        _check_sizes(kwargs.get("scaling_config") or {})
        nodegroup = create(self, *args, **kwargs)
        try:
            _back(self, nodegroup, kwargs.get("ami_type"), kwargs.get("version"))
        except Exception:
            cluster = self.clusters[nodegroup.cluster_name]  # refused: as if never made
            cluster.nodegroups.pop(nodegroup.nodegroup_name, None)
            cluster.nodegroup_count -= 1
            raise
        return nodegroup

    creating.platformctl_patched = True  # type: ignore[attr-defined]
    return creating


def _updating(update: Any) -> Any:
    def updating(self: Any, cluster_name: str, nodegroup_name: str, *args: Any, **kwargs: Any) -> Any:
        scaling = kwargs.get("scaling_config")
        cluster = self.clusters.get(cluster_name)
        nodegroup = cluster.nodegroups.get(nodegroup_name) if cluster is not None else None
        if not scaling or nodegroup is None:  # moto answers an unknown group itself
            return update(self, cluster_name, nodegroup_name, *args, **kwargs)
        _sync(self, nodegroup)
        _check_sizes({**nodegroup.scaling_config, **scaling})
        answer = update(self, cluster_name, nodegroup_name, *args, **kwargs)
        group = _group_of(self, nodegroup)
        if group is not None:
            sizes = nodegroup.scaling_config
            group.min_size, group.max_size = sizes["minSize"], sizes["maxSize"]
            _, autoscaling, _ = _backends(self.account_id, self.region_name)
            autoscaling.set_desired_capacity(group.name, sizes["desiredSize"])
        return answer

    updating.platformctl_patched = True  # type: ignore[attr-defined]
    return updating


def _sync(backend: Any, nodegroup: Any) -> None:
    """The node group's sizes as its Auto Scaling group has them now."""
    group = _group_of(backend, nodegroup)
    if group is not None:
        nodegroup.scaling_config = {"minSize": group.min_size, "maxSize": group.max_size,
                                    "desiredSize": group.desired_capacity}


def _describing(describe: Any) -> Any:
    def describing(self: Any, cluster_name: str, nodegroup_name: str) -> Any:
        nodegroup = describe(self, cluster_name, nodegroup_name)
        _sync(self, nodegroup)
        return nodegroup

    describing.platformctl_patched = True  # type: ignore[attr-defined]
    return describing


def _deleting(delete: Any) -> Any:
    def deleting(self: Any, cluster_name: str, nodegroup_name: str) -> Any:
        nodegroup = delete(self, cluster_name, nodegroup_name)
        group = _group_of(self, nodegroup)
        if group is not None:
            _, autoscaling, _ = _backends(self.account_id, self.region_name)
            group.set_desired_capacity(0)
            group.min_size = 0
            autoscaling.delete_auto_scaling_group(group.name)
        ec2, _, _ = _backends(self.account_id, self.region_name)
        if f"eks-{nodegroup.uuid}" in ec2.launch_template_name_to_ids:  # EKS deletes the launch template it made
            ec2.delete_launch_template(f"eks-{nodegroup.uuid}", None)
        return nodegroup

    deleting.platformctl_patched = True  # type: ignore[attr-defined]
    return deleting


def install() -> None:
    """Back moto's managed node groups with Auto Scaling groups (idempotent)."""
    from moto.eks.models import EKSBackend

    for name, wrap in (("create_nodegroup", _creating), ("update_nodegroup_config", _updating),
                       ("describe_nodegroup", _describing), ("delete_nodegroup", _deleting)):
        method = getattr(EKSBackend, name)
        if not getattr(method, "platformctl_patched", False):
            setattr(EKSBackend, name, wrap(method))


__all__ = ["install"]
