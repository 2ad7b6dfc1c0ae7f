"""How long the canary gate takes to stop a rotation onto a bad image, in virtual minutes, and how often it stops a
good one.

Mid-rotation (a pool of four nodes on the old image and the two a first wave booted on the new one), the
node-pool canary runs on its interval with jitter and the rotation's canary gate is asked after every
attempt (``e2e_canary.verdict.rotation_verdict``, a 30-minute window). Per scenario and seed it records the
virtual minutes from the new nodes' boot to the gate's first ``fail``: a bad image (containers never start:
``CreateContainerError``), a slow one (+4 s per start: over the 5 s p99 objective) and a subtly slow one
(+1 s: a material, significant shift under the objective). Healthy new images give the gate's false-fail
rate over the same span and the minutes until it first says ``pass``. The shipped canary (5 pods per arm every
3 minutes), a sparser one (2) and a denser one (10) are measured side by side.

    python benchmarks/canary_detect.py [--seeds 20]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e_canary.definitions import CANARY_DIR, load_canaries
from e2e_canary.results import results
from e2e_canary.runner import Runner
from e2e_canary.verdict import rotation_verdict
from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from platformctl.kernel.state.sqlite import SQLiteStore

OLD, NEW = "ami-0000000000000001a", "ami-0000000000000002b"
SCENARIOS = {"bad image": None, "slow start +4 s": 4.0, "slow start +1 s": 1.0, "healthy": 0.0}
SPAN = 4 * 3600  # virtual seconds each seed watches


def one(seed: int, fault: float | None, pods_per_arm: int, folder: Path) -> tuple[float | None, float | None, int, int]:
    """Minutes to the first fail, minutes to the first pass, gate asks, fails among them."""
    rng = random.Random(seed)
    sim = SimulatedCluster("c1", seed=seed)
    sim.add_pool(NodePoolSpec("general", "us-east-1a", "m6i.2xlarge", OLD, 4))
    sim.run_until_settled()
    sim.set_pool_image("general", NEW)
    sim.scale_pool("general", 6)  # the first wave's surge: two nodes boot the new image
    if fault != 0.0:
        sim.set_image_fault(NEW, fault)
    sim.run_until_settled()
    booted = sim.now()
    store = SQLiteStore(folder / f"{seed}-{fault}-{pods_per_arm}.db")
    runner = Runner("dev", "c1", sim, store)
    shipped = next(c for c in load_canaries(CANARY_DIR) if c.kind == "node-pool")
    canary = shipped.model_copy(update={"pods_per_arm": pods_per_arm})
    first_fail = first_pass = None
    asks = fails = 0
    while sim.now() - booted < SPAN:
        runner.run(canary)
        answer = rotation_verdict(results(store, "dev"), sim.now(), 1800, "c1", {"general": NEW}, {OLD, NEW})
        asks += 1
        if answer.verdict == "fail":
            fails += 1
            if first_fail is None:
                first_fail = (sim.now() - booted) / 60
                if fault != 0.0:
                    break
        elif answer.verdict == "pass" and first_pass is None:
            first_pass = (sim.now() - booted) / 60
            if fault == 0.0 and asks >= 12:
                break
        sim.advance(canary.interval + rng.uniform(0, canary.jitter))
    return first_fail, first_pass, asks, fails


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    wall = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="canary-detect-"))
    print(f"{'scenario':<18} {'pods/arm':>8} {'detected':>9} {'minutes to fail: median':>24} {'max':>6} "
          f"{'minutes to pass: median':>24} {'gate false-fail':>16}")
    medians: dict[tuple[str, int], float] = {}
    for name, fault in SCENARIOS.items():
        for pods in (2, 5, 10):
            runs = [one(seed, fault, pods, folder) for seed in range(args.seeds)]
            detected = [r[0] for r in runs if r[0] is not None]
            passed = [r[1] for r in runs if r[1] is not None]
            asks, fails = sum(r[2] for r in runs), sum(r[3] for r in runs)
            med = statistics.median(detected) if detected else float("nan")
            medians[(name, pods)] = med
            false_fail = f"{fails / asks:.2%} of {asks}" if fault == 0.0 else "-"
            print(f"{name:<18} {pods:>8} {len(detected):>4}/{args.seeds:<4} {med:>24.1f} "
                  f"{max(detected) if detected else float('nan'):>6.1f} "
                  f"{statistics.median(passed) if passed else float('nan'):>24.1f} {false_fail:>16}")
    for name in ("bad image", "slow start +4 s", "slow start +1 s"):
        print(f"{name}: the shipped 5 pods per arm detect in {medians[(name, 5)] / medians[(name, 2)]:.2f}x the time "
              f"of 2, 10 in {medians[(name, 10)] / medians[(name, 5)]:.2f}x the time of 5")
    print(f"wall {time.perf_counter() - wall:.1f} s")


if __name__ == "__main__":
    main()
