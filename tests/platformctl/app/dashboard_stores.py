"""Stores as the pipeline, the canaries, a rotation and remediation leave them, for the dashboard's tests: a ledger the
real reconciler wrote (a good candidate promoted out of dev, a bad one halted there by the canaries' verdict and rolled
back), dev's canary results of two images (the bad one failing), a rotation the executor ran on a simulated cluster and
two remediation passes, all in real SQLite stores. Names, notes and reasons carry markup that must be shown as text."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from e2e_canary.results import CanaryResult, keep
from e2e_canary.verdict import Verdict, soak_verdict
from platformctl.emulator.nodegroups import SimulatedNodeGroups
from platformctl.kernel.state.sqlite import SQLiteStore
from release_pipeline.candidates import Candidate, StageImages, make_candidate
from release_pipeline.ledger import Ledger
from release_pipeline.operations import replaced_images
from release_pipeline.pipeline import load_pipeline
from release_pipeline.reconcile import tick
from release_pipeline.rotation_result import StageRotation
from release_pipeline.testing import FakeStages
from tests.clusters import cluster
from tests.e2e_canary.test_evidence_window import stage_results
from tests.upgrade_service.rotation import service, serving
from upgrade_service.planning.policy import parse_policy
from upgrade_service.remediation.policy import parse_remediation_policy
from upgrade_service.remediation.remediate import run as remediate
from upgrade_service.running.execute import Executor
from upgrade_service.running.run_types import Options, Target

SCRIPT = "<script>window.__pwned = 1</script>"
ONERROR = '<img src=x onerror="window.__pwned = 1">'
GOOD_IMAGE, BAD_IMAGE = "ami-0good", "ami-0bad"
EVIL_CLUSTER = f"dev-{SCRIPT}"
T0 = float(int(time.time()) // 3600 * 3600 - 12 * 3600)  # the canaries' and the ledger's clock: the last twelve hours


@dataclass
class Stores:
    pipeline: Path
    ledger: Path
    state: Path
    good: Candidate
    bad: Candidate
    halt_reason: str
    rows: list[CanaryResult]

    def args(self) -> list[str]:
        return ["--pipeline", str(self.pipeline), "--ledger", str(self.ledger), "--state", str(self.state)]


def store_newer_result(stores: Stores, image: str) -> None:
    """A canary's result one second after the newest, on ``image``, as the runner stores it."""
    last = max(stores.rows, key=lambda r: r.at)
    store = SQLiteStore(stores.state)
    try:
        keep(store, dataclasses.replace(last, image=image, at=last.at + 1, outcome="ok"))
    finally:
        store.close()


def canary_rows(start: float, end: float, image: str, failing: float = 0.0, seed: int = 1) -> list[CanaryResult]:
    rows = stage_results(start, end, failing=failing, seed=seed)
    out = [dataclasses.replace(r, image=image, reason=f"pod on image {image}: CreateContainerError {ONERROR}"
                               if r.outcome == "fail" else "") for r in rows]
    for i in range(0, len(out), 40):  # now and then the canary's own trouble (no room for its pod): neither a success
        out[i] = dataclasses.replace(out[i], outcome="infra_error", metrics={},  # nor a failure
                                     reason="pod found no room on the arm's nodes: the image was not measured")
    return out


def dev_stages(store: SQLiteStore) -> FakeStages:
    """dev's soak verdict as the pipeline computes it (``soak_verdict``: the stage's window, and each new image against
    the last good candidate's) over what the store holds; the other stages pass. Each rotation sees three instances an
    image boot, the first of them first light's."""

    def judge(stages: FakeStages, stage: str, candidate: Candidate, baseline: Candidate | None, since: float, window: int,
              entered: float | None) -> Verdict:
        if stage != "dev":
            return Verdict("pass", "fine", results_since=500)
        return soak_verdict(store, stage, since, stages.clock, window, replaced_images(stage, candidate, baseline),
                            baseline.id if baseline else None, entered)

    def boots(stage: str, candidate: Candidate) -> dict[str, list[str]]:
        return {i: [f"i-{stage[:3]}{n}{i[-4:]}" for n in range(3)] for i in candidate.image_ids(stage)}

    def lit(stages: FakeStages, stage: str, candidate: Candidate, said: StageRotation) -> StageRotation:
        return dataclasses.replace(said, first_light={i: [f"i-{stage[:3]}0{i[-4:]}"] for i in candidate.image_ids(stage)})

    return FakeStages(T0 + 3 * 3600, initial=lambda stage: {"general": f"ami-{stage[:3]}-before"}, judge=judge, boots=boots,
                      after_rotate=lit)


