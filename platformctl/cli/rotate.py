"""``platformctl rotate``: plan node rotations (the upgrade service's planner, from the command line).

The cluster's state comes from a snapshot file (``kubectl get nodes,pods,pdb -A -o json``), a live
cluster (a kubeconfig context), or, for a whole stage, a folder of snapshots named after the stage's
clusters or the kubeconfig contexts of the same names. The plan goes to the terminal as tables, or
as JSON to standard output or a file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from platformctl.cli.output import console, emit_json
from platformctl.cluster.model import Snapshot, load_snapshot
from platformctl.errors import PlatformError
from platformctl.topology import STAGES, HostCluster, load_stage


def _duration(seconds: int) -> str:
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _snapshot_time(snapshot: Snapshot) -> float:
    """The newest instant a snapshot records: plans from one file are reproducible."""
    stamps = [n.created for n in snapshot.nodes] + [p.created for p in snapshot.pods]
    stamps += [p.started for p in snapshot.pods if p.started is not None]
    return max(stamps, default=0.0)


def _live_snapshot(kubeconfig: str | None, context: str | None) -> tuple[Snapshot, str, float]:
    from platformctl.cluster.live import LiveCluster
    from platformctl.server.control import default_kubeconfig

    live = LiveCluster.from_kubeconfig(default_kubeconfig(kubeconfig), context)
    snap = Snapshot(tuple(live.list_nodes()), tuple(live.list_pods()), tuple(live.list_pdbs()),
                    source=f"context {live.name}")
    return snap, live.name, live.clock.now()


def _print_cluster_plan(plan: Any, show_waves: bool = True) -> None:
    out = console()
    nodes = sum(len(w.nodes) for w in plan.waves)
    out.print(f"[bold]{plan.cluster}[/] ({plan.source}): {nodes} nodes in {len(plan.waves)} waves, "
              f"{len(plan.blocked)} blocked; estimated {_duration(plan.estimated_seconds)} "
              f"(strategy {plan.policy.strategy}, policy {plan.policy.source})")
    if show_waves and plan.waves:
        table = Table("wave", "zone", "pools", "nodes", "first node", "boot", "drain", "settle", "wait", "estimate")
        for w in plan.waves:
            table.add_row(str(w.index), w.segment.zone or "-", ",".join(w.segment.pools), str(len(w.nodes)), w.nodes[0],
                          str(w.boot_seconds), str(w.drain_seconds), str(w.settle_seconds), str(w.wait_seconds),
                          _duration(w.estimated_seconds))
        out.print(table)
        out.print("[dim]seconds per wave; `--explain NODE` says why a node is in its wave, `-o json` lists every node "
                  "and reason[/]")
    if plan.blocked:
        table = Table("node", "pool", "zone", "blocked because", title="Nodes that cannot be rotated now")
        for b in plan.blocked:
            table.add_row(b.node, b.pool, b.zone or "-", b.reason)
        out.print(table)
    for warning in plan.warnings:
        out.print(f"[yellow]warning:[/] {warning}")


@click.group()
def rotate() -> None:
    """Node rotation onto new machine images: plans that respect every application's budget."""


