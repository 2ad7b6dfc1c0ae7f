"""Node groups: the seam to whatever owns a cluster's instances (capacity, termination, what new ones boot).

``NodeGroups`` is the Protocol, in capacity verbs; ``AutoScalingNodeGroups`` implements it with EC2 Auto Scaling
through the project's boto3 clients (moto locally), ``ManagedNodeGroups`` with EKS managed node groups (capacity
through EKS, each group's instances through the Auto Scaling group EKS made for it), and ``SimulatedNodeGroups`` with
the simulator's own pools (what the 3,000-node benchmark rotates). Nothing above it knows which.

A node maps to its instance by ``spec.providerID`` (``Node.instance_id``) and an instance to its
group by asking the owner (``DescribeAutoScalingInstances``), never by a naming convention.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from platformctl.kernel.errors import PlatformError


@dataclass(frozen=True)
class InstanceState:
    instance_id: str
    group: str
    lifecycle: str  # InService, Pending, Terminating, ...

    @property
    def leaving(self) -> bool:
        return self.lifecycle.startswith("Terminat") or self.lifecycle.startswith("Detach")


# A launch template version's settings that a node does not carry: tags land on the instance, not in what it runs.
NOT_CARRIED = frozenset({"ImageId", "TagSpecifications"})


@dataclass(frozen=True)
class LaunchSpec:
    """What an instance is launched with beyond its image: its launch template version, and a digest of each of that
    version's settings a node carries but the image (the instance type, the user data: the node's labels, taints and
    kubelet flags; its disks, security groups, instance profile, metadata options). Versions never change: a spec read
    once stands."""

    template: str
    version: str
    settings: tuple[tuple[str, str], ...] = ()  # (setting, digest of its value), sorted

    @classmethod
    def of(cls, template: str, version: str, data: Mapping[str, object]) -> LaunchSpec:
        digest = {key: hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
                  for key, value in data.items() if key not in NOT_CARRIED}
        return cls(template, version, tuple(sorted(digest.items())))

    def changed(self, now: LaunchSpec) -> list[str]:
        """The settings ``now`` (what the group launches today) has otherwise than this one: a node launched with this
        one would not get them until it is replaced."""
        if now.template != self.template:
            return ["LaunchTemplate"]
        mine, theirs = dict(self.settings), dict(now.settings)
        return sorted(key for key in mine.keys() | theirs.keys() if mine.get(key) != theirs.get(key))


@dataclass(frozen=True)
class GroupState:
    name: str
    desired: int
    min_size: int
    max_size: int
    instances: tuple[str, ...]  # members not on their way out
    image: str | None  # the image the group's launch template boots new instances from, now
    instance_type: str | None = None  # the instance type its launch template asks for (None: not said there)
    launch: LaunchSpec | None = None  # what else a node it adds now gets: its launch template version (None: unknown)

    @property
    def room(self) -> int:
        """How many instances the group may still add above its desired capacity."""
        return max(self.max_size - self.desired, 0)


@dataclass(frozen=True)
class Member:
    """An instance of a group, with when it was launched (what a node-startup timeout counts from)."""

    instance_id: str
    lifecycle: str
    launched: float  # epoch seconds
    zone: str | None = None


# On an image build's builder instance (``ami build``): it booted the parent image to bake a child from it, so it ran
# no workload and is no node the image reached.
BUILDER_TAG = "platformctl:builder"


@dataclass(frozen=True)
class Booted:
    """The instances, in any state (terminated ones too), that booted some images: per image, their ids; and how many
    were image builders (``BUILDER_TAG``), which are left out of ``by_image``."""

    by_image: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    builders: int = 0

    @property
    def instances(self) -> list[str]:
        return sorted({i for ids in self.by_image.values() for i in ids})


class LabelledOtherwise(PlatformError):
    """A group whose launch template boots ``image`` while its user data labels the nodes ``labelled``: a version made by
    hand (a new ``ImageId``, the old user data). Its nodes would register as the other image."""

    def __init__(self, message: str, *, image: str, labelled: str, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.image = image
        self.labelled = labelled


class NodeGroupError(Exception):
    """A node-group call refused: no such group or instance, a capacity outside the group's bounds, throttling.
    Both implementations raise it, with AWS's error code (``code``) and a message that says what was refused."""

    TRANSIENT = frozenset({"Throttling", "ThrottlingException", "RequestLimitExceeded", "ServiceUnavailable",
                           "InternalFailure", "RequestTimeout", "ScalingActivityInProgress", "ResourceContention",
                           "Unreachable",
                           # EKS: another update of the node group in progress; its service failing for a moment
                           "ResourceInUseException", "ServerException", "ServiceUnavailableException"})

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code

    @property
    def transient(self) -> bool:
        """Whether it may pass by itself (asked again later, the same call may succeed)."""
        return self.code in self.TRANSIENT


@runtime_checkable
class NodeGroups(Protocol):
    """Whatever owns a region's node instances, in the verbs a rotation and a remediation use: how much capacity a
    group has and what it boots (``describe``), add capacity (``add_capacity``), retire one node's instance
    (``retire``), and where instances come from (``instances``, ``members``, ``booted``, ``failed_launches``). An
    Auto Scaling group (``AutoScalingNodeGroups``), an EKS managed node group (``ManagedNodeGroups``) and the
    simulator's pools stand behind it; a group's name is whatever its owner calls it (opaque above the seam)."""

    def instances(self, instance_ids: Sequence[str]) -> dict[str, InstanceState]:
        """The group and lifecycle of each instance that belongs to a group; others are left out."""
        ...

    def describe(self, group: str) -> GroupState:
        """The group's capacity (desired, bounds, the members not on their way out) and the image, and instance type,
        a node it adds now boots."""
        ...

    def add_capacity(self, group: str, to: int) -> None:
        """Raise the group's capacity to ``to`` nodes, which boot what ``describe(group).image`` says. A count, not an
        increment: an intent journalled and asked again after a crash asks for the same. Refused (``NodeGroupError``)
        above the group's maximum, with nothing changed."""
        ...

    def cluster_groups(self, cluster: str) -> list[str]:
        """The groups whose instances join ``cluster``, sorted."""
        ...

    def members(self, group: str) -> list[Member]:
        """The group's instances not on their way out, with their launch times."""
        ...

    def retire(self, instance_id: str, replace: bool) -> None:
        """End one instance of a group. ``replace``: the group boots another in its place (its capacity stays); else
        its capacity goes down by one with it (after ``add_capacity`` stood a new node in for it)."""
        ...

    def booted(self, images: Sequence[str]) -> Booted:
        """Every instance of this region that booted one of ``images``, whichever group launched it and in any state:
        how far an image reached (the release pipeline's measure of a bad image)."""
        ...

    def failed_launches(self, group: str, since: float) -> list[str]:
        """Why the group's launches since ``since`` (epoch seconds) failed, newest first (Auto Scaling's failed scaling
        activities: an image that does not exist, no capacity, a launch template it cannot use), up to its newest
        successful launch: empty when none failed, or when it launched an instance after they did."""
        ...

    def launched_with(self, instance_ids: Sequence[str]) -> dict[str, LaunchSpec]:
        """Each instance's launch template version, as EC2 tagged the instance when it launched it
        (``aws:ec2launchtemplate:id`` and ``:version``), and that version's settings; an instance launched otherwise
        (no template, or one this account cannot read) is left out."""
        ...


__all__ = ["BUILDER_TAG", "Booted", "GroupState", "InstanceState", "LabelledOtherwise", "LaunchSpec", "Member", "NodeGroupError",
           "NodeGroups"]
