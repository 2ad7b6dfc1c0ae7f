"""The stage story as the application layer tells it: what it says through its narrator is what the clusters did."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from platformctl.app.demo.narration import Marked, Part, Tabular, Tone
from platformctl.app.demo.stage import run_demo
from platformctl.kernel.topology import load_stage


@dataclass
class Recording:
    """A narrator that keeps what it was told."""

    paragraphs: list[tuple[Part, ...]] = field(default_factory=list)
    tables: list[Tabular] = field(default_factory=list)
    progress_seen: list[tuple[str, float, float]] = field(default_factory=list)

    def say(self, *parts: Part) -> None:
        self.paragraphs.append(parts)

    def show(self, table: Tabular) -> None:
        self.tables.append(table)

    def progress(self, label: str, done: float, total: float) -> None:
        self.progress_seen.append((label, done, total))

    def marked(self, tone: Tone) -> list[str]:
        return [p.text for parts in self.paragraphs for p in parts if isinstance(p, Marked) and p.tone is tone]

    def table(self, title: str) -> Tabular:
        return next(t for t in self.tables if t.title == title)


@pytest.mark.slow  # the whole demo, or a stage built for it: make test-fast leaves it out
def test_the_stage_story_says_what_each_cluster_did(tmp_path: Path) -> None:
    stage = load_stage("dev")
    said = Recording()
    report = run_demo(stage, 5, said, save_dir=tmp_path)

    assert said.marked(Tone.HEADING) == ["Stage dev", "Images", "Local region", "A new image"]
    assert not said.marked(Tone.BAD) and report.ok
    assert said.progress_seen[-1] == ("5 minutes of dev", 5, 5)
    assert report.rotation is not None
    rotation = said.table("Rotation onto the new images")
    names = {c.name for c in stage.clusters()}
    assert {row[0] for row in rotation.rows} == set(report.rotation.clusters) == names
    for row in rotation.rows:  # the table's waves and nodes are the run's report, cluster by cluster
        rotated = report.rotation.clusters[row[0]]
        assert (int(row[1]), int(row[2])) == (rotated.waves, rotated.nodes_rotated) and rotated.nodes_rotated > 0
        assert rotated.status == "done" and not rotated.cordoned and rotated.harm == 0
    gate = said.table("Canary gate")  # asked before every wave of every cluster, and never said fail
    assert {row[0]: int(row[1]) for row in gate.rows} == {n: report.rotation.canaries.gate[n].asked for n in names}
    assert all(report.rotation.canaries.gate[n].asked >= report.rotation.clusters[n].waves for n in names)
    assert all(row[4] == "0" for row in gate.rows)
    assert report.budget_violations == [] and len(report.snapshots) == len(names)
    assert all(set(c.images) <= set(report.rotation.images.values()) for c in report.rotation.clusters.values())
