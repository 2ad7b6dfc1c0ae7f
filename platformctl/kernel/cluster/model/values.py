"""Well-known labels and annotations, times and quantities as the API spells them, and a container's resources."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from platformctl.kernel.errors import PlatformError

# Well-known labels. EKS sets both of its own on *managed* node groups only; a self-managed group's nodes carry
# only what the kubelet sets and what its launch template's user data asks for (``--node-labels``), which is where
# the Pulumi program writes the pool (``eks.amazonaws.com/nodegroup``) and the image (``platformctl.io/image``).
LABEL_NODEGROUP = "eks.amazonaws.com/nodegroup"
LABEL_NODEGROUP_IMAGE = "eks.amazonaws.com/nodegroup-image"
LABEL_IMAGE = "platformctl.io/image"
# Where a node's image is read, first found wins: the program's own label, then a managed node group's.
IMAGE_LABELS: tuple[str, ...] = (LABEL_IMAGE, LABEL_NODEGROUP_IMAGE)
LABEL_ZONE = "topology.kubernetes.io/zone"
LABEL_INSTANCE_TYPE = "node.kubernetes.io/instance-type"
LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_NODE_TYPE = "platformctl.io/node-type"
ANNOTATION_MIRROR = "kubernetes.io/config.mirror"
RESOURCE_GPU = "nvidia.com/gpu"

# How a simulated pod behaves; kept in annotations so they survive a snapshot round trip.
ANNOTATION_START_SECONDS = "sim.platformctl.io/start-seconds"
ANNOTATION_RUN_SECONDS = "sim.platformctl.io/run-seconds"
# A Job pod's exit code once it has run (non-zero: it fails; the real control plane's kwok reads the same annotation).
ANNOTATION_EXIT_CODE = "sim.platformctl.io/exit-code"

# How an application asks to be rotated (read by the rotation planner, set by applications).
ANNOTATION_ROTATION = "platformctl.io/rotation"
ANNOTATION_SETTLE = "platformctl.io/settle-seconds"
ANNOTATION_MAX_WAIT = "platformctl.io/max-wait-seconds"

EMPTY: Mapping[str, str] = MappingProxyType({})


def image_label_of(labels: Mapping[str, str], keys: tuple[str, ...] = IMAGE_LABELS) -> str | None:
    """Which of ``keys`` names this node's image (the first it carries), or None."""
    return next((k for k in keys if k in labels), None)


def image_of(labels: Mapping[str, str], keys: tuple[str, ...] = IMAGE_LABELS) -> str | None:
    """The image a node booted, from the first of ``keys`` it carries."""
    key = image_label_of(labels, keys)
    return labels[key] if key is not None else None


def format_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(raw: Any, where: str, file: str | None) -> float:
    if not isinstance(raw, str):
        raise PlatformError("must be an RFC 3339 timestamp", file=file, field=where)
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise PlatformError(f"{raw!r} is not an RFC 3339 timestamp", file=file, field=where) from None


@lru_cache(maxsize=4096)
def _quantity(raw: str) -> Decimal | None:
    from kubernetes.utils.quantity import parse_quantity

    try:
        return parse_quantity(raw)
    except ValueError:
        return None


def parse_quantity(raw: Any, where: str, file: str | None) -> Decimal:
    q = _quantity(str(raw)) if isinstance(raw, (str, int, float)) and not isinstance(raw, bool) else None
    if q is None:
        raise PlatformError(f"{raw!r} is not a Kubernetes quantity", file=file, field=where)
    return q


def format_cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_memory(n: int) -> str:
    for suffix, size in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


@dataclass(frozen=True, slots=True)
class Resources:
    cpu_millis: int = 0
    memory_bytes: int = 0
    gpus: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu_millis + other.cpu_millis,
            self.memory_bytes + other.memory_bytes,
            self.gpus + other.gpus,
        )

    def to_kube(self) -> dict[str, str]:
        out = {"cpu": format_cpu(self.cpu_millis), "memory": format_memory(self.memory_bytes)}
        if self.gpus:
            out[RESOURCE_GPU] = str(self.gpus)
        return out


def _resources(raw: Any, where: str, file: str | None) -> Resources:
    if raw is None:
        return Resources()
    if not isinstance(raw, dict):
        raise PlatformError("must be an object", file=file, field=where)
    cpu = raw.get("cpu")
    mem = raw.get("memory")
    gpu = raw.get(RESOURCE_GPU)
    return Resources(
        math.ceil(parse_quantity(cpu, f"{where}.cpu", file) * 1000) if cpu is not None else 0,
        int(parse_quantity(mem, f"{where}.memory", file)) if mem is not None else 0,
        int(parse_quantity(gpu, f"{where}.{RESOURCE_GPU}", file)) if gpu is not None else 0,
    )


def _requests(resources: Any, where: str, file: str | None) -> Resources:
    """A container's requests; as the API defaults them, a limit stands in for a missing request."""
    if resources is None:
        return Resources()
    if not isinstance(resources, dict):
        raise PlatformError("must be an object", file=file, field=where)
    requests = _resources(resources.get("requests"), f"{where}.requests", file)
    limits = _resources(resources.get("limits"), f"{where}.limits", file)
    return Resources(
        requests.cpu_millis or limits.cpu_millis,
        requests.memory_bytes or limits.memory_bytes,
        requests.gpus or limits.gpus,
    )

