"""Benchmark: what one command reads of the platform around it: stack files and looks at the local region.

A command works its platform out once (``platformctl.app.platform.Platform``): each stage's stack file read once, the
running local region looked at once. This starts a local region of every stage, then runs commands an operator
and the scheduled jobs run, each in a process of its own whose audit hook (``sys.addaudithook``, PEP 578) counts every
``open`` of a stack file (``infra/Pulumi.<stage>.yaml``) and every request to the region's status endpoint
(``/platformctl/v1/status``); the release commands keep their ledger in the region's home. Printed: each command's counts and exit code.

Not part of the test run.

    .venv/bin/python benchmarks/command_walks.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs one command with the counting hook, then prints the counts as the process's last line on stderr.
_HOOK = r"""
import atexit, json, sys
counts = {"stack_reads": 0, "region_looks": 0}
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and "/infra/Pulumi." in args[0] and args[0].endswith(".yaml"):
        counts["stack_reads"] += 1
    elif event == "urllib.Request" and args[0].endswith("/platformctl/v1/status"):
        counts["region_looks"] += 1
sys.addaudithook(hook)
atexit.register(lambda: print("WALK " + json.dumps(counts), file=sys.stderr))
from platformctl.cli import main
sys.argv = ["platformctl", *sys.argv[1:]]
main()
"""

COMMANDS = [
    ["stage", "show", "dev"],
    ["rotate", "plan", "--stage", "dev", "--policy", "upgrade_service/examples/dev.yaml"],
    ["rotate", "run", "--stage", "dev", "--policy", "upgrade_service/examples/dev.yaml"],
    ["rotate", "status", "--stage", "dev"],
    ["release", "start", "--note", "walk", "--ledger", "{home}/release.db"],
    ["release", "tick", "--ledger", "{home}/release.db"],
    ["release", "status", "--ledger", "{home}/release.db"],
    ["remediate", "status", "--stage", "dev"],
]


def run(home: Path, argv: list[str]) -> tuple[int, dict[str, int]]:
    env = {**os.environ, "PLATFORMCTL_HOME": str(home)}
    argv = [a.format(home=home) for a in argv]
    done = subprocess.run([sys.executable, "-c", _HOOK, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    lines = [line for line in done.stderr.splitlines() if line.startswith("WALK ")]
    if done.returncode:
        print("\n".join(line for line in done.stderr.splitlines() if not line.startswith("WALK ")), file=sys.stderr)
    return done.returncode, json.loads(lines[-1][5:]) if lines else {}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="walks-") as tmp:
        home = Path(tmp)
        platformctl = [sys.executable, "-m", "platformctl"]
        env = {**os.environ, "PLATFORMCTL_HOME": str(home)}
        subprocess.run([*platformctl, "local", "up", "--stage", "all"], cwd=ROOT, env=env, check=True,
                       capture_output=True)
        try:
            print(f"{'command':<70} {'exit':>4} {'stack reads':>11} {'region looks':>12}")
            for argv in COMMANDS:
                code, counts = run(home, argv)
                print(f"{' '.join(argv):<70} {code:>4} {counts.get('stack_reads', '?'):>11} "
                      f"{counts.get('region_looks', '?'):>12}")
        finally:
            subprocess.run([*platformctl, "local", "down"], cwd=ROOT, env=env, capture_output=True)


if __name__ == "__main__":
    main()
