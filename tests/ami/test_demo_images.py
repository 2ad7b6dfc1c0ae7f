"""`platformctl demo` builds the image tree first, and the stage's nodes boot what it built."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from platformctl.cli import cli
from platformctl.cluster.model import load_snapshot


def test_demo_nodes_boot_the_images_it_built(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", "--minutes", "5", "--save-snapshots", str(tmp_path), "-o", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0
    images = json.loads(result.stdout)["images"]
    assert list(images) == ["base", "general", "custom", "ml"] and len(set(images.values())) == 4
    snap = load_snapshot(tmp_path / "dev-usw2a-01.json")
    by_pool = {n.pool: n.image for n in snap.nodes}
    assert by_pool["general"] == images["general"] and by_pool["ml"] == images["ml"]
