"""What the local region's watches share: how long one stays open, when it sends a bookmark, and the events watch.

A watch that asks ``allowWatchBookmarks=true`` gets ``BOOKMARK`` events as kube-apiserver's watch cache sends them
(k8s.io/apiserver v0.32.9, pkg/storage/cacher/cache_watcher.go ``nextBookmarkTime``): one 2 s before the watch's
deadline, if that is still ahead when it starts, and otherwise one a minute, each only if the resource's latest change
is newer than the version the watch started from (``processInterval``); it carries only the kind and that version, so
that a client that watches again from it is not sent back to a list.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

from werkzeug.wrappers import Request, Response

from platformctl.emulator.server.events import FIELDS as EVENT_FIELDS
from platformctl.emulator.server.events import as_events_v1
from platformctl.emulator.server.objects import ClusterState, bad_request, field_selector
from platformctl.emulator.server.tables import table

WATCH_TIMEOUT = 1800.0  # wall seconds a watch stays open unless the client asks for less
BOOKMARK_EVERY = 60.0  # the watch cache's bookmark frequency
BOOKMARK_BEFORE_DEADLINE = 2.0
BOOKMARK_KINDS = {"pods": ("v1", "Pod"), "nodes": ("v1", "Node"), "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget")}


def watch_timeout(request: Request) -> float:
    try:
        return min(float(request.args.get("timeoutSeconds") or WATCH_TIMEOUT), WATCH_TIMEOUT)
    except ValueError:
        raise bad_request("timeoutSeconds: must be a number") from None


class Bookmarks:
    """When a watch that allows bookmarks sends the next one (``due``), and what it sends (``event``)."""

    def __init__(self, request: Request, plural: str, deadline: float) -> None:
        self.allowed = request.args.get("allowWatchBookmarks") == "true" and plural in BOOKMARK_KINDS
        self.plural, self.deadline = plural, deadline
        self.next = self._after(time.monotonic())

    def _after(self, now: float) -> float | None:
        due = min(now + BOOKMARK_EVERY, self.deadline - BOOKMARK_BEFORE_DEADLINE)
        return due if self.allowed and due > now else None

    def wait(self, longest: float) -> float:
        """How long the stream may wait for a change before a bookmark is due."""
        return longest if self.next is None else max(min(longest, self.next - time.monotonic()), 0.0)

    def due(self) -> bool:
        now = time.monotonic()
        if self.next is None or now < self.next:
            return False
        self.next = self._after(now)
        return True

    def event(self, resource_version: int) -> bytes:
        api_version, kind = BOOKMARK_KINDS[self.plural]
        obj = {"kind": kind, "apiVersion": api_version,  # an empty object of the kind, as Go encodes it
               "metadata": {"resourceVersion": str(resource_version), "creationTimestamp": None}}
        return json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")).encode() + b"\n"


def watch_events(cond: threading.Condition, stopping: threading.Event, cluster: ClusterState, request: Request,
                 ns: str | None, as_table: bool) -> Response:
    """Events as they are recorded (ADDED), and again when a Pending pod's FailedScheduling is counted (MODIFIED)."""
    v1 = "/apis/events.k8s.io/" in request.path
    match = field_selector(request.args.get("fieldSelector") or "", EVENT_FIELDS)
    timeout = watch_timeout(request)
    rv_text = request.args.get("resourceVersion") or ""
    with cond:
        events = cluster.recorder.list(ns)
        asked = int(rv_text) if rv_text.isdigit() and rv_text != "0" else None
        initial = [e for e in events if match(e)] if asked is None else []
        cursor = asked or cluster.sim.resource_version
    sent: set[str] = set()

    def encode(kind: str, event: dict[str, Any]) -> bytes:
        obj = as_events_v1(event) if v1 else event
        if as_table:
            obj = table("events", [obj], cluster.now(), obj["metadata"]["resourceVersion"])
        return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"

    def stream() -> Iterator[bytes]:
        nonlocal cursor
        yield b""  # headers now, not with the first event
        for event in initial:
            sent.add(event["metadata"]["uid"])
            yield encode("ADDED", event)
        deadline = time.monotonic() + timeout
        while not stopping.is_set() and time.monotonic() < deadline:
            with cond:
                fresh = [e for e in cluster.recorder.list(ns) if int(e["metadata"]["resourceVersion"]) > cursor]
                if not fresh:
                    cond.wait(min(deadline - time.monotonic(), 1.0))
                    continue
                cursor = max(int(e["metadata"]["resourceVersion"]) for e in fresh)
            for event in sorted(fresh, key=lambda e: int(e["metadata"]["resourceVersion"])):
                if match(event):
                    kind = "MODIFIED" if event["metadata"]["uid"] in sent else "ADDED"
                    sent.add(event["metadata"]["uid"])
                    yield encode(kind, event)

    return Response(stream(), mimetype="application/json", direct_passthrough=True)


