"""The live cluster adapter (the official client) against an API server no one here wrote by hand for it (the local
region's, on a real port): lists are read a page at a time (``limit``/``continue``, as the server's request log
shows) and come back whole; transient answers (503 on every verb at a rate, `local fault api-errors --verbs all`)
are asked again after a jittered wait on the cluster's clock, a create only when the server said it did not act;
past the budget the error names the call and how many times it was asked."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from werkzeug.serving import make_server

from platformctl.emulator.server.process import kubeconfig
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.live import LiveCluster
from platformctl.kernel.errors import ApiRefused, ApiUnreachable
from platformctl.kernel.retry import NEVER
from tests.platformctl.emulator.server.conftest import Api, make_api


class Logged:
    """The API with every request's path and query kept, as an access log keeps them."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, str, str]] = []

    def __call__(self, environ: dict[str, Any], start: Any) -> Any:
        self.seen.append((environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("QUERY_STRING", "")))
        return self.app(environ, start)


@pytest.fixture
def region(tmp_path: Path) -> Iterator[tuple[Api, Logged, Path]]:
    api = make_api()
    logged = Logged(api.app)
    server = make_server("127.0.0.1", 0, logged, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig("test", f"http://127.0.0.1:{server.server_port}", list(api.states), "synth")))
    yield api, logged, path
    api.app.stopping.set()
    server.shutdown()
    thread.join(timeout=5)


def live(path: Path, **kw: Any) -> LiveCluster:
    return LiveCluster.from_kubeconfig(str(path), "synth", clock=VirtualClock(), **kw)


def test_lists_are_read_a_page_at_a_time_and_come_back_whole(region: tuple[Api, Logged, Path]) -> None:
    api, logged, path = region
    cluster = live(path)
    cluster.page = 7
    want = sorted((p.namespace, p.name) for p in api.synth.list_pods())
    assert len(want) > 7 * 3
    assert sorted((p.namespace, p.name) for p in cluster.list_pods()) == want
    asked = [q for method, where, q in logged.seen if where.endswith("/api/v1/pods") and method == "GET"]
    assert len(asked) == -(-len(want) // 7) and all("limit=7" in q for q in asked)  # as many pages as it takes
    assert sum("continue=" in q for q in asked) == len(asked) - 1
    assert sorted(n.name for n in cluster.list_nodes()) == sorted(n.name for n in api.synth.list_nodes())
    items, version = cluster.list_versioned("pods")
    assert len(items) == len(want) and version == str(api.synth.resource_version)


def test_transient_answers_are_asked_again_and_a_create_only_when_the_server_did_not_act(
        region: tuple[Api, Logged, Path]) -> None:
    api, logged, path = region
    api.synth.api_error_rate, api.synth.api_error_verbs = 0.5, "all"
    cluster = live(path)
    nodes = sorted(n.name for n in api.synth.list_nodes())
    for _ in range(10):
        assert sorted(n.name for n in cluster.list_nodes()) == nodes
    cordoned = cluster.cordon(nodes[0])
    assert cordoned.unschedulable and api.synth.get_node(nodes[0]).unschedulable
    assert cluster.retried > 0  # some were 503 and were asked again
    assert cluster.clock.now() > VirtualClock().now()  # the waits were on the cluster's clock, not the wall's


def test_past_its_budget_the_error_names_the_call_and_the_attempts_and_a_canary_asks_once(
        region: tuple[Api, Logged, Path]) -> None:
    api, logged, path = region
    api.synth.api_error_rate, api.synth.api_error_verbs = 1.0, "all"
    cluster = live(path)
    with pytest.raises(ApiRefused) as err:
        cluster.list_nodes()
    assert err.value.status == 503 and "to nodes (asked 8 times)" in str(err.value)
    before = len(logged.seen)
    with pytest.raises(ApiRefused) as once:
        live(path, backoff=NEVER).list_nodes()
    assert "asked" not in str(once.value) and len(logged.seen) == before + 1


def test_a_continue_token_starts_after_the_last_key_so_a_delete_between_pages_skips_nothing(api: Api) -> None:
    import json

    from werkzeug.test import Client

    client = Client(api.app)
    everything = [(p["metadata"]["namespace"], p["metadata"]["name"])
                  for p in json.loads(client.get("/clusters/synth/api/v1/pods").get_data())["items"]]
    first = json.loads(client.get("/clusters/synth/api/v1/pods?limit=5").get_data())
    gone = first["items"][0]["metadata"]
    api.synth.delete_pod(gone["namespace"], gone["name"], grace_seconds=0)  # between the pages
    api.synth.run_until_settled()
    second = json.loads(client.get(f"/clusters/synth/api/v1/pods?limit=5&continue={first['metadata']['continue']}").get_data())
    got = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in second["items"]]
    assert got == [k for k in everything if k > everything[4]][:5]  # the five after the first page's last, none skipped


def test_a_refused_connection_is_said_at_once_until_the_api_has_answered_and_waited_out_after(tmp_path: Path) -> None:
    """Nothing listening at a context's address before the API ever answered: a wrong address, said at once as kubectl
    says it (no retries, no time spent). Refused once the API has answered: its server restarting, asked again until
    it is back."""
    api = make_api()
    server = make_server("127.0.0.1", 0, api.app, threaded=True)
    port = server.server_port
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig("test", f"http://127.0.0.1:{port}", list(api.states), "synth")))
    server.server_close()  # the port is known and nothing listens on it
    never = live(path)
    with pytest.raises(ApiUnreachable) as err:
        never.list_nodes()
    assert f"cannot reach the Kubernetes API at http://127.0.0.1:{port}" in str(err.value)
    assert never.retried == 0 and never.clock.now() == VirtualClock().now()

    servers: list[Any] = []

    def serve() -> None:
        servers.append(make_server("127.0.0.1", port, api.app, threaded=True))
        threading.Thread(target=servers[-1].serve_forever, daemon=True).start()

    class Restarting(VirtualClock):
        """The server comes back during the client's second wait."""

        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            self.waits = getattr(self, "waits", 0) + 1
            if self.waits == 2:
                serve()

    serve()
    try:
        cluster = LiveCluster.from_kubeconfig(str(path), "synth", clock=Restarting())
        nodes = sorted(n.name for n in api.synth.list_nodes())
        assert sorted(n.name for n in cluster.list_nodes()) == nodes
        servers[-1].shutdown()
        servers[-1].server_close()  # the server restarts: its port refuses until it is back
        assert sorted(n.name for n in cluster.list_nodes()) == nodes
        assert cluster.retried == 2 and len(servers) == 2
    finally:
        api.app.stopping.set()
        servers[-1].shutdown()
