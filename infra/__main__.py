"""``pulumi up -s <stage>``: provision the stage its stack file describes (see ``infra/program.py``)."""

from infra.program import main

main()
