"""The dashboard in headless Chromium (Debian's, driven by Playwright): the served page and the exported file render
with no console error, the charts carry the points the stores hold, a halted candidate shows its reason, markup from
the stores runs nothing, and the served page redraws by itself when a new result is stored. Screenshots of both are
saved in ``artifacts/`` of the checkout (``$PLATFORMCTL_ARTIFACTS`` when set), where CI keeps them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

from platformctl.app.dashboard import DashboardRequest, gather
from platformctl.app.platform import Platform
from tests.platformctl.app.dashboard_stores import BAD_IMAGE, ONERROR, SCRIPT, Stores, build, store_newer_result

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("PLATFORMCTL_ARTIFACTS") or REPO / "artifacts")
# As root on a machine with no network: no sandbox, and none of Chromium's own calls home.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "no chromium on PATH: `make test` installs Debian's chromium (scripts/ensure-chromium)"
    return found


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return build(tmp_path_factory.mktemp("stores"))


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=FLAGS)
        yield b
        b.close()


@pytest.fixture
def served(stores: Stores, tmp_path: Path) -> Iterator[str]:
    server = subprocess.Popen([sys.executable, "-m", "platformctl", "dashboard", "--port", "0", *stores.args()],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), server.stderr.read() if server.stderr else url
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


class Watched:
    """A page and what its console and network said."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.navigations = 0
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("framenavigated", lambda f: self._navigated(f))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.errors.append(f"{message.type}: {message.text}")

    def _navigated(self, frame: Any) -> None:
        if frame == self.page.main_frame:
            self.navigations += 1

    def traces(self, figure: str) -> dict[str, dict[str, Any]]:
        data = self.page.evaluate(f"(document.querySelector('[data-figure=\"{figure}\"]') || {{}}).data || []")
        return {t["name"]: t for t in data}


def open_page(browser: Browser, url: str) -> Watched:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    watched = Watched(page)
    page.goto(url)
    page.wait_for_function("document.querySelector('[data-figure=\"dev-latency\"] .main-svg') !== null", timeout=30_000)
    return watched


def check_shown(watched: Watched, stores: Stores) -> None:
    page = watched.page
    assert watched.errors == []
    assert page.evaluate("window.__pwned") is None  # the note, the reason and the cluster name ran nothing
    text = page.inner_text("body")
    assert f"the good one {SCRIPT}" in text and f"the bad one {ONERROR}" in text  # shown as the text they are
    bad = page.locator(f'tr.candidate[data-candidate="{stores.bad.id}"]')
    assert "halted" in bad.inner_text() and stores.halt_reason.split(";")[0] in bad.locator(".reason").inner_text()
    # The charts carry what the stores hold: each image's points as the store gives them.
    lines = {line["image"]: line for line in gather(Platform.from_os(), DashboardRequest(stores.pipeline, str(stores.ledger),
                                                                     str(stores.state)))["canaries"]["dev"]["lines"]}
    traces = watched.traces("dev-latency")
    for image, line in lines.items():
        drawn = traces[f"{image} p50"]
        assert len(drawn["x"]) == len(line["at"]) and drawn["y"] == line["p50"]
    success = watched.traces("dev-success")
    assert success[BAD_IMAGE]["y"] == lines[BAD_IMAGE]["success_rate"]
    assert min(y for y in success[BAD_IMAGE]["y"] if y is not None) < 0.9  # the bad image stands out as its own line


def test_the_served_page_renders_shows_the_stores_and_redraws_by_itself(browser: Browser, served: str, stores: Stores) -> None:
    watched = open_page(browser, served)
    check_shown(watched, stores)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    watched.page.screenshot(path=str(ARTIFACTS / "dashboard-served.png"), full_page=True)
    # A new result stored by a canary on a new image: the page draws its line with no reload.
    store_newer_result(stores, "ami-0newer")
    deadline = time.monotonic() + 60
    while "ami-0newer p50" not in watched.traces("dev-latency"):
        assert time.monotonic() < deadline, "the page did not redraw within 60 s of a new result"
        watched.page.wait_for_timeout(500)
    assert watched.navigations == 1 and watched.errors == []  # redrawn in place, not reloaded


def test_the_exported_file_renders_offline_with_everything_inlined(browser: Browser, stores: Stores, tmp_path: Path) -> None:
    out = tmp_path / "review.html"
    done = subprocess.run([sys.executable, "-m", "platformctl", "dashboard", "--export", str(out), *stores.args()],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    watched = open_page(browser, out.as_uri())
    assert [u for u in watched.requests if not u.startswith(("file:", "data:"))] == []  # nothing fetched: it opens offline
    check_shown(watched, stores)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    watched.page.screenshot(path=str(ARTIFACTS / "dashboard-export.png"), full_page=True)
