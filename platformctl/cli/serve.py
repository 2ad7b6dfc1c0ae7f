"""``python -m platformctl.cli.serve``: the local region server process, with the stage's Pulumi
program as what provisions it. ``platformctl local up`` starts this; the server itself lives in
``platformctl.emulator.server.process``, which (as a shared module) does not import the ``infra`` subsystem.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ami.build import ensure_stage_images
from ami.manifest import load_manifests
from infra.materialize import materialize
from platformctl.emulator.server.process import main as serve
from platformctl.kernel.topology import Stage


def build_images(stage: Stage, lock: Path, copy_to: tuple[str, ...] = ()) -> None:
    """A fresh region builds the checkout's image tree into its AWS first, so the stage's pools boot real images
    (copied to ``copy_to``, the other stages' AWS regions, where a region holds several stages)."""
    ensure_stage_images(stage, lock, load_manifests(), copy_to)


def main(argv: list[str] | None = None) -> int:
    return serve(argv, provisioner=materialize, prepare=build_images)


if __name__ == "__main__":
    sys.exit(main())
