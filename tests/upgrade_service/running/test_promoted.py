"""A stage's rotation rotates only onto what the release pipeline promoted there (``promoted/<stage>`` in the stage's
store): a pool whose launch template boots anything else has drifted, and none of its nodes moves."""

from __future__ import annotations

from pathlib import Path

from platformctl.kernel.state.promoted import Promoted, promote, promoted_in
from platformctl.kernel.state.sqlite import SQLiteStore
from tests.clusters import NEW, OLD
from tests.upgrade_service.rotation import NO_HARM, harm, rotate, serving
from upgrade_service.running.run_types import RunStatus


def test_a_pool_whose_launch_template_boots_an_image_the_pipeline_did_not_promote_is_not_rotated(tmp_path: Path) -> None:
    sim = serving(nodes=3)  # its group launches NEW; the pipeline promoted OLD (an operator's deploy pointed it at NEW)
    before = {n.name: n.image for n in sim.list_nodes()}
    outcome = rotate(sim, tmp_path, promoted=frozenset({OLD}))
    assert outcome.status is RunStatus.DONE, outcome.reason
    assert {n.name: n.image for n in sim.list_nodes()} == before and harm(sim) == NO_HARM  # 0 nodes moved
    assert outcome.reason.endswith(f"did not promote to the stage (drift: `platformctl release status`): general ({NEW})")

    (tmp_path / "promoted").mkdir()
    done = rotate(sim, tmp_path / "promoted", promoted=frozenset({NEW}))  # once promoted, the same run rotates it all
    assert done.status is RunStatus.DONE and {n.image for n in sim.list_nodes()} == {NEW} and harm(sim) == NO_HARM


def test_the_promoted_record_is_the_last_one_written_and_a_repeated_deploy_writes_none(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    assert promoted_in(store, "dev") is None  # never deployed by the pipeline: its rotations follow the templates
    promote(store, Promoted("dev", {"general": "ami-1"}, "c1", 10.0))
    promote(store, Promoted("dev", {"general": "ami-1"}, "c1", 20.0))  # a killed tick's deploy asked again
    promote(store, Promoted("dev", {"general": "ami-2"}, "c2", 30.0))
    promote(store, Promoted("dev", {"general": "ami-1"}, "c1", 40.0, rollback=True))
    assert len(store.read("promoted/dev")) == 3
    last = promoted_in(store, "dev")
    assert last is not None and last.image_ids == {"ami-1"} and last.candidate == "c1" and last.rollback
    assert promoted_in(store, "prod") is None


def test_what_the_groups_launch_belongs_to_the_record_whose_deploy_made_it(tmp_path: Path) -> None:
    from platformctl.kernel.nodegroups import LaunchSpec
    from platformctl.kernel.state.promoted import record_launches

    store = SQLiteStore(tmp_path / "state.db")
    made = {"dev-1-general": LaunchSpec("lt-1", "4", (("InstanceType", "aa"), ("UserData", "bb")))}
    promote(store, Promoted("dev", {"general": "ami-1"}, "c1", 10.0))
    assert not record_launches(store, "dev", "c2", made, 11.0)  # another candidate's deploy: nothing written
    assert record_launches(store, "dev", "c1", made, 11.0)
    assert not record_launches(store, "dev", "c1", made, 12.0)  # said already
    said = promoted_in(store, "dev")
    assert said is not None and said.launches == made and said.candidate == "c1"
    promote(store, Promoted("dev", {"general": "ami-1"}, "c1", 20.0))  # the same deploy asked again: it stands
    assert promoted_in(store, "dev").launches == made  # type: ignore[union-attr]
    promote(store, Promoted("dev", {"general": "ami-2"}, "c2", 30.0))  # the next deploy: none until it is made
    assert promoted_in(store, "dev").launches == {}  # type: ignore[union-attr]
    fenced: list[str] = []
    assert record_launches(store, "dev", "c2", made, 31.0, fence=lambda: fenced.append("checked"))
    assert fenced == ["checked"] and promoted_in(store, "dev").launches == made  # type: ignore[union-attr]
    assert len(store.read("promoted/dev")) == 2 and len(store.read("launched/dev")) == 2  # no record written twice
    assert all("launches" not in r.data for r in store.read("promoted/dev"))  # kept once, in their own stream
