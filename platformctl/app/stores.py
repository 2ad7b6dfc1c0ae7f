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

from pathlib import Path

from platformctl.kernel.environment import current
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state import StateStore, open_store
from platformctl.kernel.topology import STAGES, stage_table


def stage_of(cluster: str, infra_dir: Path | None) -> str | None:
    """The stage whose stack file declares ``cluster`` (None outside a checkout, or for a cluster of no stage)."""
    from platformctl.kernel.topology import load_stage

    for stage in STAGES:
        try:
            if cluster in {c.name for c in load_stage(stage, infra_dir).clusters()}:
                return stage
        except PlatformError:
            return None
    return None


def store_for(spec: str | None, *, stage: str | None = None, cluster: str | None = None,
              infra_dir: Path | None = None, existing: bool = False) -> StateStore:
    """The store a command on ``stage`` (or ``cluster``) uses; see the module docstring. ``existing``: one named by
    ``--state`` or ``$PLATFORMCTL_STATE`` must exist (``open_store``)."""
    if spec or current().state:
        return open_store(spec, existing)
    from platformctl.kernel.region_client import for_stage, running, state_dir

    region = for_stage(running(), stage, cluster)
    if region is not None:
        path = Path(region.get("state") or state_dir() / "state.db")
        return open_store(str(path))
    if stage is None and cluster is not None:
        stage = stage_of(cluster, infra_dir)
    if stage is not None:
        try:
            table = stage_table(stage, infra_dir)
        except PlatformError:
            table = f"platformctl-state-{stage}"
        return open_store(f"dynamodb://{table}")
    return open_store(None)

