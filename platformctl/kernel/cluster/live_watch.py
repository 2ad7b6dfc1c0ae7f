"""The API server's watch, through the official client, and the informer it keeps (client-go's reflector, in Python).

``stream`` opens one watch (``GET /api/v1/pods?watch=1&resourceVersion=…&allowWatchBookmarks=true``)
and yields the events as the server sends them, a chunk's worth at a time, parsed by the same
functions that read snapshots; an ``ERROR`` event with code 410 is ``WatchExpired`` (list again), any
other error or a dropped connection a ``PlatformError``.

``LiveInformer`` lists synchronously once, then a thread of its own keeps a watch open from the
newest version it has seen (a new one each time the server ends one, after its ``timeoutSeconds``),
lists again after 410 or after a broken watch (a short pause first: polling, only while the watch is
broken), and hands everything to the caller through a queue; ``sync`` and ``wait`` apply what came.
Waits are in the cluster's time: with the local region's clock (virtual seconds at ``speed`` per
wall second) a wait of 300 s blocks one wall second at speed 300.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from platformctl.kernel.clock import Clock, real_seconds
from platformctl.kernel.cluster.informer import Informer, WatchEvent
from platformctl.kernel.cluster.model import parse_node, parse_pdb, parse_pod
from platformctl.kernel.errors import ApiFault, ApiRefused, PlatformError

WATCH_SECONDS = 300  # the server ends each watch after this long (wall seconds); the thread opens the next
RETRY_SECONDS = 2.0  # wall seconds between a broken watch and the list that replaces it


class WatchExpired(Exception):
    """410 Gone: the version asked for is older than the server keeps."""


class WatchedApi(Protocol):
    """The live cluster as its watch and informer use it (``platformctl.kernel.cluster.live.LiveCluster``)."""

    name: str
    source: str
    core: Any  # the client's CoreV1Api
    policy: Any  # the client's PolicyV1Api

    @property
    def clock(self) -> Clock: ...

    def refused(self, exc: Any, what: str) -> ApiRefused: ...

    def unreachable(self, exc: Exception) -> ApiFault: ...

    def list_versioned(self, kind: str) -> tuple[list[Any], str]: ...


def stream(live: WatchedApi, kind: str, resource_version: str, timeout_seconds: int,
           keep: Callable[[Any], None] | None = None) -> Iterator[list[WatchEvent]]:
    """One watch of ``kind`` from ``resource_version``; ``keep`` is handed the response (to close it from elsewhere)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    fn = {"nodes": live.core.list_node, "pods": live.core.list_pod_for_all_namespaces,
          "pdbs": live.policy.list_pod_disruption_budget_for_all_namespaces}[kind]
    parse = {"nodes": parse_node, "pods": parse_pod, "pdbs": parse_pdb}[kind]
    try:
        response = fn(watch=True, resource_version=resource_version, allow_watch_bookmarks=True,
                      timeout_seconds=timeout_seconds, _preload_content=False, _request_timeout=(10, timeout_seconds + 30))
    except ApiException as exc:
        if exc.status == 410:
            raise WatchExpired() from None
        raise live.refused(exc, f"a watch of {kind}") from None
    except HTTPError as exc:
        raise live.unreachable(exc) from None
    if keep is not None:
        keep(response)
    buffer = bytearray()
    try:
        for segment in response.stream(amt=None, decode_content=False):
            buffer.extend(segment if isinstance(segment, bytes) else str(segment).encode())
            batch: list[WatchEvent] = []
            while (end := buffer.find(b"\n")) != -1:
                line = bytes(buffer[:end])
                del buffer[:end + 1]
                if line.strip():
                    batch.append(_event(line, kind, parse))
            if batch:
                yield batch
    except (HTTPError, OSError, ValueError) as exc:
        raise PlatformError(f"the watch of {kind} broke ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
                            file=live.source, field=f"context {live.name}") from None
    finally:
        response.release_conn()


