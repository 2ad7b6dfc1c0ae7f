"""``platformctl dashboard``: what it reads from the stores the pipeline, the canaries, a rotation and remediation wrote,
what the page and the export carry, markup shown as text, a store that cannot be read, and bad input (exit 2, nothing
written). The page in a real browser: test_dashboard_browser_process.py."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from werkzeug.test import Client

from platformctl.app import dashboard as reading
from platformctl.app.dashboard import DashboardRequest, Reader, gather
from platformctl.app.platform import Platform
from platformctl.cli import dashboard as command
from platformctl.kernel.state.dynamodb import DynamoDBStore, create_table
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.platformctl.app.dashboard_stores import BAD_IMAGE, EVIL_CLUSTER, GOOD_IMAGE, ONERROR, SCRIPT, Stores, build, store_newer_result


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    return build(tmp_path_factory.mktemp("stores"))


def platformctl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "platformctl", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def request(stores: Stores, **kw: Any) -> DashboardRequest:
    return DashboardRequest(stores.pipeline, str(stores.ledger), str(stores.state), **kw)


def figures_of(html: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="figures">(.*?)</script>', html, re.S)
    assert found
    return json.loads(found.group(1))


def test_it_shows_each_stage_the_candidates_with_their_boots_and_the_halted_ones_reason(stores: Stores) -> None:
    d = gather(Platform.from_os(), request(stores))
    assert [s["name"] for s in d["stages"]] == ["dev", "staging", "prod-canary", "prod"]
    dev = d["stages"][0]
    assert dev["last_good"] == stores.good.id and dev["current"] == stores.bad.id  # halted and rolling back to the good one
    bad = next(c for c in d["candidates"] if c["id"] == stores.bad.id)
    assert bad["status"] == "halted" and bad["reason"] == stores.halt_reason and "CreateContainerError" in bad["reason"]
    assert bad["instances_booted_by_stage"] == {"dev": 3, "staging": 0, "prod-canary": 0, "prod": 0}  # as the ledger recorded
    # of which one first light booted, judged before any workload moved, and two the waves
    assert (bad["instances_booted_first_light"], bad["instances_booted_first_light_by_stage"]["dev"],
            bad["instances_booted_in_waves_by_stage"]["dev"]) == (1, 1, 2)
    halt = next(e for e in d["decisions"] if e["decision"] == "halt")
    assert halt["inputs"]["verdict"]["verdict"] == "fail"  # expandable to the inputs `release replay` uses
    verdict = d["canaries"]["dev"]["latest_verdict"]
    assert verdict["verdict"] == "fail" and verdict["candidate"] == stores.bad.id
    failed = [m for m in verdict["metrics"] if m["verdict"] == "fail"]
    assert failed and all(m["p_value"] is not None for m in failed)
    # the soak's comparison of the new image with the last good candidate's is in the judge's numbers too
    against = {m["against"] for m in verdict["metrics"]}
    assert {"the stage's window", f"{BAD_IMAGE} against {GOOD_IMAGE}"} <= against, against


def test_the_charts_carry_each_images_points_as_the_store_holds_them(stores: Stores) -> None:
    d = gather(Platform.from_os(), request(stores, window=4 * 3600.0))
    dev = d["canaries"]["dev"]
    lines = {line["image"]: line for line in dev["lines"]}
    assert set(lines) == {GOOD_IMAGE, BAD_IMAGE}  # a bad image is its own line
    newest = max(r.at for r in stores.rows)
    assert dev["end"] == newest and dev["start"] == newest - 4 * 3600
    # Counted again here from the rows the canaries stored: attempts and successes per image over the window, the
    # attempts the judge counts (an infra error is the canary's own trouble, not the image's).
    assert any(r.outcome == "infra_error" for r in stores.rows)
    shown = [r for r in stores.rows if dev["start"] <= r.at <= dev["end"] and r.outcome in ("ok", "fail", "timeout")]
    for image, line in lines.items():
        mine = [r for r in shown if r.image == image]
        assert sum(line["attempts"]) == len(mine)
        ok = sum(round(rate * n) for rate, n in zip(line["success_rate"], line["attempts"], strict=True))
        assert ok == sum(r.outcome == "ok" for r in mine)
    assert sum(lines[BAD_IMAGE]["attempts"]) > 0 and min(lines[BAD_IMAGE]["success_rate"]) < 0.9
    assert min(lines[GOOD_IMAGE]["success_rate"]) == 1.0
    assert len(lines[GOOD_IMAGE]["at"]) <= 120  # aggregated points, not a row a pod


def test_the_export_is_one_file_with_its_scripts_and_data_inlined_and_markup_shown_as_text(stores: Stores, tmp_path: Path) -> None:
    out = tmp_path / "review.html"
    done = platformctl("dashboard", "--export", str(out), *stores.args(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out.resolve())
    html = out.read_text()
    assert "<script src=" not in html and "http://" not in html.split("<body")[1].split("id=\"figures\"")[0]
    assert "Plotly" in html  # plotly.js itself, inlined
    for markup in (SCRIPT, ONERROR, EVIL_CLUSTER):
        assert markup not in html  # never as markup ...
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html  # ... but as text
    assert "onerror=&#34;window.__pwned = 1&#34;" in html
    # the halted candidate's instances, first light's beside the waves'
    assert re.search(rf'data-candidate="{stores.bad.id}">.*?<td class="first-light">1</td><td>dev 1\+2, ', html, re.S)
    figures = figures_of(html)
    names = {t["name"] for t in figures["dev-latency"]["data"]}
    assert {f"{GOOD_IMAGE} p50", f"{BAD_IMAGE} p99"} <= names
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp and "'unsafe-inline'" not in csp.group(1).split("script-src")[1]  # only its own scripts, by hash


def test_a_store_that_cannot_be_read_is_shown_as_such_and_the_page_keeps_serving(stores: Stores, tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not a database" * 100)
    app = command.Dashboard(lambda: gather(Platform.from_os(), DashboardRequest(stores.pipeline, str(stores.ledger), str(broken))))
    client = Client(app)
    page = client.get("/")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "cannot be read" in text and str(broken) in text
    assert stores.bad.id in text  # the ledger still read: the rest is shown
    assert client.get("/data.json").status_code == 200
    no_ledger = Client(command.Dashboard(Reader(Platform.from_os(), DashboardRequest(stores.pipeline, str(broken), str(stores.state))).read))
    page = no_ledger.get("/")
    assert page.status_code == 200 and f"the ledger {broken} cannot be read" in page.get_data(as_text=True)


def copied(stores: Stores, tmp_path: Path) -> Stores:
    """The stores in a folder of this test's own, to write to without changing what the other tests read."""
    for path in (stores.pipeline, stores.ledger, stores.state):
        shutil.copy(path, tmp_path / path.name)
    return dataclasses.replace(stores, pipeline=tmp_path / stores.pipeline.name, ledger=tmp_path / stores.ledger.name,
                               state=tmp_path / stores.state.name)


