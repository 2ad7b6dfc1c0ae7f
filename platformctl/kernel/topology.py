"""The stage and region model: which clusters a stage has, where they live, and their node pools.

It is read from the stage's Pulumi stack config file, ``infra/Pulumi.<stage>.yaml``, under the
structured key ``platformctl:topology`` (the region comes from Pulumi's own ``aws:region``), so the
Pulumi program and every other part of the toolkit read one source. Field-level checks are
pydantic's; the checks that span fields (zones of the region, unique names, pool sizes) follow, and
every failure is a ``PlatformError`` naming the file and the key path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from platformctl.kernel.errors import NotFoundError, PlatformError
from platformctl.kernel.instance_types import INSTANCE_TYPES
from platformctl.kernel.yamlfile import read_yaml, validation_error

STAGES = ("dev", "staging", "prod-canary", "prod")
TOPOLOGY_KEY = "platformctl:topology"
REGION_KEY = "aws:region"

NodeType = Literal["system", "general", "ml", "custom"]
ImageFamily = Literal["general", "ml", "custom"]
Name = Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]


class _Value(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class Taint(_Value):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class NodePool(_Value):
    name: Name
    node_type: NodeType
    image_family: ImageFamily
    instance_types: Annotated[tuple[str, ...], Field(min_length=1)]
    min_size: Annotated[int, Field(ge=0)]
    desired_size: Annotated[int, Field(ge=0)]
    max_size: Annotated[int, Field(ge=1)]
    boot_seconds: Annotated[int, Field(gt=0)] = 180
    labels: dict[str, str] = Field(default_factory=dict)
    taints: tuple[Taint, ...] = ()

    @property
    def instance_type(self) -> str:
        """The instance type new nodes of this pool get (the first listed)."""
        return self.instance_types[0]


class HostCluster(_Value):
    name: Name
    zones: Annotated[tuple[str, ...], Field(min_length=3)]
    node_pools: Annotated[tuple[NodePool, ...], Field(min_length=1)]


class MemberCluster(_Value):
    name: Name
    zone: str
    node_pools: Annotated[tuple[NodePool, ...], Field(min_length=1)]

    @property
    def zones(self) -> tuple[str, ...]:
        return (self.zone,)


class Topology(_Value):
    zones: Annotated[tuple[str, ...], Field(min_length=3)]
    vpc_cidr: str = "10.0.0.0/16"
    images: dict[ImageFamily, str] = Field(default_factory=dict)
    host_cluster: HostCluster
    member_clusters: tuple[MemberCluster, ...] = ()


Cluster = HostCluster | MemberCluster


class Stage(BaseModel):
    """One release stage: its region, host cluster and member clusters, as its stack file says."""

    model_config = ConfigDict(frozen=True)

    name: str
    region: str
    topology: Topology
    source: str

    @property
    def host_cluster(self) -> HostCluster:
        return self.topology.host_cluster

    @property
    def member_clusters(self) -> tuple[MemberCluster, ...]:
        return self.topology.member_clusters

    @property
    def zones(self) -> tuple[str, ...]:
        return self.topology.zones

    def clusters(self) -> Iterator[Cluster]:
        yield self.topology.host_cluster
        yield from self.topology.member_clusters

    def cluster(self, name: str) -> Cluster:
        for cluster in self.clusters():
            if cluster.name == name:
                return cluster
        known = ", ".join(c.name for c in self.clusters())
        raise NotFoundError(
            f"no cluster {name!r} in stage {self.name} (clusters: {known})", file=self.source
        )

    def image_for(self, pool: NodePool) -> str | None:
        return self.topology.images.get(pool.image_family)


def stage_file(stage: str, infra_dir: Path) -> Path:
    return infra_dir / f"Pulumi.{stage}.yaml"


def default_infra_dir() -> Path:
    """``infra/`` of the checkout the current directory is in (see ``platformctl.kernel.checkout``)."""
    from platformctl.kernel.checkout import find

    return find("infra", "Pulumi.yaml", "--infra-dir")


def load_stage(stage: str, infra_dir: Path | None = None) -> Stage:
    if stage not in STAGES:
        raise PlatformError(f"unknown stage {stage!r} (stages: {', '.join(STAGES)})", field="stage")
    path = stage_file(stage, infra_dir or default_infra_dir())
    return parse_stage_file(path, stage)


def stage_table(stage: str, infra_dir: Path | None) -> str:
    """The stage's state table as its Pulumi program names it (``platformctl:rotation.stateTable``)."""
    return table_of(read_stack_config(stage_file(stage, infra_dir or default_infra_dir())), stage)


