"""Benchmark: the peak memory of a whole `rotate run` against a 3,000-node, 120,000-pod local region.

`live_memory.py` measures `rotate plan --context` against a cluster served alone; this measures what the rotation Job
does all night: a whole `rotate run --context` of the local region (`local up`, its Kubernetes API, its EC2 and Auto
Scaling, its clock), from the first list to the last node, each command a process of its own whose peak resident
memory is its own ``VmHWM``. In one run, against the same region:

- the command's start alone (``rotate plan --help``);
- ``rotate plan --context``: the lists it reads, paged;
- ``rotate run --context`` to the end (or ``--max-waves``): the plan, every wave's watches, evictions and surges, the
  journal; its peak beside the plan's says what a run holds beyond its first look;
- the snapshot's size (the cluster's nodes, pods and budgets as the API lists them) and the memory limit the Pulumi
  program gives the rotation Job (``infra/components/kubernetes.py``).

The region is the checkout's `dev` stack with one member cluster whose general pool has ``--nodes`` nodes, filled by
``local up --pods-per-node``. Not part of the test run.

    .venv/bin/python benchmarks/rotate_run_memory.py [--nodes 3000] [--pods-per-node 40] [--max-in-flight 20]
        [--max-waves N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from live_memory import JOB_LIMIT_MIB, peak_mib

CHECKOUT = Path(__file__).resolve().parent.parent


def shrunk_stack(infra: Path, nodes: int) -> str:
    """The dev stack with its first member cluster only, its general pool ``nodes`` strong; the cluster's name."""
    path = infra / "Pulumi.dev.yaml"
    stack = yaml.safe_load(path.read_text())
    topology = stack["config"]["platformctl:topology"]
    member = topology["memberClusters"][0]
    topology["memberClusters"] = [member]
    others = sum(p["desiredSize"] for p in member["nodePools"] if p["name"] != "general")
    if nodes - others < 1:
        raise SystemExit(f"--nodes {nodes}: the cluster's other pools have {others} nodes, the general pool needs one more")
    general = next(p for p in member["nodePools"] if p["name"] == "general")
    general.update(minSize=nodes - others, desiredSize=nodes - others, maxSize=nodes - others + 100)
    path.write_text(yaml.safe_dump(stack, sort_keys=False))
    return str(member["name"])


def new_base_image(manifests: Path) -> None:
    """An operator's change: a new version of the base image (and of each child), which every pool then rotates to."""
    for path in manifests.glob("*.yaml"):
        lines = path.read_text().splitlines()
        i = next(i for i, line in enumerate(lines) if line.startswith("version:"))
        major, minor, patch = lines[i].split(":", 1)[1].strip().split(".")
        lines[i] = f"version: {int(major) + 1}.{minor}.{patch}" if path.stem == "base" else f"version: {major}.{minor}.{int(patch) + 1}"
        path.write_text("\n".join(lines) + "\n")


def platformctl(env: dict[str, str], *args: str, timeout: float | None = None) -> Any:
    child = subprocess.run([sys.executable, "-m", "platformctl", *args, "-o", "json"], env=env, capture_output=True,
                           text=True, timeout=timeout, check=False)
    if child.returncode:
        raise SystemExit(f"platformctl {' '.join(args)} failed ({child.returncode}): {child.stderr[-2000:]}")
    return json.loads(child.stdout)


def listed_bytes(server: str) -> int:
    """The bytes of the cluster's nodes, pods and budgets as one list each (what ``kubectl get -o json`` reads)."""
    total = 0
    for path in ("/api/v1/nodes", "/api/v1/pods", "/apis/policy/v1/poddisruptionbudgets"):
        with urllib.request.urlopen(server + path, timeout=600) as answer:
            total += len(answer.read())
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--pods-per-node", type=float, default=40.0)
    parser.add_argument("--max-in-flight", type=int, default=20)
    parser.add_argument("--max-waves", type=int, default=0, help="stop the run after this many waves (0: the whole run)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        shutil.copytree(CHECKOUT / "infra", work / "infra", ignore=shutil.ignore_patterns("__pycache__"))
        cluster = shrunk_stack(work / "infra", args.nodes)
        shutil.copytree(CHECKOUT / "ami" / "manifests", work / "manifests")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBECONFIG", "PLATFORMCTL_"))}
        env["PLATFORMCTL_HOME"] = str(work / "home")
        policy = work / "policy.yaml"
        policy.write_text(yaml.safe_dump({"strategy": "surge", "maxInFlight": args.max_in_flight,
                                          "poolOrder": {"general": ["system"], "ml": ["general"]}}))
        where = ["--infra-dir", str(work / "infra")]
        t0 = time.perf_counter()
        up = platformctl(env, *where, "local", "up", "--no-canaries", "--pods-per-node", str(args.pods_per_node),
                         timeout=1800)
        try:
            member = next(c for c in up["clusters"] if c["name"] == cluster)
            print(f"region: {member['nodes']} nodes, {member['pods']} pods in {cluster} "
                  f"(up in {time.perf_counter() - t0:.0f} s)")
            new_base_image(work / "manifests")
            platformctl(env, *where, "ami", "build", "--manifests", str(work / "manifests"), timeout=1800)
            platformctl(env, *where, "stage", "deploy", "--stage", "dev", timeout=1800)
            snapshot = listed_bytes(member["server"])
            context = ["--context", cluster, "--policy", str(policy)]
            start, _, rc0 = peak_mib(["rotate", "plan", "--help"], env)
            plan, plan_s, rc1 = peak_mib([*where, "rotate", "plan", *context, "-o", str(work / "plan.json")], env)
            waves = ["--max-waves", str(args.max_waves)] if args.max_waves else []
            out = work / "run.json"
            run, run_s, rc2 = peak_mib([*where, "rotate", "run", *context, *waves, "-o", "json"], env, stdout=out)
        finally:
            platformctl(env, "local", "down")
        if rc0 or rc1 or rc2:
            print(f"a command failed ({rc0}, {rc1}, {rc2}): the figures below are not comparable", file=sys.stderr)
            return 1
        report = json.loads(out.read_text())["clusters"][0]
        done = report["report"]
    print(f"{'':34}{'peak MiB':>10}{'wall s':>9}")
    print(f"{'command start (--help)':34}{start:>10.0f}{'':>9}")
    print(f"{'rotate plan --context':34}{plan:>10.0f}{plan_s:>9.1f}")
    print(f"{'rotate run --context':34}{run:>10.0f}{run_s:>9.1f}")
    print(f"run: {report['status']}, {len(done['waves'])} waves, {done['nodes_rotated']} nodes rotated, "
          f"{done['evictions']} evictions, {done['duration_seconds'] / 3600:.1f} virtual hours")
    print(f"run / plan: {run / plan:.2f}; snapshot {snapshot / 2**20:.0f} MiB; run / the rotation Job's limit "
          f"({JOB_LIMIT_MIB} Mi): {run / JOB_LIMIT_MIB:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
