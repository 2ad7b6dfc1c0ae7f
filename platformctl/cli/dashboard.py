"""``platformctl dashboard``: the page people decide promotions from, served (read-only, refreshing itself) or
exported to one self-contained HTML file."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click

from platformctl.app.dashboard import DashboardRequest, Reader, gather
from platformctl.app.platform import Platform
from platformctl.cli import dashboard_page as view
from platformctl.cli.context import platform
from platformctl.cli.output import writable_file
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.humanize import parse_duration

CACHE_SECONDS = 2.0  # one read of the stores serves every poll that comes within this


class Dashboard:
    """The WSGI application: ``/`` the page, ``/data.json`` what changed, ``/plotly.js`` and ``/dashboard.js`` the
    scripts, ``/healthz``. Reads only; a store that fails is reported on the page, and the page keeps serving: while one
    read of the stores is under way (a table slow to answer), every request gets the last one."""

    CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
           "font-src data:; connect-src 'self'")

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self.read = read
        self.reading = threading.Lock()
        self.cached: tuple[float, dict[str, Any], dict[str, Any]] | None = None  # when, the data, its update

    def update(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The newest data and what a poll gets for it; read anew when older than CACHE_SECONDS and no read is under
        way (else the last one)."""
        fresh = self.cached is not None and time.monotonic() - self.cached[0] <= CACHE_SECONDS
        if not fresh and self.reading.acquire(blocking=self.cached is None):
            try:
                try:
                    d = self.read()
                except Exception as exc:  # the page keeps serving, saying what went wrong
                    d = {**(self.cached[1] if self.cached else _empty()), "generated_at": time.time(),
                         "errors": [f"cannot read the stores: {exc}"]}
                self.cached = (time.monotonic(), d, view.update(d))
            finally:
                self.reading.release()
        assert self.cached is not None
        return self.cached[1], self.cached[2]

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        from werkzeug.wrappers import Request, Response

        request = Request(environ)
        headers = {"Content-Security-Policy": self.CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
        if request.method not in ("GET", "HEAD"):
            response = Response("read-only\n", status=405, headers={"Allow": "GET, HEAD"})
        elif request.path == "/":
            response = Response(view.page(self.update()[0], served=True), mimetype="text/html", headers=headers)
        elif request.path == "/data.json":
            update = self.update()[1]
            same = request.args.get("version") == update["version"]
            response = Response(json.dumps({"version": update["version"]} if same else update), mimetype="application/json",
                                headers=headers)
        elif request.path == "/plotly.js":
            response = Response(view.plotly_js(), mimetype="text/javascript", headers={"Cache-Control": "max-age=3600"})
        elif request.path == "/dashboard.js":
            response = Response(view.APP_JS, mimetype="text/javascript", headers=headers)
        elif request.path == "/healthz":
            response = Response("ok\n", mimetype="text/plain")
        else:
            response = Response("not found\n", status=404, mimetype="text/plain")
        return response(environ, start_response)


def _empty() -> dict[str, Any]:
    return {"generated_at": time.time(), "pipeline_file": "", "ledger": "", "errors": [], "window_seconds": 0,
            "objectives": {}, "decisions": [], "stages": [], "freezes": [], "candidates": [], "candidates_total": 0, "canaries": {},
            "approvals_unauthenticated": False,
            "rotations": {}, "remediation": {}}


def export(platform: Platform, request: DashboardRequest, path: Path) -> Path:
    """Write the page, scripts and data inlined, to ``path`` (its folder must exist)."""
    writable_file(path, "--export")
    tmp = path.with_name(f".{path.name}.tmp")
    try:  # opened before any work: a folder that cannot be written in is said first, and nothing is left behind
        out = tmp.open("w", encoding="utf-8")
    except OSError as exc:
        raise PlatformError(f"cannot write there: {exc.strerror or exc}", file=str(path), field="--export") from None
    try:
        with out:
            out.write(view.page(gather(platform, request), served=False))
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


@click.command("dashboard")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: any free port")
@click.option("--address", default="127.0.0.1", show_default=True, help="the address to listen on")
@click.option("--export", "export_to", type=click.Path(path_type=Path), default=None, metavar="FILE.html",
              help="write one self-contained HTML file (scripts and data inlined) and exit")
@click.option("--window", default="6h", show_default=True, help="how far back the charts reach from each stage's newest result")
@click.option("--pipeline", "pipeline_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the pipeline file (default: release_pipeline/pipeline.yaml of this checkout)")
@click.option("--ledger", default=None, metavar="STORE", help="the ledger's store (default: the pipeline file's)")
@click.option("--state", default=None, metavar="STORE", help="one state store for every stage (default: each stage's own)")
@click.pass_context
def dashboard(ctx: click.Context, port: int, address: str, export_to: Path | None, window: str, pipeline_file: Path | None,
              ledger: str | None, state: str | None) -> None:
    """The release pipeline, its gates, the canaries' SLIs, rotations and remediation on one page, read from the stores."""
    try:
        seconds = float(parse_duration(window))
    except ValueError as exc:
        raise PlatformError(str(exc), field="--window") from None
    if seconds <= 0:
        raise PlatformError("must be longer than 0 s", field="--window")
    request = DashboardRequest(pipeline_file, ledger, state, seconds)
    if export_to is not None:
        writable_file(export_to, "--export")
        click.echo(str(export(platform(), request, export_to).resolve()))
        return
    reader = Reader(platform(), request)  # a bad pipeline file, or a store that does not exist, is exit 2 before the server starts
    from werkzeug.serving import make_server

    try:
        server = make_server(address, port, Dashboard(reader.read), threaded=True)
    except OSError as exc:
        raise PlatformError(f"cannot listen on {address}:{port}: {exc.strerror or exc}", field="--port") from None
    click.echo(f"platformctl dashboard: serving http://{address}:{server.server_port}/ (read-only; Ctrl-C stops)", err=True)
    click.echo(f"http://{address}:{server.server_port}/")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
