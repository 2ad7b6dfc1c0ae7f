"""Kubernetes' protobuf encoding of a request body, read into the JSON object the server works with.

kubectl 1.32 and later send the objects ``kubectl create <kind>`` and ``kubectl debug`` build as
``application/vnd.kubernetes.protobuf``: the 4-byte magic ``k8s\\x00``, then a ``runtime.Unknown`` message
(1 typeMeta {1 apiVersion, 2 kind}, 2 raw: the object's own message, 3 contentEncoding, 4 contentType). The
protobuf package reads the wire format (``UnknownFieldSet``: each field's number, wire type and value, in
order); the tables below name the fields of the kinds the local region serves that kubectl builds, and of an
eviction, a scale and delete options, number by number, as the ``generated.proto`` files of ``k8s.io/api``
and ``k8s.io/apimachinery`` number them (``core/v1``, ``apps/v1``, ``batch/v1``, ``policy/v1``, ``scheduling/v1``,
``rbac/v1``, ``autoscaling/v1``; ``pkg/apis/meta/v1``, ``pkg/runtime``, ``pkg/util/intstr``, ``pkg/api/resource``).
A field's number never changes, so the tables read the objects of every Kubernetes version.

The object comes out as Go's JSON encoding of it reads, which is what kubectl 1.31 and older send. Protobuf
carries every plain field, zero or not, and a pointer field only when it is set: an empty string, zero or
false in a plain field is left out, as ``omitempty`` leaves it out; a pointer field that was sent
(``replicas: 0``, ``automountServiceAccountToken: false``) stays, and so does a field without ``omitempty``
(``containerPort``, a PriorityClass's ``value``); a zero time is left out (Go writes ``null``); a struct is kept
even when empty (``"status": {}``).

What the tables do not name is not dropped in silence: a field sent with a value that they lack is a 415 that
names it (one sent empty, as a newer version sends a plain field it added, is left out as Go would), and so is a
kind without a table or a body without the envelope; malformed bytes after the magic are a 400. Answers stay
JSON: kubectl asks for ``application/vnd.kubernetes.protobuf,application/json``.
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from platformctl.emulator.server.objects import ApiError, bad_request

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class _Field:
    name: str  # its JSON name; "" when the message is Go's embedded struct, its fields the parent's
    type: str  # "str", "int", "bool", "bytes", a table's name or one of _SPECIAL's
    repeated: bool = False
    map: bool = False  # map<string, type>: repeated entries {1 key, 2 value}
    keep_zero: bool = False  # a zero value is kept: a Go pointer that was sent, or a field Go's JSON writes when zero


# ------------------------------------------------------------------------------------------- tables

_TABLES: dict[str, dict[int, _Field]] = {}


def _table(name: str, spec: str) -> None:
    """``spec``: ``"NUMBER NAME TYPE; ..."``. TYPE is ``str``, ``int``, ``bool``, ``bytes`` or a message,
    ``[T]`` repeated, ``{T}`` a map from strings; a trailing ``?`` keeps a zero value (a Go pointer, or a field
    without ``omitempty``); NAME ``-`` inlines the message (Go's embedded struct)."""
    fields = {}
    for part in spec.split(";"):
        number, json_name, kind = part.split()
        keep_zero = kind.endswith("?")
        kind = kind.rstrip("?")
        repeated, is_map = kind.startswith("["), kind.startswith("{")
        fields[int(number)] = _Field("" if json_name == "-" else json_name, kind.strip("[]{}"), repeated, is_map, keep_zero)
    _TABLES[name] = fields


# meta/v1
_table("ObjectMeta", "1 name str; 2 generateName str; 3 namespace str; 4 selfLink str; 5 uid str; 6 resourceVersion str; "
       "7 generation int; 8 creationTimestamp Time; 9 deletionTimestamp Time; 10 deletionGracePeriodSeconds int?; "
       "11 labels {str}; 12 annotations {str}; 13 ownerReferences [OwnerReference]; 14 finalizers [str]; "
       "17 managedFields [ManagedFieldsEntry]")
_table("OwnerReference", "5 apiVersion str?; 1 kind str?; 3 name str?; 4 uid str?; 6 controller bool?; 7 blockOwnerDeletion bool?")
_table("ManagedFieldsEntry", "1 manager str; 2 operation str; 3 apiVersion str; 4 time Time; 6 fieldsType str; "
       "7 fieldsV1 FieldsV1; 8 subresource str")
_table("LabelSelector", "1 matchLabels {str}; 2 matchExpressions [LabelSelectorRequirement]")
_table("LabelSelectorRequirement", "1 key str?; 2 operator str?; 3 values [str]")
_table("Condition", "1 type str?; 2 status str?; 3 observedGeneration int; 4 lastTransitionTime Time; 5 reason str?; 6 message str?")
_table("DeleteOptions", "1 gracePeriodSeconds int?; 2 preconditions Preconditions; 3 orphanDependents bool?; "
       "4 propagationPolicy str?; 5 dryRun [str]; 6 ignoreStoreReadErrorWithClusterBreakingPotential bool?")
_table("Preconditions", "1 uid str?; 2 resourceVersion str?")

# core/v1: the kinds
_table("Namespace", "1 metadata ObjectMeta; 2 spec NamespaceSpec; 3 status NamespaceStatus")
_table("NamespaceSpec", "1 finalizers [str]")
_table("NamespaceStatus", "1 phase str; 2 conditions [NamespaceCondition]")
_table("NamespaceCondition", "1 type str?; 2 status str?; 4 lastTransitionTime Time; 5 reason str; 6 message str")
_table("Pod", "1 metadata ObjectMeta; 2 spec PodSpec; 3 status PodStatus")
_table("PodStatus", "1 phase str; 3 message str; 4 reason str; 11 nominatedNodeName str; 5 hostIP str; 6 podIP str; "
       "7 startTime Time; 9 qosClass str; 17 observedGeneration int")
_table("ConfigMap", "1 metadata ObjectMeta; 4 immutable bool?; 2 data {str}; 3 binaryData {bytes}")
_table("Secret", "1 metadata ObjectMeta; 5 immutable bool?; 2 data {bytes}; 4 stringData {str}; 3 type str")
_table("ServiceAccount", "1 metadata ObjectMeta; 2 secrets [ObjectReference]; 3 imagePullSecrets [LocalObjectReference]; "
       "4 automountServiceAccountToken bool?")
_table("LocalObjectReference", "1 name str")
_table("ObjectReference", "1 kind str; 2 namespace str; 3 name str; 4 uid str; 5 apiVersion str; 6 resourceVersion str; "
       "7 fieldPath str")

# core/v1: a pod's spec
_table("PodTemplateSpec", "1 metadata ObjectMeta; 2 spec PodSpec")
_table("PodSpec", "1 volumes [Volume]; 20 initContainers [Container]; 2 containers [Container]; "
       "34 ephemeralContainers [EphemeralContainer]; 3 restartPolicy str; 4 terminationGracePeriodSeconds int?; "
       "5 activeDeadlineSeconds int?; 6 dnsPolicy str; 7 nodeSelector {str}; 8 serviceAccountName str; 9 serviceAccount str; "
       "21 automountServiceAccountToken bool?; 10 nodeName str; 11 hostNetwork bool; 12 hostPID bool; 13 hostIPC bool; "
       "27 shareProcessNamespace bool?; 14 securityContext PodSecurityContext; 15 imagePullSecrets [LocalObjectReference]; "
       "16 hostname str; 17 subdomain str; 18 affinity Affinity; 19 schedulerName str; 22 tolerations [Toleration]; "
       "23 hostAliases [HostAlias]; 24 priorityClassName str; 25 priority int?; 26 dnsConfig PodDNSConfig; "
       "28 readinessGates [PodReadinessGate]; 29 runtimeClassName str?; 30 enableServiceLinks bool?; 31 preemptionPolicy str?; "
       "32 overhead {Quantity}; 33 topologySpreadConstraints [TopologySpreadConstraint]; 35 setHostnameAsFQDN bool?; "
       "36 os PodOS; 37 hostUsers bool?; 38 schedulingGates [PodSchedulingGate]; 39 resourceClaims [PodResourceClaim]; "
       "40 resources ResourceRequirements; 41 hostnameOverride str?")
_CONTAINER = ("1 name str?; 2 image str; 3 command [str]; 4 args [str]; 5 workingDir str; 6 ports [ContainerPort]; "
              "19 envFrom [EnvFromSource]; 7 env [EnvVar]; 8 resources ResourceRequirements; 23 resizePolicy [ContainerResizePolicy]; "
              "24 restartPolicy str?; 25 restartPolicyRules [ContainerRestartRule]; 9 volumeMounts [VolumeMount]; "
              "21 volumeDevices [VolumeDevice]; 10 livenessProbe Probe; 11 readinessProbe Probe; 22 startupProbe Probe; "
              "12 lifecycle Lifecycle; 13 terminationMessagePath str; 20 terminationMessagePolicy str; 14 imagePullPolicy str; "
              "15 securityContext SecurityContext; 16 stdin bool; 17 stdinOnce bool; 18 tty bool")
_table("Container", _CONTAINER)
_table("EphemeralContainerCommon", _CONTAINER)
_table("EphemeralContainer", "1 - EphemeralContainerCommon; 2 targetContainerName str")
_table("ContainerPort", "1 name str; 2 hostPort int; 3 containerPort int?; 4 protocol str; 5 hostIP str")
_table("ContainerResizePolicy", "1 resourceName str?; 2 restartPolicy str?")
_table("ContainerRestartRule", "1 action str; 2 exitCodes ContainerRestartRuleOnExitCodes")
_table("ContainerRestartRuleOnExitCodes", "1 operator str; 2 values [int]")
_table("EnvVar", "1 name str?; 2 value str; 3 valueFrom EnvVarSource")
_table("EnvVarSource", "1 fieldRef ObjectFieldSelector; 2 resourceFieldRef ResourceFieldSelector; "
       "3 configMapKeyRef ConfigMapKeySelector; 4 secretKeyRef SecretKeySelector; 5 fileKeyRef FileKeySelector")
_table("EnvFromSource", "1 prefix str; 2 configMapRef ConfigMapEnvSource; 3 secretRef SecretEnvSource")
_table("ConfigMapEnvSource", "1 - LocalObjectReference; 2 optional bool?")
_table("SecretEnvSource", "1 - LocalObjectReference; 2 optional bool?")
_table("ConfigMapKeySelector", "1 - LocalObjectReference; 2 key str?; 3 optional bool?")
_table("SecretKeySelector", "1 - LocalObjectReference; 2 key str?; 3 optional bool?")
_table("FileKeySelector", "1 volumeName str?; 2 path str?; 3 key str?; 4 optional bool?")
_table("ObjectFieldSelector", "1 apiVersion str; 2 fieldPath str?")
_table("ResourceFieldSelector", "1 containerName str; 2 resource str?; 3 divisor Quantity")
_table("ResourceRequirements", "1 limits {Quantity}; 2 requests {Quantity}; 3 claims [ResourceClaim]")
_table("ResourceClaim", "1 name str?; 2 request str")
_table("VolumeMount", "1 name str?; 2 readOnly bool; 7 recursiveReadOnly str?; 3 mountPath str?; 4 subPath str; "
       "5 mountPropagation str?; 6 subPathExpr str; 8 bindMountOptions [str]")
_table("VolumeDevice", "1 name str?; 2 devicePath str?")
_table("Probe", "1 - ProbeHandler; 2 initialDelaySeconds int; 3 timeoutSeconds int; 4 periodSeconds int; "
       "5 successThreshold int; 6 failureThreshold int; 7 terminationGracePeriodSeconds int?")
_table("ProbeHandler", "1 exec ExecAction; 2 httpGet HTTPGetAction; 3 tcpSocket TCPSocketAction; 4 grpc GRPCAction")
_table("Lifecycle", "1 postStart LifecycleHandler; 2 preStop LifecycleHandler; 3 stopSignal str?")
_table("LifecycleHandler", "1 exec ExecAction; 2 httpGet HTTPGetAction; 3 tcpSocket TCPSocketAction; 4 sleep SleepAction")
_table("ExecAction", "1 command [str]")
_table("HTTPGetAction", "1 path str; 2 port IntOrString; 3 host str; 4 scheme str; 5 httpHeaders [HTTPHeader]; 6 protocol str?")
_table("HTTPHeader", "1 name str?; 2 value str?")
_table("TCPSocketAction", "1 port IntOrString; 2 host str")
_table("GRPCAction", "1 port int?; 2 service str?; 3 mode str?")
_table("SleepAction", "1 seconds int?")
_table("SecurityContext", "1 capabilities Capabilities; 2 privileged bool?; 3 seLinuxOptions SELinuxOptions; "
       "10 windowsOptions WindowsSecurityContextOptions; 4 runAsUser int?; 8 runAsGroup int?; 5 runAsNonRoot bool?; "
       "6 readOnlyRootFilesystem bool?; 7 allowPrivilegeEscalation bool?; 9 procMount str?; 11 seccompProfile SeccompProfile; "
       "12 appArmorProfile AppArmorProfile")
_table("PodSecurityContext", "1 seLinuxOptions SELinuxOptions; 8 windowsOptions WindowsSecurityContextOptions; 2 runAsUser int?; "
       "6 runAsGroup int?; 3 runAsNonRoot bool?; 4 supplementalGroups [int]; 12 supplementalGroupsPolicy str?; 5 fsGroup int?; "
       "7 sysctls [Sysctl]; 9 fsGroupChangePolicy str?; 10 seccompProfile SeccompProfile; 11 appArmorProfile AppArmorProfile; "
       "13 seLinuxChangePolicy str?")
_table("Capabilities", "1 add [str]; 2 drop [str]")
_table("SELinuxOptions", "1 user str; 2 role str; 3 type str; 4 level str")
_table("SeccompProfile", "1 type str?; 2 localhostProfile str?")
_table("AppArmorProfile", "1 type str?; 2 localhostProfile str?")
_table("WindowsSecurityContextOptions", "1 gmsaCredentialSpecName str?; 2 gmsaCredentialSpec str?; 3 runAsUserName str?; "
       "4 hostProcess bool?")
_table("Sysctl", "1 name str?; 2 value str?")
_table("Toleration", "1 key str; 2 operator str; 3 value str; 4 effect str; 5 tolerationSeconds int?")
_table("Affinity", "1 nodeAffinity NodeAffinity; 2 podAffinity PodAffinity; 3 podAntiAffinity PodAffinity")
_table("NodeAffinity", "1 requiredDuringSchedulingIgnoredDuringExecution NodeSelector; "
       "2 preferredDuringSchedulingIgnoredDuringExecution [PreferredSchedulingTerm]")
_table("NodeSelector", "1 nodeSelectorTerms [NodeSelectorTerm]")
_table("NodeSelectorTerm", "1 matchExpressions [NodeSelectorRequirement]; 2 matchFields [NodeSelectorRequirement]")
_table("NodeSelectorRequirement", "1 key str?; 2 operator str?; 3 values [str]")
_table("PreferredSchedulingTerm", "1 weight int?; 2 preference NodeSelectorTerm")
_table("PodAffinity", "1 requiredDuringSchedulingIgnoredDuringExecution [PodAffinityTerm]; "  # and PodAntiAffinity, the same
       "2 preferredDuringSchedulingIgnoredDuringExecution [WeightedPodAffinityTerm]")
_table("PodAffinityTerm", "1 labelSelector LabelSelector; 2 namespaces [str]; 3 topologyKey str?; 4 namespaceSelector LabelSelector; "
       "5 matchLabelKeys [str]; 6 mismatchLabelKeys [str]")
_table("WeightedPodAffinityTerm", "1 weight int?; 2 podAffinityTerm PodAffinityTerm")
_table("TopologySpreadConstraint", "1 maxSkew int?; 2 topologyKey str?; 3 whenUnsatisfiable str?; 4 labelSelector LabelSelector; "
       "5 minDomains int?; 6 nodeAffinityPolicy str?; 7 nodeTaintsPolicy str?; 8 matchLabelKeys [str]")
_table("HostAlias", "1 ip str?; 2 hostnames [str]")
_table("PodDNSConfig", "1 nameservers [str]; 2 searches [str]; 3 options [PodDNSConfigOption]")
_table("PodDNSConfigOption", "1 name str; 2 value str?")
_table("PodReadinessGate", "1 conditionType str?")
_table("PodOS", "1 name str?")
_table("PodSchedulingGate", "1 name str?")
_table("PodResourceClaim", "1 name str?; 3 resourceClaimName str?; 4 resourceClaimTemplateName str?")
# Volumes: the sources a workload in a local region uses; the others (cloud disks, NFS, CSI...) are a 415.
_table("Volume", "1 name str?; 2 - VolumeSource")
_table("VolumeSource", "1 hostPath HostPathVolumeSource; 2 emptyDir EmptyDirVolumeSource; 6 secret SecretVolumeSource; "
       "10 persistentVolumeClaim PersistentVolumeClaimVolumeSource; 16 downwardAPI DownwardAPIVolumeSource; "
       "19 configMap ConfigMapVolumeSource; 26 projected ProjectedVolumeSource")
_table("HostPathVolumeSource", "1 path str?; 2 type str?")
_table("EmptyDirVolumeSource", "1 medium str; 2 sizeLimit Quantity")
_table("SecretVolumeSource", "1 secretName str; 2 items [KeyToPath]; 3 defaultMode int?; 4 optional bool?")
_table("ConfigMapVolumeSource", "1 - LocalObjectReference; 2 items [KeyToPath]; 3 defaultMode int?; 4 optional bool?")
_table("PersistentVolumeClaimVolumeSource", "1 claimName str?; 2 readOnly bool")
_table("KeyToPath", "1 key str?; 2 path str?; 3 mode int?")
_table("DownwardAPIVolumeSource", "1 items [DownwardAPIVolumeFile]; 2 defaultMode int?")
_table("DownwardAPIVolumeFile", "1 path str?; 2 fieldRef ObjectFieldSelector; 3 resourceFieldRef ResourceFieldSelector; 4 mode int?")
_table("ProjectedVolumeSource", "1 sources [VolumeProjection]; 2 defaultMode int?")
_table("VolumeProjection", "1 secret SecretProjection; 2 downwardAPI DownwardAPIProjection; 3 configMap ConfigMapProjection; "
       "4 serviceAccountToken ServiceAccountTokenProjection")
_table("SecretProjection", "1 - LocalObjectReference; 2 items [KeyToPath]; 4 optional bool?")
_table("ConfigMapProjection", "1 - LocalObjectReference; 2 items [KeyToPath]; 4 optional bool?")
_table("DownwardAPIProjection", "1 items [DownwardAPIVolumeFile]")
_table("ServiceAccountTokenProjection", "1 audience str; 2 expirationSeconds int?; 3 path str?")

# apps/v1
_table("Deployment", "1 metadata ObjectMeta; 2 spec DeploymentSpec; 3 status DeploymentStatus")
_table("DeploymentSpec", "1 replicas int?; 2 selector LabelSelector; 3 template PodTemplateSpec; 4 strategy DeploymentStrategy; "
       "5 minReadySeconds int; 6 revisionHistoryLimit int?; 7 paused bool; 9 progressDeadlineSeconds int?")
_table("DeploymentStrategy", "1 type str; 2 rollingUpdate RollingUpdateDeployment")
_table("RollingUpdateDeployment", "1 maxUnavailable IntOrString; 2 maxSurge IntOrString")
_table("DeploymentStatus", "1 observedGeneration int; 2 replicas int; 3 updatedReplicas int; 7 readyReplicas int; "
       "4 availableReplicas int; 5 unavailableReplicas int; 9 terminatingReplicas int?; 6 conditions [DeploymentCondition]; "
       "8 collisionCount int?")
_table("DeploymentCondition", "1 type str?; 2 status str; 6 lastUpdateTime Time; 7 lastTransitionTime Time; 4 reason str; 5 message str")

# batch/v1
_table("Job", "1 metadata ObjectMeta; 2 spec JobSpec; 3 status JobStatus")
_table("JobSpec", "1 parallelism int?; 2 completions int?; 3 activeDeadlineSeconds int?; 11 podFailurePolicy PodFailurePolicy; "
       "16 successPolicy SuccessPolicy; 7 backoffLimit int?; 12 backoffLimitPerIndex int?; 13 maxFailedIndexes int?; "
       "4 selector LabelSelector; 5 manualSelector bool?; 6 template PodTemplateSpec; 8 ttlSecondsAfterFinished int?; "
       "9 completionMode str?; 10 suspend bool?; 14 podReplacementPolicy str?; 15 managedBy str?")
_table("JobStatus", "2 startTime Time; 3 completionTime Time; 4 active int; 5 succeeded int; 6 failed int; 11 terminating int?; "
       "7 completedIndexes str; 10 failedIndexes str?; 9 ready int?")
_table("PodFailurePolicy", "1 rules [PodFailurePolicyRule]")
_table("PodFailurePolicyRule", "1 action str?; 2 onExitCodes PodFailurePolicyOnExitCodesRequirement; "
       "3 onPodConditions [PodFailurePolicyOnPodConditionsPattern]")
_table("PodFailurePolicyOnExitCodesRequirement", "1 containerName str?; 2 operator str?; 3 values [int]")
_table("PodFailurePolicyOnPodConditionsPattern", "1 type str; 2 status str")
_table("SuccessPolicy", "1 rules [SuccessPolicyRule]")
_table("SuccessPolicyRule", "1 succeededIndexes str?; 2 succeededCount int?")
_table("CronJob", "1 metadata ObjectMeta; 2 spec CronJobSpec; 3 status CronJobStatus")
_table("CronJobSpec", "1 schedule str?; 8 timeZone str?; 2 startingDeadlineSeconds int?; 3 concurrencyPolicy str; 4 suspend bool?; "
       "5 jobTemplate JobTemplateSpec; 6 successfulJobsHistoryLimit int?; 7 failedJobsHistoryLimit int?")
_table("JobTemplateSpec", "1 metadata ObjectMeta; 2 spec JobSpec")
_table("CronJobStatus", "1 active [ObjectReference]; 4 lastScheduleTime Time; 5 lastSuccessfulTime Time")

# policy/v1
_table("PodDisruptionBudget", "1 metadata ObjectMeta; 2 spec PodDisruptionBudgetSpec; 3 status PodDisruptionBudgetStatus")
_table("PodDisruptionBudgetSpec", "1 minAvailable IntOrString; 2 selector LabelSelector; 3 maxUnavailable IntOrString; "
       "4 unhealthyPodEvictionPolicy str?")
_table("PodDisruptionBudgetStatus", "1 observedGeneration int; 2 disruptedPods {Time}; 3 disruptionsAllowed int?; "
       "4 currentHealthy int?; 5 desiredHealthy int?; 6 expectedPods int?; 7 conditions [Condition]")
_table("Eviction", "1 metadata ObjectMeta; 2 deleteOptions DeleteOptions")

# scheduling/v1, rbac/v1, autoscaling/v1
_table("PriorityClass", "1 metadata ObjectMeta; 2 value int?; 3 globalDefault bool; 4 description str; 5 preemptionPolicy str?")
_table("ClusterRole", "1 metadata ObjectMeta; 2 rules [PolicyRule]; 3 aggregationRule AggregationRule")
_table("PolicyRule", "1 verbs [str]; 2 apiGroups [str]; 3 resources [str]; 4 resourceNames [str]; 5 nonResourceURLs [str]")
_table("AggregationRule", "1 clusterRoleSelectors [LabelSelector]")
_table("ClusterRoleBinding", "1 metadata ObjectMeta; 2 subjects [Subject]; 3 roleRef RoleRef")
_table("Subject", "1 kind str?; 2 apiGroup str; 3 name str?; 4 namespace str")
_table("RoleRef", "1 apiGroup str?; 2 kind str?; 3 name str?")
_table("Scale", "1 metadata ObjectMeta; 2 spec ScaleSpec; 3 status ScaleStatus")
_table("ScaleSpec", "1 replicas int")
_table("ScaleStatus", "1 replicas int?; 2 selector str")

# The kinds a body may be, by the apiVersion and kind of its envelope: each one's table has its own name.
# authorization.k8s.io/v1: `kubectl auth can-i`'s review
_table("SelfSubjectAccessReview", "1 metadata ObjectMeta; 2 spec SelfSubjectAccessReviewSpec; 3 status SubjectAccessReviewStatus")
_table("SelfSubjectAccessReviewSpec", "1 resourceAttributes ResourceAttributes; 2 nonResourceAttributes NonResourceAttributes")
_table("ResourceAttributes", "1 namespace str; 2 verb str; 3 group str; 4 version str; 5 resource str; 6 subresource str; "
       "7 name str")
_table("NonResourceAttributes", "1 path str; 2 verb str")
_table("SubjectAccessReviewStatus", "1 allowed bool; 4 denied bool; 2 reason str; 3 evaluationError str")

KINDS: dict[tuple[str, str], str] = {
    **{("v1", kind): kind for kind in ("Namespace", "Pod", "ConfigMap", "Secret", "ServiceAccount")},
    ("apps/v1", "Deployment"): "Deployment",
    ("batch/v1", "Job"): "Job",
    ("batch/v1", "CronJob"): "CronJob",
    ("policy/v1", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("policy/v1", "Eviction"): "Eviction",
    ("scheduling.k8s.io/v1", "PriorityClass"): "PriorityClass",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "ClusterRoleBinding",
    ("autoscaling/v1", "Scale"): "Scale",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
    # client-go's DeleteOptions carry the version of the resource they delete, or meta.k8s.io's.
    **{(version, "DeleteOptions"): "DeleteOptions" for version in ("v1", "meta.k8s.io/v1", "apps/v1", "batch/v1", "policy/v1",
                                                                    "scheduling.k8s.io/v1", "rbac.authorization.k8s.io/v1")},
}


# ------------------------------------------------------------------------------------------- decoding


class _Unsupported(Exception):
    """A well-formed body the tables cannot read in full (a 415)."""


class _Malformed(Exception):
    """Bytes that are not the protobuf they claim to be (a 400)."""


def decode(data: bytes) -> dict[str, Any]:
    """The JSON object of a ``application/vnd.kubernetes.protobuf`` body, with its ``apiVersion`` and ``kind``.
    Raises ``ApiError``: 400 for bytes that are not such a body, 415 for a kind or a field the tables lack."""
    try:
        return _decode(data)
    except _Unsupported as exc:
        raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in a format the local region does not "
                       f"read in full: {exc}; send it as application/json") from None
    except _Malformed as exc:
        raise bad_request(f"the body of the request was in an unknown format: {exc}") from None


def _decode(data: bytes) -> dict[str, Any]:
    if not data.startswith(MAGIC):  # not the envelope at all: a format of its own (kube-apiserver: a 400)
        raise _Unsupported(f"a {MEDIA_TYPE} body starts with the bytes k8s\\x00, this one does not")
    envelope: dict[int, Any] = {number: value for number, _, value in _fields(data[len(MAGIC):], "the envelope", _BYTES)}
    type_meta = {number: _text(value) for number, _, value in _fields(envelope.get(1, b""), "typeMeta", _BYTES)}
    api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
    encoding = _text(envelope.get(3, b""))
    if encoding:
        raise _Unsupported(f"contentEncoding {encoding!r}")
    table = KINDS.get((api_version, kind))
    if table is None:
        known = sorted({f"{k} ({v})" for v, k in KINDS if k != "DeleteOptions"})
        raise _Unsupported(f"a {kind or 'kind'} of {api_version or 'no apiVersion'} (it reads {', '.join(known)} "
                           f"and DeleteOptions)")
    return {"apiVersion": api_version, "kind": kind, **_message(table, envelope.get(2, b""), kind)}


def _fields(data: bytes, where: str, *wire_types: int) -> list[tuple[int, int, Any]]:
    """Each field of a message, in order: its number, wire type and value (an int, or bytes when length-delimited)."""
    try:
        found = [(f.field_number, f.wire_type, f.data) for f in UnknownFieldSet(empty_pb2.Empty.FromString(data))]
    except DecodeError:
        raise _Malformed(f"{where}: not a protobuf message") from None
    for number, wire, _ in found:
        if wire_types and wire not in wire_types:
            raise _Malformed(f"{where}: field {number} has wire type {wire}")
    return found


def _text(value: Any) -> str:
    if not isinstance(value, bytes):
        raise _Malformed("a string is not length-delimited")
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise _Malformed("a string is not UTF-8") from None


def _signed(value: int) -> int:
    """An int32 or int64 as its varint carries it: a negative number is its 64-bit two's complement."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _int(value: Any) -> int:
    if not isinstance(value, int):
        raise _Malformed("a number is not a varint")
    return _signed(value)


def _time(value: Any, where: str) -> str | None:
    """``meta/v1`` Time {1 seconds, 2 nanos} as Go writes it in JSON: RFC 3339 in UTC, to the second (a zero time is null)."""
    parts = {number: _int(v) for number, _, v in _fields(value, where, _VARINT)}
    seconds = parts.get(1, 0)
    if seconds == 0 and parts.get(2, 0) == 0:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity(value: Any, where: str) -> str:
    """``resource.Quantity`` {1 string}: its text, as in JSON."""
    return "".join(_text(v) for number, _, v in _fields(value, where, _BYTES) if number == 1)


def _int_or_string(value: Any, where: str) -> int | str:
    """``intstr.IntOrString`` {1 type (0 int, 1 string), 2 intVal, 3 strVal}: the number or the text."""
    parts = {number: v for number, _, v in _fields(value, where, _VARINT, _BYTES)}
    return _text(parts.get(3, b"")) if _int(parts.get(1, 0)) == 1 else _int(parts.get(2, 0))


def _fields_v1(value: Any, where: str) -> Any:
    """``meta/v1`` FieldsV1 {1 Raw}: its raw bytes are JSON."""
    raw = b"".join(v for number, _, v in _fields(value, where, _BYTES) if number == 1)
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        raise _Malformed(f"{where}: not JSON") from None


_SPECIAL: dict[str, Callable[[Any, str], Any]] = {"Time": _time, "Quantity": _quantity, "IntOrString": _int_or_string,
                                                  "FieldsV1": _fields_v1}


_SCALARS = ("str", "int", "bool", "bytes")


def _zero(wire: int, value: Any) -> bool:
    """A value Go's JSON would leave out: zero, empty, or a message all of whose fields are (a plain struct)."""
    if wire in (_VARINT, _FIXED32, _FIXED64) or value == b"":
        return value in (0, b"")
    if wire != _BYTES:
        return False
    try:
        return all(_zero(w, v) for _, w, v in _fields(value, ""))
    except _Malformed:  # text, not a message
        return False


def _message(name: str, data: bytes, where: str) -> dict[str, Any]:
    table = _TABLES[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data, where):
        field = table.get(number)
        if field is None:
            if _zero(wire, value):  # a plain field of a newer version than the tables, sent empty
                continue
            raise _Unsupported(f"{where}: field {number} of {name}")
        path = f"{where}.{field.name}" if field.name else where
        if field.map:
            key, item = _map_entry(field, value, path)
            out.setdefault(field.name, {})[key] = item
            continue
        decoded = _value(field, wire, value, path)
        if field.repeated:
            out.setdefault(field.name, []).append(decoded)
        elif not field.name:  # Go's embedded struct: its fields are the parent's
            out.update(decoded)
        elif decoded is None or (field.type in _SCALARS and not field.keep_zero and decoded in ("", 0, False)):
            out.pop(field.name, None)
        else:
            out[field.name] = decoded
    return out


def _map_entry(field: _Field, value: Any, where: str) -> tuple[str, Any]:
    if not isinstance(value, bytes):
        raise _Malformed(f"{where}: a map entry is not length-delimited")
    key = ""
    item = {"str": "", "bytes": "", "int": 0, "bool": False, "Quantity": "0"}.get(field.type, {} if field.type in _TABLES else None)
    for number, wire, part in _fields(value, where):
        if number == 1:
            key = _text(part)
        elif number == 2:
            item = _value(field, wire, part, f"{where}[{key}]")
    return key, item


def _value(field: _Field, wire: int, value: Any, where: str) -> Any:
    kind = field.type
    if kind in ("int", "bool"):
        if wire != _VARINT:
            raise _Malformed(f"{where}: field has wire type {wire}")
        return _int(value) if kind == "int" else value != 0
    if wire != _BYTES:
        raise _Malformed(f"{where}: field has wire type {wire}")
    if kind == "str":
        return _text(value)
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if kind in _SPECIAL:
        return _SPECIAL[kind](value, where)
    return _message(kind, value, where)
