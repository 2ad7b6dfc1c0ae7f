"""How often the canary judge fails identical arms (A/A), and how often it catches a real regression.

Over many seeds, both arms draw from the same distributions (pod startup latency, the whole check's
time, a 0.5% failure rate, a 1% disruption rate) at several sample sizes, and the judge's verdict is
counted: the A/A fail rate must stay at or under 2% (the judge's alpha is 1% for the whole verdict).
Side by side, the same arms with the experiment's startup latency shifted by a material 30% show the
rate it catches that (its power), and with a 2% shift the rate it wrongly fails an immaterial change.

    python benchmarks/judge_aa.py [--seeds 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e_canary.judge import Arm, judge


def draw(rng: np.random.Generator, n: int, slower: float = 1.0) -> Arm:
    startup = rng.lognormal(np.log(1.5), 0.35, n) * slower
    check = rng.lognormal(np.log(20.0), 0.2, n)
    attempts = n
    failed = int(rng.binomial(attempts, 0.005))
    disrupted = int(rng.binomial(attempts, 0.01))
    return Arm({"pod_startup_seconds": startup.tolist(), "check_seconds": check.tolist()},
               {"ok": attempts - failed, "fail": failed, "disrupted": disrupted})


def rates(seeds: int, n: int, slower: float) -> tuple[Counter[str], float]:
    rng = np.random.default_rng(n * 1000 + int(slower * 100))
    verdicts: Counter[str] = Counter()
    start = time.perf_counter()
    for _ in range(seeds):
        verdicts[judge(draw(rng, n), draw(rng, n, slower)).verdict] += 1
    return verdicts, (time.perf_counter() - start) / seeds


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=2000)
    args = parser.parse_args()
    worst = 0.0
    print(f"{'samples per arm':>16} {'A/A fail':>9} {'A/A inconcl.':>13} {'2% shift fail':>14} {'30% shift caught':>17} {'ms/verdict':>11}")
    for n in (30, 100, 1000):
        same, per = rates(args.seeds, n, 1.0)
        small, _ = rates(args.seeds // 4, n, 1.02)
        big, _ = rates(args.seeds // 4, n, 1.30)
        aa = same["fail"] / args.seeds
        worst = max(worst, aa)
        print(f"{n:>16} {aa:>9.2%} {same['inconclusive'] / args.seeds:>13.2%} {small['fail'] / (args.seeds // 4):>14.2%} "
              f"{big['fail'] / (args.seeds // 4):>17.2%} {per * 1000:>11.1f}")
    print(f"worst A/A fail rate {worst:.2%} over {args.seeds} seeds per size (target <= 2%)")
    return 0 if worst <= 0.02 else 1


if __name__ == "__main__":
    sys.exit(main())
