"""The simulator's event log: one ``Event`` per thing that happened, for invariant checks and the API's events."""

from __future__ import annotations

from typing import Any, NamedTuple


class Event(NamedTuple):
    time: float
    kind: str
    namespace: str
    name: str
    detail: Any = None


# Event kinds. Pod events carry the pod's uid in ``detail`` unless noted.
NODE_ADDED = "NodeAdded"
NODE_READY = "NodeReady"
NODE_CORDONED = "NodeCordoned"
NODE_UNCORDONED = "NodeUncordoned"
NODE_DELETED = "NodeDeleted"
POD_CREATED = "PodCreated"  # detail: (uid, budget keys covering the pod, healthy)
PDB_CREATED = "PDBCreated"  # detail: (budget key, ((uid, healthy) of the pods it covers, ...))
POD_SCHEDULED = "PodScheduled"  # detail: (uid, node)
POD_READY = "PodReady"
POD_SUCCEEDED = "PodSucceeded"
POD_EVICTED = "PodEvicted"  # detail: (uid, was_ready, budget key or None, desired healthy)
POD_TERMINATING = "PodTerminating"  # deleted without eviction (by a client or a controller)
POD_DELETE_REQUESTED = "PodDeleteRequested"  # a client deleted it directly, not through the eviction API
POD_DELETED = "PodDeleted"
POD_LOST = "PodLost"  # its node went away; detail: (uid, owned by a DaemonSet)
EVICTION_REFUSED = "EvictionRefused"  # detail: (code, message)
POD_UNSCHEDULABLE = "PodUnschedulable"  # the scheduler found no node for it (once per time it is pending)
NODE_NOT_READY = "NodeNotReady"  # detail: (status, reason): the node controller's or the kubelet's verdict
NODE_CONDITION = "NodeCondition"  # detail: (type, status, reason): a kubelet or node-problem-detector condition changed
POD_NOT_READY = "PodNotReady"  # the node controller marked a running pod not Ready (its node is not Ready)
POD_CREATE_FAILED = "PodCreateFailed"  # detail: (uid, reason): the kubelet could not create its containers
POD_BACK_OFF = "PodBackOff"  # detail: (uid, message): a crashed container's restart held back (CrashLoopBackOff)
POD_TAINT_EVICTED = "PodTaintEvicted"  # the taint manager deleted it: its node's NoExecute taint outlived its toleration
# A workload controller said something of a workload object: detail (apiVersion, kind, uid, reason, message, component)
WORKLOAD_EVENT = "WorkloadEvent"
