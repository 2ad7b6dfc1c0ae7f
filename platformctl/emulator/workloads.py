"""The workload objects of a simulated cluster, as the API server stores them and its controllers keep them.

Deployments, ReplicaSets, DaemonSets, StatefulSets, Jobs and CronJobs are held as the API's JSON
objects: created, read, replaced (PUT), patched, scaled (the ``scale`` subresource) and deleted with
the API's own answers (``ApiError``: 404, 409, 422 …), and read back with the status their
controllers write. The pods they own are the simulator's; the controllers are in
``platformctl.emulator.controllers`` (a Deployment rolls through ReplicaSets, a CronJob makes Jobs).

The simulator in process (``SimulatedCluster.create_object`` and its kin) and the local region's API
server use this one implementation, so a canary or a test sees the same workloads either way.
"""

from __future__ import annotations

import builtins
import copy
import json
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from platformctl.emulator.controllers.cronjob import CronJobController
from platformctl.emulator.controllers.deployment import DeploymentController
from platformctl.emulator.controllers.job import CONTROLLER_UID, job_labels
from platformctl.emulator.controllers.objects import Workload, WorkloadHost
from platformctl.emulator.podspec import failure_rules, int_field, selector_of, template_pod
from platformctl.kernel.cluster.apiobjects import (
    RESOURCES,
    WORKLOADS,
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
    plural_of,
)
from platformctl.kernel.cluster.model import PodDisruptionBudget, format_time, parse_pdb
from platformctl.kernel.errors import ApiRefused, NotFoundError, PlatformError

# Which simulator controller runs each kind's pods (a Deployment's run through its ReplicaSets).
SIM_KIND = {"replicasets": "ReplicaSet", "daemonsets": "DaemonSet", "statefulsets": "StatefulSet", "jobs": "Job"}
PLURAL_OF_SIM_KIND = {v: k for k, v in SIM_KIND.items()}
SCALABLE = ("deployments", "replicasets", "statefulsets")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; as a strategic merge patch, lists of objects with a ``name`` (containers, env,
    volumes) merge item by item on it, as their ``patchMergeKey`` says."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # strategic-merge directives: nothing served here needs them
        if value is None:
            out.pop(key, None)
        elif isinstance(value, list) and isinstance(out.get(key), list) and value and \
                all(isinstance(v, dict) and "name" in v for v in value) and \
                all(isinstance(v, dict) and "name" in v for v in out[key]):
            merged = {v["name"]: v for v in out[key]}
            for item in value:
                merged[item["name"]] = merge_patch(merged.get(item["name"]), item)
            out[key] = list(merged.values())
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def apply_patch(current: dict[str, Any], patch: Any, json_patch: bool) -> Any:
    """A PATCH body applied as the API server applies it: an RFC 6902 JSON patch, or a (strategic) merge patch."""
    if json_patch:
        import jsonpatch

        try:
            return jsonpatch.apply_patch(current, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError) as exc:
            raise ApiError(422, "Invalid", f"the JSON patch could not be applied: {exc}") from None
    if not isinstance(patch, dict):
        raise bad_request("a merge patch must be a JSON object")
    return merge_patch(current, patch)