def table_of(config: Mapping[str, Any], stage: str) -> str:
    """The state table a stack's ``config:`` names (``platformctl:rotation.stateTable``), else the program's default."""
    rotation = config.get("platformctl:rotation")
    table = rotation.get("stateTable") if isinstance(rotation, dict) else None
    return str(table) if table else f"platformctl-state-{stage}"


def read_stack_config(path: Path) -> dict[str, Any]:
    """The ``config:`` mapping of a stack file, every key as the file spells it."""
    document = read_yaml(path, "stack config file")
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict):
        raise PlatformError("missing mapping", file=str(path), field="config")
    return config


def parse_stage_file(path: Path, stage: str) -> Stage:
    return parse_stage_config(read_stack_config(path), stage, str(path))


def parse_stage_config(config: Mapping[str, Any], stage: str, source: str) -> Stage:
    """The stage a stack's config describes: ``config`` is the stack file's ``config:`` mapping, or
    what the Pulumi program reads through ``pulumi.Config`` (the same keys, the same checks)."""
    region = config.get(REGION_KEY)
    if not isinstance(region, str) or not region:
        raise PlatformError("missing region", file=source, field=f"config.{REGION_KEY}")
    raw = config.get(TOPOLOGY_KEY)
    if raw is None:
        raise PlatformError("missing topology", file=source, field=f"config.{TOPOLOGY_KEY}")
    try:
        topology = Topology.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc, source, ("config", TOPOLOGY_KEY), model=Topology) from None
    _check_topology(topology, region, source)
    return Stage(name=stage, region=region, topology=topology, source=source)


def _check_topology(topology: Topology, region: str, source: str) -> None:
    base = f"config.{TOPOLOGY_KEY}"

    def fail(field: str, message: str) -> None:
        raise PlatformError(message, file=source, field=f"{base}.{field}")

    zones = topology.zones
    for i, zone in enumerate(zones):
        if not (zone.startswith(region) and len(zone) > len(region)):
            fail(f"zones[{i}]", f"{zone!r} is not an availability zone of region {region}")
    if len(set(zones)) != len(zones):
        fail("zones", "zones are listed more than once")
    known = ", ".join(zones)
    for i, zone in enumerate(topology.host_cluster.zones):
        if zone not in zones:
            fail(f"hostCluster.zones[{i}]", f"{zone!r} is not one of the region's zones ({known})")
    if len(set(topology.host_cluster.zones)) < 3:
        fail("hostCluster.zones", "the host cluster must span at least 3 distinct zones")
    for i, member in enumerate(topology.member_clusters):
        if member.zone not in zones:
            fail(
                f"memberClusters[{i}].zone",
                f"{member.zone!r} is not one of the region's zones ({known})",
            )

    seen: dict[str, str] = {}
    clusters: list[tuple[str, Cluster]] = [("hostCluster", topology.host_cluster)]
    clusters += [(f"memberClusters[{i}]", m) for i, m in enumerate(topology.member_clusters)]
    for where, cluster in clusters:
        if cluster.name in seen:
            fail(f"{where}.name", f"cluster name {cluster.name!r} is already used by {seen[cluster.name]}")
        seen[cluster.name] = where
        pool_names: set[str] = set()
        for j, pool in enumerate(cluster.node_pools):
            at = f"{where}.nodePools[{j}]"
            if pool.name in pool_names:
                fail(f"{at}.name", f"node pool name {pool.name!r} is used twice in {cluster.name}")
            pool_names.add(pool.name)
            if pool.min_size > pool.max_size:
                fail(f"{at}.minSize", f"minSize {pool.min_size} is greater than maxSize {pool.max_size}")
            if not pool.min_size <= pool.desired_size <= pool.max_size:
                fail(
                    f"{at}.desiredSize",
                    f"sizes must satisfy minSize <= desiredSize <= maxSize "
                    f"(got {pool.min_size} <= {pool.desired_size} <= {pool.max_size})",
                )
            for k, itype in enumerate(pool.instance_types):
                if itype not in INSTANCE_TYPES:
                    fail(f"{at}.instanceTypes[{k}]", f"unknown instance type {itype!r}")
            if pool.node_type == "ml" and not INSTANCE_TYPES[pool.instance_type].gpus:
                fail(f"{at}.instanceTypes[0]", f"an ml pool needs a GPU instance type, not {pool.instance_type!r}")
