"""One node pool: a launch template and the auto scaling group that uses it.

The launch template requires IMDSv2 with a hop limit of 1 (pods cannot reach the node's
credentials), encrypts the root volume, and boots the pool's image with a ``nodeadm`` NodeConfig
that joins the cluster with the pool's labels and taints, and the image's id as a label
(``platformctl.io/image``: EKS labels only managed node groups' nodes with theirs). The group spreads over exactly the
subnets it is given: a member cluster passes its one zone's subnet, so its nodes never leave the
cluster's failure domain. Its desired capacity is left to the autoscaler and the upgrade service
after creation (``ignore_changes``). The group launches ``$Latest`` of its template: a new image
(``pulumi up`` after the stack config or the AMI lock file changed) is a new template version, and
only new instances boot it. Old nodes move when the upgrade service rotates them, under the SLOs,
so there is no instance refresh here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_aws as aws

from infra.components.common import CLUSTER_TAG, NODE_TYPE_TAG, POOL_TAG, ZONE_TAG, child, tags
from platformctl.kernel.cluster.model import Taint
from platformctl.kernel.nodeadm import registration_labels, render_user_data
from platformctl.kernel.topology import NodePool as PoolSpec

ROOT_DEVICE = "/dev/xvda"
ROOT_VOLUME_GIB = {"system": 50, "general": 100, "ml": 200, "custom": 100}


def node_labels(cluster: str, pool: PoolSpec, image_id: str) -> dict[str, str]:
    """The labels the kubelet registers the node with. A self-managed group's nodes carry nothing else of EKS's (it
    labels only managed node groups' nodes), so the pool (under EKS's own key, as the toolkit reads pools by it) and
    the image this version boots are written here, and the toolkit reads them."""
    return registration_labels(cluster, pool.name, pool.node_type, image_id, pool.labels)


def user_data(cluster: str, endpoint: str, certificate_authority: str, service_cidr: str, pool: PoolSpec,
              image_id: str) -> str:
    """A MIME multi-part document with the AL2023 ``nodeadm`` NodeConfig, base64 encoded as EC2 wants it."""
    return render_user_data(cluster, endpoint, certificate_authority, service_cidr,
                            node_labels(cluster, pool, image_id),
                            [Taint(t.key, t.value, t.effect) for t in pool.taints])


SUSPENDED_PROCESSES = ("AZRebalance",)  # on every group the toolkit rotates


class NodePool(pulumi.ComponentResource):
    auto_scaling_group: pulumi.Output[str]
    launch_template: pulumi.Output[str]

    def __init__(self, name: str, *, stage: str, cluster: str, pool: PoolSpec, image_id: str,
                 subnet_ids: Sequence[pulumi.Input[str]], zones: Sequence[str], security_group_id: pulumi.Input[str],
                 instance_profile_arn: pulumi.Input[str], endpoint: pulumi.Input[str],
                 certificate_authority: pulumi.Input[str], service_cidr: pulumi.Input[str],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("platformctl:infra:NodePool", name, None, opts)
        pool_tags: Mapping[str, str] = tags(stage, name, **{
            CLUSTER_TAG: cluster, POOL_TAG: pool.name, NODE_TYPE_TAG: pool.node_type, ZONE_TAG: ",".join(zones),
            "eks:cluster-name": cluster, "eks:nodegroup-name": pool.name,
            f"kubernetes.io/cluster/{cluster}": "owned",
        })
        data = pulumi.Output.all(endpoint, certificate_authority, service_cidr).apply(
            lambda a: user_data(cluster, a[0], a[1], a[2], pool, image_id))
        template = aws.ec2.LaunchTemplate(
            name, name=name, image_id=image_id, instance_type=pool.instance_type, user_data=data,
            update_default_version=True, ebs_optimized="true",
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=instance_profile_arn),
            vpc_security_group_ids=[security_group_id],
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1,
                instance_metadata_tags="disabled"),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE, ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=ROOT_VOLUME_GIB[pool.node_type], volume_type="gp3", encrypted="true",
                    delete_on_termination="true"))],
            tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=dict(pool_tags))
                                for kind in ("instance", "volume", "network-interface")],
            tags=dict(pool_tags), opts=child(self))
        mixed = None
        if len(pool.instance_types) > 1:
            mixed = aws.autoscaling.GroupMixedInstancesPolicyArgs(
                launch_template=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateArgs(
                    launch_template_specification=aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateLaunchTemplateSpecificationArgs(
                        launch_template_id=template.id, version="$Latest"),
                    overrides=[aws.autoscaling.GroupMixedInstancesPolicyLaunchTemplateOverrideArgs(instance_type=t)
                               for t in pool.instance_types]))
        group = aws.autoscaling.Group(
            name, name=name, min_size=pool.min_size, max_size=pool.max_size, desired_capacity=pool.desired_size,
            vpc_zone_identifiers=list(subnet_ids), health_check_type="EC2", health_check_grace_period=pool.boot_seconds,
            launch_template=None if mixed else aws.autoscaling.GroupLaunchTemplateArgs(
                id=template.id, version="$Latest"),
            mixed_instances_policy=mixed,
            tags=[aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True) for k, v in sorted(pool_tags.items())],
            # AZRebalance terminates instances, undrained, to even out zones after one zone's surges: the rotation and
            # remediation are the only ones that take nodes away.
            suspended_processes=list(SUSPENDED_PROCESSES),
            opts=child(self, ignore_changes=["desired_capacity"]))
        self.auto_scaling_group = group.name
        self.launch_template = template.name
        self.register_outputs({"autoScalingGroup": group.name, "launchTemplate": template.name})
