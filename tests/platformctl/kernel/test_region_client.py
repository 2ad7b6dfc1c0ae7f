"""A client's view of the local region: its clock extrapolated between answers and corrected when asked again; a
region that runs and is slow to answer is waited for, never taken for none."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from platformctl.app.platform import Platform
from platformctl.kernel import region_client
from platformctl.kernel.clock import past
from platformctl.kernel.errors import Unavailable
from platformctl.kernel.region_client import ServerClock


@pytest.fixture
def server() -> Iterator[dict[str, Any]]:
    """A /time endpoint whose virtual time the test sets (a busy region's clock stands still)."""
    state: dict[str, Any] = {"virtual_time": 1000.0, "speed": 300.0, "delay": 0.0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(state["delay"])  # a region busy with every stage and its canaries
            body = json.dumps({**state, "wall_time": time.time()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client stopped waiting
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state["base"] = f"http://127.0.0.1:{httpd.server_address[1]}"
    state["url"] = f"{state['base']}/time"
    yield state
    httpd.shutdown()


def test_a_lagging_server_clock_is_read_again_before_a_deadline_is_called(server: dict[str, Any]) -> None:
    clock = ServerClock(server["url"])
    time.sleep(0.2)
    assert clock.now() >= 1000.0 + 0.15 * 300  # extrapolated at the server's speed
    # The server's clock stood still meanwhile (its tick thread starved): asked again, the client goes back to it.
    assert clock.sync() == pytest.approx(1000.0, abs=0.05 * 300)
    server["virtual_time"] = 5000.0
    assert clock.sync() == pytest.approx(5000.0, abs=0.05 * 300)
    server["url"] = None  # an unreachable server keeps the last answer
    clock.url = "http://127.0.0.1:9/time"
    assert clock.sync() >= 5000.0


def test_a_deadline_is_the_regions_to_call_even_when_its_server_is_slow_to_say_its_time(
        server: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A canary runner on a region busy with every stage: its guess of the region's time runs on at the region's pace
    while the server, whose time stands still, takes longer to answer than a look waits. The deadline is not called
    on the guess (that halted a good candidate: its canary pods "not running within 180 s" a few region seconds after
    they were made); the caller looks again. Only a server silent for GONE_SECONDS is taken as gone."""
    monkeypatch.setattr(region_client, "LOOK_SECONDS", 0.2)  # a look gives up sooner than the busy server answers
    clock = ServerClock(server["url"])
    deadline = 1000.0 + 180
    server["delay"] = 0.6
    time.sleep(0.7)
    assert clock.now() >= deadline  # the guess: 0.7 s at 300x
    assert not past(clock, deadline)
    assert not past(clock, deadline)  # looked again, not answered again: still the region's to call
    server.update(virtual_time=1180.0, delay=0.0)  # the region got there, and says so
    assert past(clock, deadline)
    server["delay"] = 0.6
    clock.sync()  # not answered
    monkeypatch.setattr(region_client, "GONE_SECONDS", 0.5)
    time.sleep(0.6)
    assert past(clock, deadline + 60)  # silent for longer than GONE_SECONDS: the guess stands


def test_a_running_region_slow_to_answer_is_waited_for_and_one_that_never_answers_is_unavailable(
        server: dict[str, Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORMCTL_HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    (tmp_path / "local").mkdir()
    server.update(kubeconfig=str(tmp_path / "local" / "kubeconfig"))
    (tmp_path / "local" / "server.json").write_text(json.dumps({"pid": os.getpid(), "kubernetes_endpoint": server["base"]}))
    server["delay"] = 2.5  # longer than one look used to wait: the command then took ~/.kube/config for the region's
    assert Platform.from_os().kubeconfig(None) == server["kubeconfig"]
    monkeypatch.setattr(region_client, "ANSWER_SECONDS", 1.0)
    with pytest.raises(Unavailable, match="did not answer"):
        Platform.from_os().kubeconfig(None)
    server["delay"] = 0.0
    assert region_client.running(tmp_path) is not None
    (tmp_path / "local" / "server.json").write_text(json.dumps({"pid": os.getpid(), "kubernetes_endpoint": "http://127.0.0.1:9"}))
    assert region_client.running(tmp_path) is None  # nothing listens there: no region
