"""Node pools of a pure simulation, kept at their desired size like auto scaling groups (the local region backs
pools with moto's auto scaling groups instead), and the node the kubelet registers for an instance of one."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from platformctl.emulator.simulation.nodes import NodeRoom
from platformctl.emulator.simulation.world import World
from platformctl.kernel.cluster.model import (
    LABEL_HOSTNAME,
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    Node,
    Resources,
    Taint,
)
from platformctl.kernel.errors import NotFoundError, PlatformError
from platformctl.kernel.instance_types import INSTANCE_TYPES
from platformctl.kernel.nodeadm import registration_labels


@dataclass
class NodePoolSpec:
    """A node pool of a pure simulation, kept at ``desired`` nodes like an auto scaling group."""

    name: str
    zone: str
    instance_type: str
    image: str
    desired: int
    boot_seconds: float = 180.0
    node_type: str = "general"
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    region: str = "us-east-1"
    max_size: int | None = None  # None: no ceiling


def kubelet_labels(name: str, zone: str, region: str, instance_type: str) -> dict[str, str]:
    """The labels the kubelet (with the AWS cloud provider) sets on the node it registers, whatever its user data."""
    arch = "arm64" if re.match(r"^[a-z]+\d+g", instance_type) else "amd64"  # Graviton: m7g, c6gn, r7gd
    return {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux", LABEL_HOSTNAME: name,
            LABEL_INSTANCE_TYPE: instance_type, LABEL_ZONE: zone, "topology.kubernetes.io/region": region}


def build_node(
    *,
    name: str,
    zone: str,
    region: str,
    instance_type: str,
    instance_id: str,
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Taint] = (),
    created: float = 0.0,
    ready: bool = True,
    kubelet_version: str = "",
    pool: str | None = None,
    image: str = "",
    node_type: str = "general",
    cluster: str = "",
) -> Node:
    """A node as the kubelet registers an instance: its own well-known labels, ``spec.providerID``, and the labels
    its user data asks for (``labels``; given ``pool``, what the Pulumi program's user data asks for a node of that
    pool, ``registration_labels``, with ``labels`` as the pool's own). Nothing else: EKS adds its nodegroup labels
    to managed node groups only."""
    itype = INSTANCE_TYPES.get(instance_type)
    if itype is None:
        raise PlatformError(f"unknown instance type {instance_type!r}", field="instanceType")
    asked = dict(labels or {}) if pool is None else registration_labels(cluster, pool, node_type, image, labels)
    return Node(
        name=name,
        uid=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{instance_id}/{name}")),
        labels={**kubelet_labels(name, zone, region, instance_type), **asked},
        provider_id=f"aws:///{zone}/{instance_id}",
        allocatable=Resources(itype.allocatable_cpu_millis, itype.allocatable_memory_bytes, itype.gpus),
        max_pods=itype.max_pods,
        ready=ready,
        taints=tuple(taints),
        created=created,
        kubelet_version=kubelet_version,
    )


class PoolRoom:
    def __init__(self, world: World, nodes: NodeRoom, cluster: str = "") -> None:
        self.w = world
        self.cluster = cluster
        self.nodes = nodes
        self.pools: dict[str, NodePoolSpec] = {}
        self._launched = 0

    def add_pool(self, spec: NodePoolSpec, ready: bool = True) -> list[str]:
        if spec.name in self.pools:
            raise PlatformError(f"node pool {spec.name} already exists", field="nodePools")
        self.pools[spec.name] = spec
        return [self._launch(spec, boot=not ready).name for _ in range(spec.desired)]

    def pool(self, name: str) -> NodePoolSpec:
        try:
            return self.pools[name]
        except KeyError:
            raise NotFoundError(f"no node pool {name!r}", field="pool") from None

    def pool_names(self) -> list[str]:
        return list(self.pools)

    def set_pool_image(self, name: str, image: str) -> None:
        self.pool(name).image = image

    def scale_pool(self, name: str, desired: int) -> None:
        spec = self.pool(name)
        spec.desired = desired
        nodes = sorted(self.nodes.pool_nodes(name), key=lambda n: (n.image == spec.image, n.created))
        for node in nodes[: max(len(nodes) - desired, 0)]:
            self.delete_node(node.name)
        self._replenish(name)

    def terminate_instance(self, node_name: str, decrement_desired: bool = False) -> None:
        state = self.w.node_state(node_name)
        if decrement_desired and state.pool is not None:
            self.pools[state.pool].desired -= 1
        self.delete_node(node_name)

    def delete_node(self, name: str) -> None:
        """The node goes (``NodeRoom.delete_node``); its pool, if it has one, launches a replacement when short."""
        pool = self.nodes.delete_node(name)
        if pool is not None:
            self._replenish(pool)

    def _replenish(self, pool: str) -> None:
        spec = self.pools[pool]
        for _ in range(spec.desired - self.nodes.count(pool)):
            self._launch(spec, boot=True)

    def _launch(self, spec: NodePoolSpec, boot: bool) -> Node:
        self._launched += 1
        n = self._launched
        name = f"ip-10-{(n >> 16) & 255}-{(n >> 8) & 255}-{n & 255}.{spec.region}.compute.internal"
        node = build_node(
            name=name, zone=spec.zone, region=spec.region, instance_type=spec.instance_type, pool=spec.name,
            image=spec.image, instance_id=f"i-{self.w.rng.getrandbits(68):017x}", node_type=spec.node_type,
            labels=spec.labels, taints=spec.taints, created=self.w.now(), cluster=self.cluster,
        )
        return self.nodes.add_node(node, ready_after=spec.boot_seconds if boot else None, pool=spec.name)
