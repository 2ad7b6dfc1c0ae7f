"""Benchmark: the release ledger's records as history grows, and what `release status` costs after 1 and 100 releases.

Three measurements, each on a SQLite ledger the real reconciler writes (`release_pipeline.reconcile.tick`, stages on a
virtual clock):

1. A soak whose canary verdict flaps (pass, inconclusive, pass, ...) every five minutes for 36 hours (a 36-hour soak,
   then its deadline): the last checkpoint's size and the largest entry's, against the 100 kB each must stay under
   (DynamoDB's item is 400 kB).
2. 1,600 freezes by hand that lapsed before a candidate waits for its approval: the same two sizes.
3. `release status`'s candidate report (`platformctl.app.release_status.candidate_report`, from the ledger alone) after 1
   release and after 100 of a 10,000-node fleet (each rotation of each stage records the instances it saw booting,
   10,000 a release), median of 7, side by side: the ratio (target: within 2x), and for contrast what reading every
   boot of every candidate ever (what it read before 2026-11-29) costs after 100.

Not part of the test run.

    .venv/bin/python benchmarks/release_records.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from e2e_canary.verdict import Verdict
from platformctl.app.release_status import candidate_report
from platformctl.kernel.state import open_store
from release_pipeline.candidates import Candidate, StageImages, make_candidate
from release_pipeline.ledger import Ledger, boots_stream, checkpoints
from release_pipeline.pipeline import parse_pipeline
from release_pipeline.reconcile import tick
from release_pipeline.testing import FakeStages

STAGES = ("dev", "staging", "prod-canary", "prod")
NODES = {"dev": 500, "staging": 1500, "prod-canary": 2000, "prod": 6000}  # 10,000 a release
T0 = 1_790_000_000.0


RELEASE = [0]  # the release under way: its instances are named after it


def stages_of(flap: bool = False) -> FakeStages:
    """The stages' operations (the one fake): a rotation takes no time and boots every node of the stage afresh; the
    verdict passes, or flaps every five minutes, with a long reason."""

    def boots(stage: str, candidate: Candidate) -> dict[str, list[str]]:
        image = candidate.stages[stage].images["general"]["id"]
        return {image: [f"i-{RELEASE[0]:03d}{stage[:2]}{n:05d}" for n in range(NODES[stage])]}

    def judge(stages: FakeStages, stage: str, candidate: Candidate, baseline: Candidate | None, since: float, window: int,
              entered: float | None) -> Verdict:
        said = ("pass" if int(stages.clock / 300) % 2 else "inconclusive") if flap else "pass"
        return Verdict(said, f"{said}: " + "each canary's evidence, at length; " * 20, results_since=10_000)

    return FakeStages(T0, rotation_seconds=0.0, initial=lambda stage: {"general": f"ami-{stage}-before"}, boots=boots,
                      judge=judge)


def candidate(n: int) -> Candidate:
    images = [StageImages(s, "us-east-1", {"general": {"version": f"1.{n}.0", "id": f"ami-{s[:3]}{n:05d}"}}, "1.32", {})
              for s in STAGES]
    return make_candidate(images, f"rev{n}", f"change {n}", T0, "ci")


def start(ledger: Ledger, c: Candidate, at: float) -> None:
    ledger.add_candidate(c)
    ledger.append(c.id, None, "start", at, c.note, {"ready_in": [STAGES[0]]}, "ci")


def sizes(ledger: Ledger) -> tuple[int, int]:
    last = ledger.store.last(checkpoints(ledger.stages[-1]))
    assert last is not None
    return len(json.dumps(last.data)), max(len(json.dumps(e.to_dict())) for _, e in ledger.entries())


def flapping_soak(folder: Path) -> tuple[int, int, int]:
    ledger, stages = Ledger(open_store(str(folder / "flap.db")), ["dev"]), stages_of(flap=True)
    pipeline = parse_pipeline({"stages": [{"name": "dev", "soak": "36h", "minResults": 100, "passFor": "30m",
                                           "deadline": "2h"}]}, "pipeline.yaml", "bench")
    start(ledger, candidate(1), T0)
    for _ in range(int(40 * 3600 / 300)):
        tick(pipeline, ledger, stages, "bench")
        stages.clock += 300
    verdicts = sum(1 for _, e in ledger.entries() if e.decision == "verdict")
    return (*sizes(ledger), verdicts)


def lapsed_freezes(folder: Path) -> tuple[int, int]:
    ledger, stages = Ledger(open_store(str(folder / "freezes.db")), ["dev"]), stages_of()
    pipeline = parse_pipeline({"stages": [{"name": "dev", "soak": 0, "approvals": 1}]}, "pipeline.yaml", "bench")
    for n in range(1600):
        at = T0 - 600_000 + n * 300
        ledger.append(None, "dev", "freeze", at, f"freeze {n}", {"until": at + 60}, "oncall", salt=str(n))
    start(ledger, candidate(1), T0)
    for _ in range(3):
        tick(pipeline, ledger, stages, "bench")
        stages.clock += 300
    ledger.checkpoint(ledger.state(), ["dev"])
    return sizes(ledger)


def releases(folder: Path, count: int) -> Ledger:
    ledger, stages = Ledger(open_store(str(folder / f"releases-{count}.db")), STAGES), stages_of()
    pipeline = parse_pipeline({"stages": [{"name": s, "soak": 0, "passFor": 0, "minResults": 0} for s in STAGES]},
                              "pipeline.yaml", "bench")
    for n in range(count):
        RELEASE[0] = n
        start(ledger, candidate(n), stages.clock)
        while ledger.state().stage("prod").last_good != candidate(n).id:
            tick(pipeline, ledger, stages, "bench")
            stages.clock += 300
    return ledger


def timed(call: Any, runs: int = 7) -> float:
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds)


def main() -> int:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        checkpoint, largest, verdicts = flapping_soak(folder)
        print(f"a verdict flapping through a 36-hour soak ({verdicts} verdict changes): checkpoint {checkpoint:,} bytes, "
              f"largest entry {largest:,} bytes (limit 100,000)")
        checkpoint, largest = lapsed_freezes(folder)
        print(f"1,600 lapsed freezes by hand: checkpoint {checkpoint:,} bytes, largest entry {largest:,} bytes")
        one, hundred = releases(folder, 1), releases(folder, 100)
        t1 = timed(lambda: candidate_report(one, one.state(), None))
        t100 = timed(lambda: candidate_report(hundred, hundred.state(), None))
        every = timed(lambda: [hundred.boots_and_first_light(c.id) for c in hundred.candidates()], 3)
        rows = sum(len(r.data.get("instances", [])) for c in hundred.candidates()
                   for s in STAGES for r in hundred.store.read(boots_stream(s, c.id)))
        print(f"release status's candidate report: after 1 release {t1 * 1000:.1f} ms, after 100 of 10,000 nodes "
              f"{t100 * 1000:.1f} ms: ratio {t100 / t1:.2f} (target within 2x); reading every boot of every "
              f"candidate after 100 ({rows:,} rows): {every * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
