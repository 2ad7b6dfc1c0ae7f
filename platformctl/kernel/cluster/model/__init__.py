"""Typed values for what the toolkit reads from a cluster: nodes, pods and PodDisruptionBudgets.

Cluster snapshots (exactly what ``kubectl get nodes,pods,pdb -A -o json`` prints, a ``v1 List``)
and live API responses are parsed here, once, into frozen dataclasses; everything above works on
these values and never on raw dicts. ``to_kube()`` turns each value back into its API form, so a
snapshot saved by the simulator reads like one kubectl printed. Malformed input raises
``PlatformError`` naming the file and the field (``items[12].spec.containers[0]...``).

The rooms: ``values`` (well-known labels, times, quantities, resources), ``objects`` (the node, pod and
budget values), ``eviction`` (the eviction subresource's rules), ``parse`` (raw API objects in, at the
edge) and ``snapshot`` (a cluster's ``v1 List`` read and written). Import from here.
"""

from __future__ import annotations

from platformctl.kernel.cluster.model.eviction import (
    EVICT_FREELY,
    EVICT_UNDER_BUDGET,
    EVICT_UNHEALTHY,
    REFUSE_NO_ROOM,
    REFUSE_NOT_PROCESSED,
    REFUSE_TWO_BUDGETS,
    EvictionResult,
    eviction_decision,
    exempt_from_budgets,
)
from platformctl.kernel.cluster.model.objects import (
    DISRUPTION_MESSAGES,
    KUBELET_CONDITIONS,
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
from platformctl.kernel.cluster.model.parse import parse_node, parse_pdb, parse_pod
from platformctl.kernel.cluster.model.snapshot import Snapshot, load_snapshot, parse_snapshot, save_snapshot, snapshot_document
from platformctl.kernel.cluster.model.values import (
    ANNOTATION_EXIT_CODE,
    ANNOTATION_MAX_WAIT,
    ANNOTATION_MIRROR,
    ANNOTATION_ROTATION,
    ANNOTATION_RUN_SECONDS,
    ANNOTATION_SETTLE,
    ANNOTATION_START_SECONDS,
    EMPTY,
    IMAGE_LABELS,
    LABEL_HOSTNAME,
    LABEL_IMAGE,
    LABEL_INSTANCE_TYPE,
    LABEL_NODE_TYPE,
    LABEL_NODEGROUP,
    LABEL_NODEGROUP_IMAGE,
    LABEL_ZONE,
    RESOURCE_GPU,
    Resources,
    format_cpu,
    format_memory,
    format_time,
    image_label_of,
    image_of,
    parse_quantity,
    parse_time,
)

__all__ = [
    "ANNOTATION_MAX_WAIT",
    "ANNOTATION_MIRROR",
    "ANNOTATION_ROTATION",
    "ANNOTATION_RUN_SECONDS",
    "ANNOTATION_EXIT_CODE",
    "ANNOTATION_SETTLE",
    "ANNOTATION_START_SECONDS",
    "Container",
    "DISRUPTION_MESSAGES",
    "EMPTY",
    "EVICT_FREELY",
    "EVICT_UNDER_BUDGET",
    "EVICT_UNHEALTHY",
    "EvictionResult",
    "IMAGE_LABELS",
    "KUBELET_CONDITIONS",
    "LABEL_HOSTNAME",
    "LABEL_IMAGE",
    "LABEL_INSTANCE_TYPE",
    "LABEL_NODEGROUP",
    "LABEL_NODEGROUP_IMAGE",
    "LABEL_NODE_TYPE",
    "LABEL_ZONE",
    "Node",
    "NodeCondition",
    "OwnerReference",
    "PDBStatus",
    "Pod",
    "PodDisruptionBudget",
    "REFUSE_NOT_PROCESSED",
    "REFUSE_NO_ROOM",
    "REFUSE_TWO_BUDGETS",
    "RESOURCE_GPU",
    "Resources",
    "Snapshot",
    "Taint",
    "Toleration",
    "eviction_decision",
    "image_label_of",
    "image_of",
    "exempt_from_budgets",
    "format_cpu",
    "format_memory",
    "format_time",
    "load_snapshot",
    "parse_node",
    "parse_pdb",
    "parse_pod",
    "parse_quantity",
    "parse_snapshot",
    "parse_time",
    "save_snapshot",
    "snapshot_document",
]
