"""The local region's record of the AWS calls it answered, as CloudTrail records them for an account.

``AwsCallLog`` wraps moto's WSGI application: for every request that changes something (anything but
``Describe*``, ``List*``, ``Get*``) it keeps the time (wall and virtual), the service, the action,
its parameters (query-protocol form fields, or the JSON body's top-level fields; user data left
out) and the HTTP status moto answered. ``GET /platformctl/v1/aws-calls`` serves it, so a test or an
operator can see exactly what a command did to the region's AWS: which instances were terminated,
and how many times.

It also answers DynamoDB's calls one at a time. DynamoDB's transactions are serializable (AWS's "Isolation levels
for DynamoDB transactions"); moto's are not isolated from another thread's: a transaction moto cancels restores a
copy of each table it took before it began, undoing what other requests committed meanwhile (a ledger entry that
was acknowledged, then gone, and its number taken again). One DynamoDB request at a time keeps what the region
acknowledges written, as a real table does.
"""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from moto.moto_server.threaded_moto_server import ThreadedMotoServer

READ_PREFIXES = ("Describe", "List", "Get", "Query", "Scan", "BatchGet")
LEFT_OUT = ("UserData", "LaunchTemplateData.UserData", "PolicyDocument", "AssumeRolePolicyDocument")


class AwsCallLog:
    def __init__(self, app: Any, virtual_now: Callable[[], float] | None = None, capacity: int = 100_000) -> None:
        self.app = app
        self.virtual_now = virtual_now
        self.capacity = capacity
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.dynamodb = threading.Lock()  # one DynamoDB request at a time (above)
        # How many calls have changed something so far: the region's nodes need following only when it moved.
        self.generation = 0

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        action, params = _action(environ, body)
        status: list[int] = []

        def capture(code: str, headers: Any, exc_info: Any = None) -> Any:
            status.append(int(code.split()[0]))
            return start_response(code, headers, exc_info) if exc_info else start_response(code, headers)

        if (environ.get("HTTP_X_AMZ_TARGET") or "").startswith("DynamoDB_"):
            with self.dynamodb:
                result = self.app(environ, capture)
        else:
            result = self.app(environ, capture)
        if action and not action.startswith(READ_PREFIXES):
            record = {"time": time.time(), "service": _service(environ), "action": action, "params": params,
                      "status": status[0] if status else 0}
            if self.virtual_now is not None:
                try:
                    record["virtual_time"] = self.virtual_now()
                except Exception:  # the region is still starting: no clock yet
                    pass
            with self.lock:
                self.generation += 1
                self.calls.append(record)
                if len(self.calls) > self.capacity:
                    del self.calls[: self.capacity // 2]
        return result

    def query(self, action: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if action is None or c["action"] == action]


def _service(environ: dict[str, Any]) -> str:
    auth = environ.get("HTTP_AUTHORIZATION") or ""
    try:
        return auth.split(",")[0].split()[1].split("/")[3]
    except IndexError:
        return ""


def _action(environ: dict[str, Any], body: bytes) -> tuple[str | None, dict[str, Any]]:
    target = environ.get("HTTP_X_AMZ_TARGET")
    if target:  # JSON protocol: DynamoDB_20120810.PutItem
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            data = {}
        params = {k: v for k, v in data.items() if isinstance(v, (str, int, float, bool))} if isinstance(data, dict) else {}
        return target.rsplit(".", 1)[-1], params
    fields = urllib.parse.parse_qs(body.decode(errors="replace")) if body else {}
    fields.update(urllib.parse.parse_qs(environ.get("QUERY_STRING") or ""))
    action = (fields.pop("Action", [None]) or [None])[0]
    method = environ.get("REQUEST_METHOD", "GET")
    if action is None and method not in ("GET", "HEAD"):  # REST JSON (EKS): the method and path are the action
        action = f"{method} {environ.get('PATH_INFO', '')}"
    query: dict[str, Any] = {k: v[0] if len(v) == 1 else v for k, v in fields.items() if k not in LEFT_OUT and k != "Version"}
    return action, query


class RecordingMotoServer(ThreadedMotoServer):
    """moto's threaded server with its application wrapped in an ``AwsCallLog``."""

    def __init__(self, log: Callable[[Any], AwsCallLog], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._wrap = log
        self.log: AwsCallLog | None = None

    def _server_entry(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        self.log = self._wrap(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, self.log, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()
