"""The Kubernetes objects every cluster gets, applied with pulumi-kubernetes through the cluster's provider.

- Every cluster: the ``platformctl-canary`` namespace and the ``canary`` service account the
  canary workloads run as; and the canary runner, a Deployment there running ``platformctl canary run
  --stage <stage> --cluster <cluster>`` with the stack's canary definitions (a ConfigMap), as a service
  account bound to its own IAM role (the state table only: results and leases) and to a ClusterRole that
  may make and delete namespaces and the workloads a user makes (Deployments and their scale, Jobs,
  CronJobs, DaemonSets, budgets, pods) and read nodes; its Prometheus metrics on a named port.
- Every member cluster: the PriorityClasses of the three resource tiers (``reserved`` above
  ``ondemand``, the default, above ``preemptible``, which never preempts anything), and the RBAC
  that lets the scheduled rotation (signed in through its access entry, in the group
  ``platformctl:rotation``) cordon, drain and evict.
- Every cluster: node remediation, a CronJob in ``platformctl-system`` running ``platformctl
  remediate --context <cluster> --once`` with the stack's remediation policy, as a service account
  bound to its own IAM role (through that cluster's OIDC provider) and to a ClusterRole that may
  read nodes and pods, cordon, evict, and delete pods (the policy's ``forceAfterSeconds`` only). It
  reaches its own cluster in-cluster and shares the stage's state table, where the hourly limit lives.
- The host cluster: the federation namespace, the ``MemberCluster`` CRD and one registration object
  per member cluster, and the CronJob that runs ``platformctl rotate run --stage`` with the image
  and schedule of the stack config, as a service account bound to an IAM role. Its ConfigMap holds
  the rotation policy of the stack config and a kubeconfig with a context per cluster of the stage
  (``aws eks get-token`` as that role); it journals in the stage's DynamoDB state table. The host
  gets the same rotation RBAC as the members, since the job rotates the host too.
- The host cluster: the release pipeline's CronJob, ``platformctl release tick --stage <stage>`` every minute
  (``Forbid``: one run at a time here; the ledger's lease makes it one at a time across the stages' jobs), as its
  own service account bound to an IAM role that rotates and deploys the stage and reaches the shared ledger table;
  its ConfigMap holds the checkout's pipeline file with each stage's rotation policy and the stage's kubeconfig.
"""

from __future__ import annotations

import json
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
POD_SECURITY = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
CANARY_LABEL = "platformctl.io/canary"  # e2e_canary.definitions.LABEL: on every namespace a canary makes
CANARY_POLICY = "platformctl-canary-confined"
NETWORK_POLICY = "platformctl-jobs"
_LABELLED = "has({o}.metadata.labels) && '" + CANARY_LABEL + "' in {o}.metadata.labels"
CANARY_CONFINED = ("request.resource.resource == 'namespaces' ? "
                   + _LABELLED.format(o="(request.operation == 'CREATE' ? object : oldObject)")
                   + " : request.namespace != '' && " + _LABELLED.format(o="namespaceObject"))
# The release tick's `pulumi up`: it applies this program's objects in every cluster of its stage (its access entry).
DEPLOY_GROUP = "platformctl:deploy"
PROGRAM_ROLES = ("platformctl:rotation", "platformctl:remediation", "platformctl:canary", "platformctl:deploy")
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
class Context:
    """One cluster as the scheduled rotation reaches it."""

    name: str
    endpoint: pulumi.Input[str]
    certificate_authority: pulumi.Input[str]


@dataclass(frozen=True)
class ScheduledJob:
    """A CronJob of platformctl's: its image and schedule, the IAM role its service account assumes, the policy
    it runs with, the state table it journals in."""

    image: str
    schedule: str
    role_arn: pulumi.Input[str]
    policy: Mapping[str, Any]
    state_table: pulumi.Input[str]
    region: str


@dataclass(frozen=True)
class Rotation(ScheduledJob):
    contexts: Sequence[Context] = ()


ROTATION_CONFIG = "platformctl-rotation"
RELEASE_SERVICE_ACCOUNT = "platformctl-release"
RELEASE_CONFIG = "platformctl-release"
IMAGE_INFRA_DIR = "/opt/platformctl/infra"  # the checkout's infra/ as platformctl's image carries it (stack files, program)
WORK_DIR = "/var/lib/platformctl"


