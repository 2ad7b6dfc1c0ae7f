"""Benchmark: one `release tick` over a month of history, against one over a day's.

A tick reads the pipeline's state (the last checkpoint and the ledger entries after it), looks up the candidates in
flight, and, for a stage soaking, judges the stage's canary results since its rotation ended (each canary over its
evidence window, reading only the days the window covers). None of that should grow with history. This builds two
stores side by side in one run, each with a ledger and canary results of the same rates (a candidate every six hours
carried dev -> staging -> prod-canary -> prod by a tick every fifteen minutes; 200 canary results an hour over three
clusters, as dev's shipped canaries write them), one holding a day of it and one a month, then a fresh candidate
soaking in dev, and times one tick on each (median of 9; SQLite stores, the canary verdict computed for real by
`e2e_canary.verdict.soak_verdict`). Printed: each tick's time and the ledger entries and canary results each
store holds, and the ratio month / day (target: within 2x).

Not part of the test run.

    .venv/bin/python benchmarks/release_tick.py [--days 30]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from e2e_canary.results import ResultStream
from e2e_canary.verdict import Verdict, soak_verdict
from platformctl.kernel.state import StateStore, open_store
from release_pipeline.candidates import Candidate, StageImages, make_candidate
from release_pipeline.ledger import Ledger
from release_pipeline.operations import replaced_images
from release_pipeline.pipeline import parse_pipeline
from release_pipeline.reconcile import tick
from release_pipeline.testing import FakeStages

STAGES = ("dev", "staging", "prod-canary", "prod")
CLUSTERS = ("dev-usw2-host", "dev-usw2a-01", "dev-usw2b-01")
CANARIES = (("service", "service", 300), ("batch", "batch", 600), ("cron", "cron", 600), ("daemon", "daemon", 300),
            ("node-pool", "node-pool", 120))
PER_HOUR = 200
T0 = 1_790_000_000.0
PIPELINE = parse_pipeline({"stages": [{"name": s, "soak": "1h", "minResults": 50, "passFor": "20m", "deadline": "6h"}
                                      for s in STAGES]}, "pipeline.yaml", "bench")


def stages_of(results: StateStore, clock: float) -> FakeStages:
    """The stages' operations (the one fake) on a virtual clock: a rotation takes fifteen minutes, the verdict is judged
    for real over the results store (the application layer's own function)."""

    def judge(stages: FakeStages, stage: str, candidate: Candidate, baseline: Candidate | None, since: float, window: int,
              entered: float | None) -> Verdict:
        # every stage judged on dev's results, with the read of the last good images' results before the candidate
        # entered (the results are all of one image, so no image is compared: the read is what is measured)
        return soak_verdict(results, "dev", since, stages.clock, window, replaced_images(stage, candidate, baseline),
                            baseline.id if baseline else None, entered)

    return FakeStages(clock, rotation_seconds=900.0, initial=lambda stage: {"general": f"ami-{stage[:3]}-before"}, judge=judge)


def candidate(n: int, at: float) -> Candidate:
    stages = [StageImages(s, "us-west-2", {"general": {"version": f"1.{n}.0", "id": f"ami-{n:08d}"}}, "1.32", {})
              for s in STAGES]
    return make_candidate(stages, f"rev{n}", f"change {n}", at, "bench")


def write_results(store: StateStore, start: float, end: float) -> int:
    rng = random.Random(7)
    at, written = start, 0
    while at < end:
        name, kind, _ = CANARIES[written % len(CANARIES)]
        cluster = CLUSTERS[written % len(CLUSTERS)]
        ok = rng.random() > 0.005
        row = {"kind": "result", "canary": name, "canary_kind": kind, "attempt": f"a{written}", "stage": "dev",
               "cluster": cluster, "zone": None, "pool": "general", "image": "ami-1", "outcome": "ok" if ok else "fail",
               "reason": "", "metrics": {"pod_startup_seconds": rng.gauss(2.0, 0.2), "check_seconds": rng.gauss(12, 1)},
               "at": at}
        store.append(ResultStream.of("dev", cluster, at).name, row)
        written += 1
        at += 3600 / PER_HOUR
    return written


def build(days: float, root: Path) -> tuple[Ledger, FakeStages, int, int]:
    ledger = Ledger(open_store(str(root / "release.db")), PIPELINE.names)
    results = open_store(str(root / "canary.db"))
    end = T0 + days * 86400
    written = write_results(results, T0 - 6 * 3600, end + 8 * 3600)
    stages = stages_of(results, T0)
    n = 0
    while stages.clock < end:  # a candidate every six hours, a tick every fifteen minutes
        if stages.clock >= T0 + n * 6 * 3600:
            c = candidate(n, stages.clock)
            ledger.add_candidate(c)
            ledger.append(c.id, None, "start", stages.clock, c.note, {"ready_in": ["dev"]}, "bench")
            n += 1
        tick(PIPELINE, ledger, stages, "bench")
        stages.clock += 900
    for _ in range(500):  # the history's candidates carried to their end, so both measure the same: one soaking stage
        state = ledger.state()
        if all(st.step == "idle" and not st.ready for st in state.stages.values()):
            break
        tick(PIPELINE, ledger, stages, "bench")
        stages.clock += 900
    fresh = candidate(n, stages.clock)  # the one the measured ticks carry: soaking in dev
    ledger.add_candidate(fresh)
    ledger.append(fresh.id, None, "start", stages.clock, fresh.note, {"ready_in": ["dev"]}, "bench")
    for _ in range(6):
        tick(PIPELINE, ledger, stages, "bench")
        stages.clock += 300
        if ledger.state().stages["dev"].step == "soaking":
            break
    assert ledger.state().stages["dev"].step == "soaking", ledger.state().stages["dev"]
    return ledger, stages, len(ledger.entries()), written


def timed(ledger: Ledger, stages: FakeStages, repeats: int = 9) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        tick(PIPELINE, ledger, stages, "bench")
        times.append(time.perf_counter() - began)
        stages.clock += 60
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        built = {}
        for label, days in (("day", 1.0), ("month", args.days)):
            root = Path(tmp) / label
            root.mkdir()
            began = time.perf_counter()
            built[label] = build(days, root)
            print(f"{label}: {days:g} day(s) of history built in {time.perf_counter() - began:.1f} s: "
                  f"{built[label][2]} ledger entries, {built[label][3]} canary results")
        took = {label: timed(ledger, stages) for label, (ledger, stages, _, _) in built.items()}
        for label, seconds in took.items():
            print(f"one tick, {label} of history: {seconds * 1000:.1f} ms (median of 9)")
        print(f"ratio month / day: {took['month'] / took['day']:.2f}x (target: within 2x)")


if __name__ == "__main__":
    main()
