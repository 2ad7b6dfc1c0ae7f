"""The Kubernetes API's objects as the simulator serves them: the kinds (as discovery describes them) and the
API's error answers (``Status`` bodies: 400, 404, 409, 422, ...). Shared by the workload objects the
simulator keeps (``platformctl.emulator.workloads``) and the local region's API server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from platformctl.kernel.errors import PlatformError

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class ApiError(Exception):
    """An answer of the API other than success, carried as its ``Status`` body."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None, *,
                 empty_details: bool = False, plain: str | None = None) -> None:
        """``empty_details``: the body carries ``"details": {}`` as kube-apiserver's does for a resource (or version) a
        group it serves does not have; ``plain``: no ``Status`` at all, the API server's mux's own text (``404 page not
        found`` for a group nobody serves, or a path no handler takes)."""
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self.empty_details = empty_details
        self.plain = plain

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason}
        if self.details or self.empty_details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def details(name: str, group: str, kind: str) -> dict[str, Any]:
    """A ``Status``'s details as kube-apiserver writes them: ``group`` left out when it is the core group's empty
    name (``StatusDetails.Group`` is ``omitempty``)."""
    return {"name": name, **({"group": group} if group else {}), "kind": kind}


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    what = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{what} "{name}" not found', details(name, group, resource))


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    what = f"{resource}.{group}" if group else resource
    return ApiError(409, "AlreadyExists", f'{what} "{name}" already exists', details(name, group, resource))


def conflict(resource: str, name: str, group: str = "") -> ApiError:
    """An update at a ``resourceVersion`` that is not the object's now (the registry's optimistic concurrency)."""
    what = f"{resource}.{group}" if group else resource
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
                    "please apply your changes to the latest version and try again", details(name, group, resource))


def invalid(kind: str, name: str, field_path: str, message: str, reason: str = "FieldValueInvalid", group: str = "") -> ApiError:
    qualified = f"{kind}.{group}" if group else kind  # the group-qualified kind, as errors.NewInvalid writes it
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {field_path}: {message}', {
        **details(name, group, kind), "causes": [{"reason": reason, "message": message, "field": field_path}],
    })


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


@dataclass(frozen=True)
class Resource:
    """One kind the API serves, as discovery describes it."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    verbs: tuple[str, ...]
    short_names: tuple[str, ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_READ = ("get", "list", "watch")
_WRITE = ("create", "delete", "get", "list", "patch", "update", "watch")  # workloads
_KEPT = ("create", "delete", "get", "list", "patch", "update")  # kept as written (STORED)
RESOURCES: dict[str, Resource] = {r.plural: r for r in (
    Resource("namespaces", "Namespace", "", "v1", False, ("create", "delete", "get", "list", "update"), ("ns",)),
    Resource("nodes", "Node", "", "v1", False, ("delete", "get", "list", "patch", "watch"), ("no",)),
    Resource("pods", "Pod", "", "v1", True, ("create", "delete", *_READ), ("po",)),
    Resource("poddisruptionbudgets", "PodDisruptionBudget", "policy", "v1", True, ("create", "delete", "get", "list"), ("pdb",)),
    Resource("deployments", "Deployment", "apps", "v1", True, _WRITE, ("deploy",)),
    Resource("replicasets", "ReplicaSet", "apps", "v1", True, _WRITE, ("rs",)),
    Resource("daemonsets", "DaemonSet", "apps", "v1", True, _WRITE, ("ds",)),
    Resource("statefulsets", "StatefulSet", "apps", "v1", True, _WRITE, ("sts",)),
    Resource("jobs", "Job", "batch", "v1", True, _WRITE, ()),
    Resource("cronjobs", "CronJob", "batch", "v1", True, _WRITE, ("cj",)),
    Resource("serviceaccounts", "ServiceAccount", "", "v1", True, _KEPT, ("sa",)),
    Resource("configmaps", "ConfigMap", "", "v1", True, _KEPT, ("cm",)),
    Resource("secrets", "Secret", "", "v1", True, _KEPT, ()),
    Resource("events", "Event", "", "v1", True, ("get", "list", "watch"), ("ev",)),
    Resource("priorityclasses", "PriorityClass", "scheduling.k8s.io", "v1", False, _KEPT, ("pc",)),
    Resource("clusterroles", "ClusterRole", "rbac.authorization.k8s.io", "v1", False, _KEPT),
    Resource("clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io", "v1", False,
             _KEPT),
    Resource("customresourcedefinitions", "CustomResourceDefinition", "apiextensions.k8s.io", "v1", False,
             _KEPT, ("crd", "crds")),
    Resource("validatingadmissionpolicies", "ValidatingAdmissionPolicy", "admissionregistration.k8s.io", "v1", False,
             _KEPT),
    Resource("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", "admissionregistration.k8s.io", "v1",
             False, _KEPT),
    Resource("networkpolicies", "NetworkPolicy", "networking.k8s.io", "v1", True, _KEPT,
             ("netpol",)),
)}
# The same events as events.k8s.io/v1 serves them (RESOURCES is keyed by plural, so it lives beside it).
EVENTS_V1 = Resource("events", "Event", "events.k8s.io", "v1", True, ("get", "list", "watch"), ("ev",))
# Kinds the server keeps as written (no controller acts on them): what the Pulumi program applies besides namespaces and workloads.
STORED = ("serviceaccounts", "configmaps", "secrets", "priorityclasses", "clusterroles", "clusterrolebindings",
          "customresourcedefinitions", "validatingadmissionpolicies", "validatingadmissionpolicybindings", "networkpolicies")
WORKLOADS = ("deployments", "replicasets", "daemonsets", "statefulsets", "jobs", "cronjobs")
def platform_invalid(exc: PlatformError, kind: str, name: str) -> ApiError:
    return invalid(kind, name, exc.field or "", exc.detail)

PLURAL_OF_KIND = {r.kind: p for p, r in RESOURCES.items()}


def plural_of(kind: str) -> str:
    """The API's plural of a workload kind or PodDisruptionBudget (what a client's path names)."""
    plural = PLURAL_OF_KIND.get(kind)
    if plural is None or plural not in (*WORKLOADS, "poddisruptionbudgets"):
        raise PlatformError(f"unsupported kind {kind!r} (one of Deployment, ReplicaSet, DaemonSet, StatefulSet, Job, "
                            "CronJob, PodDisruptionBudget)", field="kind")
    return plural
