"""Node groups as EKS managed node groups: capacity through EKS, instances through the Auto Scaling group EKS made.

A group's name is ``<cluster>/<node group>`` (a node group's name is unique within its cluster only). What EKS says
of a group (``DescribeNodegroup``: its ``scalingConfig``, the Auto Scaling group in ``resources``) is read from EKS;
what its instances are, launch and boot is read from that Auto Scaling group and its launch template (EKS's own
``eks-<uuid>`` copy), through ``AutoScalingNodeGroups``:

- ``add_capacity``: ``UpdateNodegroupConfig`` with ``scalingConfig.desiredSize`` (the EKS API's way to size a managed
  group; EKS refuses one above ``maxSize`` with ``InvalidParameterException``);
- ``retire``: ``TerminateInstanceInAutoScalingGroup`` on the group's Auto Scaling group, lowering its desired capacity
  unless the node is replaced. EKS has no call that ends one instance; Cluster Autoscaler retires a managed node group's
  nodes this way, and EKS's ``desiredSize`` follows ("the desiredSize parameter is altered by the Cluster Autoscaler",
  NodegroupScalingConfig in the EKS API Reference).

A new image for a managed group comes with ``UpdateNodegroupVersion``, with which EKS rolls the group itself; this
backend rotates, remediates and lights what a group runs, and does not change what it boots.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from platformctl.kernel import aws
from platformctl.kernel.clock import Clock
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.nodegroups import Booted, GroupState, InstanceState, LaunchSpec, Member, NodeGroupError
from platformctl.kernel.nodegroups.aws import AutoScalingNodeGroups
from platformctl.kernel.retry import Backoff

NODEGROUP_TAG = "eks:nodegroup-name"  # on the Auto Scaling group EKS makes for a managed node group, with the cluster's


class ManagedNodeGroups:
    def __init__(self, region: str | None = None, quick: bool = False, clock: Clock | None = None,
                 backoff: Backoff | None = None, seed: int | None = None, target: aws.AwsTarget | None = None) -> None:
        """As ``AutoScalingNodeGroups`` takes them (its calls are retried by the same rules)."""
        self.region = region
        self._asgs = AutoScalingNodeGroups(region, quick=quick, clock=clock, backoff=backoff, seed=seed, target=target)
        self._eks = aws.client("eks", region, aws.QUICK if quick else None, target)
        self._behind: dict[str, str] = {}  # group -> its Auto Scaling group (EKS never renames it)
        self._owner: dict[str, str | None] = {}  # Auto Scaling group -> the managed group it backs (None: no such)

    @property
    def retried(self) -> int:
        return self._asgs.retried

    def _call(self, fn: Any, **kwargs: Any) -> Any:
        return self._asgs._call(fn, **kwargs)

    @staticmethod
    def _split(group: str) -> tuple[str, str]:
        cluster, _, name = group.partition("/")
        if not cluster or not name:
            raise NodeGroupError(f"{group!r} names no managed node group (<cluster>/<node group>)",
                                 "ResourceNotFoundException")
        return cluster, name

    def _nodegroup(self, group: str) -> dict[str, Any]:
        cluster, name = self._split(group)
        found: dict[str, Any] = self._call(self._eks.describe_nodegroup, clusterName=cluster, nodegroupName=name)["nodegroup"]
        names = [g["name"] for g in (found.get("resources") or {}).get("autoScalingGroups") or []]
        if not names:  # still CREATING (may pass), or failed to be made (will not)
            status = str(found.get("status") or "")
            raise NodeGroupError(f"managed node group {group} has no Auto Scaling group (status {status})",
                                 "ResourceInUseException" if status in ("CREATING", "UPDATING") else "InvalidRequestException")
        self._behind[group] = names[0]
        self._owner[names[0]] = group
        return found

    def _asg(self, group: str) -> str:
        if group not in self._behind:
            self._nodegroup(group)
        return self._behind[group]

    def probe(self) -> None:
        """Auto Scaling's probe, then one EKS call: either unreachable or refusing is a one-line error at the start."""
        self._asgs.probe()
        try:
            self._asgs._once(self._eks.list_clusters, maxResults=1)
        except NodeGroupError as exc:
            raise PlatformError(f"EKS refused the first call ({exc})", field="AWS credentials") from None

    def describe(self, group: str) -> GroupState:
        found = self._nodegroup(group)
        sizes = found.get("scalingConfig") or {}
        behind = self._asgs.describe(self._behind[group])
        instance_type = behind.instance_type or next(iter(found.get("instanceTypes") or []), None)
        # The desired capacity in force is the Auto Scaling group's: a retired node lowers it at once, and EKS's
        # scalingConfig follows ("can be out-of-date for short periods of time"); the bounds are EKS's, which it enforces.
        return GroupState(group, behind.desired, int(sizes.get("minSize", behind.min_size)),
                          int(sizes.get("maxSize", behind.max_size)), behind.instances, behind.image, instance_type,
                          behind.launch)

    def add_capacity(self, group: str, to: int) -> None:
        """Nothing when the group already has ``to`` (an intent asked again after a crash: EKS's update is asynchronous,
        and another one of the same size is not asked for). The call asked again after a lost answer carries the same
        ``clientRequestToken``, EKS's idempotency token: it is one update, not two."""
        cluster, name = self._split(group)
        found = self._call(self._asgs._asg.describe_auto_scaling_groups,
                           AutoScalingGroupNames=[self._asg(group)])["AutoScalingGroups"]
        if found and found[0]["DesiredCapacity"] >= to:
            return
        self._call(self._eks.update_nodegroup_config, clusterName=cluster, nodegroupName=name,
                   scalingConfig={"desiredSize": to}, clientRequestToken=str(uuid.uuid4()))

    def retire(self, instance_id: str, replace: bool) -> None:
        self._asgs.retire(instance_id, replace)

    def cluster_groups(self, cluster: str) -> list[str]:
        names: list[str] = []
        kwargs: dict[str, Any] = {"clusterName": cluster}
        while True:
            page = self._call(self._eks.list_nodegroups, **kwargs)
            names += page.get("nodegroups", [])
            if not page.get("nextToken"):
                return sorted(f"{cluster}/{n}" for n in names)
            kwargs["nextToken"] = page["nextToken"]

    def members(self, group: str) -> list[Member]:
        return self._asgs.members(self._asg(group))

    def instances(self, instance_ids: Sequence[str]) -> dict[str, InstanceState]:
        """Each instance's managed group, from the tags EKS puts on the Auto Scaling group it made for it; an instance
        of a self-managed group is left out (it belongs to no managed node group)."""
        states = self._asgs.instances(instance_ids)
        unknown = sorted({s.group for s in states.values()} - set(self._owner))
        for start in range(0, len(unknown), 50):
            page = self._call(self._asgs._asg.describe_auto_scaling_groups, AutoScalingGroupNames=unknown[start:start + 50],
                              MaxRecords=50)
            for g in page["AutoScalingGroups"]:
                tags = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
                cluster, name = tags.get("eks:cluster-name"), tags.get(NODEGROUP_TAG)
                self._owner[g["AutoScalingGroupName"]] = f"{cluster}/{name}" if cluster and name else None
        out = {}
        for instance_id, state in states.items():
            owner = self._owner.get(state.group)
            if owner is not None:
                out[instance_id] = InstanceState(instance_id, owner, state.lifecycle)
        return out

    def booted(self, images: Sequence[str]) -> Booted:
        return self._asgs.booted(images)

    def failed_launches(self, group: str, since: float) -> list[str]:
        return self._asgs.failed_launches(self._asg(group), since)

    def launched_with(self, instance_ids: Sequence[str]) -> dict[str, LaunchSpec]:
        """EKS launches a managed group's nodes through its Auto Scaling group and the launch template it made: the same
        tags, the same versions (a new AMI release or a changed template is a new version, as EKS's own update makes)."""
        return self._asgs.launched_with(instance_ids)
