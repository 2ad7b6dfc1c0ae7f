"""One simulated cluster as its API server holds it.

The simulator owns nodes, pods, PodDisruptionBudgets and the controllers that run pods. The API
adds what it needs on top: namespace objects, the workload objects clients create (Deployments,
DaemonSets, StatefulSets, Jobs, CronJobs) with a status computed from the simulator's pods, a
CronJob controller on the virtual clock, and a change log of nodes and pods that watches read from a
resource version on, as the watch cache does (too old a version is ``410 Gone``).

Errors are ``ApiError``s that carry the API's ``Status`` answer (404, 409, 422, ...).
"""

from __future__ import annotations

import bisect
import copy
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from croniter import croniter

from platformctl.cluster.model import Node, Pod, PodDisruptionBudget, format_time, parse_pdb, parse_pod, parse_time
from platformctl.cluster.selectors import LabelSelector, parse_selector_string
from platformctl.cluster.simulator import SimulatedCluster
from platformctl.errors import PlatformError

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class ApiError(Exception):
    """An answer of the API other than success, carried as its ``Status`` body."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason}
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    what = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{what} "{name}" not found', {"name": name, "group": group, "kind": resource})


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    what = f"{resource}.{group}" if group else resource
    return ApiError(409, "AlreadyExists", f'{what} "{name}" already exists', {"name": name, "group": group, "kind": resource})


def invalid(kind: str, name: str, field_path: str, message: str, reason: str = "FieldValueInvalid", group: str = "") -> ApiError:
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {field_path}: {message}', {
        "name": name, "group": group, "kind": kind,
        "causes": [{"reason": reason, "message": message, "field": field_path}],
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
RESOURCES: dict[str, Resource] = {r.plural: r for r in (
    Resource("namespaces", "Namespace", "", "v1", False, ("create", "delete", "get", "list"), ("ns",)),
    Resource("nodes", "Node", "", "v1", False, ("delete", "get", "list", "patch", "watch"), ("no",)),
    Resource("pods", "Pod", "", "v1", True, ("create", "delete", *_READ), ("po",)),
    Resource("poddisruptionbudgets", "PodDisruptionBudget", "policy", "v1", True, ("create", "delete", "get", "list"), ("pdb",)),
    Resource("deployments", "Deployment", "apps", "v1", True, ("create", "delete", "get", "list"), ("deploy",)),
    Resource("replicasets", "ReplicaSet", "apps", "v1", True, ("delete", "get", "list"), ("rs",)),
    Resource("daemonsets", "DaemonSet", "apps", "v1", True, ("create", "delete", "get", "list"), ("ds",)),
    Resource("statefulsets", "StatefulSet", "apps", "v1", True, ("create", "delete", "get", "list"), ("sts",)),
    Resource("jobs", "Job", "batch", "v1", True, ("create", "delete", "get", "list"), ()),
    Resource("cronjobs", "CronJob", "batch", "v1", True, ("create", "delete", "get", "list"), ("cj",)),
    Resource("serviceaccounts", "ServiceAccount", "", "v1", True, ("create", "delete", "get", "list"), ("sa",)),
    Resource("configmaps", "ConfigMap", "", "v1", True, ("create", "delete", "get", "list"), ("cm",)),
    Resource("events", "Event", "", "v1", True, ("get", "list", "watch"), ("ev",)),
    Resource("priorityclasses", "PriorityClass", "scheduling.k8s.io", "v1", False, ("create", "delete", "get", "list"), ("pc",)),
    Resource("clusterroles", "ClusterRole", "rbac.authorization.k8s.io", "v1", False, ("create", "delete", "get", "list")),
    Resource("clusterrolebindings", "ClusterRoleBinding", "rbac.authorization.k8s.io", "v1", False,
             ("create", "delete", "get", "list")),
    Resource("customresourcedefinitions", "CustomResourceDefinition", "apiextensions.k8s.io", "v1", False,
             ("create", "delete", "get", "list"), ("crd", "crds")),
)}
# The same events as events.k8s.io/v1 serves them (RESOURCES is keyed by plural, so it lives beside it).
EVENTS_V1 = Resource("events", "Event", "events.k8s.io", "v1", True, ("get", "list", "watch"), ("ev",))
# Kinds the server keeps as written (no controller acts on them): what the Pulumi program applies besides namespaces and workloads.
STORED = ("serviceaccounts", "configmaps", "priorityclasses", "clusterroles", "clusterrolebindings",
          "customresourcedefinitions")
WORKLOADS = ("deployments", "replicasets", "daemonsets", "statefulsets", "jobs", "cronjobs")
# Which simulator controller runs each workload kind (a Deployment runs through its ReplicaSet).
_SIM_KIND = {"deployments": "ReplicaSet", "daemonsets": "DaemonSet", "statefulsets": "StatefulSet", "jobs": "Job"}
_PLURAL_OF_SIM_KIND = {"ReplicaSet": "replicasets", "DaemonSet": "daemonsets", "StatefulSet": "statefulsets", "Job": "jobs"}


def _platform_invalid(exc: PlatformError, kind: str, name: str) -> ApiError:
    return invalid(kind, name, exc.field or "", exc.detail)


# ------------------------------------------------------------------------------------ change log


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    obj: Node | Pod


class Expired(Exception):
    """The asked resource version is older than the oldest change kept."""


class ChangeLog:
    """Every change of a node or pod, in resource-version order, as the watch cache keeps them.

    ``observe()`` compares the simulator's objects with what it saw last; it runs before every
    request and after every tick of the clock, and costs nothing while the cluster's resource
    version stands still. The oldest changes are dropped past ``capacity``; a watch from before the
    oldest kept change is told its version is too old, as the API server tells it.
    """

    def __init__(self, sim: SimulatedCluster, capacity: int = 50_000) -> None:
        self.sim = sim
        self.capacity = capacity
        self.entries: dict[str, list[Change]] = {"nodes": [], "pods": []}
        self._seen: dict[str, dict[Any, Node | Pod]] = {"nodes": {}, "pods": {}}
        self._floor = {"nodes": sim.resource_version, "pods": sim.resource_version}
        self._observed = -1
        self.observe(initial=True)

    def observe(self, initial: bool = False) -> bool:
        sim = self.sim
        if sim.resource_version == self._observed:
            return False
        changed = False
        for kind, current in (("nodes", {n.name: n for n in sim.list_nodes()}),
                              ("pods", {p.key: p for p in sim.list_pods()})):
            seen = self._seen[kind]
            new: list[Change] = []
            replaced = []
            for key, obj in current.items():
                old = seen.get(key)
                if old is None:
                    new.append(Change(obj.resource_version, "ADDED", obj))
                elif old.uid != obj.uid:
                    replaced.append((old, obj))
                elif old.resource_version != obj.resource_version:
                    new.append(Change(obj.resource_version, "MODIFIED", obj))
            new.sort(key=lambda c: c.rv)
            for key in seen.keys() - current.keys():
                new.append(Change(sim.next_resource_version(), "DELETED", seen[key]))
            for old, obj in replaced:
                # Gone and made again under the same name (a StatefulSet's pod) between two looks: to a watcher
                # that is the old object DELETED, then a new one ADDED, never one object MODIFIED.
                new.append(Change(sim.next_resource_version(), "DELETED", old))
                new.append(Change(sim.next_resource_version(), "ADDED", obj))
            self._seen[kind] = current
            if initial or not new:
                continue
            log = self.entries[kind]
            log.extend(new)
            if len(log) > self.capacity:
                drop = len(log) - self.capacity // 2
                self._floor[kind] = log[drop - 1].rv
                del log[:drop]
            changed = True
        self._observed = sim.resource_version
        return changed

    def current(self, kind: str) -> list[Node | Pod]:
        return list(self._seen[kind].values())

    def since(self, kind: str, rv: int) -> list[Change]:
        """The changes after resource version ``rv``; ``Expired`` when some of them are no longer kept."""
        if rv < self._floor[kind]:
            raise Expired()
        log = self.entries[kind]
        return log[bisect.bisect_right(log, rv, key=lambda c: c.rv):]


# ------------------------------------------------------------------------------------ workloads


@dataclass
class Workload:
    resource: Resource
    obj: dict[str, Any]
    sim_uid: str | None = None  # the simulator's controller (None for a CronJob)
    jobs: list[str] = field(default_factory=list)  # a CronJob's jobs, oldest first

    @property
    def namespace(self) -> str:
        return self.obj["metadata"]["namespace"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]


def _selector_of(spec: dict[str, Any], kind: str, name: str, template_labels: dict[str, str]) -> None:
    raw = spec.get("selector")
    if raw is None:
        raise invalid(kind, name, "spec.selector", "Required value", "FieldValueRequired", "apps")
    try:
        selector = LabelSelector.parse(raw, "spec.selector", None)
    except PlatformError as exc:
        raise _platform_invalid(exc, kind, name) from None
    if selector is None or not selector.matches(template_labels):
        raise invalid(kind, name, "spec.template.metadata.labels", f"Invalid value: {template_labels!r}: "
                      "`selector` does not match template `labels`", group="apps")


def _template_pod(obj: dict[str, Any], template: Any, where: str, kind: str) -> Pod:
    meta = obj["metadata"]
    if not isinstance(template, dict):
        raise invalid(kind, meta["name"], where, "Required value", "FieldValueRequired")
    tmeta = template.get("metadata") or {}
    raw = {"metadata": {"name": meta["name"], "namespace": meta["namespace"], "labels": tmeta.get("labels"),
                        "annotations": tmeta.get("annotations")},
           "spec": template.get("spec")}
    try:
        return parse_pod(raw, where)
    except PlatformError as exc:
        raise _platform_invalid(exc, kind, meta["name"]) from None


def _int_field(spec: dict[str, Any], key: str, default: int, kind: str, name: str) -> int:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(kind, name, f"spec.{key}", f"Invalid value: {value!r}: must be greater than or equal to 0")
    return value


# ------------------------------------------------------------------------------------ the cluster


class ClusterState:
    """A simulated cluster with the API objects around it; every method runs under the server's lock."""

    def __init__(self, sim: SimulatedCluster, kubernetes_version: str = "1.32") -> None:
        self.sim = sim
        self.kubernetes_version = kubernetes_version
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.terminating: set[str] = set()
        self.workloads: dict[str, dict[tuple[str, str], Workload]] = {r: {} for r in WORKLOADS}
        self.stored: dict[str, dict[tuple[str, str], dict[str, Any]]] = {r: {} for r in STORED}
        self._adopted = -1
        for ns in SYSTEM_NAMESPACES:
            self._adopt_namespace(ns)
        from platformctl.server.events import EventRecorder

        self.recorder = EventRecorder(sim)
        self.changes = ChangeLog(sim)

    @property
    def name(self) -> str:
        return self.sim.name

    def invariants(self) -> dict[str, Any]:
        """What the event log says about every disruption so far: budgets broken by evictions, pods that went
        down with their node, pods a client deleted without the eviction API, and how often each thing happened."""
        from collections import Counter

        from platformctl.cluster.invariants import deleted_without_eviction, eviction_budget_violations, lost_pods

        events = self.sim.events
        return {"cluster": self.name, "budget_violations": eviction_budget_violations(events),
                "lost_pods": lost_pods(events), "deleted_without_eviction": deleted_without_eviction(events),
                "events": dict(Counter(e.kind for e in events)), "virtual_time": self.now()}

    def now(self) -> float:
        return self.sim.now()

    def _meta(self, obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": format_time(self.now()),
                     "resourceVersion": str(self.sim.next_resource_version()), "generation": 1})
        if namespace is not None:
            meta["namespace"] = namespace
        for key in ("deletionTimestamp", "managedFields", "selfLink"):
            meta.pop(key, None)
        return meta

    # ---------------------------------------------------------------- namespaces

    def _adopt_namespace(self, name: str) -> dict[str, Any]:
        obj = {"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        self._meta(obj, None)
        self.namespaces[name] = obj
        return obj

    def _namespaces_in_use(self) -> set[str]:
        used = {p.namespace for p in self.sim.list_pods()} | {b.namespace for b in self.sim.list_pdbs()}
        for objects in self.workloads.values():
            used |= {ns for ns, _ in objects}
        for kept in self.stored.values():
            used |= {ns for ns, _ in kept if ns}
        return used

    def list_namespaces(self) -> list[dict[str, Any]]:
        in_use = self._namespaces_in_use()
        for ns in in_use - self.namespaces.keys():
            self._adopt_namespace(ns)  # made by the simulator's own workloads
        for ns in list(self.terminating - in_use):
            self.terminating.discard(ns)
            self.namespaces.pop(ns, None)
        out = []
        for name in sorted(self.namespaces):
            obj = self.namespaces[name]
            if name in self.terminating:
                obj = {**obj, "status": {"phase": "Terminating"}}
            out.append(obj)
        return out

    def get_namespace(self, name: str) -> dict[str, Any]:
        for obj in self.list_namespaces():
            if obj["metadata"]["name"] == name:
                return obj
        raise not_found("namespaces", name)

    def require_namespace(self, name: str) -> None:
        self.get_namespace(name)
        if name in self.terminating:
            raise ApiError(403, "Forbidden", f'unable to create new content in namespace {name} because it is being terminated')

    def create_namespace(self, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in {o["metadata"]["name"] for o in self.list_namespaces()}:
            raise already_exists("namespaces", name)
        created = self._adopt_namespace(name)
        created["metadata"]["labels"] = {**(obj["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": name}
        return created

    def delete_namespace(self, name: str) -> dict[str, Any]:
        self.get_namespace(name)
        if name in SYSTEM_NAMESPACES:
            raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted')
        for kept in self.stored.values():
            for key in [k for k in kept if k[0] == name]:
                del kept[key]
        for resource in WORKLOADS:
            for ns, wname in list(self.workloads[resource]):
                if ns == name:
                    self.delete_workload(resource, ns, wname)
        for pdb in self.sim.list_pdbs(name):
            self.sim.delete_pdb(name, pdb.name)
        for pod in self.sim.list_pods(name):
            self.sim.delete_pod(name, pod.name, controller=True)  # the namespace controller's, not a client's
        self.terminating.add(name)
        return {**self.namespaces[name], "status": {"phase": "Terminating"}}

    # ---------------------------------------------------------------- pods and budgets

    def _create(self, res: Resource, namespace: str, obj: dict[str, Any], parse: Callable[[Any, str], Any],
                create: Callable[[Any], Any]) -> Any:
        """Create an object the simulator holds itself: parsed as a snapshot's, mistakes as the API reports them."""
        self.require_namespace(namespace)
        name = obj["metadata"]["name"]
        self._meta(obj, namespace)
        obj.pop("status", None)
        try:
            value = parse(obj, "object")
        except PlatformError as exc:
            raise invalid(res.kind, name, (exc.field or "").removeprefix("object."), exc.detail, group=res.group) from None
        try:
            return create(value)
        except PlatformError:
            raise already_exists(res.plural, name, res.group) from None

    def create_pod(self, namespace: str, obj: dict[str, Any]) -> Pod:
        return self._create(RESOURCES["pods"], namespace, obj, parse_pod, self.sim.create_pod)

    def create_pdb(self, namespace: str, obj: dict[str, Any]) -> PodDisruptionBudget:
        return self._create(RESOURCES["poddisruptionbudgets"], namespace, obj, parse_pdb,
                            lambda pdb: self.sim.create_pdb(pdb, keep_version=True))

    # ---------------------------------------------------------------- workloads

    # ---------------------------------------------------------------- kept as written

    def list_stored(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        kept = self.stored[plural]
        return [copy.deepcopy(kept[k]) for k in sorted(kept) if namespace is None or k[0] == namespace]

    def get_stored(self, plural: str, namespace: str | None, name: str) -> dict[str, Any]:
        key = (namespace or "default" if RESOURCES[plural].namespaced else "", name)
        if key not in self.stored[plural]:
            raise not_found(plural, name, RESOURCES[plural].group)
        return copy.deepcopy(self.stored[plural][key])

    def create_stored(self, plural: str, namespace: str | None, obj: dict[str, Any]) -> dict[str, Any]:
        res = RESOURCES[plural]
        ns = (namespace or "default") if res.namespaced else ""
        if ns:
            self.require_namespace(ns)
        key = (ns, obj["metadata"]["name"])
        if key in self.stored[plural]:
            raise already_exists(plural, key[1], res.group)
        created = copy.deepcopy(obj)
        created.update(apiVersion=res.api_version, kind=res.kind)
        self._meta(created, ns or None)
        self.stored[plural][key] = created
        return copy.deepcopy(created)

    def delete_stored(self, plural: str, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.get_stored(plural, namespace, name)
        del self.stored[plural][(obj["metadata"].get("namespace", ""), name)]
        return obj

    def apply(self, manifest: dict[str, Any]) -> None:
        """Create an object the Pulumi program declares for this cluster; one that exists is left as it is."""
        kind = manifest.get("kind")
        plural = next((p for p, r in RESOURCES.items() if r.kind == kind and r.api_version == manifest.get("apiVersion")), None)
        if plural is None:
            raise ApiError(404, "NotFound", f"the local region does not serve {manifest.get('apiVersion')} {kind}")
        namespace = (manifest.get("metadata") or {}).get("namespace")
        try:
            if plural == "namespaces":
                self.create_namespace(copy.deepcopy(manifest))
            elif plural in WORKLOADS:
                self.create_workload(plural, namespace or "default", copy.deepcopy(manifest))
            elif plural in STORED:
                self.create_stored(plural, namespace, manifest)
            else:
                raise ApiError(405, "MethodNotAllowed", f"the local region does not apply {plural}")
        except ApiError as exc:
            if exc.code != 409:
                raise

    def adopt_workloads(self) -> None:
        """Give every controller the simulator runs an API object (the ones made by synthetic workloads, and the
        ReplicaSets behind Deployments), so that clients find the owners their pods name."""
        controllers = self.sim.workloads()
        if len(controllers) == self._adopted:
            return
        known = {w.sim_uid for objects in self.workloads.values() for w in objects.values()
                 if w.resource.plural != "deployments"}
        owners = {w.sim_uid: w for w in self.workloads["deployments"].values()}
        for kind, namespace, name, uid, template, replicas in controllers:
            plural = _PLURAL_OF_SIM_KIND.get(kind)
            if plural is None or uid in known or (namespace, name) in self.workloads[plural]:
                continue
            res = RESOURCES[plural]
            pod = template.to_kube()
            pod["spec"].pop("nodeName", None)
            labels = dict(template.labels)
            spec: dict[str, Any] = {"selector": {"matchLabels": labels},
                                    "template": {"metadata": {"labels": labels}, "spec": pod["spec"]}}
            if plural == "jobs":
                spec["parallelism"] = replicas
            elif plural != "daemonsets":
                spec["replicas"] = replicas
            meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "generation": 1,
                                    "creationTimestamp": format_time(self.now()),
                                    "resourceVersion": str(self.sim.resource_version), "labels": labels}
            owner = owners.get(uid)
            if owner is not None:
                meta["creationTimestamp"] = owner.obj["metadata"]["creationTimestamp"]
                meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": owner.name,
                                            "uid": owner.obj["metadata"]["uid"], "controller": True}]
            obj = {"apiVersion": res.api_version, "kind": res.kind, "metadata": meta, "spec": spec}
            self.workloads[plural][(namespace, name)] = Workload(res, obj, uid)
        self._adopted = len(controllers)

    def list_workloads(self, resource: str, namespace: str | None) -> list[Workload]:
        self.adopt_workloads()
        objects = self.workloads[resource]
        return [objects[k] for k in sorted(objects) if namespace is None or k[0] == namespace]

    def get_workload(self, resource: str, namespace: str, name: str) -> Workload:
        self.adopt_workloads()
        found = self.workloads[resource].get((namespace, name))
        if found is None:
            raise not_found(resource, name, RESOURCES[resource].group)
        return found

    def create_workload(self, resource: str, namespace: str, obj: dict[str, Any], owner: Workload | None = None) -> Workload:
        res = RESOURCES[resource]
        self.require_namespace(namespace)
        name = obj["metadata"]["name"]
        if (namespace, name) in self.workloads[resource]:
            raise already_exists(resource, name, res.group)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise invalid(res.kind, name, "spec", "Required value", "FieldValueRequired", res.group)
        self._meta(obj, namespace)
        obj.pop("status", None)
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        workload = Workload(res, obj)
        if resource == "cronjobs":
            self._check_cronjob(obj)
        else:
            self._start(workload, owner)
        self.workloads[resource][(namespace, name)] = workload
        return workload

    def _start(self, workload: Workload, owner: Workload | None) -> None:
        obj, res = workload.obj, workload.resource
        spec, name = obj["spec"], obj["metadata"]["name"]
        template = spec.get("template")
        pod = _template_pod(obj, template, "spec.template", res.kind)
        if res.plural == "jobs":
            restart = (template.get("spec") or {}).get("restartPolicy")
            if restart not in ("Never", "OnFailure"):
                raise invalid("Job", name, "spec.template.spec.restartPolicy",
                              f'Required value: valid values: "OnFailure", "Never" (got {restart!r})', "FieldValueRequired", "batch")
            parallelism = _int_field(spec, "parallelism", 1, res.kind, name)
            completions = _int_field(spec, "completions", parallelism, res.kind, name)
            ttl = spec.get("ttlSecondsAfterFinished")
            labels = {**pod.labels, "batch.kubernetes.io/job-name": name, "job-name": name}
            pod = _with_labels(pod, labels)
            workload.sim_uid = self.sim.create_workload("Job", pod, parallelism, completions=completions,
                                                        ttl_seconds=float(ttl) if isinstance(ttl, int) else None)
            if owner is not None:
                obj["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "CronJob", "name": owner.name,
                                                       "uid": owner.obj["metadata"]["uid"], "controller": True}]
            obj["status"] = {"startTime": format_time(self.now())}
            return
        _selector_of(spec, res.kind, name, dict(pod.labels))
        replicas = _int_field(spec, "replicas", 1, res.kind, name)
        if res.plural == "deployments":
            rs = f"{name}-{uuid.uuid5(uuid.NAMESPACE_OID, repr(template)).hex[:10]}"
            pod = _with_labels(_renamed(pod, rs), {**pod.labels, "pod-template-hash": rs.rsplit("-", 1)[1]})
        workload.sim_uid = self.sim.create_workload(_SIM_KIND[res.plural], pod, replicas)

    def delete_workload(self, resource: str, namespace: str, name: str) -> Workload:
        workload = self.get_workload(resource, namespace, name)
        del self.workloads[resource][(namespace, name)]
        if workload.sim_uid is not None and self.sim.has_workload(workload.sim_uid):
            self.sim.delete_workload(workload.sim_uid)
        if resource == "deployments":
            for key, rs in list(self.workloads["replicasets"].items()):
                if rs.sim_uid == workload.sim_uid:
                    del self.workloads["replicasets"][key]
        self._adopted = -1
        for job in workload.jobs:
            if (namespace, job) in self.workloads["jobs"]:
                self.delete_workload("jobs", namespace, job)
        self.sim.next_resource_version()
        return workload

    def workload_object(self, workload: Workload) -> dict[str, Any]:
        """The stored object with the status its controller would have written."""
        obj = copy.deepcopy(workload.obj)
        plural = workload.resource.plural
        if plural == "cronjobs":
            active = [j for j in workload.jobs if self._job_active(workload.namespace, j)]
            status: dict[str, Any] = dict(obj.get("status") or {})
            if active:
                status["active"] = [{"kind": "Job", "namespace": workload.namespace, "name": j, "apiVersion": "batch/v1"}
                                    for j in active]
            obj["status"] = status
            return obj
        counts = self.sim.workload_status(workload.sim_uid or "")
        generation = obj["metadata"].get("generation", 1)
        if plural == "jobs":
            status = dict(obj.get("status") or {})
            status.update({"active": counts["active"], "succeeded": counts["succeeded"], "ready": counts["ready"]})
            if counts["complete"]:
                status.setdefault("completionTime", format_time(self.now()))
                status["conditions"] = [{"type": "Complete", "status": "True"}]
            obj["status"] = status
            workload.obj["status"] = status
        elif plural == "daemonsets":
            obj["status"] = {"observedGeneration": generation, "desiredNumberScheduled": counts["replicas"],
                             "currentNumberScheduled": counts["replicas"], "numberReady": counts["ready"],
                             "numberAvailable": counts["ready"], "updatedNumberScheduled": counts["replicas"],
                             "numberMisscheduled": 0}
        else:
            obj["status"] = {"observedGeneration": generation, "replicas": counts["replicas"],
                             "updatedReplicas": counts["replicas"], "readyReplicas": counts["ready"],
                             "availableReplicas": counts["ready"]}
            if plural == "deployments":
                want = obj["spec"].get("replicas", 1)
                obj["status"]["conditions"] = [{"type": "Available", "status": "True" if counts["ready"] >= want else "False",
                                                "reason": "MinimumReplicasAvailable" if counts["ready"] >= want
                                                else "MinimumReplicasUnavailable"}]
        return obj

    def _job_active(self, namespace: str, name: str) -> bool:
        job = self.workloads["jobs"].get((namespace, name))
        return job is not None and not self.sim.workload_status(job.sim_uid or "")["complete"]

    # ---------------------------------------------------------------- CronJobs

    def _check_cronjob(self, obj: dict[str, Any]) -> None:
        spec, name = obj["spec"], obj["metadata"]["name"]
        schedule = spec.get("schedule")
        if not isinstance(schedule, str) or not croniter.is_valid(schedule):
            raise invalid("CronJob", name, "spec.schedule", f"Invalid value: {schedule!r}: not a standard cron schedule", group="batch")
        template = spec.get("jobTemplate")
        if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
            raise invalid("CronJob", name, "spec.jobTemplate.spec", "Required value", "FieldValueRequired", "batch")
        policy = spec.get("concurrencyPolicy", "Allow")
        if policy not in ("Allow", "Forbid", "Replace"):
            raise invalid("CronJob", name, "spec.concurrencyPolicy", f'Unsupported value: {policy!r}: supported values: '
                          '"Allow", "Forbid", "Replace"', "FieldValueNotSupported", "batch")
        # The job template must make a valid Job: checked now, not at the first run.
        _template_pod(obj, template["spec"].get("template"), "spec.jobTemplate.spec.template", "CronJob")

    def run_cronjobs(self) -> None:
        """The CronJob controller: start each due run (the latest one, if several were missed)."""
        now = self.now()
        for cron in list(self.workloads["cronjobs"].values()):
            spec = cron.obj["spec"]
            if spec.get("suspend"):
                continue
            status = cron.obj.setdefault("status", {})
            last = status.get("lastScheduleTime") or cron.obj["metadata"]["creationTimestamp"]
            due = None
            it = croniter(spec["schedule"], parse_time(last, "lastScheduleTime", None))
            while (t := it.get_next(float)) <= now:
                due = t
            if due is None:
                continue
            status["lastScheduleTime"] = format_time(due)
            active = [j for j in cron.jobs if self._job_active(cron.namespace, j)]
            policy = spec.get("concurrencyPolicy", "Allow")
            if active and policy == "Forbid":
                continue
            if active and policy == "Replace":
                for job in active:
                    self.delete_workload("jobs", cron.namespace, job)
            template = copy.deepcopy(spec["jobTemplate"])
            job_name = f"{cron.name}-{int(due // 60)}"
            job = {"metadata": {**(template.get("metadata") or {}), "name": job_name}, "spec": template["spec"]}
            if (cron.namespace, job_name) not in self.workloads["jobs"]:
                self.create_workload("jobs", cron.namespace, job, owner=cron)
                cron.jobs.append(job_name)
            self._prune_history(cron)

    def _prune_history(self, cron: Workload) -> None:
        spec = cron.obj["spec"]
        keep = spec.get("successfulJobsHistoryLimit", 3)  # simulated jobs never fail: only this limit applies
        finished = [j for j in cron.jobs if (cron.namespace, j) in self.workloads["jobs"] and not self._job_active(cron.namespace, j)]
        for job in finished[: max(len(finished) - keep, 0)]:
            self.delete_workload("jobs", cron.namespace, job)
        cron.jobs = [j for j in cron.jobs if (cron.namespace, j) in self.workloads["jobs"]]

    def forget_finished_jobs(self) -> None:
        """Controllers the simulator deleted itself (a Job past ``ttlSecondsAfterFinished``): drop their objects."""
        for plural in ("jobs", "replicasets", "daemonsets", "statefulsets"):
            for key, workload in list(self.workloads[plural].items()):
                if workload.sim_uid is not None and not self.sim.has_workload(workload.sim_uid):
                    del self.workloads[plural][key]
                    self._adopted = -1

    def tick(self) -> bool:
        """The controllers' turn after the clock moved; returns whether any node or pod changed."""
        self.run_cronjobs()
        self.forget_finished_jobs()
        self.recorder.sync()
        return self.changes.observe()


def _with_labels(pod: Pod, labels: dict[str, str]) -> Pod:
    return replace(pod, labels=labels)


def _renamed(pod: Pod, name: str) -> Pod:
    return replace(pod, name=name)


def field_selector(text: str, fields: dict[str, Callable[[Any], str]]) -> Callable[[Any], bool]:
    """A ``fieldSelector=`` predicate over the fields a kind supports (``=``, ``==``, ``!=``, comma-separated)."""
    tests: list[tuple[Callable[[Any], str], str, bool]] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        op = next((o for o in ("!=", "==", "=") if o in term), None)
        if op is None:
            raise bad_request(f"invalid field selector: {term!r}: expected a key=value, key==value or key!=value term")
        key, value = term.split(op, 1)
        getter = fields.get(key.strip())
        if getter is None:
            raise bad_request(f'field label not supported: {key.strip()}')
        tests.append((getter, value.strip(), op != "!="))
    return lambda obj: all((get(obj) == value) == equal for get, value, equal in tests)


def label_selector(text: str | None) -> Callable[[Iterable[Any]], bool] | None:
    if not text:
        return None
    try:
        return parse_selector_string(text).matches
    except PlatformError as exc:
        raise bad_request(f"unable to parse requirement: {exc.detail}") from None

