"""The ``platformctl`` command. The only module that imports every part of the toolkit.

A user's mistake (``PlatformError``) is printed on one line naming the file and the field, and the
command exits 2 having changed nothing. Every command takes ``--output json`` for machines.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from platformctl import __version__
from platformctl.app.platform import Platform
from platformctl.cli.context import platform
from platformctl.cli.output import OUTPUT, SKIP
from platformctl.cli.output import console as _console
from platformctl.cli.output import emit_json as _emit_json
from platformctl.kernel import failpoints
from platformctl.kernel.environment import Environment, using
from platformctl.kernel.errors import ApiUnreachable, PlatformError, Unavailable
from platformctl.kernel.topology import STAGES, HostCluster

# The subcommands whose modules are imported only when used, as click's documentation does it ("lazily loading
# subcommands"): every scheduled job and test starts a process, and `rotate run` has no need of scipy or plotly.
_LAZY = {
    "ami": "platformctl.cli.ami:ami", "canary": "platformctl.cli.canary:canary",
    "dashboard": "platformctl.cli.dashboard:dashboard", "local": "platformctl.cli.local:local",
    "release": "platformctl.cli.release:release", "remediate": "platformctl.cli.remediate:remediate",
    "rotate": "platformctl.cli.rotate:rotate",
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *(_LAZY if self.name == "cli" else ())})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if self.name == "cli" and cmd_name in _LAZY and cmd_name not in self.commands:
            import importlib

            module, attr = _LAZY[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PlatformError as exc:
            click.echo(f"platformctl: error: {exc}", err=True)
            ctx.exit(2)
        except Unavailable as exc:  # an API's or a store's fault, not the user's: one line, exit 1
            click.echo(f"platformctl: error: {exc}", err=True)
            # but an address in the user's kubeconfig where nothing ever answered is most likely the file's mistake
            ctx.exit(2 if isinstance(exc, ApiUnreachable) and exc.no_connection else 1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="platformctl")
@click.option("--infra-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="folder of the Pulumi stack files (default: infra/ of the checkout the current directory is in)")
@click.pass_context
def cli(ctx: click.Context, infra_dir: Path | None) -> None:
    """Run the lifecycle of a Kubernetes compute platform on AWS."""
    # The process environment, read once here into the platform every application call is handed (`platform()`); the
    # failpoint a crash test names is armed here, and the environment installed for the adapters' defaults.
    environment = Environment.from_os()
    failpoints.arm(environment.failpoint)
    ctx.with_resource(using(environment))
    ctx.obj = Platform(environment, infra_dir)


# ---------------------------------------------------------------------------------------- stage


@cli.group()
def stage() -> None:
    """The release stages and their regions, as their stack files describe them."""


@stage.command("show")
@click.argument("name", type=click.Choice(STAGES), default="dev", metavar="STAGE")
@OUTPUT
@click.pass_context
def stage_show(ctx: click.Context, name: str, output: str) -> None:
    """Show a stage's region, clusters and node pools."""
    st = platform().stage(name)
    if output == "json":
        _emit_json({
            "stage": st.name, "region": st.region, "zones": list(st.zones), "source": st.source,
            "clusters": [
                {"name": c.name, "kind": "host" if isinstance(c, HostCluster) else "member", "zones": list(c.zones),
                 "node_pools": [p.model_dump(by_alias=True, mode="json") for p in c.node_pools]}
                for c in st.clusters()
            ],
        })
        return
    console = _console()
    console.print(f"[bold]{st.name}[/] in {st.region} ({', '.join(st.zones)}), from {st.source}")
    table = Table("cluster", "kind", "zones", "pool", "type", "image", "instances", "min/desired/max")
    for c in st.clusters():
        for i, p in enumerate(c.node_pools):
            table.add_row(c.name if i == 0 else "", ("host" if isinstance(c, HostCluster) else "member") if i == 0 else "",
                          ",".join(c.zones) if i == 0 else "", p.name, p.node_type, st.image_for(p) or "-",
                          ",".join(p.instance_types), f"{p.min_size}/{p.desired_size}/{p.max_size}")
    console.print(table)


@stage.command("deploy")
@click.option("--stage", "stage_name", type=click.Choice(STAGES), required=True)
@click.option("--lock-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the AMI lock file whose newest images the stage's unpinned pools boot (default: the running local "
                   "region's own, else the stack's platformctl:imageLock)")
