"""Benchmark: the rotation executor (`rotate run`) on a 3,000-node, ~120,000-pod simulated cluster.

Builds the synthetic cluster, points every pool at a new image (what `stage deploy` does to the
launch templates) and rotates it with the real executor — plan, gate, pacing, surge, drain through
the eviction API, terminate, journal in a SQLite store — through the simulator's pools (the second
implementation of the node-group seam), in virtual time. Measured side by side in one run, on
clusters built from the same seed:

- virtual duration / the plan's estimate (target within 1 +/- 0.15);
- virtual duration / a one-node-at-a-time rotation of the same cluster (maxInFlight 1; run for its
  first ``--baseline-waves`` waves and extrapolated per node, since all 3,000 would take hours of wall
  time) (target <= 0.2);
- virtual duration / a naive one-node-at-a-time loop (``benchmarks/naive_rotation.py``: a node added, cordon,
  evict with retries on 429 as ``kubectl drain`` does, terminate, wait for the node to leave) on the same cluster,
  for its first ``--naive-nodes`` nodes and extrapolated per node (issue 36's targets: <= 0.4 at 40 nodes, <= 0.3 at
  3,000), with the pods each evicted more than once;
- wall time / the foundation's ``rotate_full_cluster.py`` rotation (surge 5 % of a pool at a time,
  no planning, no journal);
- what the rotation read from the API: list and watch requests, and objects read (listed items and
  watch events), per rotation and per node rotated, beside the wall time: the executor lists nodes and
  pods once and then watches them, so waits wake when what they wait for happens and reading the
  cluster costs its changes, not its size at every poll;
- peak memory, and the invariants from the event log (exits non-zero if a budget was broken, a pod
  went down with its node, or a pod was deleted without the eviction API).

Not part of the test run.

    .venv/bin/python benchmarks/rotate_run.py [--nodes 3000] [--max-in-flight 20] [--baseline-waves 40] [--naive-nodes 40]
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.naive_rotation import naive_rotate
from benchmarks.rotate_full_cluster import rotate_every_node
from platformctl.emulator.invariants import (
    deleted_without_eviction,
    eviction_budget_violations,
    lost_pods,
    one_at_a_time_breaches,
)
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.emulator.synthetic import POOL_SHAPES, synthetic_cluster
from platformctl.kernel.cluster.model import Pod
from platformctl.kernel.state.sqlite import SQLiteStore
from upgrade_service.planning.disruption import Protocol, protocol_of
from upgrade_service.planning.policy import parse_policy
from upgrade_service.running.execute import Executor
from upgrade_service.running.run_types import Options, Outcome, Target

NEW_IMAGE = "ami-0b2e00c0ffee00099"


def policy_document(max_in_flight: int) -> dict[str, object]:
    """No targets: every pool follows what its group launches now. Durations are this cluster's own
    (its pools' boot times, its pods' start times), as an operator sets them for theirs."""
    return {
        "poolOrder": {"general": ["system"], "custom": ["system"], "ml": ["general"]},
        "maxInFlight": max_in_flight,
        "maxInFlightPerPool": {"ml": 2, "system": 2},
        "durations": {"nodeBootSeconds": {pool: int(shape[2]) for pool, shape in POOL_SHAPES.items()}, "podStartSeconds": 20},
        "workloadRules": [{"selector": {"matchLabels": {"tier": "storage"}}, "mode": "one-at-a-time", "settleSeconds": 300}],
        "drainTimeoutSeconds": 7200,
        "podReadyTimeoutSeconds": 3600,
    }


class Counted:
    """The simulated cluster seen through a counter of the requests a client makes of it: lists and gets (with the
    objects they return) and everything else by name. The informers' own list and watch traffic is in their stats."""

    def __init__(self, sim: SimulatedCluster) -> None:
        self._sim = sim
        self.requests: Counter[str] = Counter()
        self.objects = 0

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._sim, name)
        if not callable(attr) or name in ("informer", "clock"):
            return attr

        def call(*args: object, **kwargs: object) -> object:
            self.requests[name] += 1
            result = attr(*args, **kwargs)
            if name.startswith("list_") and isinstance(result, list):
                self.objects += len(result)
            elif name.startswith("get_"):
                self.objects += 1
            return result

        return call


