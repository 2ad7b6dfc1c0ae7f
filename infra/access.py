"""What each job of a stage may do in AWS: the grants its IAM role's policy is made of, and nothing else.

Every grant names its actions (the policy pack rejects wildcard actions) and is as narrow as the action allows (IAM
User Guide, Service Authorization Reference for Auto Scaling, EC2, EKS and DynamoDB):

- reads that have no resource-level permissions (``Describe*``) are on ``*``, as AWS requires;
- a write to an Auto Scaling group, a launch template or an EKS cluster is on that resource type, and only where the
  resource carries the stage's tag (``aws:ResourceTag/platformctl.io/stage``), or for a cluster's remediation, the
  cluster's own tag (``aws:ResourceTag/platformctl.io/cluster``): no job reaches another stage's groups or any group
  this program did not make;
- the state store's reads are on the stage's own table, its writes there only on the partition keys the job writes
  (``dynamodb:LeadingKeys``, ``stage_keys``): a rotation its stage's clusters' journals and leases, a remediation its
  own cluster's, a canary runner its own cluster's results and lease, the tick a rotation's and its stage's promoted,
  launched and frozen records; each the registry of its own streams' families. No job writes another's journal, lease
  or results, nor another cluster's;
- the tick reads the shared ledger's table too, and writes there only its own stage's partition keys (``ledger_keys``):
  never another stage's entries, checkpoints, lease or deploy records, nor the people's entries and the candidates
  ``release start`` records (what it writes in its own partition is admitted only where its stage may decide:
  ``release_pipeline.fold.admitted``).

Writes are conditioned with ``ForAllValues:StringLike`` on item actions only (PutItem, UpdateItem, DeleteItem,
ConditionCheckItem), each of which names its key: the operator passes vacuously on a request with no key, so it is never
put on one that may carry none. The registry's shared item ``i#`` (the list of families) is every writer's; a family's
registry (``i#canary``, every cluster's runner's) is written by each job of that family, which ``LeadingKeys`` cannot
tell apart below the partition.

The tick's deploy (``pulumi up`` on its own stage, which a candidate changes only in its images, its Kubernetes
version and its components) may make a launch template's new version, point a group at it and take a cluster one
minor version up; creating or removing anything else, IAM included, is the operator's ``pulumi up``, never the tick's.
``platformctl:release.deployPolicies`` attaches more managed policies when a stage needs them (none by default).

``python -m infra.access`` prints the table docs/running-for-real.md holds (tests/infra/test_access.py keeps them the
same), so the docs cannot drift from the program.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ami.build import TAG
from infra.components.common import CLUSTER_TAG, STAGE_TAG
from platformctl.kernel.nodegroups import BUILDER_TAG
from platformctl.kernel.state.dynamodb import lease_key, registry_keys, sequence_key, stream_key

ASG_READS = ("autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
             "autoscaling:DescribeScalingActivities")
EC2_READS = ("ec2:DescribeInstances", "ec2:DescribeLaunchTemplateVersions")
# What the node-group seam does to a group (platformctl/kernel/nodegroups/aws.py): surge, and retire one instance.
ASG_WRITES = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")
# What the state store does with its table (platformctl/kernel/state/dynamodb.py): a fenced append is a transaction
# of a condition check on the lease item and a put; listing streams is a query of the registry, never a scan.
STATE_ACTIONS = ("dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem",
                 "dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:ConditionCheckItem")
STATE_READS = ("dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:Query")
STATE_WRITES = tuple(a for a in STATE_ACTIONS if a not in STATE_READS)
# What the tick's deploy of a candidate changes (infra/deploy.py): a launch template's new default version, its group
# on it, the control plane's version; and the reads Pulumi makes of what it changed, and the deploy's own check that
# each image exists and runs a kubelet that may join (``infra.materialize.check_images``: DescribeImages).
DEPLOY_READS = ("ec2:DescribeLaunchTemplates", "ec2:DescribeLaunchTemplateVersions", "ec2:DescribeImages",
                "autoscaling:DescribeAutoScalingGroups")
TEMPLATE_WRITES = ("ec2:CreateLaunchTemplateVersion", "ec2:ModifyLaunchTemplate")
GROUP_UPDATE = ("autoscaling:UpdateAutoScalingGroup",)
CLUSTER_ACTIONS = ("eks:DescribeCluster", "eks:UpdateClusterVersion", "eks:DescribeUpdate")
BACKEND_ACTIONS = ("s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject")
IMAGE_TAG = TAG + "name"  # every image and snapshot a build makes carries it (ami.build)


@dataclass(frozen=True)
class Grant:
    """One statement: ``actions`` on ``resources`` (each a string or a Pulumi output), where ``condition`` holds."""

    actions: tuple[str, ...]
    resources: tuple[Any, ...] = ("*",)
    condition: Mapping[str, Mapping[str, str | tuple[str, ...]]] = field(default_factory=dict)
    what: str = ""  # the table's words for it


def tagged(key: str, value: str) -> dict[str, dict[str, str]]:
    return {"StringEquals": {f"aws:ResourceTag/{key}": value}}


def group_arn(region: str) -> str:
    return f"arn:aws:autoscaling:{region}:*:autoScalingGroup:*:autoScalingGroupName/*"


def _node_groups(tag: str, value: str, whose: str, region: str) -> list[Grant]:
    return [Grant(ASG_READS + EC2_READS, what="describe groups, their instances and scaling activities, instances "
                  "and launch template versions"),
            Grant(ASG_WRITES, (group_arn(region),), tagged(tag, value),
                  what=f"set desired capacity and terminate an instance, in {whose}")]


def _stage_groups(stage: str, region: str) -> list[Grant]:
    """A rotation's node-group grants: in the groups tagged with its stage (the scheduled rotation's, the tick's)."""
    return _node_groups(STAGE_TAG, stage, "groups tagged with the stage", region)


