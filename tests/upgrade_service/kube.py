"""Hand-made cluster snapshots for planner tests, written as kubectl prints them and parsed by the real parser."""

from __future__ import annotations

from typing import Any

from platformctl.kernel.cluster.model import Snapshot, parse_snapshot
from upgrade_service.planning.policy import RotationPolicy, parse_policy

STAMP = "2026-03-01T10:00:00Z"


def node(name: str, pool: str = "general", image: str = "ami-old", zone: str = "us-east-1a", ready: bool = True,
         unschedulable: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"providerID": f"aws:///{zone}/i-{name}"}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "creationTimestamp": STAMP, "labels": {
            "eks.amazonaws.com/nodegroup": pool, "eks.amazonaws.com/nodegroup-image": image,
            "topology.kubernetes.io/zone": zone}},
        "spec": spec,
        "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pod(name: str, on: str, ns: str = "app", labels: dict[str, str] | None = None, owner: tuple[str, str] | None = ("ReplicaSet", "web"),
        phase: str = "Running", ready: bool = True, grace: int = 30, annotations: dict[str, str] | None = None,
        started: str = STAMP) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "creationTimestamp": STAMP, "labels": labels or {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": f"{ns}-{owner[1]}",
                                    "controller": True}]
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"nodeName": on, "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "main", "image": "app:1", "resources": {"requests": {"cpu": "100m"}}}]},
        "status": {"phase": phase, "startTime": started,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pdb(name: str, ns: str = "app", match_labels: dict[str, str] | None = None, expressions: list[dict[str, Any]] | None = None,
        min_available: int | str | None = None, max_unavailable: int | str | None = None,
        allowed: int | None = None, policy: str | None = None, healthy: int = 3) -> dict[str, Any]:
    """A budget; with ``allowed`` it carries that status, otherwise none (the planner computes it)."""
    selector: dict[str, Any] = {}
    if match_labels is not None:
        selector["matchLabels"] = match_labels
    if expressions is not None:
        selector["matchExpressions"] = expressions
    spec: dict[str, Any] = {"selector": selector}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    out: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "metadata": {"name": name, "namespace": ns, "generation": 1, "creationTimestamp": STAMP},
                           "spec": spec}
    if allowed is not None:
        out["status"] = {"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": 3 - allowed,
                         "expectedPods": 3, "observedGeneration": 1}
    return out


def snapshot(*items: dict[str, Any]) -> Snapshot:
    return parse_snapshot({"apiVersion": "v1", "kind": "List", "items": list(items)}, "snap.json")


def policy(**fields: Any) -> RotationPolicy:
    doc: dict[str, Any] = {"targets": {"general": "ami-new"}, "maxInFlight": 10, "minZoneCapacityPercent": 0, **fields}
    return parse_policy(doc, "policy.yaml")