def _event(line: bytes, kind: str, parse: Callable[..., Any]) -> WatchEvent:
    event = json.loads(line)
    type_ = event.get("type")
    obj = event.get("object") or {}
    if type_ == "ERROR":
        if obj.get("code") == 410:
            raise WatchExpired()
        raise ValueError(f"the server ended the watch: {obj.get('message') or obj}")
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    if type_ == "BOOKMARK":
        return WatchEvent("BOOKMARK", None, version)
    return WatchEvent(str(type_), parse(obj, kind, "watch"), version)


class LiveInformer(Informer):
    def __init__(self, live: WatchedApi, kind: str) -> None:
        super().__init__(kind, live.clock)
        self.live = live
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None

    def start(self) -> None:
        if self._thread is not None:
            return
        items, version = self.live.list_versioned(self.kind)
        self._replace_all(items, version, relist=False)
        self._thread = threading.Thread(target=self._reflect, name=f"watch-{self.live.name}-{self.kind}", daemon=True)
        self._thread.start()

    def _reflect(self) -> None:
        version = self.resource_version or "0"
        listing = False
        while not self._stop.is_set():
            try:
                if listing:
                    items, version = self.live.list_versioned(self.kind)
                    self._queue.put(("list", (items, version)))
                    listing = False
                self._queue.put(("watch", None))
                for batch in stream(self.live, self.kind, version, WATCH_SECONDS, self._keep):
                    if self._stop.is_set():
                        return
                    self._queue.put(("events", batch))
                    version = next((e.resource_version for e in reversed(batch) if e.resource_version), version)
            except WatchExpired:
                listing = True
            except (PlatformError, ApiFault) as exc:
                if self._stop.is_set():
                    return
                self._queue.put(("error", str(exc)))
                self._stop.wait(RETRY_SECONDS)
                listing = True

    def _keep(self, response: Any) -> None:
        self._response = response

    def _take(self, message: tuple[str, Any]) -> bool:
        what, body = message
        if what == "events":
            return self._apply(body)
        if what == "list":
            items, version = body
            self._replace_all(items, version, relist=True)
            return True
        if what == "watch":
            self.stats.watches += 1
        elif what == "error":
            self.watch_errors.append(body)
        return False

    def _drain(self, block: float | None) -> bool:
        moved = False
        try:
            message = self._queue.get(timeout=block) if block else self._queue.get_nowait()
        except queue.Empty:
            return False
        moved |= self._take(message)
        while True:
            try:
                moved |= self._take(self._queue.get_nowait())
            except queue.Empty:
                return moved

    def sync(self) -> None:
        self.start()
        self._drain(None)

    def wait(self, until: Callable[[], bool], timeout: float) -> bool:
        self.start()
        deadline = self.clock.now() + max(timeout, 0.0)
        self._drain(None)
        if until():
            return True
        changes = getattr(self.clock, "wait_for_change", None)  # a local region's clock holds the wait itself
        while True:
            remaining = deadline - self.clock.now()
            if remaining <= 0:
                return until()
            latest = changes(deadline, self.live.name, self.kind, self._version()) if changes is not None else None
            if latest is None:
                if self._drain(max(real_seconds(self.clock, remaining), 0.001)) and until():
                    return True
            elif self._catch_up(latest) and until():
                return True

    def _version(self) -> int:
        try:
            return int(self.resource_version or 0)
        except ValueError:
            return 0

    def _catch_up(self, latest: int, patience: float = 5.0) -> bool:
        """Apply what the watch brings until this informer has heard of version ``latest`` (the server said a change
        of its kind exists up to there), for at most ``patience`` wall seconds."""
        import time

        moved = self._drain(None)
        end = time.monotonic() + patience
        while self._version() < latest and (left := end - time.monotonic()) > 0:
            moved |= self._drain(min(left, 0.5))
        return moved

    def close(self) -> None:
        """Stop watching: the thread's blocked read is woken by shutting its socket down (closing the response from
        here would wait on the lock the reading thread holds)."""
        self._stop.set()
        sock = _socket_of(self._response)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=2.0)


def _socket_of(response: Any) -> socket.socket | None:
    """The socket a streaming response reads from: its connection's, or (the server said ``Connection: close``, so
    http.client handed the socket to the response) the one under the response's file."""
    if response is None:
        return None
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is None:
        raw = getattr(getattr(getattr(response, "_fp", None), "fp", None), "raw", None)
        sock = getattr(raw, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None
