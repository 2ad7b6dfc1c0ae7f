"""Pod templates for simulator tests (the clusters: ``tests/clusters.py``)."""

from __future__ import annotations

from platformctl.kernel.cluster.model import (
    ANNOTATION_RUN_SECONDS,
    ANNOTATION_START_SECONDS,
    Container,
    Pod,
    Resources,
    Toleration,
)

MIB = 1024**2


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
