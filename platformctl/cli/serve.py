"""``python -m platformctl.cli.serve``: the local region server process, with the stage's Pulumi
program as what provisions it. ``platformctl local up`` starts this; the server itself lives in
``platformctl.server.process``, which (as a shared module) does not import the ``infra`` subsystem.
"""

from __future__ import annotations

import sys

from infra.materialize import materialize
from platformctl.server.process import main as serve


def main(argv: list[str] | None = None) -> int:
    return serve(argv, provisioner=materialize)


if __name__ == "__main__":
    sys.exit(main())
