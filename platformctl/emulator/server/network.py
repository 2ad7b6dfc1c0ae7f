"""The network between a pod's node and the clusters' API servers, as the stage's security groups make it.

A pod the region's kubelet runs (``local up --run-jobs``) reaches the clusters through its kubeconfig, whose servers
the kubelet points at ``/from/<cluster>/<node>/clusters/<target>`` on the region's port: the API of ``target``, asked
from ``node``. On EKS an endpoint is private (ENIs in the cluster's VPC that carry the cluster's security groups), and
a connection from an instance that no ingress rule of those groups admits on 443 is dropped: the client's connect
times out, its retries run out, and the job fails. Here such a connection is reset at once (the same for the client:
no answer, a transient fault its retries spend), and the request never reaches the API. Which rule admits what is the
region's EC2's (``LocalRegion.reaches``): the groups the program made, and whatever an operator changed since.
"""

from __future__ import annotations

import logging
import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("platformctl.emulator.server.network")

PREFIX = "/from/"
FROM_NODE = "platformctl.from_node"


def node_path(cluster: str, node: str) -> str:
    """The path prefix under which a pod on ``node`` of ``cluster`` reaches the clusters (``…/clusters/<name>``)."""
    return f"{PREFIX}{cluster}/{node}"


class NodeNetwork:
    """The region's WSGI application as a pod's node reaches it: ``reaches(cluster, node, target)`` says why a
    connection from that node to ``target``'s API server is not admitted (None: it is)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], reaches: Callable[[str, str, str], str | None]) -> None:
        self.app = app
        self.reaches = reaches

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if not path.startswith(PREFIX):
            return self.app(environ, start_response)
        cluster, _, rest = path[len(PREFIX):].partition("/")
        node, _, rest = rest.partition("/")
        target = rest.split("/")[1] if rest.startswith("clusters/") and rest.count("/") >= 1 else ""
        why = self.reaches(cluster, node, target) if target else None
        if why is not None:
            log.info("connection from %s (%s) to %s's API server dropped: %s", node, cluster, target, why)
            _reset(environ)
            start_response("503 Service Unavailable", [("Content-Length", "0")])
            return [b""]  # never sent: the connection is gone
        environ["PATH_INFO"] = "/" + rest
        environ[FROM_NODE] = f"{cluster}/{node}"  # who connected: a pod on this node (the API server's authentication)
        return self.app(environ, start_response)


def _reset(environ: dict[str, Any]) -> None:
    """Close the client's connection with a reset, before any byte of an answer."""
    sock = environ.get("werkzeug.socket")
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
