"""The security rules of every stage, as Pulumi policies.

``pulumi preview --policy-pack infra/policy`` (and ``pulumi up``) runs them against every resource
of a stack; ``infra/policy/__main__.py`` serves them. The validation functions are plain
functions of ``(args, report_violation)`` so the tests call them directly on what the program
declares and on deliberately broken inputs.

Each reads the resource's properties as the provider names them (``metadataOptions.httpTokens``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pulumi_policy import EnforcementLevel, ResourceValidationArgs, ResourceValidationPolicy
from pulumi_policy.policy import PolicyCustomTimeouts, PolicyResourceOptions

from infra.components.common import REQUIRED_TAGS, ROLE_TAG, STAGE_TAG
from infra.settings import PROD_STAGES

Report = Callable[..., None]

LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
EKS_CLUSTER = "aws:eks/cluster:Cluster"
EBS_VOLUME = "aws:ebs/volume:Volume"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
IAM_DOCUMENTS = {  # type -> the properties that hold policy documents
    "aws:iam/role:Role": ("assumeRolePolicy", "inlinePolicies"),
    "aws:iam/rolePolicy:RolePolicy": ("policy",),
    "aws:iam/policy:Policy": ("policy",),
    "aws:iam/userPolicy:UserPolicy": ("policy",),
    "aws:iam/groupPolicy:GroupPolicy": ("policy",),
}
# Every AWS type the program declares that takes tags. The tests check this list against the
# pulumi-aws classes, so a new taggable resource cannot slip past the tag rule.
TAGGABLE = frozenset({
    "aws:ec2/vpc:Vpc", "aws:ec2/subnet:Subnet", "aws:ec2/internetGateway:InternetGateway", "aws:ec2/eip:Eip",
    "aws:ec2/natGateway:NatGateway", "aws:ec2/routeTable:RouteTable", "aws:ec2/securityGroup:SecurityGroup",
    "aws:kms/key:Key", "aws:iam/role:Role", "aws:iam/instanceProfile:InstanceProfile",
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider", EKS_CLUSTER, "aws:eks/accessEntry:AccessEntry",
    LAUNCH_TEMPLATE, "aws:autoscaling/group:Group", EBS_VOLUME, "aws:dynamodb/table:Table",
})


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def imdsv2_required(args: ResourceValidationArgs, report_violation: Report) -> None:
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    options = args.props.get("metadataOptions") or {}
    if options.get("httpTokens") != "required":
        report_violation("launch templates must require IMDSv2 (metadataOptions.httpTokens = required)")
    hops = options.get("httpPutResponseHopLimit")
    if hops is None or int(hops) != 1:
        report_violation(f"launch templates must set metadataOptions.httpPutResponseHopLimit to 1 (got {hops!r}), "
                         "so pods cannot reach the node's credentials")


def volumes_encrypted(args: ResourceValidationArgs, report_violation: Report) -> None:
    if args.resource_type == EBS_VOLUME and not _true(args.props.get("encrypted")):
        report_violation("EBS volumes must be encrypted")
    if args.resource_type != LAUNCH_TEMPLATE:
        return
    mappings = args.props.get("blockDeviceMappings") or []
    if not mappings:
        report_violation("launch templates must declare their root volume (blockDeviceMappings) to encrypt it")
    for mapping in mappings:
        ebs = mapping.get("ebs")
        if ebs is not None and not _true(ebs.get("encrypted")):
            report_violation(f"the volume {mapping.get('deviceName')} of a launch template must be encrypted (ebs.encrypted)")


def secrets_encrypted(args: ResourceValidationArgs, report_violation: Report) -> None:
    if args.resource_type != EKS_CLUSTER:
        return
    configs = args.props.get("encryptionConfig") or {}
    if isinstance(configs, Mapping):
        configs = [configs]
    if not any("secrets" in (c.get("resources") or []) and (c.get("provider") or {}).get("keyArn") for c in configs):
        report_violation("EKS clusters must encrypt Kubernetes secrets with a KMS key (encryptionConfig)")


def no_public_endpoint_in_prod(args: ResourceValidationArgs, report_violation: Report) -> None:
    if args.resource_type != EKS_CLUSTER:
        return
    vpc = args.props.get("vpcConfig") or {}
    public = vpc.get("endpointPublicAccess")
    public = True if public is None else _true(public)  # EKS's default is a public endpoint
    if not _true(vpc.get("endpointPrivateAccess")):
        report_violation("EKS clusters must have a private endpoint (vpcConfig.endpointPrivateAccess)")
    stage = (args.props.get("tags") or {}).get(STAGE_TAG)
    if public and stage in PROD_STAGES:
        report_violation(f"EKS clusters of the {stage} stage must not have a public endpoint (vpcConfig.endpointPublicAccess)")
    elif public:
        cidrs = vpc.get("publicAccessCidrs") or []
        if not cidrs or any(c in ("0.0.0.0/0", "::/0") for c in cidrs):
            report_violation("a public EKS endpoint must be limited to configured CIDRs (vpcConfig.publicAccessCidrs)")


def _documents(value: Any) -> Iterator[Mapping[str, Any]]:
    if value is None:
        return
    if isinstance(value, str):
        if value.strip():
            yield json.loads(value)
    elif isinstance(value, Mapping):
        yield value
    else:  # a role's inlinePolicies: [{name, policy}]
        for item in value:
            yield from _documents(item.get("policy") if isinstance(item, Mapping) else item)


def wildcard_actions(document: Mapping[str, Any]) -> list[str]:
    """Every action (or NotAction) pattern with a ``*`` in it."""
    statements = document.get("Statement") or []
    if isinstance(statements, Mapping):
        statements = [statements]
    found = []
    for statement in statements:
        for key in ("Action", "NotAction"):
            actions = statement.get(key) or []
            for action in [actions] if isinstance(actions, str) else actions:
                if "*" in action:
                    found.append(action)
    return found


def no_wildcard_actions(args: ResourceValidationArgs, report_violation: Report) -> None:
    for prop in IAM_DOCUMENTS.get(args.resource_type, ()):
        for document in _documents(args.props.get(prop)):
            for action in wildcard_actions(document):
                report_violation(f"IAM policies must name their actions; {prop} allows {action!r}")


# IAM's quotas on a policy's size, in characters with white space not counted (IAM User Guide, "IAM and AWS STS
# quotas"): a role's inline policies together, a managed policy. A role's keys grow with the stage's clusters
# (``infra.access``: a journal and a lease each), so a stage with very many would meet it at ``pulumi up``.
POLICY_SIZES = {"aws:iam/rolePolicy:RolePolicy": ("policy", 10_240), "aws:iam/role:Role": ("inlinePolicies", 10_240),
                "aws:iam/policy:Policy": ("policy", 6_144)}


def policy_size(args: ResourceValidationArgs, report_violation: Report) -> None:
    prop, most = POLICY_SIZES.get(args.resource_type, ("", 0))
    if not prop:
        return
    size = sum(len("".join(json.dumps(d, separators=(",", ":")).split())) for d in _documents(args.props.get(prop)))
    if size > most:
        report_violation(f"IAM allows {most:,} characters (white space not counted) in {prop}; this has {size:,}")


def tags_of(props: Mapping[str, Any]) -> dict[str, str]:
    tags = props.get("tags")
    if isinstance(tags, Mapping):
        return dict(tags)
    return {t.get("key"): t.get("value") for t in tags or []}  # an auto scaling group's tag list


def required_tags(args: ResourceValidationArgs, report_violation: Report) -> None:
    if args.resource_type not in TAGGABLE:
        return
    tags = tags_of(args.props)
    missing = [t for t in REQUIRED_TAGS if not tags.get(t)]
    if missing:
        report_violation(f"resources must carry the tags {', '.join(REQUIRED_TAGS)}; missing {', '.join(missing)}")


def members_admit_the_host(args: ResourceValidationArgs, report_violation: Report) -> None:
    """A member cluster's endpoint is private and its security group admits only itself unless told: the rotation and
    the release tick run on the host cluster and call every member, so each member's group must admit another group
    (the host's nodes) on 443, or every call they make times out."""
    if args.resource_type != SECURITY_GROUP or tags_of(args.props).get(ROLE_TAG) != "member":
        return
    for rule in args.props.get("ingress") or []:
        protocol, low, high = str(rule.get("protocol")), int(rule.get("fromPort") or 0), int(rule.get("toPort") or 0)
        if protocol in ("-1", "all") or (protocol in ("tcp", "6") and low <= 443 <= high):
            if rule.get("securityGroups"):
                return
    report_violation("a member cluster's security group must admit the host cluster's nodes on 443 (ingress tcp 443 "
                     "from the host's security group): the rotation and the release tick run there and call this "
                     "cluster's private endpoint")


RULES: dict[str, tuple[str, Callable[[ResourceValidationArgs, Report], None]]] = {
    "imdsv2-hop-limit-1": ("Launch templates require IMDSv2 with a hop limit of 1.", imdsv2_required),
    "encrypted-volumes": ("EBS volumes, including launch templates' root volumes, are encrypted.", volumes_encrypted),
    "eks-secrets-encryption": ("EKS clusters encrypt secrets with a KMS key.", secrets_encrypted),
    "eks-no-public-endpoint-in-prod": ("No public EKS endpoint in prod stages; elsewhere only from listed CIDRs.",
                                       no_public_endpoint_in_prod),
    "iam-no-wildcard-actions": ("IAM policy documents name every action.", no_wildcard_actions),
    "iam-policy-size": ("IAM policy documents fit IAM's size quotas.", policy_size),
    "required-tags": (f"Taggable resources carry {', '.join(REQUIRED_TAGS)}.", required_tags),
    "members-admit-the-host": ("Each member cluster's security group admits the host's nodes on 443.",
                               members_admit_the_host),
}


def policies() -> list[ResourceValidationPolicy]:
    return [ResourceValidationPolicy(name=name, description=description, validate=validate,
                                     enforcement_level=EnforcementLevel.MANDATORY)
            for name, (description, validate) in RULES.items()]


def violations(resource_type: str, props: Mapping[str, Any], name: str = "resource") -> list[tuple[str, str]]:
    """``(rule, message)`` for every rule ``props`` breaks: how the tests and ``platformctl`` run the pack
    without the Pulumi engine."""
    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])
    args = ResourceValidationArgs(resource_type, props, f"urn:pulumi:stack::platformctl::{resource_type}::{name}", name,
                                  opts, None)
    found: list[tuple[str, str]] = []
    for rule, (_, validate) in RULES.items():
        validate(args, lambda message, urn=None, rule=rule: found.append((rule, message)))
    return found
