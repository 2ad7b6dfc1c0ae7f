"""``platformctl local up|status|down``: the local region as a background server.

``up`` starts (detached) a server holding one stage's local region: moto's AWS endpoint and a
Kubernetes API per simulated cluster, with a kubeconfig, all on 127.0.0.1. It is idempotent: while a
region runs, ``up`` reports it instead of starting another. Other commands use the running region
whenever no live target is given.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.table import Table

from platformctl.cli.output import OUTPUT, console, emit_json
from platformctl.topology import STAGES, load_stage


def _print_status(info: dict[str, Any], headline: str) -> None:
    out = console()
    out.print(f"[bold]{headline}[/]: stage {info['stage']} ({info['region']}), pid {info['pid']}, "
              f"virtual time {info['virtual_time']} at {info['speed']:g}× wall time")
    out.print(f"  AWS endpoint   {info['aws_endpoint']}   (commands here use it; elsewhere: export AWS_ENDPOINT_URL={info['aws_endpoint']})")
    out.print(f"  kubeconfig     {info['kubeconfig']}   (kubectl --kubeconfig {info['kubeconfig']} get nodes)")
    table = Table("cluster (context)", "server", "nodes", "ready", "pods")
    for c in info["clusters"]:
        table.add_row(c["name"], c["server"], str(c["nodes"]), str(c["nodes_ready"]), str(c["pods"]))
    out.print(table)


@click.group()
def local() -> None:
    """The local region as a running place: AWS (moto) and Kubernetes APIs on 127.0.0.1."""


@local.command("up")
@click.option("--stage", "stage_name", type=click.Choice(STAGES), default="dev", show_default=True)
@click.option("--speed", type=click.FloatRange(min=1.0, max=100_000.0), default=300.0, show_default=True,
              help="virtual seconds per wall second (300: a 300 s node boot takes a second)")
@click.option("--workloads/--no-workloads", default=True, show_default=True,
              help="fill the member clusters with synthetic services, stateful sets, jobs and budgets")
@OUTPUT
@click.pass_context
def local_up(ctx: click.Context, stage_name: str, speed: float, workloads: bool, output: str) -> None:
    """Start the local region of a stage in the background (or report the one running)."""
    from platformctl.server import control

    load_stage(stage_name, ctx.obj["infra_dir"])  # a broken stack file fails here, in one line, not in the server log
    info, started = control.up(stage_name, speed, ctx.obj["infra_dir"], workloads)
    if output == "json":
        emit_json({**info, "started": started})
        return
    _print_status(info, "started" if started else "already running")


@local.command("status")
@OUTPUT
def local_status(output: str) -> None:
    """Endpoints, clusters and virtual time of the running local region (exit 1 when none runs)."""
    from platformctl.server import control

    info = control.running()
    if output == "json":
        emit_json(info or {"running": False})
    elif info is None:
        console().print("no local region is running (start one with `platformctl local up`)")
    else:
        _print_status(info, "running")
    if info is None:
        sys.exit(1)


@local.command("down")
@OUTPUT
def local_down(output: str) -> None:
    """Stop the running local region. Its state goes with it."""
    from platformctl.server import control

    info = control.down()
    if output == "json":
        emit_json({"stopped": info is not None, **({"pid": info["pid"], "stage": info["stage"]} if info else {})})
    elif info is None:
        console().print("no local region was running")
    else:
        console().print(f"stopped the local region of stage {info['stage']} (pid {info['pid']})")

