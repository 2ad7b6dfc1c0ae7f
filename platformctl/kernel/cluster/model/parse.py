"""Parsing nodes, pods and budgets at the edge: malformed input is a ``PlatformError`` naming the file and the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from platformctl.kernel.cluster.constraints import parse_constraints
from platformctl.kernel.cluster.model.objects import (
    Container,
    Node,
    NodeCondition,
    OwnerReference,
    PDBStatus,
    Pod,
    PodDisruptionBudget,
    Taint,
    Toleration,
)
from platformctl.kernel.cluster.model.values import EMPTY, Resources, _requests, _resources, parse_quantity, parse_time
from platformctl.kernel.cluster.selectors import (
    NODE_OPERATORS,
    IntOrPercent,
    LabelSelector,
    NodeSelectorTerm,
    parse_requirement,
)
from platformctl.kernel.errors import PlatformError


def _obj(raw: Any, where: str, file: str | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise PlatformError("must be an object", file=file, field=where)
    return raw


def _str(raw: Any, where: str, file: str | None) -> str:
    if not isinstance(raw, str) or not raw:
        raise PlatformError("required string is missing", file=file, field=where)
    return raw


def _str_map(raw: Any, where: str, file: str | None) -> Mapping[str, str]:
    if raw is None:
        return EMPTY
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise PlatformError("must map strings to strings", file=file, field=where)
    return raw


def _int(raw: Any, where: str, file: str | None, default: int) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise PlatformError(f"must be an integer (got {raw!r})", file=file, field=where)
    return raw


def _list(raw: Any, where: str, file: str | None) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise PlatformError("must be a list", file=file, field=where)
    return raw


def _ready(status: dict[str, Any], where: str, file: str | None) -> bool:
    for i, c in enumerate(_list(status.get("conditions"), f"{where}.conditions", file)):
        c = _obj(c, f"{where}.conditions[{i}]", file)
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def _metadata(raw: dict[str, Any], where: str, file: str | None) -> dict[str, Any]:
    meta = _obj(raw.get("metadata"), f"{where}.metadata", file)
    _str(meta.get("name"), f"{where}.metadata.name", file)
    return meta


def _created(meta: dict[str, Any], where: str, file: str | None) -> float:
    stamp = meta.get("creationTimestamp")
    return parse_time(stamp, f"{where}.metadata.creationTimestamp", file) if stamp else 0.0


def _resource_version(meta: dict[str, Any]) -> int:
    try:
        return int(meta.get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


def parse_node(raw: Any, where: str = "node", file: str | None = None) -> Node:
    raw = _obj(raw, where, file)
    meta = _metadata(raw, where, file)
    spec = _obj(raw.get("spec") or {}, f"{where}.spec", file)
    status = _obj(raw.get("status") or {}, f"{where}.status", file)
    alloc_raw = status.get("allocatable") or status.get("capacity") or {}
    allocatable = _resources(alloc_raw, f"{where}.status.allocatable", file)
    pods = alloc_raw.get("pods", "110") if isinstance(alloc_raw, dict) else "110"
    taints = []
    for i, t in enumerate(_list(spec.get("taints"), f"{where}.spec.taints", file)):
        t = _obj(t, f"{where}.spec.taints[{i}]", file)
        taints.append(
            Taint(_str(t.get("key"), f"{where}.spec.taints[{i}].key", file), t.get("value", ""),
                  _str(t.get("effect"), f"{where}.spec.taints[{i}].effect", file))
        )
    return Node(
        name=meta["name"],
        uid=meta.get("uid") or meta["name"],
        labels=_str_map(meta.get("labels"), f"{where}.metadata.labels", file),
        provider_id=spec.get("providerID") or "",
        allocatable=allocatable,
        max_pods=int(parse_quantity(pods, f"{where}.status.allocatable.pods", file)),
        unschedulable=bool(spec.get("unschedulable", False)),
        ready=_ready(status, f"{where}.status", file),
        taints=tuple(taints),
        created=_created(meta, where, file),
        resource_version=_resource_version(meta),
        conditions=_node_conditions(status, f"{where}.status.conditions", file),
        annotations=_str_map(meta.get("annotations"), f"{where}.metadata.annotations", file),
    )


def _node_conditions(status: dict[str, Any], where: str, file: str | None) -> tuple[NodeCondition, ...]:
    out = []
    for i, c in enumerate(_list(status.get("conditions"), where, file)):
        c = _obj(c, f"{where}[{i}]", file)
        since = c.get("lastTransitionTime")
        beat = c.get("lastHeartbeatTime")
        out.append(NodeCondition(
            _str(c.get("type"), f"{where}[{i}].type", file), str(c.get("status", "Unknown")), str(c.get("reason") or ""),
            str(c.get("message") or ""), parse_time(since, f"{where}[{i}].lastTransitionTime", file) if since else 0.0,
            parse_time(beat, f"{where}[{i}].lastHeartbeatTime", file) if beat else None))
    return tuple(out)


def _tolerations(raw: Any, where: str, file: str | None) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(_list(raw, where, file)):
        t = _obj(t, f"{where}[{i}]", file)
        op = t.get("operator", "Equal")
        if op not in ("Equal", "Exists"):
            raise PlatformError(f"operator must be Equal or Exists (got {op!r})", file=file, field=f"{where}[{i}].operator")
        out.append(Toleration(t.get("key", ""), op, t.get("value", ""), t.get("effect", "")))
    return tuple(out)


def _node_terms(spec: dict[str, Any], where: str, file: str | None) -> tuple[NodeSelectorTerm, ...]:
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {} if isinstance(affinity, dict) else {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    at = f"{where}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    terms = []
    for i, term in enumerate(_list(required.get("nodeSelectorTerms"), at, file)):
        term = _obj(term, f"{at}[{i}]", file)
        exprs = _list(term.get("matchExpressions"), f"{at}[{i}].matchExpressions", file)
        terms.append(
            NodeSelectorTerm(
                tuple(
                    parse_requirement(e, f"{at}[{i}].matchExpressions[{j}]", NODE_OPERATORS, file)
                    for j, e in enumerate(exprs)
                )
            )
        )
    return tuple(terms)


def parse_pod(raw: Any, where: str = "pod", file: str | None = None) -> Pod:
    raw = _obj(raw, where, file)
    meta = _metadata(raw, where, file)
    spec = _obj(raw.get("spec"), f"{where}.spec", file)
    status = _obj(raw.get("status") or {}, f"{where}.status", file)
    owner = None
    for i, ref in enumerate(_list(meta.get("ownerReferences"), f"{where}.metadata.ownerReferences", file)):
        ref = _obj(ref, f"{where}.metadata.ownerReferences[{i}]", file)
        if ref.get("controller"):
            at = f"{where}.metadata.ownerReferences[{i}]"
            owner = OwnerReference(
                ref.get("apiVersion", ""), _str(ref.get("kind"), f"{at}.kind", file),
                _str(ref.get("name"), f"{at}.name", file), ref.get("uid") or ref["name"],
            )
            break
    containers = []
    for i, c in enumerate(_list(spec.get("containers"), f"{where}.spec.containers", file)):
        at = f"{where}.spec.containers[{i}]"
        c = _obj(c, at, file)
        containers.append(
            Container(_str(c.get("name"), f"{at}.name", file), c.get("image", ""), _requests(c.get("resources"), f"{at}.resources", file))
        )
    if not containers:
        raise PlatformError("a pod needs at least one container", file=file, field=f"{where}.spec.containers")
    total = Resources()
    for c in containers:
        total = total + c.requests
    # Init containers run one at a time before the others: the pod needs the largest of them.
    for i, c in enumerate(_list(spec.get("initContainers"), f"{where}.spec.initContainers", file)):
        r = _requests(_obj(c, f"{where}.spec.initContainers[{i}]", file).get("resources"), f"{where}.spec.initContainers[{i}].resources", file)
        total = Resources(max(total.cpu_millis, r.cpu_millis), max(total.memory_bytes, r.memory_bytes), max(total.gpus, r.gpus))
    phase = status.get("phase") or "Pending"
    if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
        raise PlatformError(f"unknown pod phase {phase!r}", file=file, field=f"{where}.status.phase")
    deletion = meta.get("deletionTimestamp")
    conditions = _list(status.get("conditions"), f"{where}.status.conditions", file)
    started = status.get("startTime")
    unschedulable = _unschedulable(conditions, f"{where}.status.conditions", file) if not spec.get("nodeName") else ("", None)
    return Pod(
        namespace=meta.get("namespace") or "default",
        name=meta["name"],
        uid=meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}",
        labels=_str_map(meta.get("labels"), f"{where}.metadata.labels", file),
        annotations=_str_map(meta.get("annotations"), f"{where}.metadata.annotations", file),
        owner=owner,
        node_name=spec.get("nodeName") or None,
        containers=tuple(containers),
        requests=total,
        priority=_int(spec.get("priority"), f"{where}.spec.priority", file, 0),
        priority_class_name=spec.get("priorityClassName"),
        grace_seconds=_int(spec.get("terminationGracePeriodSeconds"), f"{where}.spec.terminationGracePeriodSeconds", file, 30),
        node_selector=_str_map(spec.get("nodeSelector"), f"{where}.spec.nodeSelector", file),
        tolerations=_tolerations(spec.get("tolerations"), f"{where}.spec.tolerations", file),
        required_node_terms=_node_terms(spec, f"{where}.spec", file),
        phase=phase,
        ready=_ready(status, f"{where}.status", file),
        deletion_time=parse_time(deletion, f"{where}.metadata.deletionTimestamp", file) if deletion else None,
        created=_created(meta, where, file),
        started=parse_time(started, f"{where}.status.startTime", file) if started else None,
        evicted=_disruption(conditions) == "EvictionByEvictionAPI",
        disruption="" if _disruption(conditions) == "EvictionByEvictionAPI" else _disruption(conditions),
        resource_version=_resource_version(meta),
        scheduled=_scheduled(conditions, f"{where}.status.conditions", file),
        waiting=_waiting(status),
        running=_running(status, f"{where}.status.containerStatuses", file),
        ready_since=_since(conditions, "Ready", f"{where}.status.conditions", file),
        inter=parse_constraints(spec, f"{where}.spec", file),
        unschedulable=unschedulable[0],
        unschedulable_since=unschedulable[1],
    )


def _unschedulable(conditions: list[Any], where: str, file: str | None) -> tuple[str, float | None]:
    """PodScheduled False with reason Unschedulable: what the scheduler said, and since when."""
    for i, c in enumerate(conditions):
        if (isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"):
            since = c.get("lastTransitionTime")
            return (str(c.get("message") or "Unschedulable"),
                    parse_time(since, f"{where}[{i}].lastTransitionTime", file) if since else None)
    return "", None


def _disruption(conditions: list[Any]) -> str:
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == "DisruptionTarget" and c.get("status") == "True":
            return str(c.get("reason") or "EvictionByEvictionAPI")
    return ""


def _running(status: dict[str, Any], where: str, file: str | None) -> float | None:
    """When every container was running: the latest ``startedAt``, or None while one is not running."""
    times = []
    statuses = status.get("containerStatuses") or []
    for i, c in enumerate(statuses):
        started = ((c or {}).get("state") or {}).get("running", {}).get("startedAt") if isinstance(c, dict) else None
        if not started:
            return None
        times.append(parse_time(started, f"{where}[{i}].state.running.startedAt", file))
    return max(times) if times else None


def _since(conditions: list[Any], kind: str, where: str, file: str | None) -> float | None:
    """When condition ``kind`` turned True, or None while it is not."""
    for i, c in enumerate(conditions):
        if isinstance(c, dict) and c.get("type") == kind and c.get("status") == "True" and c.get("lastTransitionTime"):
            return parse_time(c["lastTransitionTime"], f"{where}[{i}].lastTransitionTime", file)
    return None


def _scheduled(conditions: list[Any], where: str, file: str | None) -> float | None:
    return _since(conditions, "PodScheduled", where, file)


def _waiting(status: dict[str, Any]) -> str:
    for c in status.get("containerStatuses") or []:
        reason = ((c or {}).get("state") or {}).get("waiting", {}).get("reason") if isinstance(c, dict) else None
        if reason and reason != "ContainerCreating":
            return str(reason)
    return ""


def parse_pdb(raw: Any, where: str = "pdb", file: str | None = None) -> PodDisruptionBudget:
    raw = _obj(raw, where, file)
    meta = _metadata(raw, where, file)
    spec = _obj(raw.get("spec") or {}, f"{where}.spec", file)
    status = _obj(raw.get("status") or {}, f"{where}.status", file)
    selector = None
    if spec.get("selector") is not None:
        selector = LabelSelector.parse(spec["selector"], f"{where}.spec.selector", file)
    min_available = max_unavailable = None
    if spec.get("minAvailable") is not None:
        min_available = IntOrPercent.parse(spec["minAvailable"], f"{where}.spec.minAvailable", file)
    if spec.get("maxUnavailable") is not None:
        max_unavailable = IntOrPercent.parse(spec["maxUnavailable"], f"{where}.spec.maxUnavailable", file)
    if min_available and max_unavailable:
        raise PlatformError("minAvailable and maxUnavailable cannot be both set", file=file, field=f"{where}.spec")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy not in (None, "IfHealthyBudget", "AlwaysAllow"):
        raise PlatformError(
            f"must be IfHealthyBudget or AlwaysAllow (got {policy!r})", file=file, field=f"{where}.spec.unhealthyPodEvictionPolicy"
        )
    s = f"{where}.status"
    return PodDisruptionBudget(
        namespace=meta.get("namespace") or "default",
        name=meta["name"],
        uid=meta.get("uid") or f"{meta.get('namespace')}/{meta['name']}",
        selector=selector,
        min_available=min_available,
        max_unavailable=max_unavailable,
        unhealthy_pod_eviction_policy=policy,
        generation=_int(meta.get("generation"), f"{where}.metadata.generation", file, 1),
        created=_created(meta, where, file),
        status=PDBStatus(
            current_healthy=_int(status.get("currentHealthy"), f"{s}.currentHealthy", file, 0),
            desired_healthy=_int(status.get("desiredHealthy"), f"{s}.desiredHealthy", file, 0),
            expected_pods=_int(status.get("expectedPods"), f"{s}.expectedPods", file, 0),
            disruptions_allowed=_int(status.get("disruptionsAllowed"), f"{s}.disruptionsAllowed", file, 0),
            observed_generation=_int(status.get("observedGeneration"), f"{s}.observedGeneration", file, 0),
        ),
        resource_version=_resource_version(meta),
    )


