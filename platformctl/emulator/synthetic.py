"""Realistic synthetic workloads for a simulated cluster, at any size.

``populate`` looks at the cluster's nodes and fills them the way a shared platform is filled:
DaemonSets on every node (CNI, log shipper, node exporter), a few system services on ``system``
nodes, team services (ReplicaSets of Deployments) with PodDisruptionBudgets of every shape on
``general`` nodes, key-value StatefulSets that rotate one pod at a time, batch Jobs, memory-heavy
services on ``custom`` nodes and long GPU training Jobs on ``ml`` nodes. Requests are sized so the
cluster sits near ``utilization`` of its CPU, the way clusters are run. Everything is drawn from a
seeded random generator: the same arguments give the same cluster.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field

from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.model import (
    ANNOTATION_ROTATION,
    ANNOTATION_RUN_SECONDS,
    ANNOTATION_SETTLE,
    ANNOTATION_START_SECONDS,
    LABEL_NODE_TYPE,
    RESOURCE_GPU,
    Container,
    Node,
    Pod,
    PodDisruptionBudget,
    Resources,
    Taint,
    Toleration,
)
from platformctl.kernel.cluster.selectors import IntOrPercent, LabelSelector, Requirement

MIB = 1024**2
GIB = 1024**3

# The resource tiers of the platform, as PriorityClasses.
PRIORITY = {"reserved": 1_000_000, "ondemand": 1_000, "preemptible": -100}


@dataclass
class WorkloadSummary:
    workloads: Counter[str] = field(default_factory=Counter)
    pods: Counter[str] = field(default_factory=Counter)
    pdbs: int = 0
    namespaces: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"workloads": dict(self.workloads), "pods": dict(self.pods), "pdbs": self.pdbs, "namespaces": self.namespaces}


def _template(
    namespace: str,
    name: str,
    labels: dict[str, str],
    cpu_millis: int,
    memory: int,
    *,
    gpus: int = 0,
    node_type: str | None = None,
    tolerations: tuple[Toleration, ...] = (),
    tier: str = "ondemand",
    grace: int = 30,
    start_seconds: float = 10.0,
    run_seconds: float | None = None,
    annotations: dict[str, str] | None = None,
    image: str = "registry.example.com/app:1.0",
) -> Pod:
    notes = {ANNOTATION_START_SECONDS: f"{start_seconds:g}", **(annotations or {})}
    if run_seconds is not None:
        notes[ANNOTATION_RUN_SECONDS] = f"{run_seconds:g}"
    requests = Resources(cpu_millis, memory, gpus)
    return Pod(
        namespace=namespace,
        name=name,
        uid="",
        labels=labels,
        annotations=notes,
        containers=(Container("main", image, requests),),
        requests=requests,
        priority=PRIORITY[tier],
        priority_class_name=tier,
        grace_seconds=grace,
        node_selector={LABEL_NODE_TYPE: node_type} if node_type else {},
        tolerations=tolerations,
    )


def _pdb(namespace: str, name: str, selector: LabelSelector, rng: random.Random, replicas: int) -> PodDisruptionBudget:
    shape = rng.random()
    min_available = max_unavailable = None
    if shape < 0.30:
        max_unavailable = IntOrPercent(1)
    elif shape < 0.50:
        min_available = IntOrPercent(max(replicas - 1, 1))
    elif shape < 0.70:
        min_available = IntOrPercent(rng.choice((50, 66, 75, 80)), percent=True)
        if min_available.scaled(replicas, round_up=True) >= replicas:
            # Rounded up, the percentage would leave no room at all; such budgets are made on purpose
            # (``blocking_pdbs``), not by accident.
            min_available, max_unavailable = None, IntOrPercent(1)
    elif shape < 0.90:
        max_unavailable = IntOrPercent(rng.choice((10, 20, 25, 34)), percent=True)
    else:
        max_unavailable = IntOrPercent(rng.choice((2, 3)))
    policy = "AlwaysAllow" if rng.random() < 0.2 else None
    return PodDisruptionBudget(namespace, name, uid=f"pdb-{namespace}-{name}", selector=selector,
                               min_available=min_available, max_unavailable=max_unavailable,
                               unhealthy_pod_eviction_policy=policy)


class _Filler:
    """What ``populate`` creates workloads with, counting them as it goes."""

    def __init__(self, sim: SimulatedCluster, rng: random.Random) -> None:
        self.sim = sim
        self.rng = rng
        self.summary = WorkloadSummary()

    def workload(self, kind: str, template: Pod, replicas: int, **kw: object) -> None:
        self.sim.create_workload(kind, template, replicas, **kw)  # type: ignore[arg-type]  # kw holds the kind's own options
        self.summary.workloads[kind] += 1
        self.summary.pods[kind] += replicas if kind != "DaemonSet" else 0

    def budget(self, pdb: PodDisruptionBudget) -> None:
        self.sim.create_pdb(pdb)
        self.summary.pdbs += 1


def populate(
    sim: SimulatedCluster,
    *,
    pods_per_node: float = 40.0,
    utilization: float = 0.6,
    seed: int = 1,
    team_size: int = 40,
    pdb_every_pods: int = 80,
    blocking_pdbs: int = 0,
) -> WorkloadSummary:
    """Fill ``sim``'s nodes with workloads; returns what was created.

    ``pods_per_node`` is the target density on general-purpose nodes; ``pdb_every_pods`` sets how
    many pods there are per PodDisruptionBudget (80 gives 1,500 budgets on a 120,000-pod cluster).
    ``blocking_pdbs`` adds that many single-replica services whose budget (``minAvailable: 1``)
    never allows a disruption, the misconfiguration that blocks drains in real clusters.
    """
    fill = _Filler(sim, random.Random(seed))
    nodes = sim.list_nodes()
    _daemons_and_system(fill, nodes, sum(n.labels.get(LABEL_NODE_TYPE) == "system" for n in nodes))
    general = [n for n in nodes if n.labels.get(LABEL_NODE_TYPE) == "general"]
    team, avg_cpu, avg_mem = _teams(fill, general, pods_per_node, utilization, team_size, pdb_every_pods)
    for i in range(blocking_pdbs if general else 0):
        ns = f"team-{i % max(team, 1) + 1:03d}"
        name = f"singleton-{i:03d}"
        t = _template(ns, name, {"app": name, "team": ns}, avg_cpu, avg_mem // MIB * MIB, node_type="general")
        fill.workload("ReplicaSet", t, 1)
        fill.budget(PodDisruptionBudget(ns, name, uid=f"pdb-{ns}-{name}", selector=LabelSelector((("app", name),)),
                                        min_available=IntOrPercent(1)))
    custom = [n for n in nodes if n.labels.get(LABEL_NODE_TYPE) == "custom"]
    for i in range(len(custom) * 2):
        name = f"cache-{i:03d}"
        labels = {"app": name, "team": "data"}
        per_node_mem = custom[0].allocatable.memory_bytes
        t = _template("data", name, labels, 500, int(per_node_mem * utilization / 4) // MIB * MIB, node_type="custom", start_seconds=30)
        fill.workload("ReplicaSet", t, 2)
        fill.budget(PodDisruptionBudget("data", name, uid=f"pdb-data-{name}", selector=LabelSelector((("app", name),)),
                                        min_available=IntOrPercent(1)))
    ml = [n for n in nodes if n.labels.get(LABEL_NODE_TYPE) == "ml"]
    _training(fill, ml)
    fill.summary.namespaces = team + 1 + bool(custom) + bool(ml)  # teams, kube-system, data, ml
    return fill.summary


def _daemons_and_system(fill: _Filler, nodes: list[Node], system_nodes: int) -> None:
    """Daemons on every node; the cluster's own services on the system pool."""
    everywhere = (Toleration(operator="Exists"),)
    for name, cpu, mem in (("aws-node", 50, 64 * MIB), ("fluent-bit", 100, 128 * MIB), ("node-exporter", 50, 64 * MIB)):
        labels = {"app.kubernetes.io/name": name}
        fill.workload("DaemonSet", _template("kube-system", name, labels, cpu, mem, tolerations=everywhere, tier="reserved",
                                             start_seconds=5), 0)
        fill.summary.pods["DaemonSet"] += len(nodes)
    if not system_nodes:
        return
    for name, replicas in (("coredns", 2), ("metrics-server", 2), ("kube-state-metrics", 1)):
        labels = {"k8s-app": name}
        t = _template("kube-system", name, labels, 100, 128 * MIB, node_type="system", tier="reserved", start_seconds=5)
        fill.workload("ReplicaSet", t, replicas)
        if replicas > 1:
            fill.budget(PodDisruptionBudget("kube-system", name, uid=f"pdb-kube-system-{name}",
                                            selector=LabelSelector((("k8s-app", name),)), max_unavailable=IntOrPercent(1)))