def stage_keys(streams: Sequence[str], leases: Sequence[str]) -> tuple[str, ...]:
    """The partition keys a job writes in its stage's table (``platformctl.kernel.state.dynamodb``'s layout): its
    streams' (``*`` matching any, as ``StringLike`` does), its leases' and its streams' families' registry."""
    keys = [*(stream_key(s) for s in streams), *(lease_key(name) for name in leases)]
    for s in streams:
        keys.extend(k for k in registry_keys(s) if k not in keys)
    return tuple(keys)


def _stage_table(table: Any, keys: Sequence[str], whose: str) -> list[Grant]:
    return [Grant(STATE_READS, (table,), what="read the stage's state table"),
            Grant(STATE_WRITES, (table,), {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": tuple(keys)}},
                  what=f"write there only {whose}")]


def _rotations(clusters: Sequence[str]) -> list[str]:
    """A rotation's journal and lease of each cluster (``upgrade_service.journal.rotation.stream_of``)."""
    return [f"rotation/{c}" for c in clusters]


def rotation(stage: str, region: str, table: Any, clusters: Sequence[str]) -> list[Grant]:
    """The scheduled rotation: read groups and instances, surge and retire in the stage; journal each of the stage's
    ``clusters`` under its lease."""
    return [*_stage_groups(stage, region), *_stage_table(table, stage_keys(_rotations(clusters), _rotations(clusters)),
                                                         "the stage's clusters' rotation journals and leases")]


def remediation(cluster: str, region: str, table: Any) -> list[Grant]:
    """A cluster's remediation: the same as a rotation's, only on that cluster's own groups (it surges, then retires),
    and only its own journal and lease (``upgrade_service.journal.remediation.stream_of``)."""
    own = [f"remediation/{cluster}"]
    return [*_node_groups(CLUSTER_TAG, cluster, "its own cluster's groups", region),
            *_stage_table(table, stage_keys(own, own), "its own cluster's remediation journal and lease")]


def canary(stage: str, cluster: str, table: Any) -> list[Grant]:
    """A cluster's canary runner: its own cluster's results (a stream a day, ``e2e_canary.results.ResultStream``) and
    its lease."""
    return _stage_table(table, stage_keys([f"canary/{stage}/{cluster}/*"], [f"canary/{stage}/{cluster}"]),
                        "its own cluster's canary results and lease")


# What ``ami build`` does (ami/build.py): find and describe images, launch a builder from a source image (tagged as a
# builder when it is made), image it, tag the image and its snapshots, copy it to the other regions, publish its id
# in SSM, terminate the builder, and remove what a failed build left.
IMAGE_READS = ("ec2:DescribeImages", "ec2:DescribeInstances")
BUILDER = "aws:ResourceTag/" + BUILDER_TAG
BUILT = "aws:ResourceTag/" + IMAGE_TAG


def _ec2(kind: str, owned: bool = True) -> str:
    return f"arn:aws:ec2:*:{'*' if owned else ''}:{kind}/*"  # an image's and a snapshot's ARN name no account


def image_build() -> list[Grant]:
    """The image build (``ami build`` in the stage's host cluster): its builders are the only instances it may launch,
    image or terminate (tagged ``platformctl:builder`` as they are made), the images and snapshots it tags and removes
    are its own, and SSM holds its ids under ``/platformctl/ami/``; the EKS-optimised sources are read from AWS's
    public parameters. In every region: a build copies its images to each stage's. No grant lets it tag an image or a
    snapshot ours that is not (``CreateTags`` only as one is made, or on one already ours), so it cannot make itself
    able to remove another's."""
    made = (_ec2("image", False), _ec2("snapshot", False))
    return [Grant(IMAGE_READS, what="describe images and the builders"),
            Grant(("ssm:GetParameter",), ("arn:aws:ssm:*:*:parameter/aws/service/eks/*",),
                  what="read the EKS-optimised images' public parameters"),
            Grant(("ssm:GetParameter", "ssm:PutParameter", "ssm:DeleteParameter"), ("arn:aws:ssm:*:*:parameter/platformctl/ami/*",),
                  what="read and publish the images' ids"),
            Grant(("ec2:RunInstances",), (_ec2("image", False), _ec2("subnet"), _ec2("network-interface"),
                                          _ec2("security-group"), _ec2("volume")),
                  what="launch a builder: the image, network and volumes it uses"),
            Grant(("ec2:RunInstances",), (_ec2("instance"),), {"StringLike": {"aws:RequestTag/" + BUILDER_TAG: "*"}},
                  what="launch a builder: only an instance tagged as one"),
            Grant(("ec2:CreateTags",), (_ec2("instance"),), {"StringEquals": {"ec2:CreateAction": "RunInstances"}},
                  what="tag a builder as it is launched"),
            Grant(("ec2:CreateImage", "ec2:TerminateInstances"), (_ec2("instance"),), {"StringLike": {BUILDER: "*"}},
                  what="image a builder and terminate it"),
            Grant(("ec2:CreateImage", "ec2:CopyImage"), made, {"StringLike": {"aws:RequestTag/" + IMAGE_TAG: "*"}},
                  what="make an image and its snapshots from a builder, or copy one: only tagged as ours as they are made"),
            Grant(("ec2:CreateTags",), made, {"StringEquals": {"ec2:CreateAction": ("CreateImage", "CopyImage")}},
                  what="tag them as they are made"),
            Grant(("ec2:CreateTags", "ec2:DeregisterImage", "ec2:DeleteSnapshot"), made, {"StringLike": {BUILT: "*"}},
                  what="tag (the build's commit), or remove after a failed build, only images and snapshots already ours")]


def backend_bucket(backend: str) -> str | None:
    """The S3 bucket of a ``s3://bucket?region=...`` Pulumi backend (None for any other backend)."""
    if not backend.startswith("s3://"):
        return None
    return backend.removeprefix("s3://").split("?")[0].split("/")[0] or None


def ledger_keys(stage: str) -> tuple[str, ...]:
    """The partition keys a ``stage``'s tick writes in the ledger's table (release_pipeline.ledger's streams in the
    store's layout), every one its own stage's: its partition of the entries (and the counter of the sequence they
    share, which it moves with each entry), its checkpoints, the instances its rotations saw booting a candidate, its
    deploy records and lease, and the stream registry. Never the people's entries, another stage's, nor the
    candidates."""
    streams = (f"release/ledger@{stage}", f"release/state@{stage}", f"release/boots@{stage}/*", f"release/deploys/{stage}")
    return (*(stream_key(s) for s in streams), sequence_key("release/ledger"), lease_key(f"release/tick/{stage}"),
            *registry_keys("release/"))


def release_tick(stage: str, region: str, table: Any, ledger: str, backend: str, clusters: Sequence[str]) -> list[Grant]:
    """The tick: the rotation's grants (its rotations), the stage's promoted, launched and frozen records
    (``platformctl.kernel.state.promoted`` and ``frozen``), the shared ledger's table, and its deploy of a candidate."""
    records = [f"promoted/{stage}", f"launched/{stage}", f"frozen/{stage}"]
    grants = [*_stage_groups(stage, region),
              *_stage_table(table, stage_keys([*_rotations(clusters), *records], _rotations(clusters)),
                            "the stage's clusters' rotation journals and leases, its promoted, launched and frozen "
                            "records"),
              Grant(STATE_READS, (ledger,), what="read the release ledger's table, which every stage's tick shares"),
              Grant(STATE_WRITES, (ledger,), {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ledger_keys(stage)}},
                    what="write there, its own stage's only: entries, checkpoints, boots, deploy records and lease"),
              Grant(DEPLOY_READS, what="describe launch templates, images and groups (the deploy's reads)"),
              Grant(TEMPLATE_WRITES, (f"arn:aws:ec2:{region}:*:launch-template/*",), tagged(STAGE_TAG, stage),
                    what="a new launch template version, made the default, in templates tagged with the stage"),
              Grant(GROUP_UPDATE, (group_arn(region),), tagged(STAGE_TAG, stage),
                    what="update a group tagged with the stage (its template version)"),
              Grant(CLUSTER_ACTIONS, (f"arn:aws:eks:{region}:*:cluster/*",), tagged(STAGE_TAG, stage),
                    what="describe a cluster tagged with the stage and take it a minor version up")]
    bucket = backend_bucket(backend)
    if bucket is not None:
        grants.append(Grant(BACKEND_ACTIONS, (f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"),
                            what=f"the Pulumi backend's bucket ({bucket})"))
    return grants


def statement(grant: Grant, resources: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"Effect": "Allow", "Action": sorted(grant.actions), "Resource": list(resources)}
    if grant.condition:
        out["Condition"] = {op: {k: list(v) if isinstance(v, tuple) else v for k, v in keys.items()}
                            for op, keys in grant.condition.items()}
    return out


def document(grants: Sequence[Grant], resolved: Sequence[Sequence[str]] | None = None) -> str:
    """The policy document of ``grants`` (``resolved``: each grant's resources once Pulumi's outputs are known)."""
    resources = resolved if resolved is not None else [[str(r) for r in g.resources] for g in grants]
    return json.dumps({"Version": "2012-10-17", "Statement": [
        statement(g, r) for g, r in zip(grants, resources, strict=True) if g.actions]})


def _holds(operator: str, key: str, value: str | tuple[str, ...]) -> str:
    if operator == "StringLike" and value == "*":
        return f"`{key}` is set"
    if isinstance(value, tuple):
        return f"{'every ' if operator.startswith('ForAllValues') else ''}`{key}` is one of " + ", ".join(f"`{v}`" for v in value)
    return f"`{key}` = `{value}`"


def table() -> str:
    """docs/running-for-real.md's table of what each job may do, made from the grants above."""
    jobs = [("rotation (`platformctl-rotate`, host cluster)", rotation("STAGE", "REGION", "STATE_TABLE", ["CLUSTER"])),
            ("remediation (`platformctl-remediate`, every cluster)", remediation("CLUSTER", "REGION", "STATE_TABLE")),
            ("canary runner (every cluster)", canary("STAGE", "CLUSTER", "STATE_TABLE")),
            ("release tick (`platformctl-release-tick`, host cluster)",
             release_tick("STAGE", "REGION", "STATE_TABLE", "LEDGER_TABLE", "s3://PULUMI_BUCKET", ["CLUSTER"])),
            ("image build (`platformctl-image-build`, host cluster)", image_build())]
    lines = ["| job | what | actions | on |", "| --- | --- | --- | --- |"]
    for job, grants in jobs:
        for i, grant in enumerate(grants):
            where = ", ".join(f"`{r}`" for r in grant.resources)
            if grant.condition:
                where += " where " + ", ".join(_holds(op, k, v) for op, keys in grant.condition.items() for k, v in keys.items())
            lines.append(f"| {job if i == 0 else ''} | {grant.what} | {', '.join(f'`{a}`' for a in sorted(grant.actions))} "
                         f"| {where} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(), end="")
