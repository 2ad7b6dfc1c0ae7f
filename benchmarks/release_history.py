"""Benchmark: the release ledger after 100 releases on a 10,000-node fleet, against after one.

Each release carries a candidate dev -> staging -> prod-canary -> prod; each stage's rotation boots its share of a
10,000-node fleet (1,000 in dev, 2,000 in staging, 2,000 in prod-canary, 5,000 in prod) on the candidate's images, as
the rotation's result reports them. Two SQLite ledgers are built side by side in one run, one holding one release and
one holding 100, then a fresh candidate waits in dev on each; a tick of each is timed (median of 51, every stage
ticked, nothing to do but read the state and decide). Printed: the checkpoint's size on each (target: under 100 kB
after 100 releases; a DynamoDB item holds 400 kB) and the tick's cost, 100 releases / one (target: within 2x).

Not part of the test run.

    .venv/bin/python benchmarks/release_history.py [--releases 100] [--nodes 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from e2e_canary.verdict import Verdict
from platformctl.kernel.state import open_store
from release_pipeline.candidates import Candidate, StageImages, make_candidate
from release_pipeline.ledger import Ledger, checkpoints
from release_pipeline.pipeline import parse_pipeline
from release_pipeline.reconcile import tick
from release_pipeline.testing import FakeStages

STAGES = ("dev", "staging", "prod-canary", "prod")
SHARE = {"dev": 0.1, "staging": 0.2, "prod-canary": 0.2, "prod": 0.5}
T0 = 1_790_000_000.0
PIPELINE = parse_pipeline({"stages": [{"name": s, "soak": 0, "minResults": 0, "passFor": 0, "approvals": 1 if s == "dev" else 0}
                                      for s in STAGES]}, "pipeline.yaml", "bench")


def fleet_of(nodes: int) -> FakeStages:
    """The stages' operations (the one fake): a rotation takes twenty minutes and boots the stage's share of ``nodes``
    afresh; the canaries pass."""

    def boots(stage: str, candidate: Candidate) -> dict[str, list[str]]:
        image = sorted(candidate.image_ids(stage))[0]
        return {image: [f"i-{candidate.id[2:10]}{stage[:3]}{n:07d}" for n in range(int(nodes * SHARE[stage]))]}

    def judge(stages: FakeStages, stage: str, candidate: Candidate, baseline: Candidate | None, since: float, window: int,
              entered: float | None) -> Verdict:
        return Verdict("pass", "canaries pass", results_since=1000)

    return FakeStages(T0, initial=lambda stage: {"general": f"ami-{stage[:3]}-before"}, boots=boots, judge=judge)


def candidate(n: int) -> Candidate:
    stages = [StageImages(s, "us-east-1", {"general": {"version": f"1.{n}.0", "id": f"ami-{s[:3]}{n:05d}"}}, "1.32", {})
              for s in STAGES]
    return make_candidate(stages, f"rev{n}", f"release {n}", T0 + n, "bench")


def build(path: Path, releases: int, nodes: int) -> tuple[Ledger, FakeStages]:
    ledger, fleet = Ledger(open_store(str(path)), PIPELINE.names), fleet_of(nodes)
    for n in range(releases):
        c = candidate(n)
        ledger.add_candidate(c)
        ledger.append(c.id, None, "start", fleet.clock, c.note, {"ready_in": ["dev"]}, "bench")
        ledger.append(c.id, "dev", "approve", fleet.clock, "ok", by="bench")
        for _ in range(12):
            tick(PIPELINE, ledger, fleet, "bench")
            fleet.clock += 300
    waiting = candidate(10_000)  # waits in dev for an approval: every tick reads and decides, nothing moves
    ledger.add_candidate(waiting)
    ledger.append(waiting.id, None, "start", fleet.clock, "waits", {"ready_in": ["dev"]}, "bench")
    tick(PIPELINE, ledger, fleet, "bench")
    return ledger, fleet


def timed(ledger: Ledger, fleet: FakeStages) -> float:
    times = []
    for _ in range(51):
        began = time.perf_counter()
        tick(PIPELINE, ledger, fleet, "bench")
        times.append(time.perf_counter() - began)
        fleet.clock += 60
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one, one_fleet = build(Path(tmp) / "one.db", 1, args.nodes)
        many, many_fleet = build(Path(tmp) / "many.db", args.releases, args.nodes)
        for name, ledger in (("1 release", one), (f"{args.releases} releases", many)):
            last = ledger.store.last(checkpoints(PIPELINE.names[-1]))
            size = len(json.dumps(last.data)) if last else 0
            entries = len(ledger.entries())
            biggest = max(len(json.dumps(e.as_stored())) for _, e in ledger.entries())
            print(f"{name:>14}: checkpoint {size:,} bytes; {entries:,} ledger entries, the largest {biggest:,} bytes")
        t_one, t_many = timed(one, one_fleet), timed(many, many_fleet)
        print(f"tick (median of 51): after 1 release {t_one * 1000:.1f} ms; after {args.releases} {t_many * 1000:.1f} ms; "
              f"ratio {t_many / t_one:.2f}x (target: within 2x)")
        state = many.state()
        assert state.stage("prod").last_good == candidate(args.releases - 1).id, "the last release did not reach prod"


if __name__ == "__main__":
    main()
