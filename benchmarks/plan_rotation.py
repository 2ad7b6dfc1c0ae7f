"""Benchmark: plan the rotation of a 3,000-node, ~120,000-pod, ~1,500-budget cluster.

Builds the cluster with the synthetic workload generator (its key-value stores rotate one at a time
with settle times, its GPU training jobs wait for completion), saves its snapshot, and prints, side
by side in one run:

- the plan time as a ratio to the time ``json.load`` takes on the snapshot: both the whole of what
  ``platformctl rotate plan --snapshot`` does (read and parse the file, then plan) and the planning
  alone (target: under 10x);
- the plan's total estimate as a ratio to a naive plan's (largest waves the hard limits allow, nodes
  in name order), both under the same estimate formula and limits (target: at most 0.8x).

Not part of the test run.

    .venv/bin/python benchmarks/plan_rotation.py [--nodes 3000] [--max-in-flight 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.snapshot_timing import save_and_time_load
from platformctl.emulator.synthetic import synthetic_cluster
from platformctl.kernel.cluster.model import load_snapshot
from upgrade_service.planning.plan import plan_cluster
from upgrade_service.planning.policy import parse_policy


def policy_document(max_in_flight: int) -> dict[str, object]:
    return {
        "cluster": "synthetic",
        "targets": {"system": "ami-0new", "general": "ami-0new", "custom": "ami-0new", "ml": "ami-0newgpu"},
        "poolOrder": {"general": ["system"], "custom": ["system"], "ml": ["general"]},
        "strategy": "replace",
        "maxInFlight": max_in_flight,
        "maxInFlightPerPool": {"ml": 2, "system": 1},
        "zoneAtATime": True,
        "minZoneCapacityPercent": 90,
        "durations": {"nodeBootSeconds": {"default": 300, "ml": 600}, "podStartSeconds": 60},
        "workloadRules": [{"selector": {"matchLabels": {"tier": "storage"}}, "mode": "one-at-a-time", "settleSeconds": 300}],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--max-in-flight", type=int, default=20)
    args = parser.parse_args()

    t0 = time.perf_counter()
    sim, summary = synthetic_cluster(args.nodes)
    build = time.perf_counter() - t0
    policy = parse_policy(policy_document(args.max_in_flight), "benchmark policy")

    with tempfile.TemporaryDirectory() as tmp:
        timing = save_and_time_load(sim, tmp)
        del sim
        size, load = timing.size_bytes, timing.json_load_seconds
        t0 = time.perf_counter()
        snapshot = load_snapshot(timing.path)
        parse = time.perf_counter() - t0
    now = max(p.created for p in snapshot.pods)

    t0 = time.perf_counter()
    plan = plan_cluster(snapshot, policy, now)
    planning = time.perf_counter() - t0
    naive = plan_cluster(snapshot, policy, now, naive=True)

    waved = sum(len(w.nodes) for w in plan.waves)
    print(f"cluster: {len(snapshot.nodes)} nodes, {len(snapshot.pods)} pods, {len(snapshot.pdbs)} PDBs "
          f"(built in {build:.1f} s)")
    print(f"snapshot: {size / 1e6:.0f} MB, json.load {load:.2f} s, read and parse {parse:.2f} s")
    print(f"plan: {len(plan.waves)} waves holding {waved} nodes, {len(plan.blocked)} blocked, "
          f"estimate {plan.estimated_seconds / 3600:.1f} h; planned in {planning:.2f} s")
    print(f"naive plan: {len(naive.waves)} waves, estimate {naive.estimated_seconds / 3600:.1f} h")
    print(f"ratio (read + parse + plan) / json.load: {(parse + planning) / load:.2f}x   (target < 10x)")
    print(f"ratio plan alone / json.load: {planning / load:.2f}x")
    print(f"ratio estimate / naive estimate: {plan.estimated_seconds / naive.estimated_seconds:.2f}x   (target <= 0.8x)")


if __name__ == "__main__":
    main()
