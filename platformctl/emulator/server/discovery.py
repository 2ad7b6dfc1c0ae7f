"""The API server's discovery, as kubectl and the official client read it before anything else: ``/version``,
``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>/<version>`` and OpenAPI v3's documents."""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Request

from platformctl.emulator.server.objects import EVENTS_V1, RESOURCES, WORKLOADS, ApiError, ClusterState
from platformctl.emulator.workloads import SCALABLE

ALL_CATEGORY = {"pods", "deployments", "daemonsets", "statefulsets", "jobs", "cronjobs"}



def version(cluster: ClusterState, request: Request) -> dict[str, Any]:
    major, minor = cluster.kubernetes_version.split(".")[:2]
    return {"major": major, "minor": minor, "gitVersion": f"v{cluster.kubernetes_version}.0-platformctl",
            "gitCommit": "local", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.23.0", "compiler": "gc", "platform": "linux/amd64"}

def core_versions(cluster: ClusterState, request: Request) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.host}]}

def resource_list(group_version: str, group: str) -> dict[str, Any]:
    resources = []
    for res in [*RESOURCES.values(), EVENTS_V1]:
        if res.group != group:
            continue
        entry: dict[str, Any] = {"name": res.plural, "singularName": res.singular, "namespaced": res.namespaced,
                                 "kind": res.kind, "verbs": list(res.verbs)}
        if res.short_names:
            entry["shortNames"] = list(res.short_names)
        if res.plural in ALL_CATEGORY:
            entry["categories"] = ["all"]
        resources.append(entry)
        if res.plural == "pods":
            resources.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                              "version": "v1", "kind": "Eviction", "verbs": ["create"]})
        if res.plural in SCALABLE:
            resources.append({"name": f"{res.plural}/scale", "singularName": "", "namespaced": True,
                              "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]})
        if res.plural in WORKLOADS:
            resources.append({"name": f"{res.plural}/status", "singularName": "", "namespaced": True,
                              "kind": res.kind, "verbs": ["get"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}

def core_resources(cluster: ClusterState, request: Request) -> dict[str, Any]:
    return resource_list("v1", "")

def groups(cluster: ClusterState, request: Request) -> dict[str, Any]:
    groups = sorted({r.group for r in [*RESOURCES.values(), EVENTS_V1] if r.group})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": g, "versions": [{"groupVersion": f"{g}/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": f"{g}/v1", "version": "v1"}} for g in groups]}

def group_resources(cluster: ClusterState, request: Request, group: str, version: str) -> dict[str, Any]:
    if version != "v1" or group not in {r.group for r in [*RESOURCES.values(), EVENTS_V1]}:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    return resource_list(f"{group}/{version}", group)

def openapi_root(cluster: ClusterState, request: Request) -> dict[str, Any]:
    """OpenAPI v3 discovery: one document per group version, as kubectl fetches them before it writes."""
    versions = sorted({r.api_version for r in RESOURCES.values()})
    prefix = "" if request.environ.get("platformctl.own_endpoint") else f"/clusters/{cluster.name}"
    return {"paths": {("api/" if gv == "v1" else "apis/") + gv: {
        "serverRelativeURL": f"{prefix}/openapi/v3/{'api/' if gv == 'v1' else 'apis/'}{gv}?hash=local"}
        for gv in versions}}

def openapi_group(cluster: ClusterState, request: Request, gv: str) -> dict[str, Any]:
    """A group version's document: enough for kubectl to see that writes take ``fieldValidation`` (the
    server then validates, instead of kubectl validating against schemas this server does not publish)."""
    group_version = gv.removeprefix("api/").removeprefix("apis/")
    served = [r for r in RESOURCES.values() if r.api_version == group_version]
    if not served:
        raise ApiError(404, "NotFound", "the server could not find the requested resource")
    paths: dict[str, Any] = {}
    field_validation = {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}}
    for res in served:
        gvk = {"group": res.group, "version": res.version, "kind": res.kind}
        base = "/api/v1" if not res.group else f"/apis/{res.api_version}"
        item = f"{base}/namespaces/{{namespace}}/{res.plural}/{{name}}" if res.namespaced else f"{base}/{res.plural}/{{name}}"
        collection = item.rsplit("/", 1)[0]
        op = {"x-kubernetes-group-version-kind": gvk, "parameters": [field_validation],
              "responses": {"200": {"description": "OK"}}}
        paths[collection] = {"post": {**op, "x-kubernetes-action": "post"}}
        paths[item] = {"patch": {**op, "x-kubernetes-action": "patch"}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (platformctl local region)", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": {}}}