@rotate.command("plan")
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="the rotation policy (YAML)")
@click.option("--snapshot", "snapshot_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="one cluster's state, as `kubectl get nodes,pods,pdb -A -o json` prints it")
@click.option("--context", default=None, help="plan a live cluster: this kubeconfig context")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig for --context or --stage (default: $KUBECONFIG, else the running local region's, "
                   "else ~/.kube/config)")
@click.option("--stage", "stage_name", type=click.Choice(STAGES), default=None,
              help="plan a whole stage: its clusters in order, each with its own plan")
@click.option("--snapshot-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="with --stage: a folder of <cluster>.json snapshots (else the kubeconfig contexts named after the clusters)")
@click.option("--explain", "explain_node", default=None, metavar="NODE", help="say why NODE is where the plan puts it")
@click.option("--output", "-o", default=None, metavar="text|json|FILE",
              help="text (the default on a terminal), json (the default otherwise), or a file to write the JSON plan to")
@click.pass_context
def rotate_plan(ctx: click.Context, policy_file: Path, snapshot_file: Path | None, context: str | None,
                kubeconfig: str | None, stage_name: str | None, snapshot_dir: Path | None, explain_node: str | None,
                output: str | None) -> None:
    """Plan the rotation of a cluster (or a stage) onto the images its policy targets. Changes nothing."""
    from upgrade_service.order import ClusterPlace
    from upgrade_service.plan import plan_cluster, plan_region
    from upgrade_service.policy import load_policy

    sources = [s for s in (snapshot_file and "--snapshot", context and "--context", stage_name and "--stage") if s]
    if len(sources) != 1:
        raise PlatformError("give exactly one of --snapshot FILE, --context NAME or --stage NAME"
                            + (f" (got {', '.join(sources)})" if sources else ""), field="rotate plan")
    if snapshot_dir is not None and stage_name is None:
        raise PlatformError("--snapshot-dir goes with --stage", field="--snapshot-dir")
    if explain_node is not None and stage_name is not None:
        raise PlatformError("--explain takes one cluster's plan (--snapshot or --context)", field="--explain")
    policy = load_policy(policy_file)
    if output is None:
        output = "text" if sys.stdout.isatty() else "json"

    if stage_name is not None:
        if policy.cluster is not None:
            raise PlatformError(f"names cluster {policy.cluster!r}, but a stage plan applies the policy to every cluster "
                                "of the stage: remove `cluster`", file=policy.source, field="cluster")
        stage = load_stage(stage_name, ctx.obj["infra_dir"])
        places = [ClusterPlace(c.name, None if isinstance(c, HostCluster) else c.zones[0]) for c in stage.clusters()]
        snapshots: dict[str, Snapshot] = {}
        now = 0.0
        for place in places:
            if snapshot_dir is not None:
                snapshots[place.name] = load_snapshot(snapshot_dir / f"{place.name}.json")
                now = max(now, _snapshot_time(snapshots[place.name]))
            else:
                snapshots[place.name], _, now = _live_snapshot(kubeconfig, place.name)
        result: Any = plan_region(stage.name, stage.region, places, snapshots, policy, now)
    else:
        if snapshot_file is not None:
            snap = load_snapshot(snapshot_file)
            name, now = policy.cluster or snapshot_file.stem, _snapshot_time(snap)
        else:
            snap, name, now = _live_snapshot(kubeconfig, context)
        result = plan_cluster(snap, policy, now, cluster=name)

    if explain_node is not None:
        lines = result.explain(explain_node)
        if output == "json":
            emit_json({"node": explain_node, "explanation": lines})
        else:
            for line in lines:
                click.echo(line)
        return
    data = result.to_dict()
    if output == "json":
        emit_json(data)
        return
    if output != "text":
        path = Path(output)
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(data, indent=2) + "\n")
            tmp.replace(path)
        except OSError as exc:
            raise PlatformError(f"cannot write the plan ({exc.strerror})", file=str(path), field="--output") from None
    if stage_name is not None:
        out = console()
        out.print(f"[bold]{result.stage}[/] in {result.region}: {len(result.steps)} steps, "
                  f"estimated {_duration(result.estimated_seconds)}")
        table = Table("step", "clusters", "estimate", "why")
        for step in data["steps"]:
            table.add_row(str(step["index"]), ", ".join(step["clusters"]), _duration(step["estimated_seconds"]),
                          "; ".join(step["reasons"]) or "first")
        out.print(table)
        for step in result.steps:
            for name in step:
                _print_cluster_plan(result.plans[name], show_waves=False)
        for warning in result.warnings:
            out.print(f"[yellow]warning:[/] {warning}")
    else:
        _print_cluster_plan(result)
    if output != "text":
        console().print(f"wrote {output}")
