"""The host cluster and the zonal member clusters: an EKS control plane each, and their node pools.

Both kinds get the same control plane: secrets encrypted with the cluster's own customer-managed
KMS key (rotated yearly), a private endpoint (a public one only where the stage allows it, and only
from the configured CIDRs), every control-plane log type on, access entries instead of the
``aws-auth`` ConfigMap, and an OIDC provider for IAM roles for service accounts. They differ in
where things live:

- the **host cluster** spreads its control plane and its node pools over all its zones (three or
  more);
- a **member cluster** is zonal. Its control plane's endpoints need subnets in two zones (an EKS
  rule), so it takes its own zone's subnet plus the next zone's, but every node pool it has is
  pinned to its own zone's subnet: its workloads live in one failure domain.

Every endpoint is private, and a cluster's security group (its nodes' and its control plane's endpoint ENIs') admits
itself; a member's also admits the host's nodes on 443, since the rotation and the release tick run on the host and
call every member's API server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.components.common import CLUSTER_TAG, ROLE_TAG, child, tags
from infra.components.iam import ClusterIam
from infra.components.node_pool import NodePool
from platformctl.kernel.topology import HostCluster as HostSpec
from platformctl.kernel.topology import MemberCluster as MemberSpec

LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
SERVICE_CIDR = "172.20.0.0/16"


def kubeconfig(cluster: str, region: str, endpoint: str, certificate_authority: str) -> str:
    """A kubeconfig that authenticates with ``aws eks get-token``, as ``aws eks update-kubeconfig`` writes it."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {"server": endpoint, "certificate-authority-data": certificate_authority}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
        "users": [{"name": cluster, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", cluster, "--region", region, "--output", "json"]}}}],
    })


class _Cluster(pulumi.ComponentResource):
    """What a host and a member cluster share; the subclasses say where the subnets are."""

    endpoint: pulumi.Output[str]
    certificate_authority: pulumi.Output[str]
    oidc_provider_arn: pulumi.Output[str]
    oidc_issuer: pulumi.Output[str]
    cluster_name: pulumi.Output[str]
    security_group_id: pulumi.Output[str]  # its nodes' and its control plane's endpoint ENIs'
    provider: k8s.Provider
    node_pools: dict[str, NodePool]

    def _build(self, *, stage: str, region: str, spec: HostSpec | MemberSpec, version: str, vpc_id: pulumi.Input[str],
               control_plane_subnets: Sequence[pulumi.Input[str]], pool_subnets: Sequence[pulumi.Input[str]],
               public_access_cidrs: Sequence[str], images: Mapping[str, str], role: str,
               api_clients: Sequence[pulumi.Input[str]] = ()) -> None:
        name = spec.name
        cluster_tags = {CLUSTER_TAG: name}
        iam = ClusterIam(f"{name}-iam", stage, name, opts=child(self))
        key = aws.kms.Key(f"{name}-secrets", description=f"Kubernetes secrets of EKS cluster {name}",
                          enable_key_rotation=True, deletion_window_in_days=30,
                          tags=tags(stage, f"{name}-secrets", **cluster_tags), opts=child(self))
        aws.kms.Alias(f"{name}-secrets", name=f"alias/{name}-secrets", target_key_id=key.key_id, opts=child(self))
        ingress = [aws.ec2.SecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True,
                                                    description="nodes and control plane to each other")]
        if api_clients:  # the control plane's private endpoint ENIs carry this group too: this admits them to it
            ingress.append(aws.ec2.SecurityGroupIngressArgs(
                protocol="tcp", from_port=443, to_port=443, security_groups=list(api_clients),
                description="the host cluster's nodes (rotation, release tick) to this cluster's API server"))
        nodes_sg = aws.ec2.SecurityGroup(
            f"{name}-nodes", name=f"{name}-nodes", vpc_id=vpc_id,
            description=f"Nodes and control plane of EKS cluster {name}",
            ingress=ingress,
            egress=[aws.ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, cidr_blocks=["0.0.0.0/0"],
                                                    description="egress through the zone's NAT gateway")],
            tags=tags(stage, f"{name}-nodes", **cluster_tags, **{ROLE_TAG: role, f"kubernetes.io/cluster/{name}": "owned"}),
            opts=child(self))
        self.security_group_id = nodes_sg.id
        cluster = aws.eks.Cluster(
            name, name=name, version=version, role_arn=iam.cluster_role_arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=list(control_plane_subnets), security_group_ids=[nodes_sg.id],
                endpoint_private_access=True, endpoint_public_access=bool(public_access_cidrs),
                public_access_cidrs=list(public_access_cidrs) or None),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                resources=["secrets"], provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn)),
            enabled_cluster_log_types=list(LOG_TYPES),
            access_config=aws.eks.ClusterAccessConfigArgs(authentication_mode="API",
                                                          bootstrap_cluster_creator_admin_permissions=True),
            kubernetes_network_config=aws.eks.ClusterKubernetesNetworkConfigArgs(service_ipv4_cidr=SERVICE_CIDR),
            tags=tags(stage, name, **cluster_tags), opts=child(self, depends_on=[iam]))
        self.endpoint = cluster.endpoint
        self.kubernetes_version = cluster.version
        self.certificate_authority = cluster.certificate_authority.apply(lambda ca: ca.data or "")
        self.oidc_issuer = cluster.identities.apply(lambda ids: ids[0].oidcs[0].issuer or "")
        oidc = aws.iam.OpenIdConnectProvider(f"{name}-oidc", url=self.oidc_issuer, client_id_lists=["sts.amazonaws.com"],
                                             tags=tags(stage, f"{name}-oidc", **cluster_tags), opts=child(self))
        self.oidc_provider_arn = oidc.arn
        aws.eks.AccessEntry(f"{name}-nodes", cluster_name=cluster.name, principal_arn=iam.node_role_arn, type="EC2_LINUX",
                            tags=tags(stage, f"{name}-nodes", **cluster_tags), opts=child(self))
        self.cluster_name = cluster.name
        self.node_pools = {}
        for pool in spec.node_pools:
            image = images[pool.image_family]
            self.node_pools[pool.name] = NodePool(
                f"{name}-{pool.name}", stage=stage, cluster=name, pool=pool, image_id=image, subnet_ids=pool_subnets,
                zones=spec.zones, security_group_id=nodes_sg.id, instance_profile_arn=iam.node_instance_profile_arn,
                endpoint=cluster.endpoint, certificate_authority=self.certificate_authority, service_cidr=SERVICE_CIDR,
                opts=child(self, depends_on=[cluster]))
        self.provider = k8s.Provider(
            name, kubeconfig=pulumi.Output.all(cluster.endpoint, self.certificate_authority).apply(
                lambda a: kubeconfig(name, region, a[0], a[1])),
            opts=child(self))
        self.register_outputs({
            "name": cluster.name, "endpoint": cluster.endpoint, "oidcIssuer": self.oidc_issuer,
            "nodePools": {p: {"autoScalingGroup": n.auto_scaling_group, "launchTemplate": n.launch_template}
                          for p, n in self.node_pools.items()},
        })


