"""Benchmark: the dashboard's served page and its export over a month of history, beside the same over a day's.

Two sets of stores are built side by side in one run, each with the same rates: every canary (five of them) of each
of the four stages records a result every minute, spread over the stage's three clusters, a tenth of the node-pool
pods failing on every fourth image; and a ledger the real reconciler wrote, a candidate every six hours carried
dev -> staging -> prod-canary -> prod by a tick every fifteen minutes (benchmarks/release_tick.py's). One holds a day
of it, the other a month. Timed, median of 5: ``GET /`` on the served application (the stores read anew each time,
no cache, the stores opened once as the server keeps them) and ``platformctl dashboard --export``'s
work (read, render, write the file with plotly.js inlined).
Printed: each time, the rows each set holds, and the ratio month / day. Target: each under 2 s on this machine.

Not part of the test run.

    .venv/bin/python benchmarks/dashboard.py [--days 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from release_tick import T0, build  # the month of ledger the tick benchmark builds
from werkzeug.test import Client

from e2e_canary.results import ResultStream
from platformctl.app.dashboard import DashboardRequest, Reader
from platformctl.app.platform import Platform
from platformctl.cli import dashboard as command
from platformctl.kernel.state import open_store

STAGES = ("dev", "staging", "prod-canary", "prod")
CANARIES = ("service", "batch", "cron", "daemon", "node-pool")
PIPELINE = "stages:\n" + "".join(f"  - {{name: {s}, soak: 1h, minResults: 50, passFor: 20m, deadline: 6h}}\n" for s in STAGES)


def write_results(path: Path, start: float, end: float) -> int:
    """Every canary of every stage once a minute from ``start`` to ``end``, written a day's stream at a time."""
    rng = random.Random(11)
    store = open_store(str(path))
    batches: dict[str, list[dict[str, Any]]] = defaultdict(list)
    written = 0
    minute = 0
    at = start
    while at < end:
        image = f"ami-{int((at - start) // (6 * 3600)):08d}"
        bad = int((at - start) // (6 * 3600)) % 4 == 3
        for stage in STAGES:
            cluster = f"{stage}-{('host', 'a-01', 'b-01')[minute % 3]}"
            for canary in CANARIES:
                ok = rng.random() > (0.1 if bad and canary == "node-pool" else 0.002)
                row = {"kind": "result", "canary": canary, "canary_kind": canary, "attempt": f"a{written}", "stage": stage,
                       "cluster": cluster, "zone": None, "pool": "general", "image": image, "outcome": "ok" if ok else "fail",
                       "reason": "" if ok else f"pod on image {image}: CreateContainerError",
                       "metrics": {"pod_startup_seconds": [rng.gauss(2.0, 0.3)], "check_seconds": rng.gauss(12, 1)} if ok else {},
                       "at": at + rng.uniform(0, 50)}
                batches[ResultStream.of(stage, cluster, row["at"]).name].append(row)
                written += 1
        minute += 1
        at += 60
    for stream, rows in batches.items():
        store.append_many(stream, rows)
    store.close()
    return written


def timed(action: Any, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=float, default=30.0)
    args = parser.parse_args()
    command.CACHE_SECONDS = 0.0  # every request reads the stores anew
    with tempfile.TemporaryDirectory() as tmp:
        took: dict[str, dict[str, float]] = {}
        for label, days in (("day", 1.0), ("month", args.days)):
            root = Path(tmp) / label
            root.mkdir()
            began = time.perf_counter()
            ledger, stages, entries, _ = build(days, root)
            ledger.store.close()
            results = write_results(root / "state.db", T0 - 6 * 3600, stages.clock)
            (root / "pipeline.yaml").write_text(PIPELINE)
            print(f"{label}: {days:g} day(s) of history built in {time.perf_counter() - began:.0f} s: {entries} ledger "
                  f"entries, {results} canary results over {len(STAGES)} stages")
            request = DashboardRequest(root / "pipeline.yaml", str(root / "release.db"), str(root / "state.db"))
            client = Client(command.Dashboard(Reader(Platform.from_os(), request).read))  # as the server keeps it: stores opened once
            page = client.get("/")
            assert page.status_code == 200 and b"cannot be read" not in page.data, page.data[:2000]
            took[label] = {"served": timed(lambda client=client: client.get("/")),  # type: ignore[misc]
                           "export": timed(lambda request=request, root=root: command.export(Platform.from_os(), request, root / "x.html"))}  # type: ignore[misc]
            print(f"  GET / (served): {took[label]['served'] * 1000:.0f} ms; export: {took[label]['export'] * 1000:.0f} ms "
                  f"({(root / 'x.html').stat().st_size / 1e6:.1f} MB) (medians of 5)")
        for kind in ("served", "export"):
            print(f"{kind}: month {took['month'][kind]:.2f} s, day {took['day'][kind]:.2f} s, ratio month / day "
                  f"{took['month'][kind] / took['day'][kind]:.2f}x (target: under 2 s)")


if __name__ == "__main__":
    main()