class Workloads:
    """The workload objects of one simulated cluster; ``require_namespace`` refuses a namespace that is not
    there or is going away (the API server's), or accepts any (the simulator in process)."""

    def __init__(self, sim: WorkloadHost, require_namespace: Callable[[str], None] | None = None) -> None:
        self.sim = sim
        self.require_namespace = require_namespace or (lambda name: None)
        self.objects: dict[str, dict[tuple[str, str], Workload]] = {r: {} for r in WORKLOADS}
        self._adopted = -1
        self._forgotten = 0  # the simulator's count of removed workloads when they were last looked for
        self.deployments = DeploymentController(self)
        self.cronjobs = CronJobController(self)
        sim.job_done_hooks.append(self._job_done)

    def _job_done(self, sim_uid: str) -> None:
        job = next((j for j in self.objects["jobs"].values() if j.sim_uid == sim_uid), None)
        if job is not None:
            self.event(job, "Completed", "Job completed", "job-controller")

    def now(self) -> float:
        return self.sim.now()

    def meta(self, obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": format_time(self.now()),
                     "resourceVersion": str(self.sim.next_resource_version()), "generation": 1})
        if namespace is not None:
            meta["namespace"] = namespace
        for key in ("deletionTimestamp", "managedFields", "selfLink"):
            meta.pop(key, None)
        return meta

    def namespaces_in_use(self) -> set[str]:
        return {ns for objects in self.objects.values() for ns, _ in objects}

    # ---------------------------------------------------------------- reading

    def adopt(self) -> None:
        """Give every controller the simulator runs without an API object (synthetic workloads) one, so that
        clients find the owners their pods name."""
        controllers = self.sim.workloads()
        if len(controllers) == self._adopted:
            return
        known = {w.sim_uid for objects in self.objects.values() for w in objects.values()}
        for kind, namespace, name, uid, template, replicas in controllers:
            plural = PLURAL_OF_SIM_KIND.get(kind)
            if plural is None or uid in known or (namespace, name) in self.objects[plural]:
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
            obj = {"apiVersion": res.api_version, "kind": res.kind, "metadata": meta, "spec": spec}
            self.objects[plural][(namespace, name)] = Workload(res, obj, uid)
        self._adopted = len(controllers)

    def list(self, resource: str, namespace: str | None) -> list[Workload]:
        self.adopt()
        objects = self.objects[resource]
        return [objects[k] for k in sorted(objects) if namespace is None or k[0] == namespace]

    def get(self, resource: str, namespace: str, name: str) -> Workload:
        self.adopt()
        found = self.objects[resource].get((namespace, name))
        if found is None:
            raise not_found(resource, name, RESOURCES[resource].group)
        return found

    def owned_by(self, resource: str, owner: Workload) -> builtins.list[Workload]:  # (``list`` is a method here)
        return [w for w in self.objects[resource].values() if w.namespace == owner.namespace and
                any(ref.get("uid") == owner.uid for ref in w.obj["metadata"].get("ownerReferences") or ())]

    # ---------------------------------------------------------------- writing

    def create(self, resource: str, namespace: str, obj: dict[str, Any], owner: Workload | None = None) -> Workload:
        res = RESOURCES[resource]
        self.require_namespace(namespace)
        name = obj["metadata"]["name"]
        if (namespace, name) in self.objects[resource]:
            raise already_exists(resource, name, res.group)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise invalid(res.kind, name, "spec", "Required value", "FieldValueRequired", res.group)
        self.meta(obj, namespace)
        obj.pop("status", None)
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        if owner is not None:
            obj["metadata"]["ownerReferences"] = [{"apiVersion": owner.resource.api_version, "kind": owner.resource.kind,
                                                   "name": owner.name, "uid": owner.uid, "controller": True,
                                                   "blockOwnerDeletion": True}]
        workload = Workload(res, obj)
        if resource == "cronjobs":
            self.cronjobs.check(obj)
        elif resource == "deployments":
            self.deployments.check(obj)
        else:  # kept first: its controller's first pods are admitted against the object as written (Pod Security)
            self.objects[resource][(namespace, name)] = workload
            try:
                self._start(workload)
            except BaseException:
                del self.objects[resource][(namespace, name)]
                raise
        self.objects[resource][(namespace, name)] = workload
        if resource == "cronjobs":
            self.cronjobs.start(workload)
        elif resource == "deployments":
            self.deployments.sync(workload)
        return workload

    def _start(self, workload: Workload) -> None:
        obj, res = workload.obj, workload.resource
        spec, name = obj["spec"], obj["metadata"]["name"]
        template = spec.get("template")
        pod = template_pod(obj, template, "spec.template", res.kind)
        if res.plural == "jobs":
            restart = (template.get("spec") or {}).get("restartPolicy")
            if restart not in ("Never", "OnFailure"):
                raise invalid("Job", name, "spec.template.spec.restartPolicy",
                              f'Required value: valid values: "OnFailure", "Never" (got {restart!r})', "FieldValueRequired", "batch")
            parallelism = int_field(spec, "parallelism", 1, res.kind, name)
            completions = int_field(spec, "completions", parallelism, res.kind, name)
            ttl = spec.get("ttlSecondsAfterFinished")
            manual = spec.get("manualSelector") is True
            if manual:
                selector_of(spec, res.kind, name, dict(pod.labels), res.group)
            elif spec.get("selector") is not None:  # the server's to make: one given is refused once merged into it
                raise invalid("Job", name, "spec.selector", f"Invalid value: {json.dumps(spec['selector'])}: "
                              "`selector` not auto-generated", group="batch")
            backoff = int_field(spec, "backoffLimit", 6, res.kind, name)
            workload.sim_uid = self.sim.create_workload("Job", pod, parallelism, completions=completions,
                                                        ttl_seconds=float(ttl) if isinstance(ttl, int) else None,
                                                        backoff_limit=backoff, failure_rules=failure_rules(spec, name),
                                                        generated_selector=not manual)
            obj["metadata"]["uid"] = workload.sim_uid  # the uid its pods' ownerReferences name
            if not manual:  # the selector and template labels kube-apiserver makes
                generated = job_labels(workload.sim_uid, name)
                spec["selector"] = {"matchLabels": {CONTROLLER_UID: workload.sim_uid}}
                meta = template.setdefault("metadata", {})
                meta["labels"] = {**(meta.get("labels") or {}), **generated}
            obj["status"] = {"startTime": format_time(self.now())}
            return
        selector_of(spec, res.kind, name, dict(pod.labels), res.group)
        replicas = int_field(spec, "replicas", 1, res.kind, name)
        workload.sim_uid = self.sim.create_workload(SIM_KIND[res.plural], pod, replicas)
        obj["metadata"]["uid"] = workload.sim_uid  # the uid its pods' ownerReferences name

    def event(self, workload: Workload, reason: str, message: str, component: str) -> None:
        self.sim.workload_event(workload.resource.api_version, workload.resource.kind, workload.namespace, workload.name,
                                workload.uid, reason, message, component)

    def replace(self, resource: str, namespace: str, name: str, obj: dict[str, Any]) -> Workload:
        """PUT: the object as given becomes the spec (its ``resourceVersion``, when given, must be current)."""
        workload = self.get(resource, namespace, name)
        res = workload.resource
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") not in (None, name):
            raise bad_request("the name of the object does not match the name on the URL")
        given = meta.get("resourceVersion")
        current = workload.obj["metadata"]
        if given not in (None, "", current["resourceVersion"]):
            raise conflict(resource, name, res.group)
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            raise invalid(res.kind, name, "spec", "Required value", "FieldValueRequired", res.group)
        if resource == "cronjobs":
            self.cronjobs.check({**obj, "metadata": {**current, **meta}})
        elif resource == "deployments":
            self.deployments.check({**obj, "metadata": {**current, **meta}})
        elif resource != "jobs":
            pod = template_pod({**obj, "metadata": current}, spec.get("template"), "spec.template", res.kind)
            selector_of(spec, res.kind, name, dict(pod.labels), res.group)
            int_field(spec, "replicas", 1, res.kind, name)
        elif spec.get("template") != workload.obj["spec"].get("template"):
            raise invalid("Job", name, "spec.template", "Invalid value: field is immutable", group="batch")
        elif spec.get("selector") != workload.obj["spec"].get("selector"):
            raise invalid("Job", name, "spec.selector", "Invalid value: field is immutable", group="batch")
        changed = spec != workload.obj["spec"]
        workload.obj["spec"] = copy.deepcopy(spec)
        for key in ("labels", "annotations"):
            if key in meta:
                current[key] = copy.deepcopy(meta[key])
        current["resourceVersion"] = str(self.sim.next_resource_version())
        if changed:
            current["generation"] = current.get("generation", 1) + 1
            self._changed(workload)
        return workload

    def patch(self, resource: str, namespace: str, name: str, patch: Any, json_patch: bool = False) -> Workload:
        """PATCH: a JSON merge (or strategic merge) patch, or with ``json_patch`` an RFC 6902 JSON patch."""
        patched = apply_patch(self.object(self.get(resource, namespace, name)), patch, json_patch)
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise bad_request("the patch must leave an object with its metadata")
        # A patch that carries a resourceVersion is a compare-and-swap, as on the API server: replace() checks it.
        return self.replace(resource, namespace, name, patched)

    def scale(self, resource: str, namespace: str, name: str, replicas: Any) -> Workload:
        """The ``scale`` subresource: set ``spec.replicas``."""
        if resource not in SCALABLE:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        workload = self.get(resource, namespace, name)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise invalid("Scale", name, "spec.replicas", f"Invalid value: {replicas!r}: must be greater than or equal to 0",
                          group="autoscaling")
        return self.replace(resource, namespace, name, {"metadata": {"name": name},
                                                        "spec": {**workload.obj["spec"], "replicas": replicas}})

    def scale_object(self, workload: Workload) -> dict[str, Any]:
        """The ``autoscaling/v1`` Scale of a workload, as ``kubectl scale`` reads it."""
        status = self.object(workload).get("status") or {}
        meta = workload.obj["metadata"]
        selector = workload.obj["spec"].get("selector") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": workload.name, "namespace": workload.namespace, "uid": meta["uid"],
                             "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"]},
                "spec": {"replicas": workload.obj["spec"].get("replicas", 1)},
                "status": {"replicas": status.get("replicas", 0),
                           "selector": ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))}}

    def _changed(self, workload: Workload) -> None:
        """A spec changed: its controller acts on the new one."""
        plural = workload.resource.plural
        if plural == "deployments":
            self.deployments.sync(workload)
        elif plural == "cronjobs":
            self.cronjobs.start(workload)
        elif plural in ("replicasets", "statefulsets") and workload.sim_uid is not None and self.sim.has_workload(workload.sim_uid):
            self.sim.scale_workload(workload.sim_uid, int(workload.obj["spec"].get("replicas", 1)))
        elif plural == "jobs" and workload.sim_uid is not None and self.sim.has_workload(workload.sim_uid):
            self.sim.scale_workload(workload.sim_uid, int(workload.obj["spec"].get("parallelism", 1)))

    def delete(self, resource: str, namespace: str, name: str) -> Workload:
        """Delete the object and, as the garbage collector does, everything it owns."""
        workload = self.get(resource, namespace, name)
        del self.objects[resource][(namespace, name)]
        if workload.timer is not None:
            workload.timer.cancel()
        if workload.sim_uid is not None and self.sim.has_workload(workload.sim_uid):
            self.sim.delete_workload(workload.sim_uid)
        for plural in ("replicasets", "jobs"):
            for child in self.owned_by(plural, workload):
                self.delete(plural, namespace, child.name)
        self._adopted = -1
        self.sim.next_resource_version()
        return workload

    # ---------------------------------------------------------------- status

    def object(self, workload: Workload) -> dict[str, Any]:
        """The stored object with the status its controller would have written."""
        plural = workload.resource.plural
        if plural == "deployments":
            return self.deployments.object(workload)
        if plural == "cronjobs":
            return self.cronjobs.object(workload)
        obj = copy.deepcopy(workload.obj)
        counts = self.sim.workload_status(workload.sim_uid or "")
        generation = obj["metadata"].get("generation", 1)
        if plural == "jobs":
            status = dict(obj.get("status") or {})
            # The 1.32 Job controller's: ready and terminating always (pointers), the counters omitted when 0.
            status.update(ready=counts["ready"], terminating=counts["terminating"], uncountedTerminatedPods={})
            for key in ("active", "succeeded", "failed"):
                if counts[key]:
                    status[key] = counts[key]
                else:
                    status.pop(key, None)
            if counts["failed_reason"]:
                done = counts.get("completed_at") or self.now()
                status["conditions"] = [{"type": kind, "status": "True", "reason": counts["failed_reason"],
                                         "message": counts["failed_message"], "lastProbeTime": format_time(float(done)),
                                         "lastTransitionTime": format_time(float(done))}
                                        for kind in ("FailureTarget", "Failed")]
            elif counts["complete"]:
                done = counts.get("completed_at") or self.now()
                status["completionTime"] = format_time(float(done))
                # The Job controller marks success first (SuccessCriteriaMet, since 1.31), then Complete.
                status["conditions"] = [{"type": kind, "status": "True", "lastProbeTime": format_time(float(done)),
                                         "lastTransitionTime": format_time(float(done))}
                                        for kind in ("SuccessCriteriaMet", "Complete")]
            obj["status"] = status
            workload.obj["status"] = status
        elif plural == "daemonsets":
            obj["status"] = {"observedGeneration": generation, "desiredNumberScheduled": counts["replicas"],
                             "currentNumberScheduled": counts["replicas"], "numberReady": counts["ready"],
                             "numberAvailable": counts["ready"], "updatedNumberScheduled": counts["replicas"],
                             "numberMisscheduled": 0, "numberUnavailable": counts["replicas"] - counts["ready"]}
        else:
            obj["status"] = {"observedGeneration": generation, "replicas": counts["replicas"],
                             "fullyLabeledReplicas": counts["replicas"], "readyReplicas": counts["ready"],
                             "availableReplicas": counts["ready"]}
            if plural == "statefulsets":
                obj["status"].update(currentReplicas=counts["replicas"], updatedReplicas=counts["replicas"])
        return obj

    def job_active(self, namespace: str, name: str) -> bool:
        job = self.objects["jobs"].get((namespace, name))
        if job is None:
            return False
        counts = self.sim.workload_status(job.sim_uid or "")
        return not counts["complete"] and not counts["failed_reason"]

    def forget_finished_jobs(self) -> None:
        """Controllers the simulator deleted itself (a Job past ``ttlSecondsAfterFinished``): drop their objects. Called
        before every request, so it looks only when a controller went since it last looked."""
        if self.sim.workloads_removed == self._forgotten:
            return
        self._forgotten = self.sim.workloads_removed
        for plural in ("jobs", "replicasets", "daemonsets", "statefulsets"):
            for key, workload in list(self.objects[plural].items()):
                if workload.sim_uid is not None and not self.sim.has_workload(workload.sim_uid):
                    del self.objects[plural][key]
                    self._adopted = -1