def test_the_served_page_says_what_changed_when_a_new_result_is_stored(stores: Stores, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    mine = copied(stores, tmp_path)
    monkeypatch.setattr(command, "CACHE_SECONDS", 0.0)
    monkeypatch.setattr(reading, "time", SimpleNamespace(time=lambda: 1_800_000_000.0))  # one minute throughout
    app = command.Dashboard(Reader(Platform.from_os(), request(mine)).read)
    client = Client(app)
    page = client.get("/")
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]  # no inline script runs on the served page
    assert re.search(r"<script>", page.get_data(as_text=True)) is None
    first = client.get("/data.json").get_json()
    assert client.get(f"/data.json?version={first['version']}").get_json() == {"version": first["version"]}  # nothing new
    store_newer_result(mine, "ami-0newer")
    after = client.get(f"/data.json?version={first['version']}").get_json()
    assert after["version"] != first["version"]
    assert "ami-0newer p50" in {t["name"] for t in json.loads(after["figures"])["dev-latency"]["data"]}
    assert client.post("/").status_code == 405  # read-only


def test_a_store_named_that_does_not_exist_is_exit_2_and_is_not_made(stores: Stores, tmp_path: Path) -> None:
    for flag in ("--ledger", "--state"):
        missing = tmp_path / f"typo{flag}.db"
        args = {"--ledger": str(stores.ledger), "--state": str(stores.state), flag: str(missing)}
        done = platformctl("dashboard", "--export", str(tmp_path / "x.html"), "--pipeline", str(stores.pipeline),
                           *[part for kv in args.items() for part in kv], cwd=tmp_path)
        assert done.returncode == 2 and flag in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not missing.exists() and not (tmp_path / "x.html").exists()


