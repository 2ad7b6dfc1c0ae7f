"""The ledger's fold keeps which instances each candidate's rotations saw booting (how far a candidate got), so that
`release status` and the dashboard read it from the last checkpoint instead of the whole ledger; a checkpoint an older
version wrote without it is folded again from the start, never read as "nothing booted"."""

from __future__ import annotations

from pathlib import Path

from platformctl.state import open_store
from release_pipeline.ledger import STATE, Ledger


def test_the_instances_a_rotation_saw_booting_are_folded_and_kept_in_the_checkpoint(tmp_path: Path) -> None:
    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    ledger.append("c-1", None, "start", 1.0, "one", {"ready_in": ["dev"]})
    ledger.append("c-1", "dev", "rotated", 2.0, "done", {"result": {"booted": {"ami-1": ["i-a", "i-b"]}}})
    ledger.append("c-1", "dev", "rolled-back", 3.0, "back", {"result": {"booted": {"ami-1": ["i-b", "i-c"]}}})
    state = ledger.state()
    assert state.booted == {"c-1/dev": ["ami-1/i-a", "ami-1/i-b", "ami-1/i-c"]}  # each instance once
    ledger.checkpoint(state)
    again = Ledger(open_store(str(tmp_path / "release.db"))).state()
    assert again.booted == state.booted and again.position == state.position


def test_a_checkpoint_without_the_boots_is_folded_again_from_the_start(tmp_path: Path) -> None:
    ledger = Ledger(open_store(str(tmp_path / "release.db")))
    ledger.append("c-1", None, "start", 1.0, "one", {"ready_in": ["dev"]})
    ledger.append("c-1", "dev", "rotated", 2.0, "done", {"result": {"booted": {"ami-1": ["i-a"]}}})
    old = ledger.state().to_dict()
    del old["booted"]  # as the version before wrote it, at the ledger's last position
    ledger.store.append(STATE, {"state": old}, key=f"state/{old['position']}")
    assert ledger.state().booted == {"c-1/dev": ["ami-1/i-a"]}
    ledger.checkpoint(ledger.state())  # rewritten at the same position, now with the boots
    last = ledger.store.last(STATE)
    assert last is not None and last.data["state"]["booted"] == {"c-1/dev": ["ami-1/i-a"]}
