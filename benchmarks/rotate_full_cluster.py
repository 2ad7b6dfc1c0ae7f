"""Benchmark: replace every node of a 3,000-node, ~120,000-pod simulated cluster once.

Builds the cluster with the synthetic workload generator, saves its snapshot, then rotates every
pool onto a new image in surge batches (launch a batch of new nodes, wait until they are Ready,
drain the old batch through the eviction API, terminate it) in virtual time. Prints the rotation's
wall time as a ratio to the time ``json.load`` takes on the cluster's snapshot, peak memory, and
the invariants checked on the event log afterwards. Not part of the test run.

    .venv/bin/python benchmarks/rotate_full_cluster.py [--nodes 3000] [--batch-percent 5]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.snapshot_timing import save_and_time_load
from platformctl.emulator.invariants import eviction_budget_violations, lost_pods
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.emulator.synthetic import pool_sizes, synthetic_cluster
from platformctl.kernel.cluster.drain import drain

NEW_IMAGE = "ami-0b2e00c0ffee00099"


def rotate_every_node(sim: SimulatedCluster, batch_percent: float) -> dict[str, int]:
    evictions = refusals = 0
    for pool in pool_sizes(len(sim.list_nodes())):
        spec = sim.pool(pool)
        sim.set_pool_image(pool, NEW_IMAGE)
        batch = max(1, math.ceil(spec.desired * batch_percent / 100))
        while True:
            old = sorted(n.name for n in sim.pool_nodes(pool) if n.image != NEW_IMAGE)
            if not old:
                break
            wave = old[:batch]
            sim.scale_pool(pool, spec.desired + len(wave))  # surge: new nodes boot first
            while not all(n.ready for n in sim.pool_nodes(pool)):
                sim.advance(10)
            report = drain(sim, wave, poll_seconds=5, timeout_seconds=7200)
            evictions += report.evictions
            refusals += sum(report.refusals.values())
            for name in wave:
                sim.terminate_instance(name, decrement_desired=True)
    return {"evictions": evictions, "refusals": refusals}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--batch-percent", type=float, default=5.0)
    args = parser.parse_args()

    t0 = time.perf_counter()
    sim, summary = synthetic_cluster(args.nodes)
    build = time.perf_counter() - t0
    pods = len(sim.list_pods())

    with tempfile.TemporaryDirectory() as tmp:
        timing = save_and_time_load(sim, tmp)
    size, load = timing.size_bytes, timing.json_load_seconds

    start_virtual = sim.now()
    t0 = time.perf_counter()
    counts = rotate_every_node(sim, args.batch_percent)
    rotation = time.perf_counter() - t0
    virtual_hours = (sim.now() - start_virtual) / 3600

    nodes = sim.list_nodes()
    violations = eviction_budget_violations(sim.events)
    lost = lost_pods(sim.events)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"cluster: {len(nodes)} nodes, {pods} pods, {summary.pdbs} PDBs (built in {build:.1f} s)")
    print(f"snapshot: {size / 1e6:.0f} MB, json.load {load:.2f} s")
    print(f"rotation: every node replaced in {virtual_hours:.1f} virtual hours, "
          f"{counts['evictions']} evictions, {counts['refusals']} refused (429/500) and retried")
    print(f"rotation wall time: {rotation:.1f} s")
    print(f"ratio rotation / json.load: {rotation / load:.1f}x")
    print(f"peak memory: {peak_mib:.0f} MiB")
    print(f"nodes still on the old image: {sum(1 for n in nodes if n.image != NEW_IMAGE)}")
    print(f"evictions that broke a PDB: {len(violations)}; non-daemon pods lost with a node: {len(lost)}")
    print(f"events logged: {len(sim.events)}")
    if violations or lost:
        sys.exit(1)


if __name__ == "__main__":
    main()
