"""Small builders for simulator tests: a pool of nodes and pod templates."""

from __future__ import annotations

from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.model import (
    ANNOTATION_RUN_SECONDS,
    ANNOTATION_START_SECONDS,
    Container,
    Pod,
    Resources,
    Taint,
    Toleration,
)

MIB = 1024**2


def cluster(nodes: int = 3, instance_type: str = "m6i.xlarge", pool: str = "general", node_type: str = "general",
            taints: tuple[Taint, ...] = (), boot: float = 120.0, clock: VirtualClock | None = None) -> SimulatedCluster:
    sim = SimulatedCluster("test", clock=clock)
    sim.add_pool(NodePoolSpec(pool, "us-east-1a", instance_type, "ami-0old", nodes, boot, node_type, {}, taints))
    return sim


def template(namespace: str = "app", name: str = "web", cpu: int = 100, mem: int = 128 * MIB, labels: dict[str, str] | None = None,
             start: float = 10, run: float | None = None, grace: int = 30, node_selector: dict[str, str] | None = None,
             tolerations: tuple[Toleration, ...] = (), priority: int = 0, gpus: int = 0) -> Pod:
    notes = {ANNOTATION_START_SECONDS: str(start)}
    if run is not None:
        notes[ANNOTATION_RUN_SECONDS] = str(run)
    requests = Resources(cpu, mem, gpus)
    return Pod(namespace, name, "", labels=labels or {"app": name}, annotations=notes,
               containers=(Container("main", "img", requests),), requests=requests, grace_seconds=grace,
               node_selector=node_selector or {}, tolerations=tolerations, priority=priority)
