"""Benchmark: a rotation through transient API faults against the same rotation without them.

The executor (`rotate run`'s) rotates the synthetic 3,000-node, ~120,000-pod cluster twice, side by side in one run,
each time from the same seed: once clean, once with a share (``--rate``, 1% by default) of every call of the cluster
and node-group seams answered as a loaded API answers:

- a Kubernetes call: 503 Service Unavailable, nothing done, asked again as the live adapter asks again (``retrying``
  with the adapter's ``Backoff`` and its rule for calls that act, on the cluster's virtual clock);
- an eviction: a 503 answer the drain itself reads (the live adapter returns an eviction's answer as it comes);
- an Auto Scaling call: ``ScalingActivityInProgress``, asked again as ``AutoScalingNodeGroups`` asks again.

Printed: both virtual durations and their ratio (issue 35's target: within 1.1x), the faults injected and the calls
asked again, and the invariants of both event logs (exits non-zero if a budget was broken, a pod lost or a node left
on the old image). The informers' own list and watch traffic is not faulted (a broken watch is tested against the
local region: ``tests/platformctl/emulator/server/test_live_paging_retry.py``).

Not part of the test run.

    .venv/bin/python benchmarks/rotate_faults.py [--nodes 3000] [--rate 0.01] [--max-in-flight 20]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.rotate_run import NEW_IMAGE, policy_document
from platformctl.emulator.invariants import deleted_without_eviction, eviction_budget_violations, lost_pods
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.emulator.synthetic import synthetic_cluster
from platformctl.kernel.cluster.model import EvictionResult
from platformctl.kernel.errors import ApiRefused
from platformctl.kernel.nodegroups import NodeGroupError
from platformctl.kernel.nodegroups.aws import BUSY
from platformctl.kernel.retry import NOT_ACTED, Backoff, retrying
from platformctl.kernel.state.sqlite import SQLiteStore
from upgrade_service.planning.policy import parse_policy
from upgrade_service.running.execute import Executor
from upgrade_service.running.run_types import Options, Target


class Faults:
    """What was injected and asked again, for the report."""

    def __init__(self, rate: float, seed: int) -> None:
        self.rate = rate
        self.draw = random.Random(f"{seed}/faults")
        self.jitter = random.Random(f"{seed}/jitter")
        self.injected = 0
        self.retried = 0

    def hit(self) -> bool:
        if self.rate and self.draw.random() < self.rate:
            self.injected += 1
            return True
        return False

    def count(self) -> None:
        self.retried += 1


class Faulty:
    """A seam (the simulated cluster or its node groups) whose calls meet transient faults at the given rate, each
    asked again as the live adapter would (``again``: the adapter's rule for what is worth asking again)."""

    def __init__(self, seam: Any, faults: Faults, clock: Any, fault: Callable[[str], Exception],
                 again: Callable[[Exception], bool], evictions: bool = False) -> None:
        self._seam, self._faults, self._clock, self._fault, self._again = seam, faults, clock, fault, again
        self._evictions = evictions

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._seam, name)
        if not callable(attr) or name in ("informer", "clock", "now"):
            return attr
        if name == "evict" and self._evictions:
            def evict(*args: object, **kwargs: object) -> object:
                if self._faults.hit():  # the drain reads the answer itself, as from the live adapter
                    return EvictionResult.from_status({"message": "the server is currently unable to handle the request",
                                                       "reason": "ServiceUnavailable"}, 503)
                return attr(*args, **kwargs)
            return evict

        def call(*args: object, **kwargs: object) -> object:
            def once() -> object:
                if self._faults.hit():
                    raise self._fault(name)
                return attr(*args, **kwargs)
            return retrying(once, self._again, Backoff(), self._clock, self._faults.jitter, retried=self._faults.count)

        return call


def rotate(nodes: int, rate: float, max_in_flight: int, folder: Path, seed: int) -> dict[str, Any]:
    sim: SimulatedCluster
    sim, _ = synthetic_cluster(nodes)
    for pool in sim.pool_names():
        sim.set_pool_image(pool, NEW_IMAGE)
    faults = Faults(rate, seed)
    cluster = Faulty(sim, faults, sim.clock, lambda name: ApiRefused(f"the Kubernetes API answered 503 to {name}", 503),
                     lambda exc: isinstance(exc, ApiRefused) and exc.status in NOT_ACTED, evictions=True)
    groups = Faulty(SimulatedNodeGroups(sim), faults, sim.clock,
                    lambda name: NodeGroupError(f"{name}: ScalingActivityInProgress", "ScalingActivityInProgress"),
                    lambda exc: isinstance(exc, NodeGroupError) and exc.code in BUSY)
    store = SQLiteStore(folder / f"state-{rate}.db")
    executor = Executor(Target("synthetic", cluster, groups),  # type: ignore[arg-type]  # seams behind a proxy
                        parse_policy(policy_document(max_in_flight), "benchmark policy"), store, Options())
    start, wall = sim.now(), time.perf_counter()
    outcome = executor.run()
    out = {"status": outcome.status, "virtual": sim.now() - start, "wall": time.perf_counter() - wall,
           "rotated": outcome.report["nodes_rotated"], "waves": len(outcome.report["waves"]),
           "injected": faults.injected, "retried": faults.retried,
           "old": sum(1 for n in sim.list_nodes() if n.image != NEW_IMAGE),
           "broken": len(eviction_budget_violations(sim.events)) + len(lost_pods(sim.events))
           + len(deleted_without_eviction(sim.events))}
    del sim, executor
    gc.collect()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=0.01)
    parser.add_argument("--max-in-flight", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="rotate-faults-"))
    clean = rotate(args.nodes, 0.0, args.max_in_flight, folder, args.seed)
    faulty = rotate(args.nodes, args.rate, args.max_in_flight, folder, args.seed)
    for label, r in (("clean", clean), (f"{args.rate:.0%} faults", faulty)):
        print(f"{label:>12}: {r['status']}, {r['rotated']} nodes in {r['waves']} waves, {r['virtual'] / 3600:.2f} virtual "
              f"hours, {r['wall']:.0f} s wall; {r['injected']} faults injected, {r['retried']} calls asked again; "
              f"{r['old']} nodes left on the old image, {r['broken']} budgets broken, pods lost or deleted unevicted")
    print(f"ratio virtual duration with faults / clean: {faulty['virtual'] / clean['virtual']:.3f}   (target <= 1.1)")
    return 1 if any(r["old"] or r["broken"] or r["status"] != "done" for r in (clean, faulty)) else 0


if __name__ == "__main__":
    sys.exit(main())
