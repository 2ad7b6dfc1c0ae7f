"""The ledger's fold and its checkpoints: the instances a rotation saw booting live in a stream of their own (neither
an entry nor a checkpoint grows with the fleet), a checkpoint an older version wrote is folded again from the start,
and the same candidate started twice at once is one candidate."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from platformctl.kernel.state import open_store
from release_pipeline.ledger import STATE, Ledger
from release_pipeline.rotation_result import StageRotation


def test_boots_go_to_their_own_stream_in_chunks_and_the_entry_and_checkpoint_keep_only_counts(tmp_path: Path) -> None:
    from release_pipeline.reconcile import tick
    from tests.release_pipeline.test_reconcile import T0, Stages, candidate, pipeline, start

    class Fleet(Stages):
        def rotate(self, stage: str, c: object, rollback: bool = False, hold: Any = None) -> StageRotation:
            said = super().rotate(stage, c, rollback)  # type: ignore[arg-type]
            return dataclasses.replace(said, booted={f"ami-{stage}": [f"i-{n:08x}" for n in range(5000)]})

    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0}])
    stages, c = Fleet(T0), candidate(1)
    start(ledger, c, T0)
    for _ in range(6):
        tick(p, ledger, stages, "tester")
    rotated = next(e for _, e in ledger.entries() if e["decision"] == "rotated")
    assert rotated["inputs"]["result"]["booted_count"] == 5000 and "booted" not in rotated["inputs"]["result"]
    assert len(ledger.boots(c.id)["dev"]) == 5000
    assert all(len(json.dumps(r.data)) < 100_000 for r in ledger.store.read(f"release/boots/{c.id}"))
    last = ledger.store.last(STATE)
    assert last is not None and len(json.dumps(last.data)) < 10_000 and "booted" not in last.data["state"]


def test_a_checkpoint_an_older_version_wrote_is_folded_again_from_the_start(tmp_path: Path) -> None:
    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    ledger.append("c-1", None, "start", 1.0, "one", {"ready_in": ["dev"]})
    ledger.append("c-1", "dev", "enter", 2.0, "in", {})
    old = ledger.state().to_dict()
    old["stages"]["dev"] = {"current": None, "step": "idle", "good": []}  # as the version before wrote it, wrong
    ledger.store.append(STATE, {"state": old}, key="state/2/2")
    state = ledger.state()
    assert state.stages["dev"].current == "c-1" and state.stages["dev"].step == "deploying"
    ledger.checkpoint(state)
    last = ledger.store.last(STATE)
    assert last is not None and last.data["version"] == 3


def test_the_same_content_started_twice_at_once_is_one_candidate(tmp_path: Path) -> None:
    from tests.release_pipeline.test_reconcile import candidate

    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    c = candidate(1)
    for at in (1.0, 1.5):  # both read "not recorded" before either wrote
        ledger.store.append("release/candidates", c.to_record())
        ledger.append(c.id, None, "start", at, "one", {"ready_in": ["dev"]})
    state = ledger.state()
    assert list(state.candidates) == [c.id] and state.stages["dev"].ready == [c.id]
    assert [x.id for x in ledger.candidates()] == [c.id]
