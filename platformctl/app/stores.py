"""Which state store a command reads and writes when ``--state`` does not say: the stage's own.

The in-cluster jobs of a stage (rotation, remediation, the canary runner) journal in the stage's
DynamoDB table, the one its Pulumi program creates (``platformctl:rotation.stateTable`` in the
stage's stack file, else ``platformctl-state-<stage>``). A command an operator runs against that
stage must read and write the same table, or leases are not shared, remediation and rotation cannot
see each other, and the canary gate finds no results. So, in order:

1. ``--state`` (a path, ``sqlite:///PATH`` or ``dynamodb://TABLE``), else ``$PLATFORMCTL_STATE``;
2. against the local region (a region of that stage runs, or the context is one of its clusters): the
   region's own store, a SQLite file in its folder (``local status`` names it);
3. a stage (``--stage``, or the stage whose stack file has the context's cluster): its table;
4. else ``.platformctl/kernel/state.db`` in the current directory (a cluster of no stage this checkout knows).

Every command that reads a store says which (``state`` in its JSON, a line on a terminal).
"""

from __future__ import annotations

from platformctl.app.platform import Platform
from platformctl.kernel.environment import STATE_VARIABLE as ENV
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.region_client import state_dir
from platformctl.kernel.state import StateStore, open_store
from platformctl.kernel.topology import table_of


def store_for(platform: Platform, spec: str | None, *, stage: str | None = None, cluster: str | None = None,
              existing: bool = False) -> StateStore:
    """The store a command on ``stage`` (or ``cluster``) uses; see the module docstring. ``existing``: one named by
    ``--state`` or ``$PLATFORMCTL_STATE`` must exist (``open_store``)."""
    if spec or platform.environment.state:
        return open_store(spec or platform.environment.state, existing, where="--state" if spec else ENV,
                          target=platform.environment.aws)
    region = platform.region.for_stage(stage, cluster) if platform.region is not None else None
    if region is not None:
        return open_store(str(region.get("state") or state_dir(platform.home) / "state.db"))
    if stage is None and cluster is not None:
        found = platform.stage_of(cluster)
        stage = found.name if found is not None else None
    if stage is not None:
        try:
            table = platform.stage_table(stage)
        except PlatformError:
            table = table_of({}, stage)  # the program's default name
        # in the stage's own region (the program makes it there), whatever region the caller's shell names
        return open_store(f"dynamodb://{table}?region={platform.stage(stage).region}", target=platform.environment.aws)
    return open_store(None, home=platform.home)
