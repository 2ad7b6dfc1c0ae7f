"""First light beside the first-wave gate, on the same cluster in one run: how many instances a bad image boots before
the rotation halts, how long from its first boot to the halt, and how many workload pods were evicted; and how often
first light falsely halts a good image (A/A).

Part 1 rotates one simulated cluster (three pools, each pinned service budgeted to two disruptions at a time) onto an
image whose pods cannot start (``CreateContainerError``) and onto one whose pods start 8 s slower, with the canary gate
(the node-pool canary run each time the gate is asked, once a minute: the canary period), first with ``firstLight`` and
then without it (``maxInFlight`` 8: the first wave's gate). Part 2 judges ``--trials`` first lights of a good image:
each pool's first-light node's canary results drawn from the same distributions as the old nodes' (pod startup
log-normal around 1.5 s, the check around 20 s, 0.5% failures), through ``rotation_verdict`` as first light asks it
(``minResults`` 10 a pool), counting halts: the issue's bar is at most 1 in 40.

    python benchmarks/first_light.py [--trials 400]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e_canary.definitions import parse_canary
from e2e_canary.results import CanaryResult, Metrics
from e2e_canary.runner import Runner
from e2e_canary.verdict import Verdict, canary_gate, rotation_verdict
from platformctl.emulator import simulator as sim_events
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import NEW, cluster
from tests.upgrade_service.rotation import new_image, service
from upgrade_service.planning.policy import parse_policy
from upgrade_service.running.execute import Executor
from upgrade_service.running.gate import Question
from upgrade_service.running.run_types import Options, Target

CANARY = parse_canary({"name": "node-pool", "kind": "node-pool", "podsPerArm": 5, "deadline": 120}, "node-pool")
POOLS = {"general": 6, "batch": 4, "ml": 3}


def rotation(fault: float | None, first_light: bool) -> dict[str, Any]:
    sim = cluster(POOLS)
    for pool, count in POOLS.items():
        service(sim, f"web-{pool}", count, min_available=count - 2, node_selector={"eks.amazonaws.com/nodegroup": pool})
    sim.run_until_settled()
    new_image(sim)
    sim.set_image_fault(NEW, fault)
    store = SQLiteStore(Path(tempfile.mkdtemp()) / "state.db")
    runner, judge = Runner("dev", "test", sim, store), canary_gate(store, 1800.0)

    def gate(question: Question) -> Verdict:
        runner.run(CANARY)
        return judge(dataclasses.replace(question, now=sim.now()))

    policy = {"maxInFlight": 8, "healthGate": {"canary": {"window": "30m"}}, "gateTimeoutSeconds": 3600}
    if first_light:
        policy["firstLight"] = {"minResults": 10}
    began = sim.now()
    outcome = Executor(Target("test", sim, SimulatedNodeGroups(sim)), parse_policy(policy, "benchmark"), store,
                       Options(stage="dev", canary=gate, gate_poll_seconds=60.0)).run()
    boots = [e.time for e in sim.events if e.kind == sim_events.NODE_ADDED and e.detail == NEW]
    halted = outcome.report["halted"] if outcome.report else None
    end = began + (outcome.report or {}).get("duration_seconds", 0.0)
    return {"status": outcome.status, "booted": len(boots), "halt": halted["reason"] if halted else None,
            "minutes": (end - boots[0]) / 60 if boots else 0.0,
            "evicted": sum(1 for e in sim.events if e.kind == sim_events.POD_EVICTED)}


def rows(rng: np.random.Generator, image: str, pool: str, n: int, at: float) -> list[CanaryResult]:
    out = []
    for _ in range(n):
        ok = rng.random() >= 0.005
        metrics: Metrics = {"pod_startup_seconds": float(rng.lognormal(np.log(1.5), 0.35)),
                            "check_seconds": float(rng.lognormal(np.log(20.0), 0.2))} if ok else {}
        out.append(CanaryResult("node-pool", "node-pool", "a1", "dev", "test", None, pool, image, "ok" if ok else "fail",
                                "" if ok else "probe exited 1", metrics, at))
    return out


def aa(trials: int) -> dict[str, int]:
    rng = np.random.default_rng(37)
    counts = {"pass": 0, "fail": 0, "inconclusive": 0}
    pools = ("general", "batch")
    for _ in range(trials):
        now = 1_000_000.0
        data = [r for p in pools for r in rows(rng, "ami-old", p, 60, now - 600)]  # the old nodes' arms
        data += [r for p in pools for r in rows(rng, "ami-new", p, 10, now - 60)]  # each first-light node: minResults
        said = rotation_verdict(data, now, 1800.0, "test", dict.fromkeys(pools, "ami-new"), {"ami-old", "ami-new"},
                                min_results=10)
        counts[said.verdict] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=400)
    args = parser.parse_args()
    print(f"one cluster, pools {POOLS}, each service two disruptions at a time, maxInFlight 8, canary gate asked once a minute (the canary period)")
    print(f"{'image':>10} {'first light':>12} {'instances booted':>17} {'first boot to halt':>19} {'pods evicted':>13}  halt")
    for name, fault in (("bad", None), ("slow +8 s", 8.0)):
        for lit in (True, False):
            start = time.perf_counter()
            r = rotation(fault, lit)
            print(f"{name:>10} {'on' if lit else 'off':>12} {r['booted']:>17} {r['minutes']:>15.1f} min {r['evicted']:>13}  "
                  f"{r['halt']} ({time.perf_counter() - start:.1f} s)")
    counts = aa(args.trials)
    rate = counts["fail"] / args.trials
    print(f"A/A: {args.trials} first lights of a good image (two pools, minResults 10): {counts['fail']} halted as fail "
          f"({rate:.2%}: {40 * rate:.2f} expected in 40; the bar is at most 1), {counts['inconclusive']} inconclusive "
          f"(waited for more results), {counts['pass']} passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