@dataclass(frozen=True)
class ReleaseTick:
    """The stage's ``release tick`` job: its image and schedule, its role, the shared ledger, and the files of its
    ConfigMap (the pipeline file and the rotation policies it names)."""

    image: str
    schedule: str
    role_arn: pulumi.Input[str]
    ledger: str
    files: Mapping[str, str]
    region: str
    contexts: Sequence[Context] = ()
    pulumi_backend: str = "s3://platformctl-pulumi-state?region=us-east-1"
    pulumi_secret: str = "platformctl-pulumi"
    suspend: bool = False
CONFIG_DIR = "/etc/platformctl"
IMAGE_BUILD_SERVICE_ACCOUNT = "platformctl-image-build"
IMAGE_BUILD_JOB = "platformctl-image-build"


@dataclass(frozen=True)
class ImageBuild:
    """The stage's image build: ``ami build`` of the image's own checkout (``ami/manifests`` where it runs) into the
    stage's region, copied to ``copy_to`` (the other stages' regions), as its own role (``infra.access.image_build``).
    A suspended CronJob: run it with ``kubectl create job --from=cronjob/platformctl-image-build``."""

    image: str
    role_arn: pulumi.Input[str]
    region: str
    copy_to: Sequence[str] = ()
REMEDIATION_SERVICE_ACCOUNT = "platformctl-remediation"
REMEDIATION_CONFIG = "platformctl-remediation"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Remediation(ScheduledJob):
    cluster: str = ""


@dataclass(frozen=True)
class CanaryRunner:
    """One cluster's canary runner: its image, the IAM role its account assumes, the canaries, where it records."""

    image: str
    role_arn: pulumi.Input[str]
    canaries: Mapping[str, Mapping[str, Any]]
    state_table: pulumi.Input[str]
    region: str
    stage: str
    cluster: str
    metrics_port: int = 9464


CANARY_RUNNER = "platformctl-canary-runner"