class ObjectHost(Protocol):
    """The simulator as ``ObjectApi`` calls it: its workload objects and its budgets."""

    @property
    def api_objects(self) -> Workloads: ...

    def create_pdb(self, pdb: PodDisruptionBudget, keep_version: bool = False) -> PodDisruptionBudget: ...

    def get_pdb(self, namespace: str, name: str) -> PodDisruptionBudget: ...

    def delete_pdb(self, namespace: str, name: str) -> PodDisruptionBudget: ...


class ObjectApi:
    """The cluster interface's workload calls over ``Workloads``, for the simulator in process: the API's
    answers as the live client raises them (``NotFoundError`` for 404, ``ApiRefused`` for the rest)."""

    def __init__(self, sim: ObjectHost) -> None:
        self.sim = sim

    @property
    def _objects(self) -> Workloads:
        """The workload objects, without those the simulator deleted itself (a Job past its TTL): in process nothing
        ticks between calls as the local region's server does."""
        objects = self.sim.api_objects
        objects.forget_finished_jobs()
        return objects

    @staticmethod
    def _refused(exc: ApiError) -> PlatformError | ApiRefused:
        if exc.code == 404:
            return NotFoundError(exc.message, field="metadata.name")
        return ApiRefused(f"the Kubernetes API answered {exc.code} ({exc.reason}): {exc.message}", exc.code)

    def _name(self, obj: dict[str, Any]) -> tuple[str, str, str]:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not meta.get("name"):
            raise PlatformError("an object needs metadata.name", field="metadata.name")
        return plural_of(str(obj.get("kind"))), meta.get("namespace") or "default", meta["name"]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        plural, namespace, _ = self._name(obj)
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = namespace
        try:
            if plural == "poddisruptionbudgets":
                try:
                    pdb = parse_pdb(obj, "object")
                except PlatformError as exc:
                    raise invalid("PodDisruptionBudget", obj["metadata"]["name"], exc.field or "", exc.detail, group="policy") from None
                try:
                    return self.sim.create_pdb(pdb).to_kube()
                except PlatformError:
                    raise already_exists(plural, pdb.name, "policy") from None
            objects = self._objects
            return objects.object(objects.create(plural, namespace, obj))
        except ApiError as exc:
            raise self._refused(exc) from None

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        plural = plural_of(kind)
        try:
            if plural == "poddisruptionbudgets":
                return self.sim.get_pdb(namespace, name).to_kube()
            objects = self._objects
            return objects.object(objects.get(plural, namespace, name))
        except ApiError as exc:
            raise self._refused(exc) from None

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        plural, namespace, name = self._name(obj)
        try:
            objects = self._objects
            return objects.object(objects.replace(plural, namespace, name, copy.deepcopy(obj)))
        except ApiError as exc:
            raise self._refused(exc) from None

    def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        try:
            objects = self._objects
            return objects.object(objects.patch(plural_of(kind), namespace, name, copy.deepcopy(patch)))
        except ApiError as exc:
            raise self._refused(exc) from None

    def scale(self, kind: str, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        try:
            objects = self._objects
            return objects.scale_object(objects.scale(plural_of(kind), namespace, name, replicas))
        except ApiError as exc:
            raise self._refused(exc) from None

    def delete(self, kind: str, namespace: str, name: str) -> None:
        plural = plural_of(kind)
        try:
            if plural == "poddisruptionbudgets":
                self.sim.delete_pdb(namespace, name)
                return
            self._objects.delete(plural, namespace, name)
        except ApiError as exc:
            raise self._refused(exc) from None
