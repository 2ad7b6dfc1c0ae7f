"""The node-group seam, chosen in one place: ``node_groups(region, …)`` is how the application layer gets whatever owns
a region's instances (``platformctl.kernel.nodegroups.NodeGroups``). Every pool the Pulumi program builds is a
self-managed EC2 Auto Scaling group (``infra/components/node_pool.py``), so a region's answer is
``AutoScalingNodeGroups`` unless asked for another ``kind``: ``eks-managed`` is ``ManagedNodeGroups``, EKS managed node
groups. The simulator's pools (``platformctl.emulator.nodegroups.SimulatedNodeGroups``) are handed to the rotation
engine directly by the in-process benchmarks and tests. A backend is one class that speaks the Protocol and one entry
in ``BACKENDS``; nothing above this changes."""

from __future__ import annotations

from typing import Literal

from platformctl.kernel.clock import Clock
from platformctl.kernel.environment import AwsTarget
from platformctl.kernel.nodegroups import NodeGroups

Kind = Literal["auto-scaling", "eks-managed"]


def _backend(kind: Kind) -> type:
    from platformctl.kernel.nodegroups.aws import AutoScalingNodeGroups
    from platformctl.kernel.nodegroups.eks import ManagedNodeGroups

    backends: dict[str, type] = {"auto-scaling": AutoScalingNodeGroups, "eks-managed": ManagedNodeGroups}
    return backends[kind]


def node_groups(region: str | None, *, clock: Clock | None = None, quick: bool = False, target: AwsTarget | None = None,
                probe: bool = False, kind: Kind = "auto-scaling") -> NodeGroups:
    """The node groups of ``region`` in ``target``'s AWS (default: the command's environment's). ``clock``: the one its
    waits and retries run on (a rotation's); ``quick``: one attempt on short timeouts, for a report that must not hang
    on an AWS it cannot reach; ``probe``: one cheap call first, so that an AWS that cannot be reached or refuses is a
    one-line error (exit 2) before anything changes; ``kind``: which owner the groups are."""
    groups = _backend(kind)(region, quick=quick, clock=clock, target=target)
    if probe:
        groups.probe()
    return groups  # type: ignore[no-any-return]
