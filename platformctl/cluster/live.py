"""The cluster interface against a real API server, through the official Kubernetes client.

Responses are read as raw JSON (``_preload_content=False``) and parsed by the same functions that
read snapshots, so a live cluster and a snapshot file become the same typed values. Eviction
refusals come back as the API's ``Status`` body, turned into an ``EvictionResult`` unchanged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from platformctl.clock import Clock, WallClock
from platformctl.cluster.live_watch import LiveInformer
from platformctl.cluster.model import (
    EvictionResult,
    Node,
    Pod,
    PodDisruptionBudget,
    Taint,
    parse_node,
    parse_pdb,
    parse_pod,
    snapshot_document,
)
from platformctl.errors import ApiRefused, ApiUnreachable, NotFoundError, PlatformError


class LiveCluster:
    def __init__(self, api_client: Any, name: str = "live", clock: Clock | None = None, source: str | None = None) -> None:
        from kubernetes import client

        self.name = name
        self.source = source or "kubeconfig"
        self._clock = clock or WallClock()
        self._api = api_client
        self._core = self.core = client.CoreV1Api(api_client)
        self._policy = self.policy = client.PolicyV1Api(api_client)
        self._client = client

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, clock: Clock | None = None) -> LiveCluster:
        from kubernetes import config
        from kubernetes.config.config_exception import ConfigException

        where = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
        try:
            contexts = [c["name"] for c in config.list_kube_config_contexts(config_file=path)[0]]
        except (ConfigException, FileNotFoundError, OSError) as exc:
            raise PlatformError(f"cannot read the kubeconfig ({str(exc).splitlines()[0]})", file=where,
                                field="--kubeconfig") from None
        if context is not None and context not in contexts:
            raise PlatformError(f"no context {context!r} (contexts: {', '.join(contexts) or 'none'})", file=where,
                                field="--context")
        try:
            api_client = config.new_client_from_config(config_file=path, context=context)
            if context is None:
                context = config.list_kube_config_contexts(config_file=path)[1]["name"]
        except (ConfigException, FileNotFoundError) as exc:
            raise PlatformError(str(exc).splitlines()[0], file=where, field=f"contexts.{context}" if context else "current-context") from None
        if clock is None:
            # A context of the local region carries where its virtual clock is read.
            from platformctl.region_client import clock_for_context

            clock = clock_for_context(path, context)
            client_id = getattr(clock, "client_id", None)
            if client_id:  # the region counts this process's requests as its clock's, not a stranger's
                from platformctl.region_client import CLIENT_HEADER

                api_client.set_default_header(CLIENT_HEADER, client_id)
        return cls(api_client, name=context or "live", clock=clock, source=path)

    @property
    def clock(self) -> Clock:
        return self._clock

    def unreachable(self, exc: Exception) -> ApiUnreachable:
        return self._unreachable(exc)

    def refused(self, exc: Any, what: str) -> ApiRefused:
        return self._refused(exc, what)

    def list_versioned(self, kind: str) -> tuple[list[Any], str]:
        """Every node, pod or budget (``kind``: nodes, pods, pdbs) and the list's resourceVersion, for a watch to start from."""
        if kind == "nodes":
            data = self._call(self._core.list_node, what="nodes")
            items: list[Any] = [parse_node(item, f"items[{i}]", "nodes") for i, item in enumerate(data["items"])]
        elif kind == "pdbs":
            data = self._call(self._policy.list_pod_disruption_budget_for_all_namespaces, what="poddisruptionbudgets")
            items = [parse_pdb(item, f"items[{i}]", "poddisruptionbudgets") for i, item in enumerate(data["items"])]
        else:
            data = self._call(self._core.list_pod_for_all_namespaces, what="pods")
            items = [parse_pod(item, f"items[{i}]", "pods") for i, item in enumerate(data["items"])]
        return items, str((data.get("metadata") or {}).get("resourceVersion") or "0")

    def informer(self, kind: str) -> LiveInformer:
        """A cache of this cluster's ``nodes`` or ``pods`` kept by the API server's watch (``live_watch``)."""
        return LiveInformer(self, kind)

    def _unreachable(self, exc: Exception) -> ApiUnreachable:
        host = self._api.configuration.host
        reason = str(getattr(exc, "reason", "") or exc).splitlines()[0]
        return ApiUnreachable(f"cannot reach the Kubernetes API at {host} ({reason})", file=self.source, field=f"context {self.name}")

    # The client raises ApiException for any non-2xx answer.
    def _call(self, fn: Any, *args: Any, what: str, **kwargs: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = fn(*args, _preload_content=False, _request_timeout=30, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFoundError(f"{what} not found", field=what.split(" ")[0]) from None
            raise self._refused(exc, what) from None
        except HTTPError as exc:
            raise self._unreachable(exc) from None
        return json.loads(response.data)

    def _refused(self, exc: Any, what: str) -> ApiRefused:
        try:
            message = json.loads(exc.body or "{}").get("message") or exc.reason
        except ValueError:
            message = exc.reason
        return ApiRefused(f"the Kubernetes API answered {exc.status} to {what}: {message}", exc.status or 500,
                          file=self.source, field=f"context {self.name}")

    def list_nodes(self, label_selector: str | None = None) -> list[Node]:
        data = self._call(self._core.list_node, what="nodes", label_selector=label_selector or "")
        return [parse_node(item, f"items[{i}]", "nodes") for i, item in enumerate(data["items"])]

    def get_node(self, name: str) -> Node:
        return parse_node(self._call(self._core.read_node, name, what=f"node {name}"), "node", name)

    def cordon(self, name: str, unschedulable: bool = True) -> Node:
        data = self._call(self._core.patch_node, name, {"spec": {"unschedulable": unschedulable}}, what=f"node {name}")
        return parse_node(data, "node", name)

    def _set_taints(self, name: str, change: Any) -> Node:
        """Read the node, change its taint list, and write it back only if nobody changed the node in
        between (``metadata.resourceVersion`` in the patch: the API answers 409 otherwise, and we read again)."""
        for _ in range(10):
            node = self.get_node(name)
            taints = [t.to_kube() for t in change(node.taints)]
            body = {"metadata": {"resourceVersion": str(node.resource_version)}, "spec": {"taints": taints}}
            try:
                data = self._call(self._core.patch_node, name, body, what=f"node {name}")
            except ApiRefused as exc:
                if exc.status == 409:
                    continue
                raise
            return parse_node(data, "node", name)
        raise PlatformError(f"node {name} kept changing while its taints were written", file=self.source, field=f"node {name}")

    def taint(self, name: str, taint: Taint) -> Node:
        return self._set_taints(name, lambda ts: (*[t for t in ts if (t.key, t.effect) != (taint.key, taint.effect)], taint))

    def untaint(self, name: str, key: str) -> Node:
        return self._set_taints(name, lambda ts: tuple(t for t in ts if t.key != key))

    def delete_node(self, name: str) -> None:
        self._call(self._core.delete_node, name, what=f"node {name}")

    def list_pods(self, namespace: str | None = None, label_selector: str | None = None, node_name: str | None = None) -> list[Pod]:
        kwargs: dict[str, Any] = {"label_selector": label_selector or ""}
        if node_name:
            kwargs["field_selector"] = f"spec.nodeName={node_name}"
        if namespace:
            data = self._call(self._core.list_namespaced_pod, namespace, what="pods", **kwargs)
        else:
            data = self._call(self._core.list_pod_for_all_namespaces, what="pods", **kwargs)
        return [parse_pod(item, f"items[{i}]", "pods") for i, item in enumerate(data["items"])]

    def get_pod(self, namespace: str, name: str) -> Pod:
        return parse_pod(self._call(self._core.read_namespaced_pod, name, namespace, what=f"pod {namespace}/{name}"), "pod", name)

    def evict(self, namespace: str, name: str) -> EvictionResult:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        body = self._client.V1Eviction(metadata=self._client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            response = self._core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False, _request_timeout=30)
        except HTTPError as exc:
            raise self._unreachable(exc) from None
        except ApiException as exc:
            try:
                status = json.loads(exc.body or "{}")
            except ValueError:
                status = {"message": exc.reason or ""}
            return EvictionResult.from_status(status, exc.status or 500)
        return EvictionResult.from_status(json.loads(response.data or b"{}"), response.status)

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> Pod:
        kwargs: dict[str, Any] = {} if grace_seconds is None else {"grace_period_seconds": grace_seconds}
        data = self._call(self._core.delete_namespaced_pod, name, namespace, what=f"pod {namespace}/{name}", **kwargs)
        return parse_pod(data, "pod", name)  # the API answers with the pod as the deletion left it

    def create_pod(self, pod: Pod) -> Pod:
        body = pod.to_kube()
        body.pop("status", None)
        for key in ("uid", "resourceVersion", "creationTimestamp"):
            body["metadata"].pop(key, None)
        data = self._call(self._core.create_namespaced_pod, pod.namespace, body, what=f"pod {pod.namespace}/{pod.name}")
        return parse_pod(data, "pod", pod.name)

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}
        try:
            self._call(self._core.create_namespace, body, what=f"namespace {name}")
        except ApiRefused as exc:
            if exc.status != 409:  # AlreadyExists: as it is
                raise

    def list_namespaces(self, label_selector: str | None = None) -> list[str]:
        data = self._call(self._core.list_namespace, what="namespaces", label_selector=label_selector or "")
        return sorted(item["metadata"]["name"] for item in data["items"])

    def delete_namespace(self, name: str) -> None:
        try:
            self._call(self._core.delete_namespace, name, what=f"namespace {name}")
        except NotFoundError:
            pass

    # ---------------------------------------------------------------- workload objects, as JSON

    def _object(self, method: str, kind: str, namespace: str, name: str | None, body: Any = None, sub: str = "",
                content_type: str = "application/json") -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        from platformctl.cluster.apiobjects import RESOURCES, plural_of

        res = RESOURCES[plural_of(kind)]
        base = f"/apis/{res.group}/{res.version}" if res.group else "/api/v1"
        path = f"{base}/namespaces/{namespace}/{res.plural}" + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")
        what = f"{res.singular} {namespace}/{name or (body or {}).get('metadata', {}).get('name', '')}"
        try:
            response = self._api.call_api(path, method, header_params={"Accept": "application/json", "Content-Type": content_type},
                                          body=body, auth_settings=["BearerToken"], _preload_content=False,
                                          _request_timeout=30)
        except ApiException as exc:
            if exc.status == 404:
                raise NotFoundError(f"{what} not found", field="metadata.name") from None
            raise self._refused(exc, what) from None
        except HTTPError as exc:
            raise self._unreachable(exc) from None
        data = response[0] if isinstance(response, tuple) else response
        return json.loads(data.data or b"{}")

    def create_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        namespace = obj["metadata"].get("namespace") or "default"
        return self._object("POST", obj["kind"], namespace, None, obj)

    def get_object(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return self._object("GET", kind, namespace, name)

    def replace_object(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._object("PUT", obj["kind"], obj["metadata"].get("namespace") or "default", obj["metadata"]["name"], obj)

    def patch_object(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._object("PATCH", kind, namespace, name, patch, content_type="application/merge-patch+json")

    def scale(self, kind: str, namespace: str, name: str, replicas: int) -> dict[str, Any]:
        return self._object("PATCH", kind, namespace, name, {"spec": {"replicas": replicas}}, sub="scale",
                            content_type="application/merge-patch+json")

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        self._object("DELETE", kind, namespace, name, {"propagationPolicy": "Background"})

    def list_pdbs(self, namespace: str | None = None) -> list[PodDisruptionBudget]:
        if namespace:
            data = self._call(self._policy.list_namespaced_pod_disruption_budget, namespace, what="poddisruptionbudgets")
        else:
            data = self._call(self._policy.list_pod_disruption_budget_for_all_namespaces, what="poddisruptionbudgets")
        return [parse_pdb(item, f"items[{i}]", "poddisruptionbudgets") for i, item in enumerate(data["items"])]

    def snapshot(self) -> dict[str, Any]:
        return snapshot_document(self.list_nodes(), self.list_pods(), self.list_pdbs())