def rotate(sim: SimulatedCluster, max_in_flight: int, folder: Path,
           max_waves: int | None = None) -> tuple[Outcome, float, float, dict[str, int]]:
    for pool in sim.pool_names():
        sim.set_pool_image(pool, NEW_IMAGE)
    store = SQLiteStore(folder / f"state-{max_in_flight}.db")
    counted = Counted(sim)
    executor = Executor(Target("synthetic", counted, SimulatedNodeGroups(sim)),  # type: ignore[arg-type]  # a counting proxy
                        parse_policy(policy_document(max_in_flight), "benchmark policy"), store, Options(max_waves=max_waves))
    start_virtual, start_wall = sim.now(), time.perf_counter()
    outcome = executor.run()
    reads = executor.reads
    lists = reads.lists + sum(n for name, n in counted.requests.items() if name.startswith("list_"))
    gets = sum(n for name, n in counted.requests.items() if name.startswith("get_"))
    read = {"lists": lists, "gets": gets, "watches": reads.watches, "objects": reads.objects + counted.objects,
            "relists": reads.relists,
            "writes": sum(n for name, n in counted.requests.items() if not name.startswith(("list_", "get_")))}
    return outcome, sim.now() - start_virtual, time.perf_counter() - start_wall, read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--max-in-flight", type=int, default=20)
    parser.add_argument("--baseline-waves", type=int, default=40)
    parser.add_argument("--naive-nodes", type=int, default=40)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rotate-run-"))

    # The foundation's rotation, for the wall-time ratio.
    sim, _ = synthetic_cluster(args.nodes)
    t0 = time.perf_counter()
    rotate_every_node(sim, 5.0)
    foundation_wall = time.perf_counter() - t0
    del sim
    gc.collect()

    # The executor's rotation of the whole cluster.
    t0 = time.perf_counter()
    sim, summary = synthetic_cluster(args.nodes)
    build = time.perf_counter() - t0
    before = sim.list_pods()
    pods = len(before)
    outcome, virtual, wall, read = rotate(sim, args.max_in_flight, folder)
    policy = parse_policy(policy_document(args.max_in_flight), "benchmark policy")

    def settle_of(pod: Pod) -> float | None:
        found = protocol_of(pod, policy)
        return float(found.settle_seconds) if isinstance(found, Protocol) and found.mode == "one-at-a-time" else None

    breaches = one_at_a_time_breaches(sim.events, before, settle_of)
    report = outcome.report
    estimate = float(report["estimated_seconds"] or 0)
    violations = eviction_budget_violations(sim.events)
    lost = lost_pods(sim.events)
    deleted = len(deleted_without_eviction(sim.events))
    nodes = sim.list_nodes()
    old = sum(1 for n in nodes if n.image != NEW_IMAGE)
    rotated = report["nodes_rotated"]
    del sim
    gc.collect()

    # One node at a time, for its first waves.
    sim, _ = synthetic_cluster(args.nodes)
    single, single_virtual, single_wall, _ = rotate(sim, 1, folder, max_waves=args.baseline_waves)
    per_node = single_virtual / max(single.report["nodes_rotated"], 1)
    del sim
    gc.collect()

    # The naive loop, for its first nodes.
    sim, _ = synthetic_cluster(args.nodes)
    for pool in sim.pool_names():
        sim.set_pool_image(pool, NEW_IMAGE)
    before = sim.list_pods()
    naive = naive_rotate(sim, NEW_IMAGE, limit=args.naive_nodes)
    naive_breaches = one_at_a_time_breaches(sim.events, before, settle_of)
    naive_violations = len(eviction_budget_violations(sim.events)) + len(lost_pods(sim.events))
    naive_total = naive.seconds / max(naive.nodes, 1) * args.nodes
    del sim
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"cluster: {args.nodes} nodes, {pods} pods, {summary.pdbs} PDBs (built in {build:.1f} s)")
    print(f"rotate run: {outcome.status}, {rotated} nodes rotated in {len(report['waves'])} waves, "
          f"{virtual / 3600:.1f} virtual hours, {report['evictions']} evictions, {report['refused_evictions']} refused, "
          f"{report['pods_disrupted_more_than_once']} pods disrupted more than once; {wall:.1f} s wall")
    print(f"plan estimate at the start: {estimate / 3600:.1f} h")
    print(f"ratio virtual duration / plan estimate: {virtual / estimate:.2f}   (target 1 +/- 0.15)")
    print(f"one node at a time: {single.report['nodes_rotated']} nodes in {single_virtual / 3600:.1f} virtual hours "
          f"({per_node / 60:.1f} min a node, {single_wall:.1f} s wall); all {args.nodes}: {per_node * args.nodes / 3600:.0f} h")
    print(f"ratio virtual duration / one node at a time: {virtual / (per_node * args.nodes):.3f}   (target <= 0.2)")
    scaled = "" if naive.nodes == args.nodes else f"; all {args.nodes}: {naive_total / 3600:.0f} h"
    print(f"naive one node at a time (kubectl drain in a loop): {naive.nodes} nodes in {naive.seconds / 3600:.1f} virtual hours, "
          f"{naive.evictions} evictions, {naive.refused} refused (429), {naive.evicted_again} pods evicted more than once, "
          f"{naive_violations} budgets broken or pods lost, {len(naive_breaches)} one-at-a-time workloads' pods evicted "
          f"before the last was back and settled{scaled}")
    print(f"ratio virtual duration / naive loop: {virtual / naive_total:.3f}   (target <= 0.4 at 40 nodes, <= 0.3 at 3,000); "
          f"pods disrupted more than once: {report['pods_disrupted_more_than_once']} against the naive loop's "
          f"{naive.evicted_again * args.nodes // max(naive.nodes, 1)}")
    print(f"foundation rotate_full_cluster.py: {foundation_wall:.1f} s wall")
    print(f"ratio wall time / foundation's: {wall / foundation_wall:.1f}x")
    print(f"read from the API: {read['lists']} list and {read['gets']} get requests, {read['watches']} watches, "
          f"{read['relists']} relists; {read['objects']} objects read ({read['objects'] / max(rotated, 1):.0f} a node "
          f"rotated, {read['objects'] / max(pods, 1):.1f}x the cluster's pods); {read['writes']} other calls")
    print(f"peak memory: {peak_mib:.0f} MiB")
    print(f"nodes still on the old image: {old}; blocked: {len(report['nodes_blocked'])}; failed: {len(report['nodes_failed'])}")
    print(f"evictions that broke a PDB: {len(violations)}; pods lost with a node: {len(lost)}; deleted without eviction: "
          f"{deleted}; one-at-a-time pods evicted before the last was back and settled: {len(breaches)}")
    if violations or lost or deleted or breaches:
        sys.exit(1)


if __name__ == "__main__":
    main()
