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


def hold(lock: Path) -> None:
    """Make the mocked account's EC2 hold every image ``lock`` names, under those ids, as if ``ami build`` had made
    them there: EC2 (and so the local region) launches only images it holds, and the fixture's ids are invented.
    Test set-up of the account's state, made inside moto's own store since EC2 lets nobody choose an image's id."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami

    for name, versions in json.loads(lock.read_text())["images"].items():
        for version, regions in versions.items():
            for region, image in regions.items():
                backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
                backend.amis.setdefault(image, Ami(backend, image, name=f"{name}-{version}", owner_id=DEFAULT_ACCOUNT_ID,
                                                   architecture="x86_64", root_device_name="/dev/xvda",
                                                   region_name=region))
