"""One simulated cluster as its API server holds it.

The simulator owns nodes, pods, PodDisruptionBudgets, the workload objects clients create
(Deployments, DaemonSets, StatefulSets, Jobs, CronJobs: ``platformctl.emulator.workloads``) and the
controllers that run them. The API adds what it needs on top: namespace objects, objects kept as
written, and a change log of nodes and pods that watches read from a resource version on, as the
watch cache does (too old a version is ``410 Gone``).

Errors are ``ApiError``s that carry the API's ``Status`` answer (404, 409, 422, ...).
"""

from __future__ import annotations

import base64
import bisect
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from platformctl.emulator.server.podsecurity import ENFORCE
from platformctl.emulator.sim_watch import Expired as SimExpired
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.emulator.workloads import Workload, apply_patch
from platformctl.kernel.cluster.apiobjects import (  # noqa: F401 (the server's names for them)
    EVENTS_V1,
    RESOURCES,
    STORED,
    SYSTEM_NAMESPACES,
    WORKLOADS,
    ApiError,
    Resource,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
)
from platformctl.kernel.cluster.model import Node, Pod, PodDisruptionBudget, parse_pdb, parse_pod
from platformctl.kernel.cluster.selectors import parse_selector_string
from platformctl.kernel.errors import NotFoundError, PlatformError

# ------------------------------------------------------------------------------------ change log

# Fields an update may not change (the kinds' ValidateUpdate in kube-apiserver: PriorityClass's value, a Secret's type).
_IMMUTABLE = {"priorityclasses": (("value", "Forbidden: may not be changed in an update."),),
              "secrets": (("type", "Invalid value: field is immutable"),)}


@dataclass(frozen=True, slots=True)
class Change:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    obj: Node | Pod | PodDisruptionBudget


SIM_KINDS = {"nodes": "nodes", "pods": "pods", "poddisruptionbudgets": "pdbs"}  # the simulator's change log's names


class Expired(Exception):
    """The asked resource version is older than the oldest change kept."""


