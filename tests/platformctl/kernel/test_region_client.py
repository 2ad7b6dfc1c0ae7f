"""A client's view of the local region's clock: extrapolated between answers, corrected when asked again."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from platformctl.kernel.region_client import ServerClock


@pytest.fixture
def server() -> Iterator[dict[str, Any]]:
    """A /time endpoint whose virtual time the test sets (a busy region's clock stands still)."""
    state: dict[str, Any] = {"virtual_time": 1000.0, "speed": 300.0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({**state, "wall_time": time.time()}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}/time"
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
