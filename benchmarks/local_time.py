"""Benchmark: what the local region's time costs in wall time, with skipping and without, side by side in one run.

1. A soak: ``local up --stage dev`` with its canary runner (the shipped canaries, as the Pulumi program runs them),
   left alone until ``--hours`` of the region's time have passed. Printed per way: wall seconds, the region's seconds
   per wall second, how much was skipped, and the canary results the stage's store holds (the soak's evidence: the
   same canaries ran, skipping or not).
2. A whole release (``--pipeline``): ``platformctl demo-pipeline`` (every stage's region at once, a good candidate to
   prod under the shipped soaks, a bad one halted in dev), wall seconds per way.

Not part of the test run.

    .venv/bin/python benchmarks/local_time.py [--hours 24] [--pipeline]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _env(home: Path, skip: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PLATFORMCTL_")) and k != "KUBECONFIG"}
    env.update({"PLATFORMCTL_HOME": str(home), "PLATFORMCTL_LOCAL_SKIP": "true" if skip else "false"})
    return env


def _platformctl(home: Path, skip: bool, *args: str, timeout: float = 3600) -> str:
    done = subprocess.run([sys.executable, "-m", "platformctl", *args], capture_output=True, text=True, cwd=ROOT,
                          env=_env(home, skip), timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"platformctl {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout


def soak(hours: float, skip: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        info = json.loads(_platformctl(home, skip, "local", "up", "--stage", "dev", "-o", "json"))
        try:
            start_virtual, start_wall = float(info["virtual_epoch"]), time.monotonic()
            while True:
                status = json.loads(_platformctl(home, skip, "local", "status", "-o", "json"))
                if float(status["virtual_epoch"]) - start_virtual >= hours * 3600:
                    break
                time.sleep(1.0)
            wall = time.monotonic() - start_wall
            with sqlite3.connect(status["state"]) as db:
                results = db.execute("SELECT COUNT(*) FROM records WHERE stream LIKE 'canary/%'").fetchone()[0]
            virtual = float(status["virtual_epoch"]) - start_virtual
            return {"wall_seconds": wall, "virtual_seconds": virtual, "pace": virtual / wall,
                    "skipped_seconds": status["clock"].get("skipped_seconds", 0.0), "canary_results": results}
        finally:
            _platformctl(home, skip, "local", "down")


def pipeline(skip: bool) -> float:
    with tempfile.TemporaryDirectory() as folder:
        started = time.monotonic()
        _platformctl(Path(folder), skip, "demo-pipeline", timeout=7200)
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="the soak's length in the region's hours")
    parser.add_argument("--pipeline", action="store_true", help="also time a whole release through every stage")
    args = parser.parse_args()
    rows = {skip: soak(args.hours, skip) for skip in (True, False)}
    print(f"a {args.hours:g}-hour soak of dev with its canary runner (local up, default speed 300x):")
    for skip, row in rows.items():
        print(f"  {'skipping' if skip else 'no skip '}  {row['wall_seconds']:7.1f} s wall  {row['pace']:7.0f} region s "
              f"per wall s  skipped {row['skipped_seconds']:8.0f} s  canary results {row['canary_results']}")
    print(f"  ratio skipping / no skip: {rows[True]['wall_seconds'] / rows[False]['wall_seconds']:.2f}x wall time")
    if args.pipeline:
        times = {skip: pipeline(skip) for skip in (True, False)}
        print("a whole release (demo-pipeline: every stage's region, a good candidate to prod, a bad one halted):")
        for skip, seconds in times.items():
            print(f"  {'skipping' if skip else 'no skip '}  {seconds:7.1f} s wall")
        print(f"  ratio skipping / no skip: {times[True] / times[False]:.2f}x wall time")


if __name__ == "__main__":
    main()