class ChangeLog:
    """Every change of a node, pod or PodDisruptionBudget, in resource-version order, as the watch cache keeps them.

    ``observe()`` compares the simulator's objects with what it saw last (the objects it is told of by the
    simulator's own change log, so that a look costs what changed, not what exists); it runs before every
    request and after every tick of the clock, and costs nothing while the cluster's resource
    version stands still. The oldest changes are dropped past ``capacity``; a watch from before the
    oldest kept change is told its version is too old, as the API server tells it. PodDisruptionBudgets
    are compared by value: their status (what the disruption controller computes) moves without their
    own version moving, and a watcher must hear of it.
    """

    def __init__(self, sim: SimulatedCluster, capacity: int = 50_000) -> None:
        self.sim = sim
        self.capacity = capacity
        self.entries: dict[str, list[Change]] = {"nodes": [], "pods": [], "poddisruptionbudgets": []}
        self._seen: dict[str, dict[Any, Any]] = {"nodes": {}, "pods": {}, "poddisruptionbudgets": {}}
        self._floor = {kind: sim.resource_version for kind in self.entries}
        self._observed = -1
        self._noted = sim.change_log()  # the simulator's own record of each change, from here on
        self._cursor = dict.fromkeys(self.entries, sim.resource_version)
        self.observe(initial=True)

    def observe(self, initial: bool = False) -> bool:
        sim = self.sim
        if sim.resource_version == self._observed:
            return False
        changed = False
        listers: dict[str, Callable[[], dict[Any, Any]]] = {
            "nodes": lambda: {n.name: n for n in sim.list_nodes()}, "pods": lambda: {p.key: p for p in sim.list_pods()},
            "poddisruptionbudgets": lambda: {b.key: b for b in sim.list_pdbs()}}
        for kind, listed in listers.items():
            touched: dict[Any, Any] | None = None if initial else self._touched(kind)
            if touched is None:  # every object compared: at first, or past the simulator's log's reach
                current = listed()
                touched = {**dict.fromkeys(self._seen[kind].keys() - current.keys()), **current}
            new = self._compare(kind, touched)
            if initial or not new:
                continue
            self._log(kind, new)
            changed = True
        self._observed = sim.resource_version
        return changed

    def _touched(self, kind: str) -> dict[Any, Any] | None:
        """The objects of ``kind`` the simulator's own change log names since the last look, each as it is now (None:
        gone), so that a look costs what changed, not what exists (comparing 100,000 pods and computing 1,500 budgets'
        status on every change was most of a large region's time); None when that log has dropped some of them: every
        object is compared then."""
        try:
            noted = self._noted.since(SIM_KINDS[kind], self._cursor[kind])
        except SimExpired:
            self._cursor[kind] = self.sim.resource_version
            return None
        if not noted:
            return {}
        self._cursor[kind] = noted[-1][0]
        if kind == "poddisruptionbudgets":  # the simulator notes its budget, whose status is computed as it is read
            last = {b.pdb.key: (type_, b) for _, type_, b in noted}
            return {key: None if type_ == "DELETED" else self.sim.budget_object(b, type_) for key, (type_, b) in last.items()}
        named = (lambda n: n.name) if kind == "nodes" else (lambda p: p.key)
        return {named(obj): None if type_ == "DELETED" else obj for _, type_, obj in noted}

    def _compare(self, kind: str, touched: dict[Any, Any]) -> list[Change]:
        """The changes of the ``touched`` objects (key -> the object now, None when gone) against what was seen last,
        in version order; what is seen is updated."""
        sim = self.sim
        seen = self._seen[kind]
        new: list[Change] = []
        gone = []
        replaced = []
        for key, obj in touched.items():
            old = seen.get(key)
            if obj is None:
                if old is not None:
                    gone.append(seen.pop(key))
                continue
            if old is None:
                new.append(Change(obj.resource_version, "ADDED", obj))
            elif old.uid != obj.uid:
                replaced.append((old, obj))
            elif old.resource_version != obj.resource_version:
                new.append(Change(obj.resource_version, "MODIFIED", obj))
            elif kind == "poddisruptionbudgets" and old != obj:
                # The disruption controller's status moved (a covered pod turned Ready or went): a new version.
                new.append(Change(sim.next_resource_version(), "MODIFIED", obj))
            seen[key] = obj
        new.sort(key=lambda c: c.rv)
        new += [Change(sim.next_resource_version(), "DELETED", old) for old in gone]
        for old, obj in replaced:
            # Gone and made again under the same name (a StatefulSet's pod) between two looks: to a watcher
            # that is the old object DELETED, then a new one ADDED, never one object MODIFIED.
            new.append(Change(sim.next_resource_version(), "DELETED", old))
            new.append(Change(sim.next_resource_version(), "ADDED", obj))
        return new

    def _log(self, kind: str, new: list[Change]) -> None:
        log = self.entries[kind]
        log.extend(new)
        if len(log) > self.capacity:
            drop = len(log) - self.capacity // 2
            self._floor[kind] = log[drop - 1].rv
            del log[:drop]

    def current(self, kind: str) -> list[Node | Pod]:
        return list(self._seen[kind].values())

    def latest(self, kind: str) -> int:
        """The resource version of the newest change of ``kind`` (what a watcher that has it has heard of)."""
        log = self.entries.get(kind)
        return log[-1].rv if log else self._floor.get(kind, 0)

    def since(self, kind: str, rv: int) -> list[Change]:
        """The changes after resource version ``rv``; ``Expired`` when some of them are no longer kept."""
        if rv < self._floor[kind]:
            raise Expired()
        log = self.entries[kind]
        return log[bisect.bisect_right(log, rv, key=lambda c: c.rv):]


# ------------------------------------------------------------------------------------ the cluster


