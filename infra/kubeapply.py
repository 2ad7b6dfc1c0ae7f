"""The deploy's Kubernetes side: each object of the program that is new or changed, applied to its cluster with the
deployer's own kubeconfig, as ``pulumi up``'s Kubernetes provider applies it (an update replaces the object with the
program's, on the version it read: another writer in between is a conflict, not lost).

Whoever deploys is who the cluster authorizes: the operator's kubeconfig (the stack's creator), or the release tick's,
whose IAM role the clusters' access entries map to ``platformctl:deploy`` (infra/components/kubernetes.py). A refusal
(403 and the API server's reason) stops the deploy on one line naming the object and the cluster, as Pulumi does: an
``ApiRefused`` with the answer's status (a 403 or a 409 needs someone, a 5xx may pass), or ``ApiUnreachable`` for a
cluster that did not answer, never the user's mistake (exit 1).
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

from kubernetes import config as kube_config
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError, ResourceNotFoundError
from urllib3.exceptions import HTTPError, NewConnectionError

from platformctl.kernel.errors import ApiRefused, ApiUnreachable, PlatformError


class KubeApplier:
    """Applies manifests to the clusters a kubeconfig names (one context per cluster, named after it)."""

    def __init__(self, kubeconfig: str) -> None:
        self.kubeconfig = kubeconfig
        self._clients: dict[str, DynamicClient] = {}
        self._cache = tempfile.TemporaryDirectory(prefix="platformctl-discovery-")  # discovery, this deploy's only
        self.applied: list[tuple[str, str, str]] = []  # (cluster, "created" | "updated", kind/namespace/name)

    def close(self) -> None:
        for client in self._clients.values():
            client.client.close()
        self._cache.cleanup()

    def _client(self, cluster: str) -> DynamicClient:
        if cluster not in self._clients:
            try:
                api = kube_config.new_client_from_config(config_file=self.kubeconfig, context=cluster)
            except (kube_config.ConfigException, OSError, ValueError) as exc:
                raise PlatformError(f"cannot reach cluster {cluster} to apply the program's Kubernetes objects: {exc}",
                                    file=self.kubeconfig, field="kubeconfig") from None
            try:
                self._clients[cluster] = DynamicClient(api, cache_file=str(Path(self._cache.name) / f"{cluster}.json"))
            except DynamicApiError as exc:
                api.close()
                raise self._refused(exc, "discovery", cluster) from None
            except HTTPError as exc:
                host = api.configuration.host
                api.close()
                raise self._unreachable(exc, host, cluster) from None
        return self._clients[cluster]

    def apply(self, cluster: str, manifest: dict[str, Any]) -> str:
        """Create ``manifest`` in ``cluster``, or replace the object of its name with it; 'created' or 'updated'."""
        meta = manifest.get("metadata") or {}
        name, namespace = str(meta.get("name")), meta.get("namespace") or None
        what = f"{manifest.get('kind')} {namespace + '/' if namespace else ''}{name}"
        client = self._client(cluster)
        try:
            resource = client.resources.get(api_version=manifest.get("apiVersion"), kind=manifest.get("kind"))
        except ResourceNotFoundError:
            raise PlatformError(f"{what}: cluster {cluster} does not serve {manifest.get('apiVersion')} "
                                f"{manifest.get('kind')}", field="stage deploy") from None
        try:
            try:
                current = resource.get(name=name, namespace=namespace)
            except NotFoundError:
                resource.create(body=manifest, namespace=namespace)
                done = "created"
            else:
                body = copy.deepcopy(manifest)
                body.setdefault("metadata", {})["resourceVersion"] = current.metadata.resourceVersion
                resource.replace(body=body, name=name, namespace=namespace)
                done = "updated"
        except DynamicApiError as exc:
            raise self._refused(exc, what, cluster) from None
        except HTTPError as exc:
            raise self._unreachable(exc, client.client.configuration.host, cluster) from None
        self.applied.append((cluster, done, what))
        return done


    def _refused(self, exc: DynamicApiError, what: str, cluster: str) -> ApiRefused:
        """The API server's answer on one line: its code, reason and message (its ``Status``)."""
        try:
            body = json.loads(exc.body or "")
            message = str(body.get("message")) if isinstance(body, dict) and body.get("message") else str(exc.body)
        except (TypeError, ValueError):
            message = str(exc.body or exc.reason)
        message = " ".join(message.split())
        return ApiRefused(f"{what}: answered {exc.status} {exc.reason}: {message}", int(exc.status or 0),
                          file=self.kubeconfig, field=f"context {cluster}")

    def _unreachable(self, exc: HTTPError, host: str, cluster: str) -> ApiUnreachable:
        reason = str(getattr(exc, "reason", "") or exc).splitlines()[0]
        unreachable = ApiUnreachable(f"cannot reach the Kubernetes API at {host} to apply the program's objects "
                                     f"({reason})", file=self.kubeconfig, field=f"context {cluster}")
        unreachable.no_connection = isinstance(getattr(exc, "reason", exc), NewConnectionError)
        return unreachable
