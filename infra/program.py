"""The Pulumi program of one stage: ``pulumi up -s <stage>`` in ``infra/`` runs ``main()``.

``main()`` reads the stack config through ``pulumi.Config`` (the stage's ``Pulumi.<stage>.yaml``)
and checks it with the same stage model platformctl uses, then ``provision()`` declares the stage:

- a ``Network`` (VPC, private and public subnets and a NAT gateway per zone);
- the ``HostCluster`` over three or more zones and one zonal ``MemberCluster`` per member, each
  with its IAM, KMS key, EKS control plane, OIDC provider and ``NodePool``s;
- the IAM role of the scheduled rotation (each role's grants are ``infra.access``'s), which its service account on the host cluster assumes
  and which every cluster admits (access entry, group ``platformctl:rotation``), and the DynamoDB
  table of the state store its journal and leases live in (``StateTable``);
- the IAM role of each cluster's remediation job and of its canary runner, each assumed through that
  cluster's own OIDC provider;
- the IAM role of the stage's ``release tick`` job (its service account on the host cluster): it rotates the stage
  like the scheduled rotation (admitted by every cluster in the same group, and in ``platformctl:deploy``, whose
  ClusterRole applies the program's own objects), reaches the stage's state table and
  the ledger's table every stage shares, and deploys a candidate to the stage (``infra.access``: what each job may do,
  and the stack's ``deployPolicies`` on top, none by default);
- each cluster's Kubernetes objects (``ClusterObjects``).

The stack outputs are what the rest of the toolkit reads: the clusters (endpoint, zones, OIDC
issuer) and every node pool's auto scaling group and launch template. The same program runs under
``pulumi.runtime.set_mocks`` in the tests and to materialise the local region (``infra/mocked.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws

from infra import access
from infra.components.cluster import HostCluster, MemberCluster
from infra.components.common import tags
from infra.components.iam import irsa_role
from infra.components.kubernetes import (
    CANARY_NAMESPACE,
    CANARY_RUNNER,
    DEPLOY_GROUP,
    IMAGE_BUILD_SERVICE_ACCOUNT,
    RELEASE_SERVICE_ACCOUNT,
    REMEDIATION_SERVICE_ACCOUNT,
    ROTATION_GROUP,
    ROTATION_SERVICE_ACCOUNT,
    SYSTEM_NAMESPACE,
    CanaryRunner,
    ClusterObjects,
    Context,
    ImageBuild,
    Registration,
    ReleaseTick,
    Remediation,
    Rotation,
)
from infra.components.network import Network
from infra.components.state import StateTable
from infra.settings import (
    InfraSettings,
    check_new_families,
    image_kubelets,
    node_images,
    parse_settings,
    read_promoted,
    release_config,
    scheduled_policy,
    state_table,
    with_canaries,
    with_promoted,
)
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state.promoted import Promoted
from platformctl.kernel.topology import REGION_KEY, STAGES, Stage, parse_stage_config, read_stack_config, stage_file

INFRA_DIR = Path(__file__).resolve().parent
# Stack config values that are text; every other platformctl: value is structured (YAML in the file, JSON to the program).
TEXT_KEYS = ("kubernetesVersion", "imageLock")


def stack_config() -> dict[str, Any]:
    """The stack's config as the stack file spells it, read through ``pulumi.Config``. Every
    ``platformctl:`` key is read, so a misspelt one reaches the settings check and is reported."""
    from pulumi.runtime.config import CONFIG, get_config_env

    config: dict[str, Any] = {}
    region = pulumi.Config("aws").get("region")
    if region is not None:
        config[REGION_KEY] = region
    ours = pulumi.Config("platformctl")
    for key in sorted(k for k in {*CONFIG.get(), *get_config_env()} if k.startswith("platformctl:")):
        name = key.removeprefix("platformctl:")
        try:
            config[key] = ours.get(name) if name in TEXT_KEYS else ours.get_object(name)
        except Exception:  # not JSON: hand the text to the settings check, which names the key
            config[key] = ours.get(name)
    return config


def load(config: dict[str, Any], stage_name: str, source: str, infra_dir: Path = INFRA_DIR,
         promoted: Callable[[Stage, InfraSettings], Promoted | None] | None = None,
         kubelets: Callable[[str, list[str]], dict[str, str]] | None = None) -> tuple[Stage, InfraSettings, dict[str, str]]:
    """The stage, its settings and its node images, or a ``PlatformError`` naming the file and key. ``promoted`` reads
    what the release pipeline promoted to the stage (``pulumi up`` reads the stage's state table: ``main``); its images
    and Kubernetes version win over the checkout's (``infra.settings.with_promoted``), and the program says so; each
    image the checkout still adds must run a kubelet that may join them (``kubelets`` reads an image's: EC2's tags)."""
    stage = parse_stage_config(config, stage_name, source)
    settings = with_canaries(parse_settings(config, stage_name, source), source, infra_dir)
    release = settings.release
    if release.owns_ledger and release.ledger_region != stage.region:
        raise PlatformError(f"the ledger {release.ledger} is in {release.ledger_region}, not in this stage's region "
                            f"{stage.region}: set ownsLedger on a stack of {release.ledger_region}", file=source,
                            field="config.platformctl:release.ownsLedger")
    images = node_images(stage, settings, infra_dir)
    if promoted is not None and not settings.images_from_lock:
        record = promoted(stage, settings)
        settings, images, said = with_promoted(stage, settings, images, record)
        for line in said:
            pulumi.log.warn(line)
        if kubelets is not None:  # what the checkout's lock file adds must join the control planes kept
            check_new_families(stage, settings, images, record, kubelets, str((infra_dir / settings.image_lock).resolve()))
    scheduled = scheduled_policy(settings, stage_name, source, infra_dir)
    settings = settings.model_copy(update={"rotation": settings.rotation.model_copy(update={"policy": scheduled})})
    return stage, settings, images


def provision(stage: Stage, settings: InfraSettings, images: dict[str, str],
              release_files: dict[str, str] | None = None, copy_to: Sequence[str] = ()) -> dict[str, Any]:
    """Declare the stage's resources (with the ``release tick`` job when ``release_files``, its ConfigMap's files, are
    given; its image build copying to ``copy_to``, the other stages' regions); returns the stack outputs."""
    name = stage.name
    network = Network(name, name, stage.topology.vpc_cidr, stage.zones)
    common: dict[str, Any] = {"stage": name, "region": stage.region, "version": settings.kubernetes_version, "vpc_id": network.vpc_id,
              "public_access_cidrs": settings.public_access_cidrs, "images": images}
    host = HostCluster(stage.host_cluster, private_subnets=network.private_subnets, **common)
    members = [MemberCluster(m, stage_zones=stage.zones, private_subnets=network.private_subnets,
                             api_clients=[host.security_group_id], **common)
               for m in stage.member_clusters]

    table = StateTable(f"{name}-state", stage=name, table_name=state_table(settings, name))
    every = [c.name for c in stage.clusters()]
    role = irsa_role(f"{stage.host_cluster.name}-rotation", name, host.oidc_provider_arn, host.oidc_issuer, SYSTEM_NAMESPACE,
                     ROTATION_SERVICE_ACCOUNT, access.rotation(name, stage.region, table.arn, every), parent=host)
    # The job rotates the host cluster too: it is admitted there like on every member.
    aws.eks.AccessEntry(f"{stage.host_cluster.name}-rotation", cluster_name=host.cluster_name, principal_arn=role.arn,
                        type="STANDARD", kubernetes_groups=[ROTATION_GROUP],
                        tags=tags(name, f"{stage.host_cluster.name}-rotation",
                                  **{"platformctl.io/cluster": stage.host_cluster.name}),
                        opts=pulumi.ResourceOptions(parent=host))
    def remediation(spec: Any, cluster: Any) -> Remediation:
        """Each cluster's remediation job, as its own service account through the cluster's own OIDC provider."""
        own = irsa_role(f"{spec.name}-remediation", name, cluster.oidc_provider_arn, cluster.oidc_issuer, SYSTEM_NAMESPACE,
                        REMEDIATION_SERVICE_ACCOUNT, access.remediation(spec.name, stage.region, table.arn), parent=cluster)
        r = settings.remediation
        return Remediation(r.image, r.schedule, own.arn, r.policy, table.name, stage.region, spec.name)

    def canary_runner(spec: Any, cluster: Any) -> CanaryRunner:
        """Each cluster's canary runner, as its own service account: the state table is all it reaches in AWS."""
        own = irsa_role(f"{spec.name}-canary", name, cluster.oidc_provider_arn, cluster.oidc_issuer, CANARY_NAMESPACE,
                        CANARY_RUNNER, access.canary(name, spec.name, table.arn), parent=cluster)
        c = settings.canary
        return CanaryRunner(c.image, own.arn, c.canaries, table.name, stage.region, name, spec.name, c.metrics_port)

    for spec, member in zip(stage.member_clusters, members, strict=True):
        aws.eks.AccessEntry(f"{spec.name}-rotation", cluster_name=member.cluster_name, principal_arn=role.arn,
                            type="STANDARD", kubernetes_groups=[ROTATION_GROUP],
                            tags=tags(name, f"{spec.name}-rotation", **{"platformctl.io/cluster": spec.name}),
                            opts=pulumi.ResourceOptions(parent=member))
        ClusterObjects(f"{spec.name}-objects", provider=member.provider, stage=name, region=stage.region, member=True,
                       remediation=remediation(spec, member), canary_runner=canary_runner(spec, member),
                       opts=pulumi.ResourceOptions(parent=member))
    registrations = [Registration(spec.name, spec.zone, member.endpoint, member.certificate_authority,
                                  [p.name for p in spec.node_pools])
                     for spec, member in zip(stage.member_clusters, members, strict=True)]
    contexts = [Context(stage.host_cluster.name, host.endpoint, host.certificate_authority),
                *[Context(spec.name, member.endpoint, member.certificate_authority)
                  for spec, member in zip(stage.member_clusters, members, strict=True)]]
    rotation = Rotation(settings.rotation.image, settings.rotation.schedule, role.arn, settings.rotation.policy or {},
                        table.name, stage.region, contexts)
    release = None
    if release_files is not None:
        release = ReleaseTick(settings.release.image, settings.release.schedule,
                              release_role(stage, settings, host, members, table).arn, settings.release.ledger,
                              release_files, stage.region, contexts, settings.release.pulumi_backend,
                              settings.release.pulumi_secret, settings.release.suspend)
    builder = irsa_role(f"{stage.host_cluster.name}-image-build", name, host.oidc_provider_arn, host.oidc_issuer,
                        SYSTEM_NAMESPACE, IMAGE_BUILD_SERVICE_ACCOUNT, access.image_build(), parent=host)
    image_build = ImageBuild(settings.rotation.image, builder.arn, stage.region,
                             [r for r in dict.fromkeys(copy_to) if r != stage.region])
    ClusterObjects(f"{stage.host_cluster.name}-objects", provider=host.provider, stage=name, region=stage.region,
                   member=False, members=registrations, rotation=rotation, release=release, image_build=image_build,
                   remediation=remediation(stage.host_cluster, host), canary_runner=canary_runner(stage.host_cluster, host),
                   opts=pulumi.ResourceOptions(parent=host))

    clusters: dict[str, Any] = {}
    pools: dict[str, Any] = {}
    placed: list[tuple[Any, HostCluster | MemberCluster]] = [(stage.host_cluster, host),
                                                              *zip(stage.member_clusters, members, strict=True)]
    for spec, cluster in placed:
        clusters[spec.name] = {"role": "host" if cluster is host else "member", "zones": list(spec.zones),
                               "endpoint": cluster.endpoint, "oidcIssuer": cluster.oidc_issuer,
                               "kubernetesVersion": cluster.kubernetes_version}
        for pool_name, pool in cluster.node_pools.items():
            pools[f"{spec.name}/{pool_name}"] = {"cluster": spec.name, "pool": pool_name,
                                                 "autoScalingGroup": pool.auto_scaling_group,
                                                 "launchTemplate": pool.launch_template, "image": images[
                                                     next(p for p in spec.node_pools if p.name == pool_name).image_family]}
    return {"stage": name, "region": stage.region, "vpcId": network.vpc_id, "clusters": clusters, "nodePools": pools,
            "rotationRoleArn": role.arn, "stateTable": table.name}


def release_role(stage: Stage, settings: InfraSettings, host: HostCluster, members: list[MemberCluster],
                 table: StateTable) -> aws.iam.Role:
    """The tick's role: the rotation's grants, the shared ledger table, a candidate's deploy, the stack's deploy
    policies; admitted by every cluster of the stage into the rotation's group and the deploy's."""
    name = stage.name
    release = settings.release
    if release.owns_ledger:  # the one stack that creates the table every stage's tick shares (in its region: load())
        StateTable(f"{name}-release-ledger", stage=name, table_name=release.ledger_table)
    ledger = f"arn:aws:dynamodb:{release.ledger_region}:*:table/{release.ledger_table}"
    grants = access.release_tick(name, stage.region, table.arn, ledger, release.pulumi_backend,
                                 [c.name for c in stage.clusters()])
    role = irsa_role(f"{stage.host_cluster.name}-release", name, host.oidc_provider_arn, host.oidc_issuer,
                     SYSTEM_NAMESPACE, RELEASE_SERVICE_ACCOUNT, grants, parent=host)
    for i, arn in enumerate(settings.release.deploy_policies):
        aws.iam.RolePolicyAttachment(f"{stage.host_cluster.name}-release-deploy-{i}", role=role.name, policy_arn=arn,
                                     opts=pulumi.ResourceOptions(parent=host))
    placed: list[tuple[Any, HostCluster | MemberCluster]] = [(stage.host_cluster, host),
                                                              *zip(stage.member_clusters, members, strict=True)]
    for spec, cluster in placed:
        aws.eks.AccessEntry(f"{spec.name}-release", cluster_name=cluster.cluster_name, principal_arn=role.arn,
                            type="STANDARD", kubernetes_groups=[ROTATION_GROUP, DEPLOY_GROUP],
                            tags=tags(name, f"{spec.name}-release", **{"platformctl.io/cluster": spec.name}),
                            opts=pulumi.ResourceOptions(parent=cluster))
    return role


def stage_regions(infra_dir: Path = INFRA_DIR) -> list[str]:
    """The AWS region of every stage whose stack file the checkout holds, in the pipeline's order: where an image build
    copies its images, so that whatever stage a candidate reaches finds them."""
    found = [read_stack_config(stage_file(name, infra_dir)).get(REGION_KEY) for name in STAGES
             if stage_file(name, infra_dir).is_file()]
    return [str(r) for r in dict.fromkeys(found) if r]


def main() -> None:
    stack = pulumi.get_stack()
    source = str(INFRA_DIR / f"Pulumi.{stack}.yaml")
    try:
        stage, settings, images = load(stack_config(), stack, source, promoted=lambda st, se: read_promoted(st, se, pulumi.log.warn),
                                       kubelets=image_kubelets)
        release_files = release_config(settings, source, INFRA_DIR)
        regions = stage_regions(INFRA_DIR)
    except PlatformError as exc:
        raise pulumi.RunError(str(exc)) from None  # one line, no traceback
    for key, value in provision(stage, settings, images, release_files, regions).items():
        pulumi.export(key, value)
