"""`platformctl demo` builds the image tree first, the stage's nodes boot what it built, and a new general
image reaches exactly the pools of its family through `ami build`, `stage deploy` and `rotate run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from platformctl.cli import cli
from platformctl.kernel.cluster.model import load_snapshot


@pytest.mark.slow  # the whole demo, or a stage built for it: make test-fast leaves it out
def test_demo_nodes_boot_the_images_it_built(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", "--minutes", "5", "--save-snapshots", str(tmp_path), "-o", "json"],
                                catch_exceptions=False)
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    images, rotation = report["images"], report["rotation"]
    assert list(images) == ["base", "general", "custom", "ml"] and len(set(images.values())) == 4
    assert rotation["rebuilt"] == ["general", "custom"] and rotation["all_on_new_images"] and rotation["harm"] == 0
    new_general = rotation["images"]["dev-usw2a-01/general"]
    assert new_general != images["general"]
    for cluster in ("dev-usw2a-01", "dev-usw2b-01", "dev-usw2-host"):
        by_pool = {n.pool: n.image for n in load_snapshot(tmp_path / f"{cluster}.json").nodes}
        assert by_pool["system"] == new_general  # rotated onto the new build
        assert by_pool.get("ml", images["ml"]) == images["ml"]  # not of its family: never rotated
    assert {n.image for n in load_snapshot(tmp_path / "dev-usw2b-01.json").nodes if n.pool == "custom"} == \
        {rotation["images"]["dev-usw2b-01/custom"]} != {images["custom"]}
