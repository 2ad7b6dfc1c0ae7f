"""Benchmark: what one command reads of the platform around it: stack files and looks at the local region.

A command works its platform out once (``platformctl.app.platform.Platform``): each stage's stack file read once, the
running local region looked at once. This starts a local region of every stage, then runs commands an operator
and the scheduled jobs run, each in a process of its own whose audit hook (``sys.addaudithook``, PEP 578) counts every
``open`` of a stack file (``infra/Pulumi.<stage>.yaml``) and every request to the region's status endpoint
(``/platformctl/v1/status``: a status that is slow to answer is asked again, within the one look), and whose profile
hook (``sys.setprofile``) follows the main thread's calls between the toolkit's own modules: how many modules the
command's walk touches (``files``) and how many times it enters a module it had already left (``returns``, a
measure of how often a request goes back through a file it passed). The release commands keep their ledger in the
region's home. Printed: each command's counts and exit code.

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
import atexit, json, os, sys, threading
counts = {"stack_reads": 0, "region_looks": 0}
def hook(event, args):
    if event == "open" and isinstance(args[0], str) and "/infra/Pulumi." in args[0] and args[0].endswith(".yaml"):
        counts["stack_reads"] += 1
    elif event == "urllib.Request" and args[0].endswith("/platformctl/v1/status"):
        counts["region_looks"] += 1
sys.addaudithook(hook)
root = os.getcwd() + "/"
packages = tuple(root + p + "/" for p in ("platformctl", "infra", "upgrade_service", "ami", "release_pipeline",
                                          "e2e_canary"))
walk = {"last": None, "left": set(), "returns": 0, "files": set()}
def profile(frame, event, arg):
    # the main thread's calls between the toolkit's own modules: each time the call path enters a module it had left
    # before (a file already left, returned to), after the command's own module imports
    if event != "call":
        return
    name = frame.f_code.co_filename
    if not name.startswith(packages) or frame.f_code.co_name == "<module>" or name == walk["last"]:
        return
    if walk["last"] is not None:
        walk["left"].add(walk["last"])
    if name in walk["left"]:
        walk["returns"] += 1
    walk["files"].add(name)
    walk["last"] = name
def report():
    sys.setprofile(None)
    counts["files"], counts["returns"] = len(walk["files"]), walk["returns"]
    print("WALK " + json.dumps(counts), file=sys.stderr)
atexit.register(report)
from platformctl.cli import main
sys.argv = ["platformctl", *sys.argv[1:]]
sys.setprofile(profile)
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
            print(f"{'command':<70} {'exit':>4} {'stack reads':>11} {'region looks':>12} {'files':>5} {'returns':>7}")
            for argv in COMMANDS:
                code, counts = run(home, argv)
                print(f"{' '.join(argv):<70} {code:>4} {counts.get('stack_reads', '?'):>11} "
                      f"{counts.get('region_looks', '?'):>12} {counts.get('files', '?'):>5} {counts.get('returns', '?'):>7}")
        finally:
            subprocess.run([*platformctl, "local", "down"], cwd=ROOT, env=env, capture_output=True)


if __name__ == "__main__":
    main()