@OUTPUT
@click.pass_context
def stage_deploy(ctx: click.Context, stage_name: str, lock_file: Path | None, output: str) -> None:
    """Run the stage's Pulumi program again: new launch template versions, no node moved. A stage the release pipeline
    has deployed gets what it promoted there (a template changed since is put back); another lock file is refused
    (exit 2): images reach a pipeline stage through `release start`. Any other stage: the lock file's images."""
    from platformctl.app.deploy import deploy_by_hand

    result, promoted = deploy_by_hand(platform(), stage_name, lock_file)
    if output == "json":
        _emit_json({**result.to_dict(), "promoted": promoted.to_dict() if promoted is not None else None})
        return
    out = _console()
    data = result.to_dict()
    what = (f"the images the release pipeline promoted there (candidate {promoted.candidate})" if promoted is not None
            else str(result.lock_file))
    out.print(f"[bold]{stage_name}[/] deployed to {result.target} with {what}: "
              + ", ".join(f"{n} {a}" for a, n in sorted(data["summary"].items())))
    for change in data["changes"]:
        out.print(f"  {change['action']:<11} {change['type']} {change['name']}  {change['detail']}")
    table = Table("node pool", "boots")
    for key, image in sorted(result.images.items()):
        table.add_row(key, image)
    out.print(table)
    out.print("Nodes move onto new images only when rotated: `platformctl rotate run --stage " + stage_name + " --policy …`")


@stage.command("cancel")
@click.option("--stage", "stage_name", type=click.Choice(STAGES), required=True)
@click.option("--yes", is_flag=True, help="do not ask first")
@click.pass_context
def stage_cancel(ctx: click.Context, stage_name: str, yes: bool) -> None:
    """Clear the stage's stack lock, as `pulumi cancel` does: for a lock whose holder is gone (a deploy killed before it
    gave it back). A release tick clears one itself only when a tick took it and it is older than an hour."""
    from platformctl.app.deploy import cancel_stack_lock

    if not yes:
        click.confirm(f"Clear {stage_name}'s stack lock? An update still running would go on beside the next one", abort=True)
    cancel_stack_lock(platform(), stage_name)
    click.echo(f"{stage_name}: its stack lock is cleared")


# ---------------------------------------------------------------------------------------- snapshot


@cli.group()
def snapshot() -> None:
    """Cluster snapshots in the format of `kubectl get nodes,pods,pdb -A -o json`."""


@snapshot.command("inspect")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@OUTPUT
def snapshot_inspect(file: Path, output: str) -> None:
    """Summarise a snapshot: nodes by pool and image, pods, and budgets as the disruption controller sees them."""
    from platformctl.emulator.simulator import SimulatedCluster
    from platformctl.kernel.cluster.model import load_snapshot

    snap = load_snapshot(file)
    sim = SimulatedCluster.from_snapshot(snap, name=file.stem)
    pdbs = sim.list_pdbs()
    pools = Counter((n.pool or "-", n.image or "-") for n in snap.nodes)
    blocking = [b for b in pdbs if b.status.disruptions_allowed == 0]
    data: dict[str, Any] = {
        "file": str(file),
        "nodes": len(snap.nodes),
        "nodes_ready": sum(n.ready for n in snap.nodes),
        "nodes_cordoned": sum(n.unschedulable for n in snap.nodes),
        "pools": [{"pool": p, "image": i, "nodes": c} for (p, i), c in sorted(pools.items())],
        "pods": len(snap.pods),
        "pods_by_phase": dict(Counter(p.phase for p in snap.pods)),
        "pods_by_owner": dict(Counter(p.owner_kind or "none" for p in snap.pods)),
        "pdbs": len(pdbs),
        "pdbs_blocking": [
            {"namespace": b.namespace, "name": b.name, "current_healthy": b.status.current_healthy,
             "desired_healthy": b.status.desired_healthy, "expected_pods": b.status.expected_pods,
             **({"reason": b.status.sync_failed} if b.status.sync_failed else {})}
            for b in blocking
        ],
    }
    if output == "json":
        _emit_json(data)
        return
    console = _console()
    console.print(f"[bold]{file}[/]: {data['nodes']} nodes ({data['nodes_ready']} Ready, {data['nodes_cordoned']} cordoned), "
                  f"{data['pods']} pods, {data['pdbs']} PodDisruptionBudgets")
    table = Table("pool", "image", "nodes")
    for row in data["pools"]:
        table.add_row(row["pool"], row["image"], str(row["nodes"]))
    console.print(table)
    console.print("pods by phase: " + ", ".join(f"{k} {v}" for k, v in sorted(data["pods_by_phase"].items())))
    console.print("pods by owner: " + ", ".join(f"{k} {v}" for k, v in sorted(data["pods_by_owner"].items())))
    if blocking:
        table = Table("namespace", "budget", "healthy", "desired", "expected", title="Budgets that allow no disruption now")
        for b in blocking[:50]:
            table.add_row(b.namespace, b.name, str(b.status.current_healthy), str(b.status.desired_healthy), str(b.status.expected_pods))
        console.print(table)
        if len(blocking) > 50:
            console.print(f"… and {len(blocking) - 50} more (--output json lists them all)")


