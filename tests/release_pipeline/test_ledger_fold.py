"""The ledger's fold and its checkpoints: the instances a rotation saw booting live in a stream of their own (neither
an entry nor a checkpoint grows with the fleet), a checkpoint an older version wrote is folded again from the start,
and the same candidate started twice at once is one candidate. An entry and a checkpoint read back as they were
written, and a decision a newer version wrote is passed over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from platformctl.kernel.state import open_store
from release_pipeline.fold import CHECKPOINT_VERSION, Entry, Kind, PipelineState, StageState
from release_pipeline.ledger import LEDGER, Ledger, checkpoints


def test_boots_go_to_their_own_stream_in_chunks_and_the_entry_and_checkpoint_keep_only_counts(tmp_path: Path) -> None:
    from release_pipeline.reconcile import tick
    from tests.release_pipeline.test_reconcile import T0, candidate, fake, pipeline, start

    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0}])
    stages, c = fake(T0, boots=lambda stage, c: {f"ami-{stage}": [f"i-{n:08x}" for n in range(5000)]}), candidate(1)
    start(ledger, c, T0)
    for _ in range(6):
        tick(p, ledger, stages, "tester")
    rotated = next(e for _, e in ledger.entries() if e.decision == "rotated")
    assert rotated.inputs["result"]["booted_count"] == 5000 and "booted" not in rotated.inputs["result"]
    assert len(ledger.boots(c.id)["dev"]) == 5000
    assert all(len(json.dumps(r.data)) < 100_000 for r in ledger.store.read(f"release/boots@dev/{c.id}"))
    last = ledger.store.last(checkpoints("dev"))
    assert last is not None and len(json.dumps(last.data)) < 10_000 and "booted" not in last.data["state"]


def test_a_checkpoint_an_older_version_wrote_is_folded_again_from_the_start(tmp_path: Path) -> None:
    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    ledger.append("c-1", None, "start", 1.0, "one", {"ready_in": ["dev"]})
    ledger.append("c-1", "dev", "enter", 2.0, "in", {})
    old = ledger.state().to_dict()
    old["stages"]["dev"] = {"current": None, "step": "idle", "good": []}  # as the version before wrote it, wrong
    ledger.store.append(checkpoints("dev"), {"state": old}, key="state/2/2")
    state = ledger.state(checkpoints("dev"))
    assert state.stages["dev"].current == "c-1" and state.stages["dev"].step == "deploying"
    ledger.checkpoint(state, ["dev"])
    last = ledger.store.last(checkpoints("dev"))
    assert last is not None and last.data["version"] == CHECKPOINT_VERSION


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


def test_an_entry_reads_back_as_it_was_written_and_history_shows_it_as_the_store_keeps_it(tmp_path: Path) -> None:
    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    written = [ledger.append("c-1", None, "start", 1.0, "one", {"ready_in": ["dev"], "lock_file": "x.json"}, "alice"),
               ledger.append("c-1", "dev", Kind.WAIT, 2, "frozen", {"decision": {"decision": "wait", "opens_at": 9.0}}),
               ledger.append(None, "dev", "freeze", 3.5, "incident", {"until": None}, "bob")]
    # what an append answers (``release freeze -o json`` prints it): the keys in the order they always came
    assert list(written[0].to_dict()) == ["id", "candidate", "stage", "decision", "at", "reason", "inputs", "by"]
    assert written[1].decision is Kind.WAIT and written[2].decision is Kind.FREEZE
    read = [entry for _, entry in ledger.entries()]
    assert read == written  # every value as it was written (an int stays an int)
    assert [e.as_stored() for e in read] == [dict(r.data) for r in ledger.store.read(LEDGER)]
    assert [json.dumps(e.as_stored()) for e in read] == [json.dumps(r.data) for r in ledger.store.read(LEDGER)]
    assert Entry.from_dict(json.loads(json.dumps(written[1].to_dict()))) == written[1]
    assert ledger.entry(written[2].id) == written[2] and ledger.entry("d-none") is None
    assert ledger.newest(2) == [written[2], written[1]]


def test_a_decision_a_newer_version_wrote_is_read_and_passed_over_by_the_fold(tmp_path: Path) -> None:
    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    ledger.append("c-1", None, "start", 1.0, "one", {"ready_in": ["dev"]})
    before = ledger.state()
    future = {"id": "d-future", "candidate": "c-1", "stage": "dev", "decision": "teleport", "at": 2.0, "reason": "later",
              "inputs": {"to": "prod"}, "by": "someone"}
    ledger.store.append(LEDGER, future, key="d-future")
    entry = ledger.entry("d-future")
    assert entry is not None and entry.decision == "teleport" and not isinstance(entry.decision, Kind)
    assert entry.as_stored() == dict(sorted(future.items()))
    state = ledger.state()
    assert state.stages == before.stages and state.candidates == before.candidates and state.position == 2


def test_a_checkpoint_reads_back_as_the_state_it_keeps(tmp_path: Path) -> None:
    from release_pipeline.reconcile import tick
    from tests.release_pipeline.test_reconcile import T0, candidate, fake, pipeline, start

    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    p, stages = pipeline(), fake(T0)
    for n in (1, 2):
        start(ledger, candidate(n), stages.clock)
        for _ in range(12):
            tick(p, ledger, stages, "tester")
            stages.clock += 300
    ledger.append(None, "prod", "freeze", stages.clock, "incident", {"until": stages.clock + 60}, "oncall")
    state = ledger.state()
    assert state.stages["dev"].before and state.stages["dev"].verdicts and state.freezes
    again = PipelineState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state and again.to_dict() == state.to_dict()
    # a stage as a checkpoint of this version that did not hold every field yet keeps it: the rest take their defaults
    assert StageState.from_dict({"current": "c-1", "step": "soaking", "since": 5}) == StageState("c-1", step="soaking", since=5)


def test_the_deploys_that_may_have_taken_a_lock_are_found_past_the_busy_ticks_after_it_and_no_older_ones(tmp_path: Path) -> None:
    """A stage's deploys (``Ledger.add_deploy``, one a tick before each deploy) read back for a lock taken at ``since``:
    the one begun just before it is found however many ticks met the lock after it (a day of them), and the read
    stops at the deploys of the days before."""
    from release_pipeline.ledger import DEPLOY_TO_LOCK

    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    since = 1_800_000_000.0
    for n in range(300):  # the history before: a deploy an hour
        ledger.add_deploy("dev", {"lock_holder": f"root@tick-old-{n}", "lease_holder": f"old-{n}", "at": since - 3600.0 * (300 - n)})
    ledger.add_deploy("dev", {"lock_holder": "root@tick-a", "lease_holder": "a", "at": since - 2.0})
    for n in range(1440):  # a tick a minute met the lock for a day, each recording the deploy it began
        ledger.add_deploy("dev", {"lock_holder": f"root@tick-busy-{n}", "lease_holder": f"busy-{n}", "at": since + 60.0 * (n + 2)})
    ledger.add_deploy("dev", {"cleared": {"lock": "x"}, "at": since + 90_000.0})
    found = ledger.deploys_before_lock("dev", since)
    assert [d["lease_holder"] for d in found] == ["a"]
    read: list[int] = []
    real = ledger.store.read_back

    def counted(stream: str, before: int | None = None, limit: int = 500) -> Any:
        page = real(stream, before=before, limit=limit)
        read.extend(r.seq for r in page)
        return page

    ledger.store.read_back = counted  # type: ignore[method-assign]
    ledger.deploys_before_lock("dev", since)
    assert len(read) < 1442 + 100 + DEPLOY_TO_LOCK / 3600 + 1  # never the days before: one page past the lock at most
    assert ledger.deploys_before_lock("dev", since + 10 * 86400) == []  # a lock after them all: none took it


def test_what_a_stages_tick_forges_in_its_own_partition_is_passed_over_and_a_promotion_skips_no_stage(
        tmp_path: Path) -> None:
    """Dev's tick may write only its own partition (IAM), so what it forges is written there: an approval for prod, a
    freeze, prod's step, a halt of a candidate it does not run, and a promotion of its own candidate straight to prod.
    The fold passes over each but the promotion, which stands in dev; prod takes nothing that did not pass the stage
    before it."""
    from release_pipeline.reconcile import tick
    from tests.release_pipeline.test_reconcile import STAGES, T0, candidate, fake, pipeline, start

    store = open_store(str(tmp_path / "release.db"))
    ticks, people = Ledger(store, STAGES), Ledger(store, STAGES)
    p = pipeline(stages=[{"name": s, "soak": "1h", "minResults": 0, "passFor": 0} for s in STAGES])
    stages, c, other = fake(T0), candidate(1), candidate(2)
    start(people, c, T0)
    leases = ticks.stage_leases("tick", 600.0)
    while people.state().stage("dev").step != "soaking":
        tick(p, ticks, stages, "tick", lease=leases)
        stages.clock += 300
    assert [e.writer for _, e in people.entries()] == [None] + ["dev"] * (len(people.entries()) - 1)
    start(people, other, stages.clock)
    forger = Ledger(store, STAGES)
    forger.acting = "dev"  # as dev's lease sets it: dev's partition, all IAM lets dev's tick write
    forged = [forger.append(c.id, "prod", Kind.APPROVE, stages.clock, "forged", by="tick").id,
              forger.append(None, None, Kind.FREEZE, stages.clock, "forged", {"until": None}, "tick").id,
              forger.append(c.id, "prod", Kind.ENTER, stages.clock, "forged", {}, "tick").id,
              forger.append(other.id, "dev", Kind.HALT, stages.clock, "forged", {"rollback_to": None}, "tick").id,
              forger.append(other.id, "staging", Kind.FORCE, stages.clock, "forged", {}, "tick").id]
    forger.append(c.id, "dev", Kind.PROMOTE, stages.clock, "forged", {"ready_in": ["prod"]}, "tick")
    state = people.state()
    assert state.refused == forged
    assert state.approvals == {} and state.freezes == [] and state.stage("prod").current is None
    assert state.candidates[other.id].status == "queued" and state.stage("staging").forced is None
    assert state.stage("dev").last_good == c.id and state.stage("prod").ready == [c.id]  # the promotion stands in dev
    for _ in range(4):
        tick(p, ticks, stages, "tick", lease=leases)
        stages.clock += 300
    state = people.state()
    assert state.stage("prod").current is None and state.stage("prod").newest == -1  # never entered prod
    assert state.stage("staging").current in (None, other.id) and c.id not in state.stage("staging").ready
    assert ticks.state(checkpoints("prod")).to_dict() == people.state().to_dict()  # prod's checkpoint, the same fold


def test_a_tick_that_decides_nothing_checkpoints_once_others_wrote_200_entries_past_its_last(tmp_path: Path) -> None:
    """People read the last stage's checkpoints: its tick keeps them near even when it has nothing to decide."""
    from release_pipeline.ledger import CHECKPOINT_EVERY
    from release_pipeline.reconcile import tick
    from tests.release_pipeline.test_reconcile import T0, fake, pipeline

    store = open_store(str(tmp_path / "release.db"))
    ticks, people = Ledger(store, ["dev"]), Ledger(store, ["dev"])
    p = pipeline(stages=[{"name": "dev", "soak": 0, "passFor": 0, "minResults": 0}])
    leases = ticks.stage_leases("tick", 600.0)
    for n in range(CHECKPOINT_EVERY - 1):
        people.append(None, "dev", Kind.UNFREEZE, T0 + n, "nothing frozen", salt=str(n))
    assert tick(p, ticks, fake(T0), "tick", lease=leases).steps == []
    assert store.last(checkpoints("dev")) is None  # 199 behind: not yet
    people.append(None, "dev", Kind.UNFREEZE, T0 + 1000, "one more")
    assert tick(p, ticks, fake(T0), "tick", lease=leases).steps == []
    last = store.last(checkpoints("dev"))
    assert last is not None and last.data["state"]["position"] == CHECKPOINT_EVERY
    people.state()
    assert people.folded == 0  # people fold from it, nothing after it
