"""The cluster interface against a real API server, through the official Kubernetes client.

Responses are read as raw JSON (``_preload_content=False``) and parsed by the same functions that
read snapshots, so a live cluster and a snapshot file become the same typed values. Eviction
refusals come back as the API's ``Status`` body, turned into an ``EvictionResult`` unchanged.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from platformctl.kernel.clock import Clock, WallClock
from platformctl.kernel.cluster.live_watch import LiveInformer
from platformctl.kernel.cluster.model import (
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
from platformctl.kernel.errors import ApiRefused, ApiUnreachable, NotFoundError, PlatformError
from platformctl.kernel.retry import NOT_ACTED, TRANSIENT, Backoff, retrying


class LiveCluster:
    PAGE = 500  # items a list asks for at a time (``limit``/``continue``), as kubectl and client-go's pager do

    def __init__(self, api_client: Any, name: str = "live", clock: Clock | None = None, source: str | None = None,
                 backoff: Backoff | None = None, page: int | None = None) -> None:
        from kubernetes import client

        self.backoff = backoff or Backoff()  # transient answers are asked again (platformctl.kernel.retry)
        self.page = page or self.PAGE
        self._rng = random.Random()
        self.retried = 0  # calls asked again, for reports and tests
        self.answered = False  # whether the API has ever answered this seam (any status): see ``_call``'s ``again``
        self.name = name
        self.source = source or "kubeconfig"
        self._clock = clock or WallClock()
        self._api = api_client
        self._core = self.core = client.CoreV1Api(api_client)
        self._policy = self.policy = client.PolicyV1Api(api_client)
        self._client = client

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, clock: Clock | None = None,
                        backoff: Backoff | None = None) -> LiveCluster:
        from kubernetes import config
        from kubernetes.config.config_exception import ConfigException

        # No path: the official client's own default ($KUBECONFIG, else ~/.kube/config), which the caller (the command's
        # platform) found set to nothing.
        where = path or "~/.kube/config"
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
            from platformctl.kernel.region_client import clock_for_context

            clock = clock_for_context(Path(path.split(os.pathsep)[0]).expanduser() if path
                                      else Path(config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION).expanduser(), context)
            client_id = getattr(clock, "client_id", None)
            if client_id:  # the region counts this process's requests as its clock's, not a stranger's
                from platformctl.kernel.region_client import CLIENT_HEADER

                api_client.set_default_header(CLIENT_HEADER, client_id)
        return cls(api_client, name=context or "live", clock=clock, source=path, backoff=backoff)

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
            return self._list(self._core.list_node, parse_node, what="nodes")
        if kind == "pdbs":
            return self._list(self._policy.list_pod_disruption_budget_for_all_namespaces, parse_pdb,
                              what="poddisruptionbudgets")
        return self._list(self._core.list_pod_for_all_namespaces, parse_pod, what="pods")

    def _list(self, fn: Any, parse: Any, *args: Any, what: str, **kwargs: Any) -> tuple[list[Any], str]:
        """Every item of a list, a page at a time (``limit``/``continue``): each page parsed into the model before the
        next is asked for, so no whole list's JSON is ever held at once. A continue token the server no longer
        honours (410 Gone: the snapshot it paged is compacted) starts the list again. Returns the items and the
        list's resourceVersion (the first page's: the snapshot the pages belong to)."""
        for _ in range(3):
            items: list[Any] = []
            token, version = "", ""
            try:
                while True:
                    asked: dict[str, Any] = {**kwargs, "limit": self.page}
                    if token:
                        asked["_continue"] = token
                    data = self._call(fn, *args, what=what, **asked)
                    meta = data.get("metadata") or {}
                    version = version or str(meta.get("resourceVersion") or "0")
                    start = len(items)
                    items += [parse(item, f"items[{start + i}]", what) for i, item in enumerate(data.get("items") or [])]
                    del data
                    token = str(meta.get("continue") or "")
                    if not token:
                        return items, version
            except ApiRefused as exc:
                if exc.status != 410:
                    raise
        raise ApiRefused(f"the Kubernetes API kept answering 410 Gone to the pages of {what}: its list changed faster "
                         "than it could be read", 410, file=self.source, field=f"context {self.name}")

    def informer(self, kind: str) -> LiveInformer:
        """A cache of this cluster's ``nodes`` or ``pods`` kept by the API server's watch (``live_watch``)."""
        return LiveInformer(self, kind)

    def _unreachable(self, exc: Exception) -> ApiUnreachable:
        host = self._api.configuration.host
        from urllib3.exceptions import NewConnectionError

        reason = str(getattr(exc, "reason", "") or exc).splitlines()[0]
        unreachable = ApiUnreachable(f"cannot reach the Kubernetes API at {host} ({reason})", file=self.source,
                                     field=f"context {self.name}")
        # refused, or a name that does not resolve (NameResolutionError is a NewConnectionError; a connect timeout is not)
        unreachable.no_connection = isinstance(getattr(exc, "reason", exc), NewConnectionError)
        return unreachable

    # The client raises ApiException for any non-2xx answer.
    def _call(self, fn: Any, *args: Any, what: str, acts: bool = False, **kwargs: Any) -> dict[str, Any]:
        """One API call, asked again while its answer is transient (``platformctl.kernel.retry``): a read or an idempotent
        write on every transient answer, one that ``acts`` (a create, a delete) only when the API said it did not."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        attempts = 0

        def once() -> dict[str, Any]:
            nonlocal attempts
            attempts += 1
            try:
                response = fn(*args, _preload_content=False, _request_timeout=30, **kwargs)
            except ApiException as exc:
                self.answered = True
                if exc.status == 404:
                    raise NotFoundError(f"{what} not found", field=what.split(" ")[0]) from None
                raise self._refused(exc, what, attempts) from None
            except HTTPError as exc:
                raise self._unreachable(exc) from None
            self.answered = True
            return dict(json.loads(response.data))

        def again(exc: Exception) -> bool:
            if isinstance(exc, ApiRefused):
                return exc.status in (NOT_ACTED if acts else TRANSIENT)
            if not isinstance(exc, ApiUnreachable) or acts:  # a lost answer to one that acts: it may have
                return False
            # Nothing listening at the address, or no such host, before the API has ever answered: the address is
            # wrong or nothing serves it, and kubectl says so at once (client-go asks a GET again on a reset or an
            # EOF, not on a refused connection). Once it has answered, the same is an API server restarting.
            return self.answered or not exc.no_connection

        return retrying(once, again, self.backoff, self._clock, self._rng,
                        retry_after=lambda exc: getattr(exc, "retry_after", None), retried=self._count_retry)

    def _count_retry(self) -> None:
        self.retried += 1

    def _refused(self, exc: Any, what: str, attempts: int = 1) -> ApiRefused:
        try:
            message = json.loads(exc.body or "{}").get("message") or exc.reason
        except ValueError:
            message = exc.reason
        tried = f" (asked {attempts} times)" if attempts > 1 else ""
        refused = ApiRefused(f"the Kubernetes API answered {exc.status} to {what}{tried}: {message}", exc.status or 500,
                             file=self.source, field=f"context {self.name}")
        refused.retry_after = _retry_after(exc)
        return refused

    def list_nodes(self, label_selector: str | None = None) -> list[Node]:
        return self._list(self._core.list_node, parse_node, what="nodes", label_selector=label_selector or "")[0]

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
        self._call(self._core.delete_node, name, what=f"node {name}", acts=True)

    def list_pods(self, namespace: str | None = None, label_selector: str | None = None, node_name: str | None = None) -> list[Pod]:
        kwargs: dict[str, Any] = {"label_selector": label_selector or ""}
        if node_name:
            kwargs["field_selector"] = f"spec.nodeName={node_name}"
        if namespace:
            return self._list(self._core.list_namespaced_pod, parse_pod, namespace, what="pods", **kwargs)[0]
        return self._list(self._core.list_pod_for_all_namespaces, parse_pod, what="pods", **kwargs)[0]

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
        data = self._call(self._core.delete_namespaced_pod, name, namespace, what=f"pod {namespace}/{name}", acts=True,
                          **kwargs)
        return parse_pod(data, "pod", name)  # the API answers with the pod as the deletion left it

    def create_pod(self, pod: Pod) -> Pod:
        body = pod.to_kube()
        body.pop("status", None)
        for key in ("uid", "resourceVersion", "creationTimestamp"):
            body["metadata"].pop(key, None)
        data = self._call(self._core.create_namespaced_pod, pod.namespace, body, what=f"pod {pod.namespace}/{pod.name}",
                          acts=True)
        return parse_pod(data, "pod", pod.name)

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}
        try:
            self._call(self._core.create_namespace, body, what=f"namespace {name}", acts=True)
        except ApiRefused as exc:
            if exc.status != 409:  # AlreadyExists: as it is
                raise

    def list_namespaces(self, label_selector: str | None = None) -> list[str]:
        data = self._call(self._core.list_namespace, what="namespaces", label_selector=label_selector or "")
        return sorted(item["metadata"]["name"] for item in data["items"])

    def delete_namespace(self, name: str) -> None:
        try:
            self._call(self._core.delete_namespace, name, what=f"namespace {name}", acts=True)
        except NotFoundError:
            pass

    # ---------------------------------------------------------------- workload objects, as JSON

    def _object(self, method: str, kind: str, namespace: str, name: str | None, body: Any = None, sub: str = "",
                content_type: str = "application/json") -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        from platformctl.kernel.cluster.apiobjects import RESOURCES, plural_of

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
            return self._list(self._policy.list_namespaced_pod_disruption_budget, parse_pdb, namespace,
                              what="poddisruptionbudgets")[0]
        return self._list(self._policy.list_pod_disruption_budget_for_all_namespaces, parse_pdb,
                          what="poddisruptionbudgets")[0]

    def snapshot(self) -> dict[str, Any]:
        return snapshot_document(self.list_nodes(), self.list_pods(), self.list_pdbs())


def _retry_after(exc: Any) -> float | None:
    """The wait a 429 or 503 asked for: its Retry-After header, else the Status's details.retryAfterSeconds."""
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value is None:
        try:
            value = (json.loads(exc.body or "{}").get("details") or {}).get("retryAfterSeconds")
        except (ValueError, AttributeError):
            value = None
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