@snapshot.command("generate")
@click.option("--nodes", type=click.IntRange(4, 20000), default=100, show_default=True)
@click.option("--pods-per-node", type=click.FloatRange(1, 200), default=40.0, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--blocking-pdbs", type=click.IntRange(0, 10000), default=0, show_default=True,
              help="add this many single-replica services whose budget never allows a disruption")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True)
@OUTPUT
def snapshot_generate(nodes: int, pods_per_node: float, seed: int, blocking_pdbs: int, out: Path, output: str) -> None:
    """Write a synthetic cluster's snapshot: services with budgets, stateful sets, jobs, GPU training, daemons."""
    from platformctl.cli.output import writable_file
    from platformctl.emulator.synthetic import synthetic_cluster
    from platformctl.kernel.cluster.model import save_snapshot

    writable_file(out, "--out")
    sim, summary = synthetic_cluster(nodes, seed=seed, pods_per_node=pods_per_node, blocking_pdbs=blocking_pdbs)
    save_snapshot(sim.snapshot(), out)
    made = summary.as_dict()
    data = {"file": str(out), "nodes": len(sim.list_nodes()), "pods": len(sim.list_pods()), "pdbs": made["pdbs"],
            "workloads": made["workloads"], "pods_by_workload": made["pods"], "namespaces": made["namespaces"]}
    if output == "json":
        _emit_json(data)
    else:
        _console().print(f"wrote {out}: {data['nodes']} nodes, {data['pods']} pods, {data['pdbs']} PodDisruptionBudgets")


# ---------------------------------------------------------------------------------------- demo


@cli.command("demo-pipeline")
@click.option("--keep", is_flag=True, help="leave the region running at the end (its folder is printed)")
@SKIP
@OUTPUT
@click.pass_context
def demo_pipeline(ctx: click.Context, keep: bool, skip: bool, output: str) -> None:
    """Tell the release pipeline's story on the local region of every stage: a good candidate through all four
    stages, then a broken one halted and rolled back in dev (the region a process; the story's commands and the
    release CronJob's ticks called as the commands call them)."""
    from platformctl.app.demo.narration import Narrator, Silent
    from platformctl.app.demo.pipeline import run_story
    from platformctl.cli.dashboard import export
    from platformctl.cli.demo import RichNarrator
    from platformctl.kernel.checkout import root

    infra = platform().infra_dir
    manifests = root("--manifests") / "ami" / "manifests"
    quiet = output == "json"
    narrator: Narrator = Silent() if quiet else RichNarrator(_console())
    report = run_story(infra, manifests, narrator, keep=keep, export=export, skip=skip)
    if quiet:
        _emit_json(report.to_dict())
    if not report.ok:
        sys.exit(1)


@cli.command()
@click.option("--stage", "stage_name", type=click.Choice(STAGES), default="dev", show_default=True)
@click.option("--minutes", type=click.IntRange(5, 24 * 60), default=60, show_default=True, help="virtual minutes to live through")
@click.option("--save-snapshots", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="write each cluster's final snapshot here")
@OUTPUT
@click.pass_context
def demo(ctx: click.Context, stage_name: str, minutes: int, save_snapshots: Path | None, output: str) -> None:
    """Tell a short story of a stage on the embedded local region."""
    from platformctl.app.demo.narration import Narrator, Silent
    from platformctl.app.demo.stage import run_demo
    from platformctl.cli.demo import RichNarrator, print_ending
    from platformctl.cli.output import writable_folder

    st = platform().stage(stage_name)
    if save_snapshots is not None:
        writable_folder(save_snapshots, "--save-snapshots")
    quiet = output == "json"
    narrator: Narrator = Silent() if quiet else RichNarrator(_console())
    try:
        report = run_demo(st, minutes, narrator, save_dir=save_snapshots)
    finally:
        if isinstance(narrator, RichNarrator):
            narrator.close()
    if quiet:
        _emit_json(report.as_dict())
    else:
        print_ending(report, _console())
    if not report.ok:
        sys.exit(1)


def main() -> None:
    """The command, with every mistake on one line: click's own usage errors too (an unknown stage names the
    stages, a missing option names the option), not its four-line usage block."""
    try:
        code = cli.main(prog_name="platformctl", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path.removeprefix("platformctl").strip() if exc.ctx else ""
        message = exc.format_message().replace("\n", " ")
        click.echo(f"platformctl: error: {where + ': ' if where else ''}{message}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"platformctl: error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("platformctl: aborted", err=True)
        sys.exit(130)
    except RecursionError:
        # An input nested thousands deep that a loader did not catch: the user's file, not a crash.
        from platformctl.kernel.errors import TOO_DEEP

        click.echo(f"platformctl: error: an input is {TOO_DEEP}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