def candidate(image: str, note: str, at: float) -> Candidate:
    stages = [StageImages(s, "us-west-2", {"general": {"version": image, "id": image}}, "1.32", {})
              for s in ("dev", "staging", "prod-canary", "prod")]
    return make_candidate(stages, "rev", note, at, "tester")


def build(tmp_path: Path) -> Stores:
    pipeline_file = tmp_path / "pipeline.yaml"
    pipeline_file.write_text(
        "stages:\n" + "".join(f"  - {{name: {s}, soak: 1h, minResults: 10, passFor: 30m, deadline: 2h}}\n"
                              for s in ("dev", "staging", "prod-canary", "prod")))
    pipeline = load_pipeline(pipeline_file)
    state = SQLiteStore(tmp_path / "state.db")
    ledger = Ledger(SQLiteStore(tmp_path / "release.db"))
    # dev's canaries: the good image for eight hours, then the bad one (a third of its pods cannot start).
    rows = canary_rows(T0, T0 + 8 * 3600, GOOD_IMAGE) + canary_rows(T0 + 8 * 3600, T0 + 10 * 3600, BAD_IMAGE, 0.35, 2)
    rows.sort(key=lambda r: r.at)
    for row in rows:
        keep(state, row)
    dev = dev_stages(state)
    good = candidate(GOOD_IMAGE, f"the good one {SCRIPT}", T0)
    ledger.add_candidate(good)
    ledger.append(good.id, None, "start", dev.clock, good.note, {"ready_in": ["dev"]}, "tester")
    while ledger.state().stage("dev").last_good != good.id and dev.clock < T0 + 8 * 3600:
        tick(pipeline, ledger, dev, "tester")
        dev.clock += 300
    dev.clock = max(dev.clock, T0 + 8 * 3600 + 600)
    bad = candidate(BAD_IMAGE, f"the bad one {ONERROR}", dev.clock)
    ledger.add_candidate(bad)
    ledger.append(bad.id, None, "start", dev.clock, bad.note, {"ready_in": ["dev"]}, "tester")
    for _ in range(40):
        tick(pipeline, ledger, dev, "tester")
        dev.clock += 300
        where = ledger.state().candidates.get(bad.id)
        if where is not None and where.status in ("halted", "rolled-back"):
            break
    halt_reason = ledger.state().candidates[bad.id].reason

    # A rotation the executor ran, and remediation: a breaker open on one cluster, a node replaced on another.
    sim = serving(nodes=4)
    Executor(Target("dev-usw2a-01", sim, SimulatedNodeGroups(sim)), parse_policy({}, "policy.yaml"), state, Options()).run()
    policy = parse_remediation_policy({}, "remediation.yaml")
    broken = cluster({"general": 5})
    service(broken, "web", 10, min_available=8)
    broken.run_until_settled()
    for node in [n.name for n in broken.list_nodes()][:2]:
        broken.stop_kubelet(node)
    broken.advance(400)
    remediate("dev-usw2b-01", broken, SimulatedNodeGroups(broken), policy, state, "tester")
    one = cluster({"general": 5})
    service(one, "web", 10, min_available=8)
    one.run_until_settled()
    one.stop_kubelet(one.list_nodes()[0].name)
    one.advance(400)
    remediate(EVIL_CLUSTER, one, SimulatedNodeGroups(one), policy, state, "tester")
    return Stores(pipeline_file, tmp_path / "release.db", tmp_path / "state.db", good, bad, halt_reason, rows)