@pytest.mark.parametrize(("args", "field"), [
    (["--export", "/nonexistent-folder/x.html"], "--export"),
    (["--window", "soon"], "--window"),
    (["--window", "0"], "--window"),
    (["--port", "99999"], "--port"),
    (["--export", "/proc/dashboard.html"], "--export"),  # a folder that cannot be written in: said before any work
    (["--state", "dynamodb://"], "--state"),
    (["--state", "dynamodb://t?zone=x"], "--state"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(stores: Stores, tmp_path: Path, args: list[str], field: str) -> None:
    before = sorted(p.name for p in tmp_path.iterdir())
    done = platformctl("dashboard", *stores.args(), *args, cwd=tmp_path)  # the last of a repeated option counts
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and field in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_malformed_pipeline_file_is_named_and_nothing_is_exported(stores: Stores, tmp_path: Path) -> None:
    bad = tmp_path / "pipeline.yaml"
    bad.write_text("stages: [{name: qa}]\n")
    out = tmp_path / "x.html"
    done = platformctl("dashboard", "--export", str(out), "--pipeline", str(bad), "--ledger", str(stores.ledger), cwd=tmp_path)
    assert done.returncode == 2 and str(bad) in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()


def test_it_reads_shared_dynamodb_tables_as_it_reads_sqlite(stores: Stores, moto_endpoint: str, aws_env: dict[str, str]) -> None:
    """The same stores in DynamoDB (moto), as a real account's shared tables hold them: the same page."""
    tables = {}
    for name, path in (("ledger", stores.ledger), ("state", stores.state)):
        table = f"platformctl-dashboard-{name}"
        create_table(table)
        source, target = SQLiteStore(path), DynamoDBStore(table)
        for stream in source.streams():
            target.bulk_load(stream, [r.data for r in source.read(stream)])
        source.close()
        tables[name] = f"dynamodb://{table}"
    on_sqlite = gather(Platform.from_os(), request(stores))
    on_dynamodb = gather(Platform.from_os(), DashboardRequest(stores.pipeline, tables["ledger"], tables["state"]))
    assert on_dynamodb["errors"] == [] and on_dynamodb["ledger"] == tables["ledger"]
    assert on_dynamodb["candidates"] == on_sqlite["candidates"] and on_dynamodb["rotations"] == on_sqlite["rotations"]
    assert [d["id"] for d in on_dynamodb["decisions"]] == [d["id"] for d in on_sqlite["decisions"]]
    assert on_dynamodb["canaries"]["dev"]["lines"] == on_sqlite["canaries"]["dev"]["lines"]
    # (what is counted from now on the wall clock aside)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("clock", "last_hour")} for r in rows]  # noqa: E731
    assert strip(on_dynamodb["stages"]) == strip(on_sqlite["stages"])
    assert {s: strip(r) for s, r in on_dynamodb["remediation"].items()} == {s: strip(r) for s, r in on_sqlite["remediation"].items()}


def test_approvals_on_a_ledger_on_the_local_disk_are_shown_as_unauthenticated(tmp_path: Path) -> None:
    from release_pipeline.ledger import Ledger
    from release_pipeline.pipeline import load_pipeline
    from release_pipeline.reconcile import tick
    from tests.release_pipeline.test_reconcile import candidate, fake

    pipeline_file = tmp_path / "pipeline.yaml"
    pipeline_file.write_text("stages:\n  - {name: dev, soak: 0, approvals: 1}\napprovers: {unauthenticated: true}\n")
    ledger = Ledger(SQLiteStore(tmp_path / "release.db"))
    SQLiteStore(tmp_path / "state.db")
    c = candidate(1)
    ledger.add_candidate(c)
    ledger.append(c.id, None, "start", 0.0, "change", {"ready_in": ["dev"]}, "tester")
    tick(load_pipeline(pipeline_file), ledger, fake(0.0), "tester")  # waits for its approval
    d = gather(Platform.from_os(), DashboardRequest(pipeline_file, str(tmp_path / "release.db"), str(tmp_path / "state.db")))
    assert d["approvals_unauthenticated"] and d["stages"][0]["approvals_needed"][0]["candidate"] == c.id
    out = tmp_path / "page.html"
    done = platformctl("dashboard", "--export", str(out), "--pipeline", str(pipeline_file), "--ledger",
                       str(tmp_path / "release.db"), "--state", str(tmp_path / "state.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "approval 0/1 <span class=\"fail\">(unauthenticated: a ledger on the local disk" in out.read_text()


def drifted_page(tmp_path: Path, drift: Callable[[Any], None]) -> tuple[str, str]:
    """The dashboard page of a pipeline whose one candidate passed dev, after ``drift(stages)`` and one tick; and the
    image the candidate carries."""
    from release_pipeline.ledger import Ledger
    from release_pipeline.pipeline import load_pipeline
    from release_pipeline.reconcile import tick
    from tests.release_pipeline.test_reconcile import candidate, fake

    pipeline_file = tmp_path / "pipeline.yaml"
    pipeline_file.write_text("stages:\n  - {name: dev, soak: 0, minResults: 0, passFor: 0}\n")
    pipeline = load_pipeline(pipeline_file)
    ledger = Ledger(SQLiteStore(tmp_path / "release.db"))
    SQLiteStore(tmp_path / "state.db")
    c = candidate(1)
    ledger.add_candidate(c)
    ledger.append(c.id, None, "start", 0.0, "change", {"ready_in": ["dev"]}, "tester")
    stages = fake(0.0)
    for _ in range(12):
        tick(pipeline, ledger, stages, "tester")
        stages.clock += 300
    assert ledger.state().stage("dev").last_good == c.id
    drift(stages)
    tick(pipeline, ledger, stages, "tester")
    out = tmp_path / "page.html"
    done = platformctl("dashboard", "--export", str(out), "--pipeline", str(pipeline_file), "--ledger",
                       str(tmp_path / "release.db"), "--state", str(tmp_path / "state.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return out.read_text(), c.stages["dev"].images["general"]["id"]


def test_a_drifted_stage_is_shown_in_red_naming_the_pool_and_both_images(tmp_path: Path) -> None:
    page, expected = drifted_page(tmp_path, lambda stages: stages.templates["dev"].update(general="ami-by-hand"))
    assert (f'<div class="fail drift">drift: dev-1/general launches <code>ami-by-hand</code>, not <code>{expected}</code>'
            in page)


def test_a_template_with_settings_no_deploy_made_is_shown_in_red_naming_them(tmp_path: Path) -> None:
    page, expected = drifted_page(tmp_path, lambda stages: stages.settings.update(dev={"general": ("InstanceType", "UserData")}))
    assert (f'<div class="fail drift">drift: dev-1/general launches <code>{expected}</code> (general), with other '
            "InstanceType, UserData than the pipeline deployed: no step until it is put back</div>" in page)