def in_cluster_kubeconfig(cluster: str) -> str:
    """A kubeconfig whose one context (named after the cluster) is the pod's own API server, signed in as its
    service account: what `remediate --context <cluster>` reads inside the cluster."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": cluster,
        "clusters": [{"name": cluster, "cluster": {"server": "https://kubernetes.default.svc",
                                                   "certificate-authority": f"{SERVICE_ACCOUNT_DIR}/ca.crt"}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": cluster}}],
        "users": [{"name": cluster, "user": {"tokenFile": f"{SERVICE_ACCOUNT_DIR}/token"}}],
    }, indent=2)


def stage_kubeconfig(region: str, contexts: Sequence[tuple[str, str, str]]) -> str:
    """A kubeconfig with one context per cluster, named after it, signed in with ``aws eks get-token``."""
    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": contexts[0][0],
        "clusters": [{"name": n, "cluster": {"server": e, "certificate-authority-data": ca}} for n, e, ca in contexts],
        "contexts": [{"name": n, "context": {"cluster": n, "user": n}} for n, _, _ in contexts],
        "users": [{"name": n, "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
            "args": ["eks", "get-token", "--cluster-name", n, "--region", region, "--output", "json"]}}}
            for n, _, _ in contexts],
    }, indent=2)


class ClusterObjects(pulumi.ComponentResource):
    def __init__(self, name: str, *, provider: k8s.Provider, stage: str, region: str, member: bool,
                 members: Sequence[Registration] = (), rotation: Rotation | None = None,
                 remediation: Remediation | None = None, canary_runner: CanaryRunner | None = None,
                 release: ReleaseTick | None = None, image_build: ImageBuild | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("platformctl:infra:ClusterObjects", name, None, opts)
        self._provider = provider
        self._name = name
        self._system: k8s.core.v1.Namespace | None = None
        canary = self._namespace(CANARY_NAMESPACE)
        k8s.core.v1.ServiceAccount(f"{name}-canary", metadata=_meta(CANARY_SERVICE_ACCOUNT, CANARY_NAMESPACE),
                                   opts=self._opts(depends_on=[canary]))
        if member:
            for tier, value, default, preemption, description in PRIORITY_TIERS:
                k8s.scheduling.v1.PriorityClass(f"{name}-{tier}", metadata=_meta(tier), value=value, global_default=default,
                                                preemption_policy=preemption, description=description, opts=self._opts())
            self._rotation_rbac()
            self._deploy_rbac()
        else:
            self._deploy_rbac()
            self._federation(stage, region, members)
            if rotation is not None:
                self._rotation_rbac()
                self._scheduled_rotation(stage, rotation)
            if release is not None:
                self._release_tick(stage, release)
            if image_build is not None:
                self._image_build(image_build)
        if remediation is not None:
            self._remediation(remediation)
        if canary_runner is not None:
            self._canary_runner(canary_runner, canary)
        self.register_outputs({})

    def _opts(self, **kwargs: Any) -> pulumi.ResourceOptions:
        return child(self, provider=self._provider, **kwargs)

    def _namespace(self, namespace: str) -> k8s.core.v1.Namespace:
        """One of the program's namespaces, enforcing Pod Security "restricted" on every pod in it."""
        meta = _meta(namespace)
        meta["labels"].update(POD_SECURITY)
        return k8s.core.v1.Namespace(f"{self._name}-{namespace}", metadata=meta, opts=self._opts())

    def _system_namespace(self) -> k8s.core.v1.Namespace:
        if self._system is None:
            self._system = self._namespace(SYSTEM_NAMESPACE)
            self._network_policy(SYSTEM_NAMESPACE, self._system)
        return self._system

    def _network_policy(self, namespace: str, made: k8s.core.v1.Namespace, metrics_port: int | None = None) -> None:
        """The jobs' pods (and the canary runner's) reach only what they call: the cluster's DNS, and HTTPS (their
        clusters' API servers and AWS's endpoints, neither at addresses known in advance); nothing reaches them but,
        for the runner, Prometheus on its metrics port."""
        k8s.networking.v1.NetworkPolicy(
            f"{self._name}-{namespace}-policy", metadata=_meta(NETWORK_POLICY, namespace),
            spec=network_policy_spec(metrics_port), opts=self._opts(depends_on=[made]))

    def _role_account(self, key: str, account: str, role_arn: pulumi.Input[str]) -> k8s.core.v1.ServiceAccount:
        """A job's service account in the system namespace, bound to its IAM role (IRSA)."""
        namespace = self._system_namespace()
        return k8s.core.v1.ServiceAccount(
            f"{self._name}-{key}", opts=self._opts(depends_on=[namespace]),
            metadata=pulumi.Output.from_input(role_arn).apply(
                lambda arn: _meta(account, SYSTEM_NAMESPACE, **{"eks.amazonaws.com/role-arn": arn})))

    def _remediation(self, remediation: Remediation) -> None:
        namespace = self._system_namespace()
        account = self._role_account("remediation", REMEDIATION_SERVICE_ACCOUNT, remediation.role_arn)
        rules = [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
        ]
        self._cluster_role("remediation", rules, {"kind": "ServiceAccount", "name": REMEDIATION_SERVICE_ACCOUNT,
                                                  "namespace": SYSTEM_NAMESPACE}, account)
        config = k8s.core.v1.ConfigMap(
            f"{self._name}-remediation-config", metadata=_meta(REMEDIATION_CONFIG, SYSTEM_NAMESPACE),
            data={"policy.yaml": json.dumps(dict(remediation.policy), indent=2, sort_keys=True),
                  "kubeconfig": in_cluster_kubeconfig(remediation.cluster)},
            opts=self._opts(depends_on=[namespace]))
        spec = pulumi.Output.from_input(remediation.state_table).apply(
            lambda table: remediation_cronjob_spec(remediation.cluster, remediation.image, remediation.schedule, table,
                                                   remediation.region))
        k8s.batch.v1.CronJob(f"{self._name}-remediate", metadata=_meta("platformctl-remediate", SYSTEM_NAMESPACE),
                             spec=spec, opts=self._opts(depends_on=[account, config]))

    def _canary_runner(self, runner: CanaryRunner, namespace: k8s.core.v1.Namespace) -> None:
        self._network_policy(CANARY_NAMESPACE, namespace, runner.metrics_port)
        account = k8s.core.v1.ServiceAccount(
            f"{self._name}-canary-runner", opts=self._opts(depends_on=[namespace]),
            metadata=pulumi.Output.from_input(runner.role_arn).apply(
                lambda arn: _meta(CANARY_RUNNER, CANARY_NAMESPACE, **{"eks.amazonaws.com/role-arn": arn})))
        write = ["get", "list", "watch", "create", "update", "patch", "delete"]
        rules = [
            {"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": write},
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["deployments", "replicasets", "daemonsets"], "verbs": write},
            {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "update", "patch"]},
            {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": write},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": write},
        ]
        self._cluster_role("canary", rules, {"kind": "ServiceAccount", "name": CANARY_RUNNER, "namespace": CANARY_NAMESPACE},
                           account)
        self._canary_confined()
        config = k8s.core.v1.ConfigMap(
            f"{self._name}-canary-config", metadata=_meta(CANARY_RUNNER, CANARY_NAMESPACE),
            data={"kubeconfig": in_cluster_kubeconfig(runner.cluster),
                  **{f"canary-{name}.yaml": json.dumps(dict(document), indent=2, sort_keys=True)
                     for name, document in sorted(runner.canaries.items())}},
            opts=self._opts(depends_on=[namespace]))
        spec = pulumi.Output.from_input(runner.state_table).apply(lambda table: canary_runner_spec(runner, table))
        k8s.apps.v1.Deployment(f"{self._name}-canary-runner", metadata=_meta(CANARY_RUNNER, CANARY_NAMESPACE), spec=spec,
                               opts=self._opts(depends_on=[account, config]))

    def _canary_confined(self) -> None:
        """RBAC cannot say "only in namespaces it made": an admission policy does. Every write of the canary runner is
        refused unless it is in (or is) a namespace carrying the canary label, which the runner sets on the namespaces it
        makes and no other namespace has (it cannot label an existing one: an update is judged by the namespace as it
        was). So it can neither start a pod in ``platformctl-system`` (nor use a service account of it: a pod's service
        account is its namespace's) nor delete ``kube-system``."""
        policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{self._name}-canary-confined", metadata=_meta(CANARY_POLICY), opts=self._opts(),
            spec={"failurePolicy": "Fail",
                  "matchConstraints": {"resourceRules": [  # every kind its ClusterRole lets it write
                      {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
                       "resources": resources} for group, resources in (
                          ("", ["namespaces", "pods"]), ("apps", ["deployments", "deployments/scale", "replicasets",
                                                                   "daemonsets"]),
                          ("batch", ["jobs", "cronjobs"]), ("policy", ["poddisruptionbudgets"]))]},
                  "matchConditions": [{"name": "the-canary-runner", "expression":
                                       f"request.userInfo.username == 'system:serviceaccount:{CANARY_NAMESPACE}:{CANARY_RUNNER}'"}],
                  "validations": [{"expression": CANARY_CONFINED, "reason": "Forbidden", "message":
                                   f"the canary runner writes only in namespaces labelled {CANARY_LABEL}, which it makes"}]})
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{self._name}-canary-confined", metadata=_meta(CANARY_POLICY), opts=self._opts(depends_on=[policy]),
            spec={"policyName": CANARY_POLICY, "validationActions": ["Deny"]})

    def _cluster_role(self, what: str, rules: list[dict[str, Any]], subject: dict[str, str],
                      account: pulumi.Resource | None = None) -> None:
        """ClusterRole ``platformctl:<what>`` with ``rules``, bound to ``subject`` (a service account or a group)."""
        role = k8s.rbac.v1.ClusterRole(f"{self._name}-{what}", metadata=_meta(f"platformctl:{what}"), rules=rules,
                                       opts=self._opts())
        k8s.rbac.v1.ClusterRoleBinding(
            f"{self._name}-{what}", metadata=_meta(f"platformctl:{what}"),
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"platformctl:{what}"},
            subjects=[subject], opts=self._opts(depends_on=[role, *([account] if account is not None else [])]))

    def _rotation_rbac(self) -> None:
        rules = [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["apps"], "resources": ["daemonsets", "replicasets", "statefulsets"], "verbs": ["get", "list"]},
        ]
        self._cluster_role("rotation", rules, {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                               "name": ROTATION_GROUP})

    def _deploy_rbac(self) -> None:
        """What the tick's ``pulumi up`` applies: the kinds this program declares, and no others (no Secret: the
        operator makes the Pulumi one); a namespace deleted only if it is one of the program's; the program's own
        ClusterRoles bound and changed (``bind``, ``escalate``: RBAC refuses a role or binding granting more than its
        writer holds otherwise), no other."""
        write = ["get", "list", "watch", "create", "update", "patch"]
        rules = [
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": write},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["delete"],
             "resourceNames": [SYSTEM_NAMESPACE, CANARY_NAMESPACE, FEDERATION_NAMESPACE]},
            {"apiGroups": [""], "resources": ["serviceaccounts", "configmaps"], "verbs": [*write, "delete"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": [*write, "delete"]},
            {"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": [*write, "delete"]},
            {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": [*write, "delete"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": [*write, "delete"]},
            {"apiGroups": [FEDERATION_GROUP], "resources": ["memberclusters"], "verbs": [*write, "delete"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "clusterrolebindings"],
             "verbs": [*write, "delete"]},
            {"apiGroups": ["admissionregistration.k8s.io"],
             "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"], "verbs": [*write, "delete"]},
            {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": [*write, "delete"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind", "escalate"],
             "resourceNames": list(PROGRAM_ROLES)},
        ]
        self._cluster_role("deploy", rules, {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": DEPLOY_GROUP})

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

    def _stage_job(self, key: str, account: str, config: str, role_arn: pulumi.Input[str], region: str,
                   contexts: Sequence[Context], files: Mapping[str, str]) -> list[pulumi.Resource]:
        """A host-cluster job over the whole stage: its service account (bound to ``role_arn``) and its ConfigMap
        (``files`` and a kubeconfig with a context per cluster of the stage)."""
        namespace = self._system_namespace()
        made = self._role_account(key, account, role_arn)
        reached = pulumi.Output.all(*[pulumi.Output.all(c.name, c.endpoint, c.certificate_authority) for c in contexts])
        configmap = k8s.core.v1.ConfigMap(
            f"{self._name}-{key}-config", metadata=_meta(config, SYSTEM_NAMESPACE),
            data=reached.apply(lambda cs: {**files, "kubeconfig": stage_kubeconfig(region, [tuple(c) for c in cs])}),
            opts=self._opts(depends_on=[namespace]))
        return [made, configmap]

    def _scheduled_rotation(self, stage: str, rotation: Rotation) -> None:
        policy = {"policy.yaml": json.dumps(dict(rotation.policy), indent=2, sort_keys=True)}
        made = self._stage_job("rotation", ROTATION_SERVICE_ACCOUNT, ROTATION_CONFIG, rotation.role_arn, rotation.region,
                               rotation.contexts, policy)
        spec = pulumi.Output.from_input(rotation.state_table).apply(
            lambda table: rotation_cronjob_spec(stage, rotation.image, rotation.schedule, table, rotation.region))
        k8s.batch.v1.CronJob(
            f"{self._name}-rotate", metadata=_meta("platformctl-rotate", SYSTEM_NAMESPACE),
            spec=spec, opts=self._opts(depends_on=made))

    def _release_tick(self, stage: str, release: ReleaseTick) -> None:
        made = self._stage_job("release", RELEASE_SERVICE_ACCOUNT, RELEASE_CONFIG, release.role_arn, release.region,
                               release.contexts, release.files)
        k8s.batch.v1.CronJob(
            f"{self._name}-release-tick", metadata=_meta("platformctl-release-tick", SYSTEM_NAMESPACE),
            spec=release_tick_cronjob_spec(stage, release.image, release.schedule, release.ledger, release.region,
                                           release.pulumi_backend, release.pulumi_secret, release.suspend),
            opts=self._opts(depends_on=made))

    def _image_build(self, build: ImageBuild) -> None:
        """Its service account (bound to its role; no Kubernetes grant: it calls only AWS) and its CronJob."""
        made = self._role_account("image-build", IMAGE_BUILD_SERVICE_ACCOUNT, build.role_arn)
        k8s.batch.v1.CronJob(f"{self._name}-image-build", metadata=_meta(IMAGE_BUILD_JOB, SYSTEM_NAMESPACE),
                             spec=image_build_cronjob_spec(build.image, build.region, build.copy_to),
                             opts=self._opts(depends_on=[made]))


SCRATCH_LIMIT, SCRATCH_REQUEST = "2Gi", "512Mi"  # a candidate's sources and Pulumi's workspace, with room


def scratch(pod: dict[str, Any]) -> None:
    """A writable place under a read-only root: the scratch volume at ``WORK_DIR`` as ``HOME`` (where the AWS CLI that
    the kubeconfig's ``aws eks get-token`` runs caches IRSA's web identity credentials), ``TMPDIR`` and the toolkit's
    own home (lock files, a candidate's extracted sources, Pulumi's workspace)."""
    pod["volumes"].append({"name": "work", "emptyDir": {"sizeLimit": SCRATCH_LIMIT}})
    for container in pod["containers"]:
        container["volumeMounts"].append({"name": "work", "mountPath": WORK_DIR})
        container["env"] += [{"name": name, "value": WORK_DIR} for name in ("HOME", "TMPDIR", "PLATFORMCTL_HOME")]
        container["resources"]["requests"]["ephemeral-storage"] = SCRATCH_REQUEST
    # Pod Security "restricted" (its namespaces enforce it): the runtime's default seccomp profile, never root.
    pod["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


# A job's pod evicted by a drain (its own rotation's, remediation's, a node going away) did not fail: its Job makes
# another at once, which goes on from the journal (Kubernetes' podFailurePolicy; the eviction sets DisruptionTarget).
DISRUPTION_IS_NO_FAILURE = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


def _cronjob_spec(name: str, account: str, config: str | None, image: str, schedule: str, args: list[str], region: str, *,
                  starting_deadline: int, failed_history: int, cpu: str, memory: str, limit: str,
                  active_deadline: int | None = None) -> dict[str, Any]:
    """A platformctl CronJob: one run at a time (``Forbid``), never a pile of missed runs, a bounded history,
    the policy and kubeconfig from its ConfigMap, locked down (non-root, read-only, no capabilities) with a scratch
    volume for what must be written, and a pod a drain evicts replaced at once rather than counted as a failure."""
    job: dict[str, Any] = {"backoffLimit": 0, "podFailurePolicy": {"rules": [dict(DISRUPTION_IS_NO_FAILURE)]}}
    if active_deadline is not None:
        job["activeDeadlineSeconds"] = active_deadline
    job["template"] = {
        "metadata": {"labels": {**LABELS, "app.kubernetes.io/name": name}},
        "spec": {
            "serviceAccountName": account, "restartPolicy": "Never", "priorityClassName": "system-cluster-critical",
            "volumes": [{"name": "config", "configMap": {"name": config}}],
            "containers": [{
                "name": name.removeprefix("platformctl-"), "image": image, "args": args,
                "env": [{"name": "AWS_REGION", "value": region}],
                "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": limit}},
                "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True,
                                    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
        }}
    if config is None:  # a job that reads no ConfigMap
        pod = job["template"]["spec"]
        pod["volumes"], pod["containers"][0]["volumeMounts"] = [], []
    scratch(job["template"]["spec"])
    return {"schedule": schedule, "timeZone": "Etc/UTC", "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": starting_deadline, "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": failed_history, "jobTemplate": {"spec": job}}


# A rotation's (the rotation Job's, and the release tick's, which rotates): a whole `rotate run` of a 3,000-node,
# 130,000-pod cluster peaked at 853 MiB (benchmarks/rotate_run_memory.py, docs/benchmarks.md).
JOB_MEMORY, JOB_MEMORY_LIMIT = "1024Mi", "1536Mi"


def rotation_cronjob_spec(stage: str, image: str, schedule: str, state_table: str, region: str) -> dict[str, Any]:
    """The job rotates the whole stage with the stack's policy, journals in the stage's state table, and exits
    with `rotate run`'s codes (a paused stage exits 4, which the job records as failed: visible)."""
    args = ["rotate", "run", "--stage", stage, "--policy", f"{CONFIG_DIR}/policy.yaml", "--kubeconfig",
            f"{CONFIG_DIR}/kubeconfig", "--state", f"dynamodb://{state_table}", "--output", "json"]
    # Memory from benchmarks/live_memory.py: `rotate plan --context` of a 3,000-node, 121,715-pod cluster peaks at 546
    # MiB with its lists paged (1,286 MiB read whole); a run holds its informers' caches beside the plan: room for both.
    spec = _cronjob_spec("platformctl-rotate", ROTATION_SERVICE_ACCOUNT, ROTATION_CONFIG, image, schedule, args, region,
                         starting_deadline=600, failed_history=3, cpu="250m", memory=JOB_MEMORY, limit=JOB_MEMORY_LIMIT)
    # The job runs on the host cluster it rotates: a drain of its own node evicts it. SIGTERM stops it at a safe point
    # and gives its leases back (within the grace period), and its Job starts another pod at once, which resumes the
    # journal. A crash (out of memory) is tried once more; what `rotate run` itself answered (halted 1, bad input 2,
    # lease held 3, paused 4, interrupted 130) is the job's outcome.
    job = spec["jobTemplate"]["spec"]
    job["backoffLimit"] = 1
    job["podFailurePolicy"]["rules"].append({"action": "FailJob", "onExitCodes": {
        "containerName": "rotate", "operator": "In", "values": [1, 2, 3, 4, 130]}})
    job["template"]["spec"]["terminationGracePeriodSeconds"] = 120
    return spec


def release_tick_cronjob_spec(stage: str, image: str, schedule: str, ledger: str, region: str,
                              pulumi_backend: str = "s3://platformctl-pulumi-state?region=us-east-1",
                              pulumi_secret: str = "platformctl-pulumi", suspend: bool = False) -> dict[str, Any]:
    """The stage's tick: idempotent, so a missed minute is only skipped (a short starting deadline); it holds the
    ledger's lease while it rotates the stage, so no deadline cuts a rotation short. Exit 3 (another stage's tick
    holds the lease) marks the job failed, which a minute later is only history. Its deploy is `pulumi up` on the
    stage's stack: the backend named in the stack file, the passphrase or token from the operator's Secret."""
    args = ["--infra-dir", IMAGE_INFRA_DIR, "release", "tick", "--stage", stage, "--pipeline", f"{CONFIG_DIR}/pipeline.yaml",
            "--ledger", ledger, "--kubeconfig", f"{CONFIG_DIR}/kubeconfig", "--output", "json"]
    # (The root filesystem is read-only: the candidates' lock files and Pulumi's workspace go to the scratch volume.)
    spec = _cronjob_spec("platformctl-release-tick", RELEASE_SERVICE_ACCOUNT, RELEASE_CONFIG, image, schedule, args, region,
                         starting_deadline=50, failed_history=5, cpu="250m", memory=JOB_MEMORY, limit=JOB_MEMORY_LIMIT)
    [container] = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    container["env"] += [{"name": "KUBECONFIG", "value": f"{CONFIG_DIR}/kubeconfig"},  # its `pulumi up`'s too
                         {"name": "PULUMI_BACKEND_URL", "value": pulumi_backend},
                         {"name": "PULUMI_HOME", "value": f"{WORK_DIR}/.pulumi"},  # plugins and credentials: scratch
                         {"name": "PULUMI_SKIP_UPDATE_CHECK", "value": "true"}]
    container["envFrom"] = [{"secretRef": {"name": pulumi_secret}}]  # a missing Secret: the pod does not start, and says so
    if suspend:  # until the stage is bootstrapped: a tick runs when asked
        spec["suspend"] = True
    return spec


def image_build_cronjob_spec(image: str, region: str, copy_to: Sequence[str] = ()) -> dict[str, Any]:
    """Suspended: a build runs when someone asks (``kubectl create job --from=cronjob/platformctl-image-build``), not
    on a schedule. It builds what the image's own manifests say is new (nothing, when every image's build exists),
    publishes each id in SSM (``/platformctl/ami/<name>/<version>``), and prints every image's id and copies (its
    lock file is scratch): a checkout's ``ami build`` after it finds every image built and records them in the
    checkout's lock file without launching anything. Builders wait on EC2, so it asks little CPU; a build of the whole
    tree takes an hour or two on AWS."""
    args = ["ami", "build", "--region", region, *[a for r in copy_to for a in ("--copy-to", r)],
            "--lock-file", f"{WORK_DIR}/images.lock.json", "--output", "json"]
    spec = _cronjob_spec(IMAGE_BUILD_JOB, IMAGE_BUILD_SERVICE_ACCOUNT, None, image, "0 0 1 1 *", args, region,
                         starting_deadline=300, failed_history=3, cpu="100m", memory="256Mi", limit="512Mi",
                         active_deadline=6 * 3600)
    spec["suspend"] = True
    return spec


def remediation_cronjob_spec(cluster: str, image: str, schedule: str, state_table: str, region: str) -> dict[str, Any]:
    """One pass at a time: runs that overlap could only race each other for the lease. Exit 1 (breaker open)
    marks the job failed: an incident shows on the cluster, not only in the store."""
    args = ["remediate", "--context", cluster, "--policy", f"{CONFIG_DIR}/policy.yaml", "--kubeconfig",
            f"{CONFIG_DIR}/kubeconfig", "--state", f"dynamodb://{state_table}", "--once", "--output", "json"]
    return _cronjob_spec("platformctl-remediate", REMEDIATION_SERVICE_ACCOUNT, REMEDIATION_CONFIG, image, schedule, args,
                         region, starting_deadline=120, failed_history=5, cpu="100m", memory="192Mi", limit="384Mi",
                         active_deadline=3600)


def network_policy_spec(metrics_port: int | None = None) -> dict[str, Any]:
    """Every pod of the namespace: egress to the cluster's DNS (kube-dns in kube-system, UDP and TCP 53) and to TCP 443
    anywhere; ingress from nowhere, or only to ``metrics_port`` when one is given."""
    dns = {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                   "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    https = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    ingress = [] if metrics_port is None else [{"from": [{"namespaceSelector": {}}],
                                                "ports": [{"protocol": "TCP", "port": metrics_port}]}]
    return {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": ingress, "egress": [dns, https]}


def canary_runner_spec(runner: CanaryRunner, state_table: str) -> dict[str, Any]:
    """One runner per cluster (``Recreate``: two would only wait on each other's lease), its canaries and
    kubeconfig from its ConfigMap, its metrics on the port Prometheus scrapes, restarted when they stop
    answering; locked down as the CronJobs are. SIGTERM lets it delete its attempt's namespace first."""
    labels = {**LABELS, "app.kubernetes.io/name": CANARY_RUNNER}
    args = ["canary", "run", "--stage", runner.stage, "--cluster", runner.cluster, "--canaries", f"{CONFIG_DIR}/canaries",
            "--kubeconfig", f"{CONFIG_DIR}/kubeconfig", "--state", f"dynamodb://{state_table}",
            "--metrics-address", "0.0.0.0", "--metrics-port", str(runner.metrics_port)]
    items = [{"key": "kubeconfig", "path": "kubeconfig"},
             *[{"key": f"canary-{name}.yaml", "path": f"canaries/{name}.yaml"} for name in sorted(runner.canaries)]]
    spec: dict[str, Any] = {
        "replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": {"app.kubernetes.io/name": CANARY_RUNNER}},
        "template": {
            "metadata": {"labels": labels, "annotations": {"prometheus.io/scrape": "true",
                                                           "prometheus.io/port": str(runner.metrics_port)}},
            "spec": {
                "serviceAccountName": CANARY_RUNNER, "priorityClassName": "system-cluster-critical",
                "terminationGracePeriodSeconds": 120,
                "volumes": [{"name": "config", "configMap": {"name": CANARY_RUNNER, "items": items}}],
                "containers": [{
                    "name": "runner", "image": runner.image, "args": args,
                    "env": [{"name": "AWS_REGION", "value": runner.region}],
                    "ports": [{"name": "metrics", "containerPort": runner.metrics_port}],
                    "livenessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 30,
                                      "failureThreshold": 4},
                    "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
                    "resources": {"requests": {"cpu": "100m", "memory": "192Mi"}, "limits": {"memory": "384Mi"}},
                    "securityContext": {"runAsNonRoot": True, "readOnlyRootFilesystem": True,
                                        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }],
            }},
    }
    scratch(spec["template"]["spec"])
    return spec


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
