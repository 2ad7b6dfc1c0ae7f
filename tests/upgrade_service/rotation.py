"""A simulated cluster whose pools stand in for auto scaling groups, workloads on it, and a rotation run on it.

The executor runs against ``SimulatedCluster`` through the cluster interface and against its pools
through ``SimulatedNodeGroups`` (the second implementation of the node-group seam), with the real
journal in a SQLite store; what happened is read from the simulator's event log.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from platformctl.emulator import simulator as sim_events
from platformctl.emulator.invariants import deleted_without_eviction, eviction_budget_violations, lost_pods
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.constraints import parse_constraints
from platformctl.kernel.cluster.model import ANNOTATION_START_SECONDS, Container, Pod, PodDisruptionBudget, Resources
from platformctl.kernel.cluster.selectors import IntOrPercent, LabelSelector
from platformctl.kernel.state import StateStore
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import NEW, cluster
from upgrade_service.journal.rotation import RUN_STARTED, RunState, apply, stream_of
from upgrade_service.planning.policy import parse_policy
from upgrade_service.running.execute import Executor
from upgrade_service.running.run_types import Options, Outcome, Target

MIB = 1024**2


def service(sim: SimulatedCluster, name: str, replicas: int, *, ns: str = "app", min_available: int | None = None,
            start: float = 10, grace: int = 30, cpu: int = 500, annotations: dict[str, str] | None = None,
            node_selector: dict[str, str] | None = None, kind: str = "ReplicaSet", tolerations: tuple[Any, ...] = (),
            spec: dict[str, Any] | None = None) -> None:
    """A workload of ``replicas`` pods labelled ``app: name``; ``spec`` adds pod spec fields as the API writes them
    (``affinity``, ``topologySpreadConstraints``)."""
    requests = Resources(cpu, 256 * MIB)
    inter = parse_constraints(spec or {}, "spec", None)
    template = Pod(ns, name, "", labels={"app": name}, annotations={ANNOTATION_START_SECONDS: str(start), **(annotations or {})},
                   containers=(Container("main", "img", requests),), requests=requests, grace_seconds=grace,
                   node_selector=node_selector or {}, tolerations=tolerations, inter=inter)
    sim.create_workload(kind, template, replicas)
    if min_available is not None:
        selector = LabelSelector.parse({"matchLabels": {"app": name}}, "selector", None)
        sim.create_pdb(PodDisruptionBudget(ns, name, f"pdb-{name}", selector, min_available=IntOrPercent(min_available)))


def new_image(sim: SimulatedCluster, image: str = NEW) -> None:
    """What `stage deploy` does to a group: new instances boot ``image`` from now on."""
    for pool in sim.pool_names():
        sim.set_pool_image(pool, image)


def serving(nodes: int = 4, replicas: int | None = None, min_available: int | None = None, **pool: Any) -> SimulatedCluster:
    """A pool of ``nodes`` nodes serving one budgeted service (one pod a node by default, one disruption at a
    time), settled, and its group already launching the new image: a cluster ready to be rotated."""
    sim = cluster({"general": nodes}, **pool)
    replicas = nodes if replicas is None else replicas
    service(sim, "web", replicas, min_available=replicas - 1 if min_available is None else min_available)
    sim.run_until_settled()
    new_image(sim)
    return sim


def executor(sim: SimulatedCluster, tmp_path: Path, policy: dict[str, Any] | None = None, **options: Any) -> Executor:
    store = SQLiteStore(tmp_path / "state.db")
    return Executor(Target("test", sim, SimulatedNodeGroups(sim)), parse_policy(policy or {}, "policy.yaml"), store,
                    Options(**options))


def rotate(sim: SimulatedCluster, tmp_path: Path, policy: dict[str, Any] | None = None, **options: Any) -> Outcome:
    return executor(sim, tmp_path, policy, **options).run()


def harm(sim: SimulatedCluster) -> dict[str, Any]:
    """What the event log says was done to applications: evictions that broke a budget, pods lost with
    their node, and pods deleted without the eviction API."""
    return {"violations": eviction_budget_violations(sim.events), "lost": lost_pods(sim.events),
            "deleted": deleted_without_eviction(sim.events)}


def events(sim: SimulatedCluster) -> Counter[str]:
    return Counter(e.kind for e in sim.events)


NO_HARM = {"violations": [], "lost": [], "deleted": []}


def longest_pending(sim: SimulatedCluster, since: float) -> tuple[float, str]:
    """The longest any pod created at or after ``since`` waited for a node (created to scheduled; still
    waiting counts until now), with its name: what an application sees as a replica not running."""
    created: dict[str, tuple[float, str]] = {}
    worst = (0.0, "")
    for e in sim.events:
        if e.kind == sim_events.POD_CREATED and e.time >= since:
            created[e.detail[0]] = (e.time, e.name)
        elif e.kind == sim_events.POD_SCHEDULED and e.detail[0] in created:
            at, name = created.pop(e.detail[0])
            worst = max(worst, (e.time - at, name))
    for uid, (at, name) in created.items():
        pod = next((p for p in sim.list_pods() if p.uid == uid), None)
        if pod is not None and pod.node_name is None and not pod.terminating:
            worst = max(worst, (sim.now() - at, name))
    return worst


def overlapping_waves(store: StateStore, cluster: str) -> int:
    """Waves of the cluster's runs that started while an earlier wave of the same run was still open (its
    replacements, pods or settle time still to come), as its journal tells it: every run of the stream counted, since a
    run killed and resumed is one run, and a later run that found nothing left to do has no waves of its own."""
    state = RunState(cluster)
    total = 0
    for record in store.read(stream_of(cluster)):
        if record.data.get("kind") == RUN_STARTED:
            total += _overlapping(state)
        apply(state, record)
    return total + _overlapping(state)


def _overlapping(state: RunState) -> int:
    finished = {n: w.finished.at for n, w in state.waves.items() if w.finished is not None}
    return sum(1 for n, w in state.waves.items()
               if any(finished.get(m, float("inf")) > w.started.at for m in range(1, n)))
