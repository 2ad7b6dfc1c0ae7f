"""Node groups as the simulator's own pools: the second implementation of the seam, for pure simulations.

A pool of a ``SimulatedCluster`` behaves like an auto scaling group (it keeps ``desired`` nodes,
launches replacements from its current image, boots them for its boot time), so the executor
rotates a 3,000-node simulated cluster through it exactly as it rotates a local region's groups
through boto3, without moto in the way. An instance id is the one in the node's ``providerID``.
"""

from __future__ import annotations

from collections.abc import Sequence

from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from platformctl.kernel.errors import NotFoundError
from platformctl.kernel.nodegroups import Booted, GroupState, InstanceState, LaunchSpec, Member, NodeGroupError


class SimulatedNodeGroups:
    def __init__(self, sim: SimulatedCluster) -> None:
        self.sim = sim

    def instances(self, instance_ids: Sequence[str]) -> dict[str, InstanceState]:
        out = {}
        for instance_id in instance_ids:
            node = self.sim.node_of_instance(instance_id)
            pool = self.sim.pool_of(node) if node else None
            if pool is not None:
                out[instance_id] = InstanceState(instance_id, pool, "InService")
        return out

    def _pool(self, group: str) -> NodePoolSpec:
        try:
            return self.sim.pool(group)
        except NotFoundError:  # as Auto Scaling answers a name it does not know
            raise NodeGroupError(f"no auto scaling group {group!r}", "ValidationError") from None

    def describe(self, group: str) -> GroupState:
        spec = self._pool(group)
        members = tuple(n.instance_id or n.name for n in self.sim.pool_nodes(group))
        ceiling = spec.max_size if spec.max_size is not None else 1_000_000
        return GroupState(group, spec.desired, 0, ceiling, members, spec.image, spec.instance_type)

    def add_capacity(self, group: str, to: int) -> None:
        spec = self._pool(group)
        if spec.max_size is not None and to > spec.max_size:  # Auto Scaling's own words
            raise NodeGroupError(f"SetDesiredCapacity: ValidationError: New SetDesiredCapacity value {to} is above "
                                 f"max value {spec.max_size} for the AutoScalingGroup.", "ValidationError")
        if to < 0:
            raise NodeGroupError(f"SetDesiredCapacity: ValidationError: New SetDesiredCapacity value {to} is below "
                                 "min value 0 for the AutoScalingGroup.", "ValidationError")
        self.sim.scale_pool(group, to)

    def retire(self, instance_id: str, replace: bool) -> None:
        node = self.sim.node_of_instance(instance_id)
        if node is None:
            raise NodeGroupError(f"TerminateInstanceInAutoScalingGroup: ValidationError: Instance Id not found - No managed "
                                 f"instance found for instance ID: {instance_id}", "ValidationError")
        self.sim.terminate_instance(node, decrement_desired=not replace)

    def cluster_groups(self, cluster: str) -> list[str]:
        return sorted(self.sim.pool_names())

    def members(self, group: str) -> list[Member]:
        self._pool(group)
        return [Member(n.instance_id or n.name, "InService", n.created, n.zone) for n in self.sim.pool_nodes(group)]

    def failed_launches(self, group: str, since: float) -> list[str]:
        """None: a pure simulation's pool launches whatever image it is given (the local region's Auto Scaling, behind
        ``AutoScalingNodeGroups``, refuses an image EC2 does not hold)."""
        self._pool(group)
        return []

    def launched_with(self, instance_ids: Sequence[str]) -> dict[str, LaunchSpec]:
        """None: a pure simulation's pool has an image and no launch template (the local region's groups, behind
        ``AutoScalingNodeGroups``, have EC2's)."""
        return {}

    def booted(self, images: Sequence[str]) -> Booted:
        """The simulator's nodes on those images. A pure simulation forgets a node once its instance is gone, so this
        is what runs them now, not everything that ever did (no builders: nothing builds images here)."""
        wanted = set(images)
        found: dict[str, set[str]] = {}
        for node in self.sim.list_nodes():
            if node.image in wanted:
                found.setdefault(node.image, set()).add(node.instance_id or node.name)
        return Booted({image: tuple(sorted(v)) for image, v in sorted(found.items())})
