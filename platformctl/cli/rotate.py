"""``platformctl rotate``: plan node rotations (the upgrade service's planner, from the command line).

The cluster's state comes from a snapshot file (``kubectl get nodes,pods,pdb -A -o json``), a live
cluster (a kubeconfig context), or, for a whole stage, a folder of snapshots named after the stage's
clusters or the kubeconfig contexts of the same names. The plan goes to the terminal as tables, or
as JSON to standard output or a file.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from platformctl.app import rotation as app
from platformctl.cli.context import platform
from platformctl.cli.output import LEASE_TTL, OUTPUT, STATE_HELP, console, emit_json, writable_file
from platformctl.kernel.cluster.model import format_time
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.humanize import hms
from platformctl.kernel.region_client import take_part
from platformctl.kernel.topology import STAGES
from upgrade_service.journal.records import ControlAction
from upgrade_service.planning.plan import RegionPlan, RotationPlan
from upgrade_service.running.run_types import Outcome, Progress


def _print_cluster_plan(plan: RotationPlan, show_waves: bool = True) -> None:
    out = console()
    nodes = sum(len(w.nodes) for w in plan.waves)
    out.print(f"[bold]{plan.cluster}[/] ({plan.source}): {nodes} nodes in {len(plan.waves)} waves, "
              f"{len(plan.blocked)} blocked; estimated {hms(plan.estimated_seconds)} "
              f"(strategy {plan.policy.strategy}, policy {plan.policy.source})")
    if plan.windows is not None:
        needed, ends = plan.windows
        out.print(f"  in its maintenance windows: {needed} window{'s' if needed != 1 else ''}, ending about "
                  f"{format_time(ends)}")
    if plan.closed_now is not None:
        out.print(f"  [yellow]no wave may start now[/]: {plan.closed_now}")
    if show_waves and plan.waves:
        table = Table("wave", "zone", "pools", "nodes", "first node", "boot", "drain", "settle", "wait", "estimate",
                      "starts", "ends")
        for w in plan.waves:
            span = plan.spans.get(w.index)
            table.add_row(str(w.index), w.segment.zone or "-", ",".join(w.segment.pools), str(len(w.nodes)), w.nodes[0],
                          str(w.boot_seconds), str(w.drain_seconds), str(w.settle_seconds), str(w.wait_seconds),
                          hms(w.estimated_seconds), hms(span.start) if span else "-", hms(span.end) if span else "-")
        out.print(table)
        out.print("[dim]seconds per wave; waves overlap (starts and ends: from the rotation's start), so the estimate is "
                  "when the last one ends; `--explain NODE` says why a node is in its wave, `-o json` lists every node "
                  "and reason[/]")
    if plan.blocked:
        table = Table("node", "pool", "zone", "now", "because", title="Nodes that cannot be rotated now")
        for b in plan.blocked:  # waiting: a budget at its floor whose pods are on their way back; a run waits for it
            table.add_row(b.node, b.pool, b.zone or "-", "waiting" if b.waiting else "blocked", b.reason)
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
    request = app.PlanRequest(policy_file, snapshot_file, context, stage_name, snapshot_dir, kubeconfig)
    app.check_plan_request(request)
    if explain_node is not None and stage_name is not None:
        raise PlatformError("--explain takes one cluster's plan (--snapshot or --context)", field="--explain")
    if output is None:
        output = "text" if sys.stdout.isatty() else "json"
    if output not in ("text", "json"):
        writable_file(Path(output), "--output")
    result = app.plan_rotation(platform(), request)
    if explain_node is not None and isinstance(result, RotationPlan):
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
    if isinstance(result, RegionPlan):
        out = console()
        out.print(f"[bold]{result.stage}[/] in {result.region}: {len(result.steps)} steps, "
                  f"estimated {hms(result.estimated_seconds)}")
        table = Table("step", "clusters", "estimate", "why")
        for step in data["steps"]:
            table.add_row(str(step["index"]), ", ".join(step["clusters"]), hms(step["estimated_seconds"]),
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


# ---------------------------------------------------------------------------------------- carrying rotations out

def _progress_printer(output: str) -> tuple[Callable[[Progress], None], Any]:
    """Live progress: a rich table on a terminal, a line per change otherwise (quiet with -o json)."""
    from rich.live import Live

    lock = threading.Lock()
    views: dict[str, Any] = {}
    last: dict[str, str] = {}
    if output == "json":
        return (lambda view: None), None
    if sys.stdout.isatty():
        live = Live(console=console(), refresh_per_second=4, transient=False)

        def render() -> Table:
            table = Table("cluster", "wave", "phase", "nodes in flight", "evictions", "waiting", "", box=None)
            for name, v in sorted(views.items()):
                d = v.drain
                waiting = ""
                if d is not None and (d.waiting_on_budget or d.waiting_other):
                    top = (d.waiting_on_budget + d.waiting_other).most_common(2)
                    waiting = ", ".join(f"{n} on {why}" for why, n in top)
                table.add_row(name, f"{v.wave} of {v.waves}" if v.waves else "-", v.phase, str(len(v.in_flight)),
                              str(d.evictions) if d else "-", waiting, v.message)
            return table

        def show(view: Any) -> None:
            with lock:
                views[view.cluster] = view
                live.update(render())

        return show, live

    def line(view: Any) -> None:
        text = f"{view.cluster}: wave {view.wave} of {view.waves}: {view.phase}: {view.message}"
        with lock:
            if last.get(view.cluster) != text:
                last[view.cluster] = text
                click.echo(text)

    return line, None


def _print_outcome(outcome: Outcome) -> None:
    out = console()
    report = outcome.report
    colour = {"done": "green", "paused": "yellow", "partial": "yellow", "outside-window": "yellow"}.get(outcome.status, "red")
    out.print(f"[bold]{outcome.cluster}[/]: [{colour}]{outcome.status}[/] — {outcome.reason}")
    if not report or report.get("status") == "never-run":
        return
    lit = report.get("first_light")
    if lit:
        verdict = lit["verdict"] or "judging"
        shade = {"pass": "green", "fail": "red", "skipped": "yellow"}.get(verdict, "cyan")
        nodes = ", ".join(f"{pool} {node}" for pool, node in sorted(lit["nodes"].items())) or "none yet"
        out.print(f"  first light: [{shade}]{verdict}[/] — one node a pool before any workload moves ({nodes})"
                  + (f": {lit['reason']}" if lit["reason"] and verdict != "pass" else ""))
        for pool, why in sorted(lit["skipped"].items()):
            out.print(f"  [yellow]first light skipped[/] {pool}: {why}")
    if report.get("waves"):
        table = Table("wave", "zone", "nodes", "estimate", "actual", "evictions", "refused", "failed")
        for w in report["waves"]:
            table.add_row(str(w["wave"]), w["zone"] or "-", str(len(w["nodes"])), hms(w["estimated_seconds"] or 0),
                          hms(w["actual_seconds"]) if w["actual_seconds"] is not None else "running",
                          str(w["evictions"]), str(w["refused_evictions"]), str(len(w["failed"])))
        out.print(table)
    lowest = report.get("lowest_budget_headroom")
    out.print(f"  {report['nodes_rotated']} nodes rotated in {hms(report['duration_seconds'])} "
              f"(plan estimate {hms(report['estimated_seconds'] or 0)}); {report['evictions']} evictions, "
              f"{report['refused_evictions']} refused; {report['pods_disrupted_more_than_once']} pods disrupted more than once; "
              f"lowest budget headroom {lowest['headroom']} ({lowest['budget']})" if lowest else "lowest budget headroom: no budget involved")
    for item in report.get("nodes_failed", []):
        out.print(f"  [red]failed[/] {item['node']}: {item['reason']}")
    for item in report.get("nodes_blocked", [])[:20]:
        out.print(f"  [yellow]blocked[/] {item['node']}: {item['reason']}")
    waiting = report.get("waiting")
    if waiting and not waiting["nodes"]:  # for an API that does not answer
        out.print(f"  [cyan]waiting[/] since {waiting['since']} (until {waiting['gives_up_at']} at most): {waiting['reason']}")
    elif waiting:
        out.print(f"  [cyan]waiting[/] since {waiting['since']} ({len(waiting['nodes'])} node(s), until {waiting['gives_up_at']} "
                  f"at most without a change): {waiting['reason']}")
    for name in report.get("nodes_unmanaged", []):
        out.print(f"  [yellow]not in any auto scaling group[/] {name}: cannot be replaced")
    if report.get("cordoned_by_this_run"):
        out.print(f"  left cordoned: {', '.join(report['cordoned_by_this_run'])}")
    if report.get("tainted_by_this_run"):
        out.print(f"  carrying the rotation taint: {len(report['tainted_by_this_run'])} nodes (`rotate abort` removes it)")


EXIT_CODES_HELP = ("exit 0 done, 1 halted or failed, 2 bad input, 3 another run holds the lease, 4 paused, "
                   "130 interrupted (Ctrl-C or SIGTERM: stopped at a safe point; the next run goes on)")


@rotate.command("run", epilog=EXIT_CODES_HELP)
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="the rotation policy (YAML)")
@click.option("--context", default=None, help="rotate one cluster: this kubeconfig context")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig (default: $KUBECONFIG, else the running local region's, else ~/.kube/config)")
@click.option("--stage", "stage_name", type=click.Choice(STAGES), default=None,
              help="rotate a whole stage: its clusters in the stage plan's order, one zone at a time")
@click.option("--state", "state_spec", default=None, metavar="STORE", help=STATE_HELP)
@click.option("--region", default=None, help="AWS region of the clusters' auto scaling groups (default: the stage's that "
              "declares the cluster, else the nodes' topology.kubernetes.io/region, else AWS_REGION)")
@click.option("--lease-ttl", type=LEASE_TTL, default=60.0, show_default=True,
              help="seconds a run's lease outlives its last renewal; a run that died is taken over after it")
@click.option("--max-waves", type=click.IntRange(min=1), default=None, metavar="N",
              help="start at most N waves per cluster, then stop (exit 0; a stage stops at that cluster) and let the "
              "next run go on: for a maintenance window")
@click.option("--dry-run", is_flag=True, help="read, resolve targets and plan; change nothing and take no lease")
@OUTPUT
@click.pass_context
def rotate_run(ctx: click.Context, policy_file: Path, context: str | None, kubeconfig: str | None, stage_name: str | None,
               state_spec: str | None, region: str | None, lease_ttl: float, max_waves: int | None, dry_run: bool,
               output: str) -> None:
    """Carry a rotation out: wave by wave, journalled, resumable, halted by health gates."""
    take_part()  # a job of the local region's: it holds the region's time while it works
    request = app.RunRequest(policy_file, context=context, stage=stage_name, kubeconfig=kubeconfig, state=state_spec,
                             region=region, lease_ttl=lease_ttl, max_waves=max_waves)
    rotation = app.prepare(platform(), request)
    rotation.options = replace(rotation.options, stop=_stop_on_signals())
    if dry_run:
        _print_dry_run(app.dry_run(rotation), output)
        return
    show, live = _progress_printer(output)
    try:
        if live is not None:
            live.start()
        result = app.rotate(rotation, show)
    finally:
        # Nothing is left to interrupt: a Ctrl-C from now on must not cut the report short or kill the exit (Python
        # gives a Python-level handler back to SIG_DFL when it finalizes; an ignored signal stays ignored).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if live is not None:
            live.stop()
    if output == "json":
        emit_json(result.to_dict())
    else:
        for outcome in result.outcomes:
            _print_outcome(outcome)
    sys.exit(result.exit_code)


def _stop_on_signals() -> Any:
    """The first Ctrl-C (or SIGTERM, as a CronJob's pod gets when it is stopped) asks every cluster to stop at its next
    safe point; a second raises KeyboardInterrupt, which a stage run's wait absorbs (its workers still hold leases)
    and a single cluster's run stops on at once."""
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        click.echo(f"platformctl: {signal.Signals(signum).name}: stopping every cluster at its next safe point", err=True)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return stop


def _print_dry_run(runs: list[app.DryRun], output: str) -> None:
    if output == "json":
        emit_json({"dry_run": True, "clusters": [r.to_dict() for r in runs]})
        return
    for r in runs:
        console().print(f"[bold]{r.cluster}[/]: would rotate onto {', '.join(f'{p}={i}' for p, i in sorted(r.targets.items())) or 'nothing'}"
                        f" (journal: {r.run}{', paused' if r.paused else ''})")
        _print_cluster_plan(r.plan)


@rotate.command("status")
@click.option("--context", default=None, help="one cluster (its kubeconfig context name)")
@click.option("--stage", "stage_name", type=click.Choice(STAGES), default=None, help="every cluster of a stage")
@click.option("--state", "state_spec", default=None, metavar="STORE", help=STATE_HELP)
@OUTPUT
@click.pass_context
def rotate_status(ctx: click.Context, context: str | None, stage_name: str | None, state_spec: str | None, output: str) -> None:
    """What the rotations of a cluster or stage are doing, from the state store (no cluster access needed)."""
    store, clusters = app.rotation_status(platform(), context, stage_name, state_spec)
    if output == "json":
        emit_json({"state": store.location, "clusters": clusters})
        return
    out = console()
    out.print(f"[dim]state: {store.location}[/]")
    for report in clusters:
        status = report["status"]
        lease = report.get("lease")
        who = f", running under {lease['holder']}" if lease and lease["live"] else ""
        paused = report.get("paused")
        out.print(f"[bold]{report['cluster']}[/]: {status}{who}" + (f"; paused by {paused['by']}" if paused else ""))
        if report.get("reason"):
            out.print(f"  {report['reason']}")
        if status != "never-run":
            done = sum(1 for w in report["waves"] if w["finished"])
            out.print(f"  {done} waves done, {report['nodes_rotated']} nodes rotated, {report['evictions']} evictions, "
                      f"{len(report['nodes_failed'])} failed, {len(report['nodes_blocked'])} blocked; "
                      f"{hms(report['duration_seconds'])} so far (estimate {hms(report['estimated_seconds'] or 0)})")


def _control(ctx: click.Context, action: str, context: str | None, stage_name: str | None, state_spec: str | None,
             reason: str) -> list[app.Controlled]:
    _, done = app.control_rotations(platform(), app.ControlRequest(ControlAction(action), context, stage_name, state_spec, reason))
    return done


def _control_options(fn: Any) -> Any:
    """What pause, resume and abort take: which clusters, the store, why, and the output."""
    for option in reversed([
        click.option("--context", default=None, help="one cluster (its kubeconfig context name)"),
        click.option("--stage", "stage_name", type=click.Choice(STAGES), default=None, help="every cluster of a stage"),
        click.option("--state", "state_spec", default=None, metavar="STORE", help=STATE_HELP),
        click.option("--reason", default="", help="why, for whoever reads `rotate status`"),
        OUTPUT,
    ]):
        fn = option(fn)
    return click.pass_context(fn)


@rotate.command("pause")
@_control_options
def rotate_pause(ctx: click.Context, context: str | None, stage_name: str | None, state_spec: str | None, reason: str,
                 output: str) -> None:
    """Pause rotations: a running one stops after its current wave (exit 4), later ones do not start."""
    done = _control(ctx, "pause", context, stage_name, state_spec, reason)
    if output == "json":
        emit_json({"paused": [d.to_dict() for d in done]})
    else:
        for d in done:
            console().print(f"{d.cluster}: paused (a running rotation stops after its current wave; "
                            "`platformctl rotate resume` lets rotations go on)")


@rotate.command("resume")
@_control_options
def rotate_resume(ctx: click.Context, context: str | None, stage_name: str | None, state_spec: str | None, reason: str,
                  output: str) -> None:
    """Lift a pause; the next `rotate run` (or the scheduled job) goes on where the rotation stopped."""
    done = _control(ctx, "resume", context, stage_name, state_spec, reason)
    if output == "json":
        emit_json({"resumed": [d.to_dict() for d in done]})
    else:
        for d in done:
            console().print(f"{d.cluster}: resumed; the next `platformctl rotate run` continues it")


@rotate.command("abort")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig, for when no run is alive and this command puts things back itself")
@click.option("--no-wait", is_flag=True, help="do not wait for a dead run's lease to lapse: say when and by what its "
              "nodes will be put back (exit 1 while any is held)")
@_control_options
def rotate_abort(ctx: click.Context, kubeconfig: str | None, no_wait: bool, context: str | None, stage_name: str | None,
                 state_spec: str | None, reason: str, output: str) -> None:
    """End a rotation: the running one stops at its next step and puts back what it holds (uncordon,
    untaint); a dead one's lease is waited out and this command puts them back itself, after settling
    what the dead run left unconfirmed. Exit 0 only when nothing is left held."""
    take_part()  # a job of the local region's: it holds the region's time while it works
    say = None if output == "json" else (lambda text: console().print(text))
    request = app.ControlRequest(ControlAction.ABORT, context, stage_name, state_spec, reason)
    results = app.abort_rotations(platform(), request, kubeconfig, wait=not no_wait, say=say)
    if output == "json":
        emit_json({"aborted": [r.to_dict() for r in results]})
    else:
        for r in results:
            console().print(f"{r.outcome.cluster}: {r.outcome.result}")
    sys.exit(0 if all(r.outcome.done for r in results) else 1)
