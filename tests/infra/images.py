"""The images a stage's pools boot in the tests: a stage's pins, else the newest build in the tests' lock file.

``dev`` pins no images (its pools follow ``ami build``'s lock file), so the tests run the program with
``platformctl:imageLock`` pointing at ``tests/fixtures/images.lock.json``, as ``pulumi up`` would read
the checkout's lock file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ami.lock import newest_in_lock
from platformctl.kernel.topology import NodePool, Stage, load_stage, read_stack_config

LOCK = Path(__file__).parents[1] / "fixtures" / "images.lock.json"


def stack_config(stage_name: str) -> dict[str, Any]:
    config = read_stack_config(Path(load_stage(stage_name).source))
    config["platformctl:imageLock"] = str(LOCK)
    return config


def image_for(stage: Stage, pool: NodePool) -> str | None:
    return stage.image_for(pool) or newest_in_lock(json.loads(LOCK.read_text()), pool.image_family, stage.region)