class ClusterState:
    """A simulated cluster with the API objects around it; every method runs under the server's lock."""

    def __init__(self, sim: SimulatedCluster, kubernetes_version: str | Callable[[], str] = "1.32") -> None:
        self.sim = sim
        # the control plane's version: a function when it can change (the local region's EKS, which a deploy upgrades)
        self._version = kubernetes_version
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.terminating: set[str] = set()
        self.objects = sim.api_objects  # the workload objects and their controllers (platformctl.emulator.workloads)
        self.objects.require_namespace = self.require_namespace
        self.stored: dict[str, dict[tuple[str, str], dict[str, Any]]] = {r: {} for r in STORED}
        for ns in SYSTEM_NAMESPACES:
            self._adopt_namespace(ns)
        from platformctl.emulator.server.events import EventRecorder

        self.recorder = EventRecorder(sim)
        self.changes = ChangeLog(sim)
        self._refused: set[tuple[str, str]] = set()  # (controller uid, why): said once, as FailedCreate
        sim.admit_pods(self._refuses)

    def _refuses(self, ctrl: Any) -> bool:
        """Pod Security admission of a controller's new pod: its namespace's level against the controller's
        template as written; a refusal is the controller's ``FailedCreate`` event."""
        from platformctl.emulator.server.podsecurity import refusal
        from platformctl.emulator.workloads import PLURAL_OF_SIM_KIND

        namespace = self.namespaces.get(ctrl.namespace)
        if not (((namespace or {}).get("metadata") or {}).get("labels") or {}).get(ENFORCE):
            return False
        found = self.objects.objects.get(PLURAL_OF_SIM_KIND.get(ctrl.kind, ""), {}).get((ctrl.namespace, ctrl.name))
        spec = ((found.obj.get("spec") or {}).get("template") or {}).get("spec") or {} if found is not None else {}
        why = refusal(namespace, f"{ctrl.name}-", spec)
        if why is None:
            return False
        if (ctrl.uid, why) not in self._refused:
            self._refused.add((ctrl.uid, why))
            api = RESOURCES[PLURAL_OF_SIM_KIND[ctrl.kind]].api_version
            self.sim.workload_event(api, ctrl.kind, ctrl.namespace, ctrl.name, ctrl.uid, "FailedCreate",
                                    f"Error creating: {why}", f"{ctrl.kind.lower()}-controller")
        return True

    @property
    def name(self) -> str:
        return self.sim.name

    @property
    def kubernetes_version(self) -> str:
        return self._version() if callable(self._version) else self._version

    def pod_log(self, ns: str, name: str, query: Mapping[str, str]) -> str:
        """``kubectl logs``: what the pod's container wrote (the last ``tailLines`` of the query), as the kubelet
        answers it; a container that has not started has nothing to show yet (400, as kube-apiserver says it)."""
        container, tail_lines = query.get("container"), query.get("tailLines")
        try:
            pod = self.sim.get_pod(ns, name)
        except NotFoundError:
            raise not_found("pods", name) from None
        names = [c.name for c in pod.containers]
        if container and container not in names:
            raise bad_request(f"container {container} is not valid for pod {name}")
        if pod.phase == "Pending":
            raise bad_request(f'container "{container or names[0]}" in pod "{name}" is waiting to start: '
                              f"{pod.waiting or 'ContainerCreating'}")
        text = self.sim.container_log(ns, name)
        if tail_lines is None:
            return text
        try:
            count = int(tail_lines)
        except ValueError:
            raise bad_request(f"tailLines: invalid value {tail_lines!r}") from None
        return "".join(text.splitlines(keepends=True)[-count:]) if count > 0 else ""

    def invariants(self) -> dict[str, Any]:
        """What the event log says about every disruption so far: budgets broken by evictions, pods that went
        down with their node, pods a client deleted without the eviction API, and how often each thing happened."""
        from collections import Counter

        from platformctl.emulator.invariants import deleted_without_eviction, eviction_budget_violations, lost_pods

        events = self.sim.events
        return {"cluster": self.name, "budget_violations": eviction_budget_violations(events),
                "lost_pods": lost_pods(events), "deleted_without_eviction": deleted_without_eviction(events),
                "events": dict(Counter(e.kind for e in events)), "virtual_time": self.now()}

    def now(self) -> float:
        return self.sim.now()

    def _meta(self, obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        return self.objects.meta(obj, namespace)

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
        used |= self.objects.namespaces_in_use()
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

    def replace_namespace(self, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT of a namespace: its labels and annotations (``kubernetes.io/metadata.name`` stays its name, as the API
        server sets it); a ``resourceVersion`` given must be the current one."""
        current = self.get_namespace(name)
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") != name:
            raise bad_request(f"the name of the object ({(meta or {}).get('name')}) does not match the name on the URL ({name})")
        if meta.get("resourceVersion") not in (None, "", current["metadata"]["resourceVersion"]):
            raise conflict("namespaces", name)
        kept = self.namespaces[name]["metadata"]
        kept["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": name}
        kept["annotations"] = dict(meta.get("annotations") or {})
        kept["resourceVersion"] = str(self.sim.next_resource_version())
        return self.get_namespace(name)

    def delete_namespace(self, name: str) -> dict[str, Any]:
        self.get_namespace(name)
        if name in SYSTEM_NAMESPACES:
            raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted')
        for kept in self.stored.values():
            for key in [k for k in kept if k[0] == name]:
                del kept[key]
        for resource in WORKLOADS:
            for ns, wname in list(self.objects.objects[resource]):
                if ns == name and (ns, wname) in self.objects.objects[resource]:
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
        from platformctl.emulator.server.podsecurity import refusal

        why = refusal(self.namespaces.get(namespace), str((obj.get("metadata") or {}).get("name", "")), obj.get("spec") or {})
        if why is not None:
            raise ApiError(403, "Forbidden", why, {"name": str((obj.get("metadata") or {}).get("name", "")), "kind": "pods"})
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
        if plural == "secrets":  # stringData is write-only: the API server folds it into data, base64
            written = created.pop("stringData", None) or {}
            created["data"] = {**(created.get("data") or {}),
                               **{k: base64.b64encode(str(v).encode()).decode() for k, v in written.items()}}
            created.setdefault("type", "Opaque")
        self._meta(created, ns or None)
        self.stored[plural][key] = created
        return copy.deepcopy(created)

    def replace_stored(self, plural: str, namespace: str | None, name: str, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT, as the API server's generic registry answers it: the object must exist (these kinds are not created by
        an update), its name and namespace are the URL's, a ``resourceVersion`` given must be the current one (else 409),
        and none given is an unconditional update; ``uid`` and ``creationTimestamp`` stay, the version moves on."""
        res = RESOURCES[plural]
        current = self.get_stored(plural, namespace, name)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise invalid(res.kind, name, "metadata", "Required value", "FieldValueRequired", res.group)
        if meta.get("name") != name:
            raise bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
        if res.namespaced and meta.get("namespace") not in (None, "", current["metadata"]["namespace"]):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        if obj.get("apiVersion") not in (None, res.api_version) or obj.get("kind") not in (None, res.kind):
            raise bad_request(f"the kind in the data ({obj.get('apiVersion')} {obj.get('kind')}) does not match the "
                              f"expected kind ({res.api_version} {res.kind})")
        if meta.get("resourceVersion") not in (None, "", current["metadata"]["resourceVersion"]):
            raise conflict(plural, name, res.group)
        for field, what in _IMMUTABLE.get(plural, ()):  # the kinds' ValidateUpdate
            if field in obj and obj.get(field) != current.get(field):
                raise invalid(res.kind, name, field, what, "FieldValueForbidden" if what.startswith("Forbidden") else
                              "FieldValueInvalid", res.group)
        updated = copy.deepcopy(obj)
        updated.update(apiVersion=res.api_version, kind=res.kind)
        if plural == "secrets":
            written = updated.pop("stringData", None) or {}
            updated["data"] = {**(updated.get("data") or {}),
                               **{k: base64.b64encode(str(v).encode()).decode() for k, v in written.items()}}
            updated.setdefault("type", current.get("type", "Opaque"))
        kept = current["metadata"]
        updated["metadata"] = {**{k: v for k, v in meta.items() if k not in ("managedFields", "selfLink", "deletionTimestamp")},
                               "uid": kept["uid"], "creationTimestamp": kept["creationTimestamp"],
                               "resourceVersion": str(self.sim.next_resource_version()),
                               **({"namespace": kept["namespace"]} if res.namespaced else {})}
        self.stored[plural][(kept.get("namespace", ""), name)] = updated
        return copy.deepcopy(updated)

    def patch_stored(self, plural: str, namespace: str | None, name: str, patch: Any, json_patch: bool) -> dict[str, Any]:
        """PATCH: the patch applied to the object as it is now, then stored as a PUT would (a ``resourceVersion`` the
        patch sets is a precondition, as on the API server)."""
        patched = apply_patch(self.get_stored(plural, namespace, name), patch, json_patch)
        if not isinstance(patched, dict):
            raise bad_request("the patch does not leave an object")
        return self.replace_stored(plural, namespace, name, patched)

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

    def list_workloads(self, resource: str, namespace: str | None) -> list[Workload]:
        return self.objects.list(resource, namespace)

    def get_workload(self, resource: str, namespace: str, name: str) -> Workload:
        return self.objects.get(resource, namespace, name)

    def create_workload(self, resource: str, namespace: str, obj: dict[str, Any]) -> Workload:
        return self.objects.create(resource, namespace, obj)

    def delete_workload(self, resource: str, namespace: str, name: str) -> Workload:
        return self.objects.delete(resource, namespace, name)

    def workload_object(self, workload: Workload) -> dict[str, Any]:
        return self.objects.object(workload)

    def tick(self) -> bool:
        """After the clock moved (the controllers ran on it): returns whether any node or pod changed. Every request
        catches the clock up and ticks every cluster, so each step costs nothing when nothing it looks at changed."""
        self.objects.forget_finished_jobs()
        self.recorder.sync()
        return self.changes.observe()


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


def label_selector(text: str | None) -> Callable[[Mapping[str, str]], bool] | None:
    if not text:
        return None
    try:
        return parse_selector_string(text).matches
    except PlatformError as exc:
        raise bad_request(f"unable to parse requirement: {exc.detail}") from None

