"""Node groups as the simulator's own pools: the second implementation of the seam, for pure simulations.

A pool of a ``SimulatedCluster`` behaves like an auto scaling group (it keeps ``desired`` nodes,
launches replacements from its current image, boots them for its boot time), so the executor
rotates a 3,000-node simulated cluster through it exactly as it rotates a local region's groups
through boto3, without moto in the way. An instance id is the one in the node's ``providerID``.
"""

from __future__ import annotations

from collections.abc import Sequence

from platformctl.cluster.simulator import SimulatedCluster
from platformctl.nodegroups import GroupState, InstanceState, Member


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

    def describe(self, group: str) -> GroupState:
        spec = self.sim.pool(group)
        members = tuple(n.instance_id or n.name for n in self.sim.pool_nodes(group))
        ceiling = spec.max_size if spec.max_size is not None else 1_000_000
        return GroupState(group, spec.desired, 0, ceiling, members, spec.image, spec.instance_type)

    def set_desired(self, group: str, desired: int) -> None:
        self.sim.scale_pool(group, desired)

    def terminate(self, instance_id: str, decrement: bool) -> None:
        node = self.sim.node_of_instance(instance_id)
        if node is None:
            raise KeyError(f"no instance {instance_id} in any pool")
        self.sim.terminate_instance(node, decrement_desired=decrement)

    def cluster_groups(self, cluster: str) -> list[str]:
        return sorted(self.sim.pool_names())

    def members(self, group: str) -> list[Member]:
        return [Member(n.instance_id or n.name, "InService", n.created, n.zone) for n in self.sim.pool_nodes(group)]
