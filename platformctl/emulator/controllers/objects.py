"""The workload objects as the Deployment and CronJob controllers see them, and the simulator as the objects see it.

``Workload`` is one object as the API stores it (its JSON, and for the kinds whose pods the simulator
runs, the uid of its controller there). ``WorkloadStore`` names what the ``deployment`` and ``cronjob``
controllers call on the store of objects (``platformctl.emulator.workloads.Workloads``);
``WorkloadHost`` names what the store and those controllers call on the simulator
(``platformctl.emulator.simulator.SimulatedCluster``). This module imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.apiobjects import Resource
from platformctl.kernel.cluster.model import Pod


@dataclass
class Workload:
    resource: Resource
    obj: dict[str, Any]
    sim_uid: str | None = None  # the simulator's controller (None for a Deployment or a CronJob)
    jobs: list[str] = field(default_factory=list)  # a CronJob's jobs, oldest first
    timer: Any = None  # a CronJob's next firing, a Deployment's next look
    conditions: dict[str, tuple[bool, str]] = field(default_factory=dict)  # a Deployment's: state and since when

    @property
    def namespace(self) -> str:
        return self.obj["metadata"]["namespace"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def uid(self) -> str:
        return self.obj["metadata"]["uid"]


class WorkloadHost(Protocol):
    """The simulator as its workload objects and their controllers act on it."""

    @property
    def clock(self) -> VirtualClock: ...

    @property
    def resource_version(self) -> int: ...

    @property
    def job_done_hooks(self) -> list[Callable[[str], None]]: ...

    @property
    def workloads_removed(self) -> int: ...

    def now(self) -> float: ...

    def next_resource_version(self) -> int: ...

    def workloads(self) -> list[tuple[str, str, str, str, Pod, int]]: ...

    def create_workload(self, kind: str, template: Pod, replicas: int, *, completions: int | None = None,
                        ttl_seconds: float | None = None, backoff_limit: int = 6,
                        failure_rules: tuple[dict[str, Any], ...] = (), generated_selector: bool = True) -> str: ...

    def scale_workload(self, uid: str, replicas: int) -> None: ...

    def delete_workload(self, uid: str) -> None: ...

    def has_workload(self, uid: str) -> bool: ...

    def workload_status(self, uid: str) -> dict[str, Any]: ...

    def workload_event(self, api_version: str, kind: str, namespace: str, name: str, uid: str, reason: str, message: str,
                       component: str) -> None: ...

    def list_pods(self, namespace: str | None = None, label_selector: str | None = None,
                  node_name: str | None = None) -> list[Pod]: ...


class WorkloadStore(Protocol):
    """The workload objects as the Deployment and CronJob controllers act on them."""

    sim: WorkloadHost
    objects: dict[str, dict[tuple[str, str], Workload]]

    def now(self) -> float: ...

    def create(self, resource: str, namespace: str, obj: dict[str, Any], owner: Workload | None = None) -> Workload: ...

    def delete(self, resource: str, namespace: str, name: str) -> Workload: ...

    def scale(self, resource: str, namespace: str, name: str, replicas: Any) -> Workload: ...

    def event(self, workload: Workload, reason: str, message: str, component: str) -> None: ...

    def owned_by(self, resource: str, owner: Workload) -> list[Workload]: ...

    def job_active(self, namespace: str, name: str) -> bool: ...