def _teams(fill: _Filler, general: list[Node], pods_per_node: float, utilization: float, team_size: int,
           pdb_every_pods: int) -> tuple[int, int, int]:
    """Teams' services, stateful stores and batch jobs on the general pool; returns (teams, average cpu, memory)."""
    rng = fill.rng
    target = int(len(general) * pods_per_node)
    if general:
        cpu_total = sum(n.allocatable.cpu_millis for n in general) - len(general) * 200  # daemons
        mem_total = sum(n.allocatable.memory_bytes for n in general) - len(general) * 256 * MIB
        avg_cpu = max(int(cpu_total * utilization / max(target, 1)), 10)
        avg_mem = max(int(mem_total * utilization / max(target, 1)), 16 * MIB)
    else:
        avg_cpu, avg_mem = 250, 512 * MIB
    created = 0
    team = 0
    in_team = team_size
    pods_since_pdb = 0
    while created < target:
        if in_team >= team_size:
            team += 1
            in_team = 0
        in_team += 1
        ns = f"team-{team:03d}"
        roll = rng.random()
        scale = rng.choice((0.5, 0.75, 1.0, 1.0, 1.25, 1.5))
        cpu = max(int(avg_cpu * scale), 10)
        mem = max(int(avg_mem * scale) // MIB * MIB, 16 * MIB)
        if roll < 0.04:
            name = f"kv-{in_team:03d}"
            replicas = rng.choice((3, 3, 5))
            labels = {"app": name, "team": ns, "tier": "storage"}
            notes = {ANNOTATION_ROTATION: "one-at-a-time", ANNOTATION_SETTLE: str(rng.choice((120, 300, 600)))}
            t = _template(ns, name, labels, cpu, mem, node_type="general", grace=60, start_seconds=45, annotations=notes)
            fill.workload("StatefulSet", t, replicas)
            fill.budget(PodDisruptionBudget(ns, name, uid=f"pdb-{ns}-{name}", selector=LabelSelector((("app", name),)),
                                            max_unavailable=IntOrPercent(1)))
            pods_since_pdb = 0
        elif roll < 0.14:
            name = f"batch-{in_team:03d}"
            parallelism = rng.choice((2, 4, 8, 10))
            labels = {"job-name": name, "team": ns}
            t = _template(ns, name, labels, cpu, mem, node_type="general", tier="preemptible", grace=10,
                          start_seconds=15, run_seconds=rng.choice((600, 1200, 1800, 3600)))
            fill.workload("Job", t, parallelism, completions=parallelism * rng.choice((1, 2, 4)), ttl_seconds=600)
            replicas = parallelism
        else:
            name = f"svc-{in_team:03d}"
            replicas = min(rng.choice((2, 3, 3, 4, 6, 8, 12, 20, 30, 60)), max(target - created, 2))
            tier = rng.choice(("web", "api", "worker"))
            labels = {"app": name, "team": ns, "tier": tier, "pod-template-hash": f"{rng.getrandbits(32):08x}"[:9]}
            t = _template(ns, name, labels, cpu, mem, node_type="general", start_seconds=rng.choice((5, 10, 20, 40)))
            fill.workload("ReplicaSet", t, replicas)
            pods_since_pdb += replicas
            if pods_since_pdb >= pdb_every_pods:
                pods_since_pdb = 0
                if rng.random() < 0.5:
                    selector = LabelSelector((("app", name),))
                else:
                    selector = LabelSelector((), (Requirement("app", "In", (name,)), Requirement("tier", "Exists")))
                fill.budget(_pdb(ns, name, selector, rng, replicas))
        created += replicas
    return team, avg_cpu, avg_mem


def _training(fill: _Filler, ml: list[Node]) -> None:
    """GPU training jobs taking three quarters of the ml pool's GPUs."""
    rng = fill.rng
    gpu_toleration = (Toleration(key=RESOURCE_GPU, operator="Exists", effect="NoSchedule"),)
    budget = int(sum(n.allocatable.gpus for n in ml) * 0.75)
    used = 0
    while used < budget:
        node = ml[0].allocatable
        per_pod = min(rng.choice((1, 2, 4)), node.gpus, budget - used)
        workers = min(rng.choice((1, 2, 4)), (budget - used) // per_pod)
        name = f"train-{fill.summary.workloads['Job']:03d}"
        labels = {"job-name": name, "team": "ml", "workload": "training"}
        t = _template("ml", name, labels, int(node.cpu_millis / node.gpus * per_pod * 0.8),
                      int(node.memory_bytes / node.gpus * per_pod * 0.7) // MIB * MIB, gpus=per_pod, node_type="ml",
                      tolerations=gpu_toleration, grace=120, start_seconds=90, run_seconds=rng.choice((4, 6, 8, 12)) * 3600,
                      annotations={ANNOTATION_ROTATION: "wait-for-completion"}, image="registry.example.com/trainer:2.3")
        fill.workload("Job", t, workers, completions=workers)
        used += per_pod * workers


POOL_SHAPES = {
    # pool: (node type, instance type, boot seconds, taints)
    "system": ("system", "m6i.xlarge", 150.0, ()),
    "general": ("general", "m6i.4xlarge", 180.0, ()),
    "custom": ("custom", "r6i.2xlarge", 240.0, ()),
    "ml": ("ml", "g5.12xlarge", 420.0, (Taint(RESOURCE_GPU, "true", "NoSchedule"),)),
}


def pool_sizes(total_nodes: int) -> dict[str, int]:
    """How a cluster of ``total_nodes`` splits into pools: mostly general, some system and GPU."""
    system = max(2, math.ceil(total_nodes * 0.02))
    ml = max(1, total_nodes // 60)
    custom = max(1, total_nodes // 30)
    return {"system": system, "general": max(total_nodes - system - ml - custom, 1), "custom": custom, "ml": ml}


def synthetic_cluster(
    total_nodes: int,
    *,
    name: str = "synthetic",
    zone: str = "us-east-1a",
    image: str = "ami-0a1f00c0ffee00001",
    seed: int = 1,
    clock: VirtualClock | None = None,
    pods_per_node: float = 40.0,
    pdb_every_pods: int = 80,
    blocking_pdbs: int = 0,
) -> tuple[SimulatedCluster, WorkloadSummary]:
    """A zonal member cluster of ``total_nodes`` Ready nodes in four pools, filled by ``populate``
    and run until every pod that can start has started."""
    sim = SimulatedCluster(name=name, clock=clock, seed=seed, region=zone[:-1])
    for pool, count in pool_sizes(total_nodes).items():
        node_type, instance_type, boot, taints = POOL_SHAPES[pool]
        sim.add_pool(NodePoolSpec(pool, zone, instance_type, image, count, boot, node_type, {}, taints, zone[:-1]))
    summary = populate(sim, pods_per_node=pods_per_node, seed=seed, pdb_every_pods=pdb_every_pods, blocking_pdbs=blocking_pdbs)
    sim.run_until_settled(max_seconds=600, step=30)
    return sim, summary
