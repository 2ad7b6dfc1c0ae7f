"""The Kubernetes objects every cluster gets, applied with pulumi-kubernetes through the cluster's provider.

- Every cluster: the ``platformctl-canary`` namespace and the ``canary`` service account the
  canary workloads run as.
- Every member cluster: the PriorityClasses of the three resource tiers (``reserved`` above
  ``ondemand``, the default, above ``preemptible``, which never preempts anything), and the RBAC
  that lets the scheduled rotation (signed in through its access entry, in the group
  ``platformctl:rotation``) cordon, drain and evict.
- The host cluster: the federation namespace, the ``MemberCluster`` CRD and one registration object
  per member cluster, and the CronJob that runs ``platformctl rotate run`` with the image and
  schedule of the stack config, as a service account bound to an IAM role.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.components.common import child

CANARY_NAMESPACE = "platformctl-canary"
CANARY_SERVICE_ACCOUNT = "canary"
FEDERATION_NAMESPACE = "platformctl-federation"
SYSTEM_NAMESPACE = "platformctl-system"
ROTATION_SERVICE_ACCOUNT = "platformctl-rotation"
ROTATION_GROUP = "platformctl:rotation"
FEDERATION_GROUP = "federation.platformctl.io"
PRIORITY_TIERS = (
    # name, value, global default, preemption policy, what it is for
    ("reserved", 1_000_000, False, "PreemptLowerPriority", "Capacity paid for up front; preempts the lower tiers."),
    ("ondemand", 100_000, True, "PreemptLowerPriority", "The default tier; may preempt preemptible pods."),
    ("preemptible", 1_000, False, "Never", "Runs on spare capacity and is the first to go; never preempts."),
)
LABELS = {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "platformctl"}


def _meta(name: str, namespace: str | None = None, **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespace:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return meta


@dataclass(frozen=True)
class Registration:
    """What the host cluster records about one member cluster."""

    name: str
    zone: str
    endpoint: pulumi.Input[str]
    certificate_authority: pulumi.Input[str]
    node_pools: Sequence[str]


@dataclass(frozen=True)
class Rotation:
    image: str
    schedule: str
    role_arn: pulumi.Input[str]


class ClusterObjects(pulumi.ComponentResource):
    def __init__(self, name: str, *, provider: k8s.Provider, stage: str, region: str, member: bool,
                 members: Sequence[Registration] = (), rotation: Rotation | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("platformctl:infra:ClusterObjects", name, None, opts)
        self._provider = provider
        self._name = name
        canary = self._namespace(CANARY_NAMESPACE)
        k8s.core.v1.ServiceAccount(f"{name}-canary", metadata=_meta(CANARY_SERVICE_ACCOUNT, CANARY_NAMESPACE),
                                   opts=self._opts(depends_on=[canary]))
        if member:
            for tier, value, default, preemption, description in PRIORITY_TIERS:
                k8s.scheduling.v1.PriorityClass(f"{name}-{tier}", metadata=_meta(tier), value=value, global_default=default,
                                                preemption_policy=preemption, description=description, opts=self._opts())
            self._rotation_rbac()
        else:
            self._federation(stage, region, members)
            if rotation is not None:
                self._scheduled_rotation(stage, rotation)
        self.register_outputs({})

    def _opts(self, **kwargs: Any) -> pulumi.ResourceOptions:
        return child(self, provider=self._provider, **kwargs)

    def _namespace(self, namespace: str) -> k8s.core.v1.Namespace:
        return k8s.core.v1.Namespace(f"{self._name}-{namespace}", metadata=_meta(namespace), opts=self._opts())

    def _rotation_rbac(self) -> None:
        rules = [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["daemonsets", "replicasets", "statefulsets"], "verbs": ["get", "list"]},
        ]
        role = k8s.rbac.v1.ClusterRole(f"{self._name}-rotation", metadata=_meta("platformctl:rotation"), rules=rules,
                                       opts=self._opts())
        k8s.rbac.v1.ClusterRoleBinding(
            f"{self._name}-rotation", metadata=_meta("platformctl:rotation"),
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "platformctl:rotation"},
            subjects=[{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": ROTATION_GROUP}],
            opts=self._opts(depends_on=[role]))

    def _federation(self, stage: str, region: str, members: Sequence[Registration]) -> None:
        namespace = self._namespace(FEDERATION_NAMESPACE)
        crd = k8s.apiextensions.v1.CustomResourceDefinition(
            f"{self._name}-memberclusters", metadata=_meta(f"memberclusters.{FEDERATION_GROUP}"),
            spec=member_cluster_crd_spec(), opts=self._opts())
        for m in members:
            k8s.apiextensions.CustomResource(
                f"{self._name}-member-{m.name}", api_version=f"{FEDERATION_GROUP}/v1alpha1", kind="MemberCluster",
                metadata=_meta(m.name, FEDERATION_NAMESPACE),
                spec={"stage": stage, "region": region, "zone": m.zone, "endpoint": m.endpoint,
                      "certificateAuthorityData": m.certificate_authority, "nodePools": list(m.node_pools)},
                opts=self._opts(depends_on=[crd, namespace]))

    def _scheduled_rotation(self, stage: str, rotation: Rotation) -> None:
        namespace = self._namespace(SYSTEM_NAMESPACE)
        account = k8s.core.v1.ServiceAccount(
            f"{self._name}-rotation", opts=self._opts(depends_on=[namespace]),
            metadata=pulumi.Output.from_input(rotation.role_arn).apply(
                lambda arn: _meta(ROTATION_SERVICE_ACCOUNT, SYSTEM_NAMESPACE, **{"eks.amazonaws.com/role-arn": arn})))
        k8s.batch.v1.CronJob(
            f"{self._name}-rotate", metadata=_meta("platformctl-rotate", SYSTEM_NAMESPACE),
            spec=rotation_cronjob_spec(stage, rotation.image, rotation.schedule), opts=self._opts(depends_on=[account]))


def rotation_cronjob_spec(stage: str, image: str, schedule: str) -> dict[str, Any]:
    """One rotation at a time (``Forbid``), never a pile of missed runs, and a bounded history."""
    return {
        "schedule": schedule, "timeZone": "Etc/UTC", "concurrencyPolicy": "Forbid", "startingDeadlineSeconds": 600,
        "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 3,
        "jobTemplate": {"spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {**LABELS, "app.kubernetes.io/name": "platformctl-rotate"}},
            "spec": {
                "serviceAccountName": ROTATION_SERVICE_ACCOUNT, "restartPolicy": "Never",
                "priorityClassName": "system-cluster-critical",
                "containers": [{
                    "name": "rotate", "image": image,
                    "args": ["rotate", "run", "--stage", stage, "--output", "json"],
                    "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
                    "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True,
                                        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }],
            }}}},
    }


def member_cluster_crd_spec() -> Mapping[str, Any]:
    string = {"type": "string"}
    return {
        "group": FEDERATION_GROUP, "scope": "Namespaced",
        "names": {"kind": "MemberCluster", "plural": "memberclusters", "singular": "membercluster",
                  "shortNames": ["mc"], "listKind": "MemberClusterList"},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True,
            "additionalPrinterColumns": [
                {"name": "Zone", "type": "string", "jsonPath": ".spec.zone"},
                {"name": "Stage", "type": "string", "jsonPath": ".spec.stage"},
                {"name": "Endpoint", "type": "string", "jsonPath": ".spec.endpoint", "priority": 1},
            ],
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object", "required": ["stage", "region", "zone", "endpoint"],
                "properties": {"stage": string, "region": string, "zone": string, "endpoint": string,
                               "certificateAuthorityData": string,
                               "nodePools": {"type": "array", "items": string}},
            }}}},
        }],
    }