class HostCluster(_Cluster):
    def __init__(self, spec: HostSpec, *, stage: str, region: str, version: str, vpc_id: pulumi.Input[str],
                 private_subnets: Mapping[str, pulumi.Input[str]], public_access_cidrs: Sequence[str],
                 images: Mapping[str, str], opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("platformctl:infra:HostCluster", spec.name, None, opts)
        subnets = [private_subnets[z] for z in spec.zones]
        self._build(stage=stage, region=region, spec=spec, version=version, vpc_id=vpc_id, control_plane_subnets=subnets,
                    pool_subnets=subnets, public_access_cidrs=public_access_cidrs, images=images, role="host")


class MemberCluster(_Cluster):
    def __init__(self, spec: MemberSpec, *, stage: str, region: str, version: str, vpc_id: pulumi.Input[str],
                 stage_zones: Sequence[str], private_subnets: Mapping[str, pulumi.Input[str]],
                 public_access_cidrs: Sequence[str], images: Mapping[str, str],
                 api_clients: Sequence[pulumi.Input[str]] = (), opts: pulumi.ResourceOptions | None = None) -> None:
        """``api_clients``: the security groups whose instances call this cluster's API server (the host's nodes)."""
        super().__init__("platformctl:infra:MemberCluster", spec.name, None, opts)
        self.control_plane_zones = control_plane_zones(spec.zone, stage_zones)
        self._build(stage=stage, region=region, spec=spec, version=version, vpc_id=vpc_id,
                    control_plane_subnets=[private_subnets[z] for z in self.control_plane_zones],
                    pool_subnets=[private_subnets[spec.zone]], public_access_cidrs=public_access_cidrs, images=images,
                    role="member", api_clients=api_clients)


def control_plane_zones(zone: str, stage_zones: Sequence[str]) -> list[str]:
    """A member cluster's zone and the stage zone after it (EKS needs two for the endpoints)."""
    i = list(stage_zones).index(zone)
    return [zone, stage_zones[(i + 1) % len(stage_zones)]]
