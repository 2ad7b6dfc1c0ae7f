"""What every component shares: the tags each taggable resource carries, and child options."""

from __future__ import annotations

import pulumi

STAGE_TAG = "platformctl.io/stage"
MANAGED_BY_TAG = "platformctl.io/managed-by"
CLUSTER_TAG = "platformctl.io/cluster"
POOL_TAG = "platformctl.io/node-pool"
NODE_TYPE_TAG = "platformctl.io/node-type"
ZONE_TAG = "platformctl.io/zone"
ROLE_TAG = "platformctl.io/cluster-role"  # host or member, on each cluster's security group
# Tags the policy pack requires on every taggable resource.
REQUIRED_TAGS = (STAGE_TAG, MANAGED_BY_TAG, "Name")


def tags(stage: str, name: str, **extra: str) -> dict[str, str]:
    return {"Name": name, STAGE_TAG: stage, MANAGED_BY_TAG: "pulumi", **extra}


def child(parent: pulumi.Resource, **kwargs: object) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions(parent=parent, **kwargs)  # type: ignore[arg-type]  # kwargs are ResourceOptions fields
