"""``meta.k8s.io/v1 Table`` answers: what ``kubectl get`` asks for and prints.

The columns are the API server's own (``pkg/printers/internalversion``), priority 1 being the ones
``-o wide`` adds. Ages are counted on the cluster's clock, so they read in the cluster's time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from platformctl.kernel.cluster.model import parse_time
from platformctl.kernel.humanize import human_duration


def ip_for(name: str, prefix: str = "10.0") -> str:
    """A stable private address for a simulated node or pod (the simulator does not model networking)."""
    digest = hashlib.sha256(name.encode()).digest()
    return f"{prefix}.{digest[0]}.{max(digest[1], 1)}"


def node_ip(name: str) -> str:
    """An EKS node's address is in its name (``ip-10-0-1-5.<region>.compute.internal``)."""
    head = name.split(".", 1)[0]
    if head.startswith("ip-"):
        parts = head[3:].split("-")
        if len(parts) == 4 and all(p.isdigit() for p in parts):
            return ".".join(parts)
    return ip_for(name, "10.1")


def _col(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


def _age(obj: dict[str, Any], now: float) -> str:
    stamp = obj["metadata"].get("creationTimestamp")
    return human_duration(now - parse_time(stamp, "creationTimestamp", None)) if stamp else "<unknown>"


def _node_row(obj: dict[str, Any], now: float) -> list[Any]:
    ready = next((c["status"] == "True" for c in obj["status"].get("conditions", []) if c["type"] == "Ready"), False)
    status = "Ready" if ready else "NotReady"
    if obj["spec"].get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = obj["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = obj["status"].get("nodeInfo", {})
    addresses = {a["type"]: a["address"] for a in obj["status"].get("addresses", [])}
    return [obj["metadata"]["name"], status, ",".join(roles) or "<none>", _age(obj, now), info.get("kubeletVersion", ""),
            addresses.get("InternalIP", "<none>"), addresses.get("ExternalIP", "<none>"), info.get("osImage", "<unknown>"),
            info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion", "<unknown>")]


def _pod_row(obj: dict[str, Any], now: float) -> list[Any]:
    status = obj.get("status", {})
    containers = obj["spec"].get("containers", [])
    ready = next((c["status"] == "True" for c in status.get("conditions", []) if c["type"] == "Ready"), False)
    phase = status.get("phase", "Pending")
    reason = phase
    if obj["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    elif phase == "Succeeded":
        reason = "Completed"
    elif phase == "Failed":
        reason = "Error"
    elif phase == "Pending" and obj["spec"].get("nodeName"):
        # As kubectl's printer: a waiting container's reason, else ContainerCreating.
        waiting = [((c.get("state") or {}).get("waiting") or {}).get("reason") for c in status.get("containerStatuses", [])]
        reason = next((w for w in waiting if w), "ContainerCreating")
    return [obj["metadata"]["name"], f"{len(containers) if ready else 0}/{len(containers)}", reason, 0, _age(obj, now),
            status.get("podIP", "<none>"), obj["spec"].get("nodeName", "<none>"), "<none>", "<none>"]


def _pdb_row(obj: dict[str, Any], now: float) -> list[Any]:
    spec = obj.get("spec", {})
    return [obj["metadata"]["name"], str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            obj.get("status", {}).get("disruptionsAllowed", 0), _age(obj, now)]


def _deployment_row(obj: dict[str, Any], now: float) -> list[Any]:
    st = obj.get("status", {})
    return [obj["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{obj['spec'].get('replicas', 1)}",
            st.get("updatedReplicas", 0), st.get("availableReplicas", 0), _age(obj, now)]


def _replicaset_row(obj: dict[str, Any], now: float) -> list[Any]:
    st = obj.get("status", {})
    return [obj["metadata"]["name"], obj["spec"].get("replicas", 1), st.get("replicas", 0), st.get("readyReplicas", 0),
            _age(obj, now)]


def _statefulset_row(obj: dict[str, Any], now: float) -> list[Any]:
    st = obj.get("status", {})
    return [obj["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{obj['spec'].get('replicas', 1)}", _age(obj, now)]


def _daemonset_row(obj: dict[str, Any], now: float) -> list[Any]:
    st = obj.get("status", {})
    selector = (obj["spec"].get("template", {}).get("spec") or {}).get("nodeSelector") or {}
    return [obj["metadata"]["name"], st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0),
            st.get("numberReady", 0), st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
            ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>", _age(obj, now)]


def _job_row(obj: dict[str, Any], now: float) -> list[Any]:
    st = obj.get("status", {})
    held = {c.get("type") for c in st.get("conditions", []) if c.get("status") == "True"}
    done = "Complete" in held
    completions = obj["spec"].get("completions", obj["spec"].get("parallelism", 1))
    start = st.get("startTime")
    end = parse_time(st["completionTime"], "completionTime", None) if st.get("completionTime") else now
    duration = human_duration(end - parse_time(start, "startTime", None)) if start else ""
    said = "Complete" if done else "Failed" if "Failed" in held else "Running"
    return [obj["metadata"]["name"], said, f"{st.get('succeeded', 0)}/{completions}", duration,
            _age(obj, now)]


def _cronjob_row(obj: dict[str, Any], now: float) -> list[Any]:
    st = obj.get("status", {})
    last = st.get("lastScheduleTime")
    return [obj["metadata"]["name"], obj["spec"]["schedule"], obj["spec"].get("timeZone", "<none>"),
            bool(obj["spec"].get("suspend")), len(st.get("active", [])),
            human_duration(now - parse_time(last, "lastScheduleTime", None)) if last else "<none>", _age(obj, now)]


def _namespace_row(obj: dict[str, Any], now: float) -> list[Any]:
    return [obj["metadata"]["name"], obj.get("status", {}).get("phase", "Active"), _age(obj, now)]


def _name_age_row(obj: dict[str, Any], now: float) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj, now)]


def _priority_class_row(obj: dict[str, Any], now: float) -> list[Any]:
    return [obj["metadata"]["name"], obj.get("value", 0), bool(obj.get("globalDefault", False)),
            obj.get("preemptionPolicy", "PreemptLowerPriority"), _age(obj, now)]


def _event_row(obj: dict[str, Any], now: float) -> list[Any]:
    involved = obj.get("involvedObject") or obj.get("regarding") or {}
    last = obj.get("lastTimestamp") or obj.get("deprecatedLastTimestamp") or obj["metadata"]["creationTimestamp"]
    first = obj.get("firstTimestamp") or obj.get("deprecatedFirstTimestamp") or last
    source = obj.get("source", {}).get("component") or obj.get("reportingController", "")
    host = obj.get("source", {}).get("host") or obj.get("reportingInstance", "")
    return [human_duration(now - parse_time(last, "lastTimestamp", None)), obj.get("type", ""), obj.get("reason", ""),
            f"{involved.get('kind', '').lower()}/{involved.get('name', '')}", obj.get("message") or obj.get("note", ""),
            involved.get("fieldPath", ""), f"{source}, {host}" if host else source,
            human_duration(now - parse_time(first, "firstTimestamp", None)), obj.get("count") or obj.get("deprecatedCount", 1),
            obj["metadata"]["name"]]


NAME = _col("Name", fmt="name")
AGE = _col("Age")
TABLES: dict[str, tuple[list[dict[str, Any]], Callable[[dict[str, Any], float], list[Any]]]] = {
    "nodes": ([NAME, _col("Status"), _col("Roles"), AGE, _col("Version"), _col("Internal-IP", priority=1),
               _col("External-IP", priority=1), _col("OS-Image", priority=1), _col("Kernel-Version", priority=1),
               _col("Container-Runtime", priority=1)], _node_row),
    "pods": ([NAME, _col("Ready"), _col("Status"), _col("Restarts", "integer"), AGE, _col("IP", priority=1),
              _col("Node", priority=1), _col("Nominated Node", priority=1), _col("Readiness Gates", priority=1)], _pod_row),
    "poddisruptionbudgets": ([NAME, _col("Min Available"), _col("Max Unavailable"), _col("Allowed Disruptions", "integer"),
                              AGE], _pdb_row),
    "deployments": ([NAME, _col("Ready"), _col("Up-to-date", "integer"), _col("Available", "integer"), AGE], _deployment_row),
    "replicasets": ([NAME, _col("Desired", "integer"), _col("Current", "integer"), _col("Ready", "integer"), AGE],
                    _replicaset_row),
    "statefulsets": ([NAME, _col("Ready"), AGE], _statefulset_row),
    "daemonsets": ([NAME, _col("Desired", "integer"), _col("Current", "integer"), _col("Ready", "integer"),
                    _col("Up-to-date", "integer"), _col("Available", "integer"), _col("Node Selector"), AGE], _daemonset_row),
    "jobs": ([NAME, _col("Status"), _col("Completions"), _col("Duration"), AGE], _job_row),
    "cronjobs": ([NAME, _col("Schedule"), _col("Timezone"), _col("Suspend", "boolean"), _col("Active", "integer"),
                  _col("Last Schedule"), AGE], _cronjob_row),
    "namespaces": ([NAME, _col("Status"), AGE], _namespace_row),
    "serviceaccounts": ([NAME, AGE], _name_age_row),
    "configmaps": ([NAME, _col("Data", "integer"), AGE], lambda o, now: [o["metadata"]["name"], len(o.get("data") or {}),
                                                                          *_name_age_row(o, now)[1:]]),
    "secrets": ([NAME, _col("Type"), _col("Data", "integer"), AGE],
                lambda o, now: [o["metadata"]["name"], o.get("type", "Opaque"), len(o.get("data") or {}),
                                *_name_age_row(o, now)[1:]]),
    "priorityclasses": ([NAME, _col("Value", "integer"), _col("Global-Default", "boolean"), _col("Preemption Policy"), AGE],
                        _priority_class_row),
    "clusterroles": ([NAME, AGE], _name_age_row),
    "clusterrolebindings": ([NAME, AGE], _name_age_row),
    "customresourcedefinitions": ([NAME, AGE], _name_age_row),
    "events": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message"),
                _col("Subobject", priority=1), _col("Source", priority=1), _col("First Seen", priority=1),
                _col("Count", "integer", priority=1), _col("Name", fmt="name", priority=1)], _event_row),
}


def table(plural: str, objects: list[dict[str, Any]], now: float, resource_version: str, include_object: str = "Metadata",
          continue_token: str = "") -> dict[str, Any]:
    columns, row = TABLES[plural]
    rows = []
    for obj in objects:
        if include_object == "None":
            embedded = None
        elif include_object == "Object":
            embedded = obj
        else:
            embedded = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
        rows.append({"cells": row(obj, now), "object": embedded})
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": columns, "rows": rows}
