"""Kubernetes Events, as a cluster's components record them, made from the simulator's event log.

``kubectl get events`` and ``kubectl describe`` are how an operator finds out why something is stuck
(a replacement pod Pending because no node has room, which is why a drain keeps getting 429). The
recorder turns what the simulator logged into the events the real components would have written:

- the scheduler: ``Scheduled``, and ``FailedScheduling`` with its count of why each node was refused
  (``0/7 nodes are available: 3 Insufficient cpu, 4 node(s) were unschedulable.``), refreshed with a
  growing ``count`` while the pod stays Pending;
- the kubelet: ``Started`` when a pod's containers run, ``Killing`` when a pod is deleted or evicted,
  ``Starting``, ``NodeReady``, ``NodeNotSchedulable`` / ``NodeSchedulable`` (cordon, uncordon);
- the node controller: ``RegisteredNode``, ``RemovingNode``;
- the workload controllers: the deployment controller's ``ScalingReplicaSet``, the CronJob controller's
  ``SuccessfulCreate`` / ``SuccessfulDelete`` of its Jobs, the Job controller's ``Completed``.

They are served as ``core/v1`` Events (what ``kubectl describe`` reads, with ``involvedObject``
field selectors) and as ``events.k8s.io/v1`` Events; node events live in ``default``, as on a real
cluster. Events older than an hour of the cluster's time are dropped, as the API server's TTL does,
except the newest 2,000: at 300 times wall time an hour passes in twelve seconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from platformctl.emulator import simulator as sim
from platformctl.kernel.cluster.model import format_time
from platformctl.kernel.errors import NotFoundError

TTL_SECONDS = 3600.0
KEEP_AT_LEAST = 2000  # the newest events stay past the TTL: at 300x, an hour of the cluster is twelve wall seconds
REFRESH_SECONDS = 60.0  # how often a Pending pod's FailedScheduling is counted again

FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda e: e["metadata"]["name"],
    "metadata.namespace": lambda e: e["metadata"]["namespace"],
    "involvedObject.kind": lambda e: e["involvedObject"].get("kind", ""),
    "involvedObject.name": lambda e: e["involvedObject"].get("name", ""),
    "involvedObject.namespace": lambda e: e["involvedObject"].get("namespace", ""),
    "involvedObject.uid": lambda e: e["involvedObject"].get("uid", ""),
    "involvedObject.apiVersion": lambda e: e["involvedObject"].get("apiVersion", ""),
    "reason": lambda e: e.get("reason", ""),
    "type": lambda e: e.get("type", ""),
    "source": lambda e: e.get("source", {}).get("component", ""),
    "reportingComponent": lambda e: e.get("reportingComponent", ""),
}


# What the kubelet says when one of its own conditions changes: (while False, while True).
_KUBELET_REASONS = {"MemoryPressure": ("NodeHasSufficientMemory", "NodeHasInsufficientMemory"),
                    "DiskPressure": ("NodeHasNoDiskPressure", "NodeHasDiskPressure"),
                    "PIDPressure": ("NodeHasSufficientPID", "NodeHasInsufficientPID")}


class EventRecorder:
    def __init__(self, cluster: sim.SimulatedCluster) -> None:
        self.sim = cluster
        self.cursor = 0
        self.events: list[dict[str, Any]] = []  # core/v1 form, oldest first
        self._node_uids: dict[str, str] = {}
        self._failed_scheduling: dict[tuple[str, str], dict[str, Any]] = {}  # pending pod -> its FailedScheduling

    # ---------------------------------------------------------------- recording

    def _add(self, at: float, kind: str, namespace: str, name: str, uid: str, reason: str, message: str,
             component: str, host: str = "", type_: str = "Normal", api_version: str = "v1") -> dict[str, Any]:
        stamp = format_time(at)
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace or "default",
                         "uid": str(uuid.uuid4()), "resourceVersion": str(self.sim.next_resource_version()),
                         "creationTimestamp": stamp},
            "involvedObject": {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
                               **({"namespace": namespace} if namespace else {})},
            "reason": reason, "message": message, "type": type_,
            "source": {"component": component, **({"host": host} if host else {})},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1, "eventTime": None,
            "reportingComponent": component, "reportingInstance": host,
        }
        self.events.append(event)
        return event

    def _node_uid(self, name: str) -> str:
        if name not in self._node_uids:
            try:
                self._node_uids[name] = self.sim.get_node(name).uid
            except NotFoundError:
                self._node_uids[name] = ""
        return self._node_uids[name]

    def sync(self) -> None:
        log = self.sim.events
        for event in log[self.cursor:]:
            self._record(event)
        self.cursor = len(log)
        now = self.sim.now()
        for key, failed in list(self._failed_scheduling.items()):
            try:
                pod = self.sim.get_pod(*key)
            except NotFoundError:
                del self._failed_scheduling[key]
                continue
            if pod.node_name is not None:
                del self._failed_scheduling[key]
            elif now - _seconds(failed["lastTimestamp"]) >= REFRESH_SECONDS:
                failed["count"] += 1
                failed["lastTimestamp"] = format_time(now)
                failed["message"] = self.sim.why_unschedulable(pod)
                failed["metadata"]["resourceVersion"] = str(self.sim.next_resource_version())
        if len(self.events) > KEEP_AT_LEAST and now - _seconds(self.events[0]["lastTimestamp"]) > TTL_SECONDS:
            old, recent = self.events[:-KEEP_AT_LEAST], self.events[-KEEP_AT_LEAST:]
            self.events = [e for e in old if now - _seconds(e["lastTimestamp"]) <= TTL_SECONDS] + recent

    def _record(self, e: sim.Event) -> None:
        at, kind = e.time, e.kind
        if kind == sim.NODE_ADDED:
            uid = self._node_uid(e.name)
            self._add(at, "Node", "", e.name, uid, "Starting", "Starting kubelet.", "kubelet", e.name)
            self._add(at, "Node", "", e.name, uid, "RegisteredNode",
                      f"Node {e.name} event: Registered Node {e.name} in Controller", "node-controller")
        elif kind == sim.NODE_READY:
            self._add(at, "Node", "", e.name, self._node_uid(e.name), "NodeReady",
                      f"Node {e.name} status is now: NodeReady", "kubelet", e.name)
        elif kind == sim.NODE_NOT_READY:
            self._add(at, "Node", "", e.name, self._node_uid(e.name), "NodeNotReady",
                      f"Node {e.name} status is now: NodeNotReady", "node-controller", type_="Normal")
        elif kind == sim.NODE_CONDITION:
            type_, status, reason = e.detail
            if type_ in _KUBELET_REASONS:
                said = _KUBELET_REASONS[type_][status == "True"]
                self._add(at, "Node", "", e.name, self._node_uid(e.name), said, f"Node {e.name} status is now: {said}",
                          "kubelet", e.name)
            else:  # a node-problem-detector's condition: it records the problem as a warning on the node
                self._add(at, "Node", "", e.name, self._node_uid(e.name), reason, f"Node condition {type_} is now: {status}, "
                          f"reason: {reason}", "node-problem-detector", e.name, type_="Warning" if status == "True" else "Normal")
        elif kind == sim.POD_NOT_READY:
            self._add(at, "Pod", e.namespace, e.name, e.detail, "NodeNotReady", "Node is not ready", "node-controller",
                      type_="Warning")
        elif kind == sim.POD_CREATE_FAILED:
            pod = self._pod(e.namespace, e.name, e.detail[0])
            self._add(at, "Pod", e.namespace, e.name, e.detail[0], "Failed", f"Error: {e.detail[1]}", "kubelet",
                      (pod.node_name or "") if pod is not None else "", type_="Warning")
        elif kind == sim.POD_BACK_OFF:
            pod = self._pod(e.namespace, e.name, e.detail[0])
            self._add(at, "Pod", e.namespace, e.name, e.detail[0], "BackOff", e.detail[1], "kubelet",
                      (pod.node_name or "") if pod is not None else "", type_="Warning")
        elif kind == sim.WORKLOAD_EVENT:
            api_version, object_kind, uid, reason, message, component = e.detail
            self._add(at, object_kind, e.namespace, e.name, uid, reason, message, component,
                      type_="Warning" if reason == "JobAlreadyActive" else "Normal", api_version=api_version)
        elif kind == sim.POD_TAINT_EVICTED:
            self._add(at, "Pod", e.namespace, e.name, e.detail[0], "TaintManagerEviction",
                      f"Marking for deletion Pod {e.namespace}/{e.name}", "taint-eviction-controller")
        elif kind in (sim.NODE_CORDONED, sim.NODE_UNCORDONED):
            status = "NodeNotSchedulable" if kind == sim.NODE_CORDONED else "NodeSchedulable"
            self._add(at, "Node", "", e.name, self._node_uid(e.name), status, f"Node {e.name} status is now: {status}",
                      "kubelet", e.name)
        elif kind == sim.NODE_DELETED:
            self._add(at, "Node", "", e.name, self._node_uid(e.name), "RemovingNode",
                      f"Node {e.name} event: Removing Node {e.name} from Controller", "node-controller")
        elif kind == sim.POD_SCHEDULED:
            uid, node = e.detail
            self._add(at, "Pod", e.namespace, e.name, uid, "Scheduled",
                      f"Successfully assigned {e.namespace}/{e.name} to {node}", "default-scheduler")
        elif kind == sim.POD_UNSCHEDULABLE:
            try:
                pod = self.sim.get_pod(e.namespace, e.name)
            except NotFoundError:
                return
            if pod.uid != e.detail or pod.node_name is not None:
                return
            self._failed_scheduling[pod.key] = self._add(at, "Pod", e.namespace, e.name, pod.uid, "FailedScheduling",
                                                         self.sim.why_unschedulable(pod), "default-scheduler",
                                                         type_="Warning")
        elif kind == sim.POD_READY:
            pod = self._pod(e.namespace, e.name, e.detail)
            containers = [c.name for c in pod.containers] if pod is not None else ["main"]
            for container in containers or ["main"]:
                self._add(at, "Pod", e.namespace, e.name, e.detail, "Started", f"Started container {container}",
                          "kubelet", pod.node_name or "" if pod else "")
        elif kind in (sim.POD_EVICTED, sim.POD_TERMINATING):
            uid = e.detail[0] if kind == sim.POD_EVICTED else e.detail
            pod = self._pod(e.namespace, e.name, uid)
            if pod is not None and pod.is_finished:
                return
            containers = [c.name for c in pod.containers] if pod is not None else []
            for container in containers or [""]:
                self._add(at, "Pod", e.namespace, e.name, uid, "Killing",
                          f"Stopping container {container}" if container else "Stopping the pod's containers", "kubelet",
                          (pod.node_name or "") if pod is not None else "")

    def _pod(self, namespace: str, name: str, uid: str) -> Any:
        try:
            pod = self.sim.get_pod(namespace, name)
        except NotFoundError:
            return None
        return pod if pod.uid == uid else None

    # ---------------------------------------------------------------- reading

    def list(self, namespace: str | None) -> list[dict[str, Any]]:
        self.sync()
        return [e for e in self.events if namespace is None or e["metadata"]["namespace"] == namespace]


def as_events_v1(event: dict[str, Any]) -> dict[str, Any]:
    """The same event as ``events.k8s.io/v1`` serves it."""
    involved = event["involvedObject"]
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": event["metadata"],
        "eventTime": event["firstTimestamp"].replace("Z", ".000000Z"),
        "reportingController": event["reportingComponent"], "reportingInstance": event["reportingInstance"] or "local",
        "action": event["reason"], "reason": event["reason"], "note": event["message"], "type": event["type"],
        "regarding": {k: v for k, v in involved.items()},
        "deprecatedFirstTimestamp": event["firstTimestamp"], "deprecatedLastTimestamp": event["lastTimestamp"],
        "deprecatedCount": event["count"],
    }


def _seconds(stamp: str) -> float:
    from platformctl.kernel.cluster.model import parse_time

    return parse_time(stamp, "lastTimestamp", None)
