"""The Kubernetes REST API over simulated clusters, as a WSGI application.

Every cluster lives under ``/clusters/<name>``, so one port serves them all and a kubeconfig gives
each its own server URL. The subset is what the toolkit, the official client and kubectl use:

- discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>``;
- nodes: get, list (label and field selectors, ``limit``/``continue``), patch (JSON merge, strategic
  merge or JSON patch; ``spec.unschedulable``, labels, taints), delete, watch;
- pods: get, list across or within namespaces (label selectors; ``spec.nodeName``,
  ``metadata.name``, ``metadata.namespace`` and ``status.phase`` field selectors), create, delete
  (with a grace period), watch; the ``policy/v1`` eviction subresource with the simulator's answers;
- PodDisruptionBudgets with the status the disruption controller computes; namespaces;
  Deployments, DaemonSets, StatefulSets, Jobs and CronJobs: create, get, list, delete.

Bodies are JSON, or protobuf as kubectl 1.32 and later send what ``kubectl create`` and ``debug`` build
(``platformctl.emulator.server.protobuf``); answers are JSON, which kubectl accepts beside protobuf.
``kubectl get`` asks for ``Table`` answers and gets the API server's own columns. Mistakes get the
API's ``Status`` errors (400, 404, 405, 409, 410, 415, 422); any fault of the server's is a 500
``Status`` and is logged, never a crash.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any

from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from platformctl.emulator.server import discovery, protobuf, rbac, watches
from platformctl.emulator.server.events import FIELDS as EVENT_FIELDS
from platformctl.emulator.server.events import as_events_v1
from platformctl.emulator.server.objects import (
    EVENTS_V1,
    RESOURCES,
    STORED,
    WORKLOADS,
    ApiError,
    Change,
    ClusterState,
    Expired,
    bad_request,
    conflict,
    field_selector,
    invalid,
    label_selector,
    not_found,
)
from platformctl.emulator.server.paging import Pages
from platformctl.emulator.server.tables import ip_for, node_ip, table
from platformctl.emulator.workloads import SCALABLE, apply_patch
from platformctl.kernel.cluster.model import Node, Pod, Taint
from platformctl.kernel.errors import NotFoundError, PlatformError

log = logging.getLogger("platformctl.emulator.server")

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

_P = "/clusters/<cluster>"
_ROUTES = Map([
    Rule(f"{_P}/version", endpoint="version"),
    Rule(f"{_P}/healthz", endpoint="health"),
    Rule(f"{_P}/livez", endpoint="health"),
    Rule(f"{_P}/readyz", endpoint="health"),
    Rule(f"{_P}/api", endpoint="core_versions"),
    Rule(f"{_P}/api/v1", endpoint="core_resources"),
    Rule(f"{_P}/apis", endpoint="groups"),
    Rule(f"{_P}/openapi/v3", endpoint="openapi_root"),
    Rule(f"{_P}/openapi/v3/<path:gv>", endpoint="openapi_group"),
    Rule(f"{_P}/apis/<group>/<version>", endpoint="group_resources"),
    Rule(f"{_P}/api/v1/<plural>", endpoint="collection", defaults={"group": "", "version": "v1", "ns": None}),
    Rule(f"{_P}/api/v1/<plural>/<name>", endpoint="item", defaults={"group": "", "version": "v1", "ns": None}),
    Rule(f"{_P}/api/v1/namespaces/<ns>/<plural>", endpoint="collection", defaults={"group": "", "version": "v1"}),
    Rule(f"{_P}/api/v1/namespaces/<ns>/<plural>/<name>", endpoint="item", defaults={"group": "", "version": "v1"}),
    Rule(f"{_P}/api/v1/namespaces/<ns>/<plural>/<name>/<sub>", endpoint="subresource",
         defaults={"group": "", "version": "v1"}),
    Rule(f"{_P}/apis/<group>/<version>/<plural>", endpoint="collection", defaults={"ns": None}),
    Rule(f"{_P}/apis/<group>/<version>/<plural>/<name>", endpoint="item", defaults={"ns": None}),
    Rule(f"{_P}/apis/<group>/<version>/namespaces/<ns>/<plural>", endpoint="collection"),
    Rule(f"{_P}/apis/<group>/<version>/namespaces/<ns>/<plural>/<name>", endpoint="item"),
    Rule(f"{_P}/apis/<group>/<version>/namespaces/<ns>/<plural>/<name>/<sub>", endpoint="subresource"),
    Rule(f"{_P}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", endpoint="access_review", methods=["POST"]),
    Rule(f"{_P}/apis/authorization.k8s.io/v1/subjectaccessreviews", endpoint="subject_access_review", methods=["POST"]),
    Rule("/platformctl/v1/status", endpoint="control_status"),
    Rule("/platformctl/v1/time", endpoint="control_time"),
    Rule("/platformctl/v1/aws-calls", endpoint="control_aws_calls"),
    Rule("/platformctl/v1/iam-decisions", endpoint="control_iam_decisions"),
    Rule("/platformctl/v1/rbac-decisions", endpoint="control_rbac_decisions"),
    Rule("/platformctl/v1/clusters/<cluster>/invariants", endpoint="control_invariants"),
    Rule("/platformctl/v1/faults", endpoint="control_faults", methods=["GET", "POST", "DELETE"]),
])


def _json(body: Any, code: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=code, mimetype="application/json")


def _success(name: str, kind: str, uid: str = "") -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": name, "kind": kind, "uid": uid}}


def _node_object(node: Node, version: str) -> dict[str, Any]:
    obj = node.to_kube()
    obj["status"]["addresses"] = [{"type": "InternalIP", "address": node_ip(node.name)},
                                  {"type": "Hostname", "address": node.name}]
    version = node.kubelet_version or version  # a node's kubelet keeps the version it registered with
    obj["status"]["nodeInfo"] = {
        "kubeletVersion": f"v{version}.0-eks", "kubeProxyVersion": f"v{version}.0-eks", "osImage": "Amazon Linux 2023",
        "kernelVersion": "6.1.0-platformctl.amzn2023.x86_64", "containerRuntimeVersion": "containerd://1.7.27",
        "operatingSystem": "linux", "architecture": node.labels.get("kubernetes.io/arch", "amd64"),
        "machineID": node.uid.replace("-", ""), "systemUUID": node.uid, "bootID": node.uid,
    }
    return obj


def _converter(cluster: ClusterState, plural: str) -> Callable[[Any], dict[str, Any]]:
    """What turns a listed object into its JSON: nodes and pods are listed as the simulator holds them."""
    if plural == "nodes":
        version = cluster.kubernetes_version
        return lambda n: _node_object(n, version)
    return _pod_object if plural == "pods" else lambda o: o


def _pod_object(pod: Pod) -> dict[str, Any]:
    obj = pod.to_kube()
    if pod.node_name:
        obj["status"]["hostIP"] = node_ip(pod.node_name)
        if pod.phase == "Running" or pod.ready:
            obj["status"]["podIP"] = ip_for(pod.uid)
    return obj


def _change_object(change: Change, version: str) -> dict[str, Any]:
    if isinstance(change.obj, Node):
        obj = _node_object(change.obj, version)
    elif isinstance(change.obj, Pod):
        obj = _pod_object(change.obj)
    else:
        obj = change.obj.to_kube()
    obj["metadata"]["resourceVersion"] = str(change.rv)
    return obj


_POD_FIELDS: dict[str, Callable[[Any], str]] = {
    "metadata.name": lambda p: p.name, "metadata.namespace": lambda p: p.namespace,
    "spec.nodeName": lambda p: p.node_name or "", "status.phase": lambda p: p.phase,
}
_NODE_FIELDS: dict[str, Callable[[Any], str]] = {
    "metadata.name": lambda n: n.name, "spec.unschedulable": lambda n: "true" if n.unschedulable else "false",
}
_OBJECT_FIELDS: dict[str, Callable[[Any], str]] = {
    "metadata.name": lambda o: o["metadata"]["name"], "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
}


class KubeAPI:
    """The WSGI application. ``cond`` guards every cluster; ``stopping`` ends open watches."""

    def __init__(self, clusters: dict[str, ClusterState], cond: threading.Condition,
                 control: Callable[..., dict[str, Any]] | None = None, stopping: threading.Event | None = None,
                 authenticator: rbac.Authenticator | None = None) -> None:
        """``authenticator``: who each token is, every request then authorized by RBAC (None: nobody is asked)."""
        self.clusters = clusters
        self.rbac = rbac.Gate(authenticator)
        self.cond = cond
        self.control = control
        self.stopping = stopping or threading.Event()
        self.pages = Pages()  # lists answered in pages, read from as they were at their first page

    # ---------------------------------------------------------------- WSGI

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        request = Request(environ)
        try:
            response = self.dispatch(request)
        except ApiError as exc:
            response = Response(exc.plain, exc.code, mimetype="text/plain") if exc.plain else _json(exc.status(), exc.code)
        except NotFoundError as exc:
            response = _json(ApiError(404, "NotFound", exc.detail).status(), 404)
        except PlatformError as exc:
            response = _json(ApiError(422, "Invalid", str(exc)).status(), 422)
        except Exception:  # a fault of the server's: answer 500, keep serving
            log.exception("%s %s failed", request.method, request.full_path)
            response = _json(ApiError(500, "InternalError", "an error on the server has prevented the request from "
                                      "succeeding (see the local region's server.log)").status(), 500)
        with contextlib.suppress(ValueError):  # Go's status line (``401 Unauthorized``), not werkzeug's capitals
            response.status = f"{response.status_code} {HTTPStatus(response.status_code).phrase}"
        return response(environ, start_response)

    def dispatch(self, request: Request) -> Response:
        adapter = _ROUTES.bind_to_environ(request.environ)
        try:
            endpoint, matched = adapter.match()
            args = dict(matched)
        except NotFound:  # no handler for the path: the API server's mux answers in plain text
            raise ApiError(404, "NotFound", "404 page not found", plain="404 page not found\n") from None
        except MethodNotAllowed:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource") from None
        if endpoint.startswith("control_"):
            if self.control is None:
                raise ApiError(404, "NotFound", "no control endpoint")
            body = self._body(request) if request.method == "POST" else {}
            with self.cond:
                answer = self.control(endpoint.removeprefix("control_"),
                                      {**request.args.to_dict(), **args, **body, "method": request.method})
                for state in self.clusters.values():  # a fault changes objects: open watches must hear of it
                    state.changes.observe()
                self.cond.notify_all()
            return _json(answer, int(answer.pop("code", 200)) if isinstance(answer, dict) else 200)
        name = args.pop("cluster")
        cluster = self.clusters.get(name)
        if cluster is None:
            raise ApiError(404, "NotFound", f"no cluster {name!r} in this local region (it has {', '.join(sorted(self.clusters))})")
        user = self.rbac.check(cluster, name, endpoint, args, request)
        if endpoint in ("access_review", "subject_access_review"):
            return _json(rbac.access_review(cluster.stored, user, self._body(request), endpoint == "access_review"), 201)
        if endpoint == "health":
            return Response("ok", mimetype="text/plain")
        if endpoint in ("version", "core_versions", "core_resources", "groups", "group_resources", "openapi_root",
                        "openapi_group"):
            return _json(getattr(discovery, endpoint)(cluster, request, **args))
        res = self._resource(args["group"], args["version"], args["plural"], args.get("ns"))
        if endpoint == "collection" and request.args.get("watch") in ("1", "t", "T", "true", "True", "TRUE"):
            return self._watch(cluster, res.plural, request, args.get("ns"))
        sim = cluster.sim
        faulty = sim.api_error_verbs == "all" or (request.method == "POST" and endpoint == "collection")
        if faulty and sim.api_error_rate > 0 and (sim.api_error_until is None or cluster.now() < sim.api_error_until) \
                and sim.api_error_draw.random() < sim.api_error_rate:  # `local fault api-errors`: an overloaded API server, an outage
            if sim.api_error_for is not None and sim.api_error_until is None:
                sim.api_error_until = cluster.now() + sim.api_error_for  # the outage's clock starts at its first 503
            raise ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request",
                           {"causes": [{"reason": "UnexpectedServerResponse", "message": "unknown"}], "retryAfterSeconds": 1})
        with self.cond:
            cluster.changes.observe()
            response = getattr(self, f"_{endpoint}")(cluster, res, request, **{k: v for k, v in args.items()
                                                                                if k not in ("group", "version", "plural")})
            if request.method != "GET" and cluster.changes.observe():
                self.cond.notify_all()
        return response

    def _resource(self, group: str, version: str, plural: str, ns: str | None) -> Any:
        res = EVENTS_V1 if (group, plural) == (EVENTS_V1.group, EVENTS_V1.plural) else RESOURCES.get(plural)
        if res is None or res.group != group or res.version != version or (ns is not None and not res.namespaced):
            served = group == "" or any(r.group == group for r in (*RESOURCES.values(), EVENTS_V1))  # a known group
            raise ApiError(404, "NotFound", "the server could not find the requested resource", empty_details=served,
                           plain=None if served else "404 page not found\n")
        return res

    # ---------------------------------------------------------------- objects

    def _objects(self, cluster: ClusterState, plural: str, ns: str | None, request: Request) -> list[dict[str, Any]]:
        selected, _ = self._selected(cluster, plural, ns, request)  # filtered by the selectors, sorted by key
        convert = _converter(cluster, plural)
        return [convert(o) for o in selected]

    def _selected(self, cluster: ClusterState, plural: str, ns: str | None,
                  request: Request) -> tuple[list[Any], Callable[[Any], tuple[str, str]]]:
        """What ``_objects`` lists, nodes and pods as the simulator holds them (a page converts its own 500, not all
        120,000: ``_converter``), with each one's key (namespace, name)."""
        labels = label_selector(request.args.get("labelSelector"))
        fields_text = request.args.get("fieldSelector") or ""
        if plural == "nodes":
            match = field_selector(fields_text, _NODE_FIELDS)
            nodes = [n for n in cluster.sim.list_nodes() if match(n) and (labels is None or labels(n.labels))]
            return sorted(nodes, key=lambda n: n.name), lambda n: ("", n.name)
        if plural == "pods":
            match = field_selector(fields_text, _POD_FIELDS)
            pods = [p for p in cluster.sim.list_pods(ns) if match(p) and (labels is None or labels(p.labels))]
            return sorted(pods, key=lambda p: p.key), lambda p: p.key
        if plural == "events":
            v1 = request.path.find("/apis/events.k8s.io/") >= 0
            fields = {**EVENT_FIELDS, **{k.replace("involvedObject.", "regarding."): f for k, f in EVENT_FIELDS.items()
                                         if k.startswith("involvedObject.")}}
            match = field_selector(fields_text, fields)
            events = [e for e in cluster.recorder.list(ns) if match(e)]
            return ([as_events_v1(e) for e in events] if v1 else events), _key
        match = field_selector(fields_text, _OBJECT_FIELDS)
        if plural == "poddisruptionbudgets":
            objects = [b.to_kube() for b in sorted(cluster.sim.list_pdbs(ns), key=lambda b: b.key)]
        elif plural == "namespaces":
            objects = cluster.list_namespaces()
        elif plural in STORED:
            objects = cluster.list_stored(plural, ns)
        else:
            objects = [cluster.workload_object(w) for w in cluster.list_workloads(plural, ns)]
        return [o for o in objects if match(o) and (labels is None or labels(o["metadata"].get("labels") or {}))], _key

    def _get_object(self, cluster: ClusterState, plural: str, ns: str | None, name: str) -> dict[str, Any]:
        group = RESOURCES[plural].group
        if plural == "events":
            found = [e for e in cluster.recorder.list(ns) if e["metadata"]["name"] == name]
            if not found:
                raise not_found("events", name)
            return found[0]
        try:
            if plural == "nodes":
                return _node_object(cluster.sim.get_node(name), cluster.kubernetes_version)
            if plural == "pods":
                return _pod_object(cluster.sim.get_pod(ns or "default", name))
            if plural == "poddisruptionbudgets":
                return cluster.sim.get_pdb(ns or "default", name).to_kube()
        except NotFoundError:
            raise not_found(plural, name, group) from None
        if plural == "namespaces":
            return cluster.get_namespace(name)
        if plural in STORED:
            return cluster.get_stored(plural, ns, name)
        return cluster.workload_object(cluster.get_workload(plural, ns or "default", name))

    def _wants_table(self, request: Request) -> bool:
        return "as=Table" in request.headers.get("Accept", "")

    def _collection(self, cluster: ClusterState, res: Any, request: Request, ns: str | None) -> Response:
        if request.method == "POST":
            return self._create(cluster, res, request, ns)
        if request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {res.plural}")
        scope = (cluster.name, request.path, request.args.get("labelSelector"), request.args.get("fieldSelector"))
        objects, rv, next_token, remaining = self.pages.page(
            scope, lambda: self._selected(cluster, res.plural, ns, request), request.args, str(cluster.sim.resource_version))
        convert = _converter(cluster, res.plural)
        objects = [convert(o) for o in objects]  # only the page's
        if self._wants_table(request):
            return _json(table(res.plural, objects, cluster.now(), rv, request.args.get("includeObject", "Metadata"),
                               next_token))
        meta: dict[str, Any] = {"resourceVersion": rv}
        if next_token:  # and, as etcd3's store, how many are left when no selector filters the list
            meta.update({"continue": next_token, **({} if scope[2] or scope[3] else {"remainingItemCount": remaining})})
        return _json({"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": objects})

    def _item(self, cluster: ClusterState, res: Any, request: Request, name: str, ns: str | None) -> Response:
        if request.method == "GET":
            obj = self._get_object(cluster, res.plural, ns, name)
            if self._wants_table(request):
                return _json(table(res.plural, [obj], cluster.now(), obj["metadata"].get("resourceVersion", "")))
            return _json(obj)
        if request.method == "DELETE":
            return self._delete(cluster, res, request, ns, name)
        if request.method == "PATCH" and res.plural == "nodes":
            return self._patch_node(cluster, request, name)
        if request.method == "PUT" and res.plural == "namespaces":
            return _json(cluster.replace_namespace(name, self._body(request)))
        if request.method in ("PUT", "PATCH") and res.plural in STORED:
            if request.method == "PUT":
                return _json(cluster.replace_stored(res.plural, ns, name, self._body(request)))
            return _json(cluster.patch_stored(res.plural, ns, name, *self._patch_body(request)))
        if request.method in ("PUT", "PATCH") and res.plural in WORKLOADS:
            if request.method == "PUT":
                workload = cluster.objects.replace(res.plural, ns or "default", name, self._body(request))
            else:
                patch, json_patch = self._patch_body(request)
                workload = cluster.objects.patch(res.plural, ns or "default", name, patch, json_patch)
            return _json(cluster.workload_object(workload))
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {res.plural}")

    def _patch_body(self, request: Request) -> tuple[Any, bool]:
        """A PATCH's body and whether it is a JSON patch (else a merge or strategic merge patch)."""
        kind = request.mimetype
        if kind not in ("application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json"):
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted "
                           f"media types include: application/json-patch+json, application/merge-patch+json, "
                           f"application/strategic-merge-patch+json (got {kind!r})")
        try:
            return json.loads(request.get_data(cache=False) or b"null"), kind == "application/json-patch+json"
        except ValueError as exc:
            raise bad_request(f"the body of the request was in an unknown format: {exc}") from None

    def _scale(self, cluster: ClusterState, res: Any, request: Request, name: str, ns: str) -> Response:
        """The ``scale`` subresource of Deployments, ReplicaSets and StatefulSets (``kubectl scale``)."""
        objects = cluster.objects
        workload = objects.get(res.plural, ns, name)
        if request.method == "GET":
            return _json(objects.scale_object(workload))
        if request.method == "PUT":
            wanted = self._body(request)
        elif request.method == "PATCH":
            wanted = apply_patch(objects.scale_object(workload), *self._patch_body(request))
        else:
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {res.plural}/scale")
        replicas = ((wanted or {}).get("spec") or {}).get("replicas")
        return _json(objects.scale_object(objects.scale(res.plural, ns, name, replicas)))

    def _subresource(self, cluster: ClusterState, res: Any, request: Request, name: str, sub: str, ns: str) -> Response:
        if sub == "scale" and res.plural in SCALABLE:
            return self._scale(cluster, res, request, name, ns)
        if sub == "status" and res.plural in WORKLOADS and request.method == "GET":
            return _json(cluster.workload_object(cluster.get_workload(res.plural, ns, name)))
        if res.plural == "pods" and sub == "log" and request.method == "GET":
            return Response(cluster.pod_log(ns, name, request.args), mimetype="text/plain")
        if res.plural != "pods" or sub != "eviction":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if request.method != "POST":
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on pods/eviction")
        body = self._body(request)
        meta = body.get("metadata") or {}
        if not isinstance(meta, dict):
            raise bad_request("Eviction in version \"v1\" cannot be handled as a Eviction: metadata must be an object")
        if meta.get("name") not in (None, name):
            raise bad_request("name in URL does not match name in Eviction object")
        if meta.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        result = cluster.sim.evict(ns, name)
        if result.code == 404:
            raise not_found("pods", name)
        return _json(result.to_status(), result.code)

    # ---------------------------------------------------------------- writes

    def _body(self, request: Request) -> dict[str, Any]:
        """The object a request sends: JSON, or the protobuf kubectl 1.32 and later send (``protobuf.decode``)."""
        if request.mimetype == protobuf.MEDIA_TYPE:
            return protobuf.decode(request.get_data(cache=False))
        if request.mimetype not in ("", "application/json"):
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media "
                           f"types include: application/json, {protobuf.MEDIA_TYPE} (got {request.mimetype!r})")
        raw = request.get_data(cache=False)
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise bad_request(f"the body of the request was in an unknown format: {exc}") from None
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        return body

    def _create(self, cluster: ClusterState, res: Any, request: Request, ns: str | None) -> Response:
        body = self._body(request)
        if body.get("apiVersion") not in (None, res.api_version):
            raise bad_request(f"the API version in the data ({body['apiVersion']}) does not match the expected API "
                              f"version ({res.api_version})")
        if body.get("kind") not in (None, res.kind):
            raise bad_request(f"the kind in the data ({body['kind']}) does not match the expected kind ({res.kind})")
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise invalid(res.kind, "", "metadata", "Required value", "FieldValueRequired", res.group)
        if res.namespaced and meta.get("namespace") not in (None, "", ns):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        if not name:
            raise invalid(res.kind, "", "metadata.name", "Required value: name or generateName is required",
                          "FieldValueRequired", res.group)
        if res.group == "rbac.authorization.k8s.io":  # ValidateRBACName: any path segment ("system:node")
            if not isinstance(name, str) or name in (".", "..") or "/" in name or "%" in name:
                raise invalid(res.kind, str(name), "metadata.name", f'Invalid value: "{name}": may not contain \'/\' '
                              "or '%' and may not be '.' or '..'", group=res.group)
        elif not isinstance(name, str) or len(name) > 253 or not NAME_RE.match(name):
            raise invalid(res.kind, str(name), "metadata.name", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain '
                          "must consist of lower case alphanumeric characters, '-' or '.', and must start and end with "
                          "an alphanumeric character (e.g. 'example.com', regex used for validation is "
                          "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')", group=res.group)
        meta["name"] = name
        if res.plural == "namespaces":
            return _json(cluster.create_namespace(body), 201)
        if res.plural == "pods":
            return _json(_pod_object(cluster.create_pod(ns or "default", body)), 201)
        if res.plural == "poddisruptionbudgets":
            return _json(cluster.create_pdb(ns or "default", body).to_kube(), 201)
        if res.plural in WORKLOADS:
            return _json(cluster.workload_object(cluster.create_workload(res.plural, ns or "default", body)), 201)
        if res.plural in STORED:
            return _json(cluster.create_stored(res.plural, ns, body), 201)
        if res.plural == "nodes":
            raise ApiError(405, "MethodNotAllowed", "nodes register themselves in the local region: scale the node "
                           "pool's auto scaling group instead")
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow creating {res.plural}")

    def _grace(self, request: Request) -> int | None:
        raw = request.args.get("gracePeriodSeconds")
        if raw is None and request.content_length:
            raw = self._body(request).get("gracePeriodSeconds")
        if raw is None:
            return None
        try:
            return max(int(raw), 0)
        except (TypeError, ValueError):
            raise bad_request(f"gracePeriodSeconds: invalid value {raw!r}") from None

    def _delete(self, cluster: ClusterState, res: Any, request: Request, ns: str | None, name: str) -> Response:
        group = res.group
        try:
            if res.plural == "pods":
                pod = cluster.sim.delete_pod(ns or "default", name, grace_seconds=self._grace(request))
                return _json(_pod_object(pod))
            if res.plural == "nodes":
                node = cluster.sim.get_node(name)
                cluster.sim.delete_node(name)
                return _json(_success(name, "nodes", node.uid))
            if res.plural == "poddisruptionbudgets":
                pdb = cluster.sim.delete_pdb(ns or "default", name)
                return _json(_success(name, "poddisruptionbudgets", pdb.uid))
        except NotFoundError:
            raise not_found(res.plural, name, group) from None
        if res.plural == "namespaces":
            return _json(cluster.delete_namespace(name))
        if res.plural in STORED:
            obj = cluster.delete_stored(res.plural, ns, name)
            return _json(_success(name, res.plural, obj["metadata"]["uid"]))
        workload = cluster.delete_workload(res.plural, ns or "default", name)
        return _json(_success(name, res.plural, workload.obj["metadata"]["uid"]))

    def _patch_node(self, cluster: ClusterState, request: Request, name: str) -> Response:
        try:
            current = _node_object(cluster.sim.get_node(name), cluster.kubernetes_version)
        except NotFoundError:
            raise not_found("nodes", name) from None
        patched = apply_patch(current, *self._patch_body(request))
        if not isinstance(patched, dict) or (patched.get("metadata") or {}).get("name") != name:
            raise bad_request("the patch may not change the node's name")
        # A patch that carries a resourceVersion is a compare-and-swap, as on the API server.
        if (patched.get("metadata") or {}).get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise conflict("nodes", name)
        spec = patched.get("spec") or {}
        meta = patched.get("metadata") or {}
        unschedulable = spec.get("unschedulable", False)
        if not isinstance(unschedulable, bool):
            raise invalid("Node", name, "spec.unschedulable", f"Invalid value: {unschedulable!r}: must be a boolean")
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise invalid("Node", name, "metadata.labels", "Invalid value: labels map strings to strings")
        annotations = meta.get("annotations") or {}
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            raise invalid("Node", name, "metadata.annotations", "Invalid value: annotations map strings to strings")
        taints = []
        for i, t in enumerate(spec.get("taints") or []):
            if not isinstance(t, dict) or not t.get("key") or t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise invalid("Node", name, f"spec.taints[{i}]", "Invalid value: a taint needs a key and an effect of "
                              "NoSchedule, PreferNoSchedule or NoExecute")
            taints.append(Taint(t["key"], str(t.get("value", "")), t["effect"]))
        node = cluster.sim.update_node(name, unschedulable=unschedulable, labels=labels, taints=tuple(taints),
                                       annotations=annotations)
        return _json(_node_object(node, cluster.kubernetes_version))

    # ---------------------------------------------------------------- watch

    def _watch(self, cluster: ClusterState, plural: str, request: Request, ns: str | None) -> Response:
        if plural == "events":
            return watches.watch_events(self.cond, self.stopping, cluster, request, ns, self._wants_table(request))
        if plural in WORKLOADS:
            return self._watch_objects(cluster, plural, request, ns)
        if plural not in ("nodes", "pods", "poddisruptionbudgets"):
            raise ApiError(405, "MethodNotAllowed",
                           f"watch is served for nodes, pods, poddisruptionbudgets, events and workloads, not {plural}")
        labels = label_selector(request.args.get("labelSelector"))
        match = field_selector(request.args.get("fieldSelector") or "", _NODE_FIELDS if plural == "nodes" else _POD_FIELDS)

        def wanted(obj: Any) -> bool:
            if ns is not None and getattr(obj, "namespace", ns) != ns:
                return False
            return match(obj) and (labels is None or labels(getattr(obj, "labels", {})))

        timeout = watches.watch_timeout(request)
        rv_text = request.args.get("resourceVersion") or ""
        with self.cond:
            cluster.changes.observe()
            if rv_text in ("", "0"):
                cursor = cluster.sim.resource_version
                initial = [Change(o.resource_version, "ADDED", o) for o in cluster.changes.current(plural) if wanted(o)]
                initial.sort(key=lambda c: c.rv)
            else:
                try:
                    cursor = int(rv_text)
                except ValueError:
                    raise bad_request(f"resourceVersion: invalid value {rv_text!r}") from None
                initial = []
        as_table = self._wants_table(request)
        version = cluster.kubernetes_version

        def encode(change: Change) -> bytes:
            obj = _change_object(change, version)
            if as_table:
                obj = table(plural, [obj], cluster.now(), obj["metadata"]["resourceVersion"])
            return json.dumps({"type": change.type, "object": obj}, separators=(",", ":")).encode() + b"\n"

        def stream() -> Iterator[bytes]:
            nonlocal cursor
            yield b""  # the status line and headers go out now, as the API server sends them when a watch starts
            for change in initial:
                yield encode(change)
            deadline, start = time.monotonic() + timeout, cursor
            bookmarks = watches.Bookmarks(request, plural, deadline)
            while not self.stopping.is_set():
                remaining, mark, expired = deadline - time.monotonic(), b"", False
                if remaining <= 0:
                    return
                with self.cond:
                    try:
                        changes = cluster.changes.since(plural, cursor)
                    except Expired:
                        changes, expired = [], True
                    if changes:
                        cursor = changes[-1].rv
                    elif not expired and bookmarks.due() and cursor > start:  # only one newer than the watch's start
                        mark = bookmarks.event(cursor)
                    elif not expired:
                        self.cond.wait(bookmarks.wait(min(remaining, 1.0)))
                        continue
                if expired:
                    gone = ApiError(410, "Expired", f"too old resource version: {cursor}").status()
                    yield json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n"
                    return
                if mark:
                    yield mark
                    continue
                for change in changes:
                    if wanted(change.obj):
                        yield encode(change)

        return Response(stream(), mimetype="application/json", direct_passthrough=True)


    def _watch_objects(self, cluster: ClusterState, plural: str, request: Request, ns: str | None) -> Response:
        """Workloads (``kubectl rollout status``, ``get -w``): every object at the start (ADDED; MODIFIED from a
        client's resourceVersion, since its status may have moved after the list it read: a redundant event is
        harmless, a missed one leaves the client waiting), then each one whose spec or status changed (MODIFIED),
        appeared (ADDED) or went (DELETED), as the clock moves."""
        timeout = watches.watch_timeout(request)
        as_table = self._wants_table(request)
        since_now = (request.args.get("resourceVersion") or "") not in ("", "0")

        def current() -> dict[tuple[str, str], dict[str, Any]]:
            with self.cond:
                return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
                        for o in self._objects(cluster, plural, ns, request)}

        def encode(kind: str, obj: dict[str, Any]) -> bytes:
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(cluster.sim.resource_version)}}
            if as_table:
                obj = table(plural, [obj], cluster.now(), obj["metadata"]["resourceVersion"])
            return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"

        def stream() -> Iterator[bytes]:
            yield b""  # headers now, not with the first event
            seen = current()
            for obj in seen.values():
                yield encode("MODIFIED" if since_now else "ADDED", obj)
            deadline = time.monotonic() + timeout
            while not self.stopping.is_set() and time.monotonic() < deadline:
                with self.cond:
                    self.cond.wait(min(max(deadline - time.monotonic(), 0.0), 1.0))
                now = current()
                for key, obj in now.items():
                    if key not in seen:
                        yield encode("ADDED", obj)
                    elif obj != seen[key]:
                        yield encode("MODIFIED", obj)
                for key in seen.keys() - now.keys():
                    yield encode("DELETED", seen[key])
                seen = now

        return Response(stream(), mimetype="application/json", direct_passthrough=True)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
