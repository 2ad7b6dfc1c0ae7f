"""``platformctl canary``: the canaries' definitions and their judge (the runner and verdicts follow)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from e2e_canary.runner import AttemptReport
from platformctl.app.canaries import CanaryRunRequest, VerdictRequest, judge_stage, prepare_canaries, run_canaries
from platformctl.cli.context import platform
from platformctl.cli.output import LEASE_TTL, OUTPUT, STATE_HELP, console, emit_json
from platformctl.kernel.region_client import take_part
from platformctl.kernel.topology import STAGES

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_INCONCLUSIVE = 0, 1, 2, 3
EXIT_CODES_HELP = "exit 0 pass, 1 fail, 2 bad input, 3 inconclusive"


@click.group()
def canary() -> None:
    """Canaries: workloads that act like a platform user, and the judge of what they measured."""


@canary.command("judge", epilog=EXIT_CODES_HELP)
@click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help='the baseline arm: {"samples": {"<metric>": [numbers…]}, "outcomes": {"ok": n, "fail": n, …}}')
@click.option("--experiment", "experiment_file", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="the experiment arm, in the same shape")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="thresholds per metric (YAML; default: the documented defaults)")
def canary_judge(baseline_file: Path, experiment_file: Path, config_file: Path | None) -> None:
    """Judge an experiment arm against a baseline: pass, fail (a regression both significant and material) or
    inconclusive (too little data; an empty arm is never a pass). Prints JSON."""
    from e2e_canary.judge import judge, load_arm, load_config

    config = load_config(config_file)
    baseline, experiment = load_arm(baseline_file), load_arm(experiment_file)
    verdict = judge(baseline, experiment, config)
    emit_json(verdict.to_dict())
    sys.exit({"pass": EXIT_PASS, "fail": EXIT_FAIL}.get(verdict.verdict, EXIT_INCONCLUSIVE))


@canary.command("list")
@click.option("--canaries", "folder", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="folder of canary definitions (default: e2e_canary/canaries of the checkout the current directory is in)")
@OUTPUT
def canary_list(folder: Path | None, output: str) -> None:
    """The canaries defined, checked: an unknown kind, a bad cron expression or a field of another kind is one line, exit 2."""
    from e2e_canary.definitions import default_canary_dir, load_canaries

    folder = folder or default_canary_dir()
    canaries = load_canaries(folder)
    if output == "json":
        emit_json({"canaries": [c.to_dict() for c in canaries]})
        return
    table = Table("canary", "kind", "every", "deadline", "namespace", "what it does", title=f"canaries in {folder}")
    for c in canaries:
        table.add_row(c.name, c.kind, f"{c.interval} s", f"{c.deadline} s", c.namespace, c.description)
    console().print(table)


RUN_EXIT_HELP = "exit 0 every check ok, 1 a check failed or timed out, 2 bad input, 3 another runner holds a cluster's lease"


@canary.command("run", epilog=RUN_EXIT_HELP)
@click.option("--stage", "stage_name", type=click.Choice(STAGES), required=True,
              help="the stage whose clusters the canaries run on")
@click.option("--cluster", "only", default=None, help="one cluster of the stage (its kubeconfig context name)")
@click.option("--once", is_flag=True, help="each canary once, then exit (else each on its interval until interrupted)")
@click.option("--canaries", "folder", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="folder of canary definitions (default: e2e_canary/canaries of the checkout)")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig (default: $KUBECONFIG, else the running local region's, else ~/.kube/config)")
@click.option("--state", "state_spec", default=None, metavar="STORE", help=STATE_HELP)
@click.option("--lease-ttl", type=LEASE_TTL, default=60.0, show_default=True)
@click.option("--retention", default="90d", show_default=True,
              help="how long results are kept (seconds, or 30d, 12h); journals and ledgers are kept for ever")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=9464, show_default=True,
              help="serve Prometheus metrics here while running (not with --once); 0: none")
@click.option("--metrics-address", default="127.0.0.1", show_default=True, help="the address the metrics are served on")
@OUTPUT
@click.pass_context
def canary_run(ctx: click.Context, stage_name: str, only: str | None, once: bool, folder: Path | None,
               kubeconfig: str | None, state_spec: str | None, lease_ttl: float, retention: str, metrics_port: int,
               metrics_address: str, output: str) -> None:
    """Run the canaries on a stage's clusters as a user would: reap what a crashed run left, then carry each out and
    record every pod's outcome and startup latency in the state store."""
    take_part()  # a job of the local region's: it holds the region's time while it works
    import signal

    run = prepare_canaries(platform(), CanaryRunRequest(stage_name, only, once, folder, kubeconfig, state_spec, lease_ttl,
                                                        retention, metrics_port, metrics_address))
    quiet = output == "json"

    def stop(signum: int, frame: Any) -> None:  # a Deployment's pod is stopped with SIGTERM: clean up as on ^C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    report = run_canaries(run, say=(lambda m: None) if quiet else click.echo,
                          on_attempt=(lambda cluster, attempt: None) if quiet else _print_attempt)
    if quiet:
        emit_json(report.to_dict())
    sys.exit(report.exit_code)


def _print_attempt(cluster: str, attempt: AttemptReport) -> None:
    out = console()
    if attempt.skipped:
        out.print(f"[dim]{cluster} {attempt.canary}: {attempt.skipped}[/]")
        return
    counts = ", ".join(f"{n} {k}" for k, n in sorted(attempt.outcomes.items())) or "no results"
    colour = "green" if set(attempt.outcomes) <= {"ok", "disrupted"} else "red"
    out.print(f"[bold]{cluster}[/] {attempt.canary}: [{colour}]{counts}[/]")
    for r in attempt.results:
        if not r.ok:
            out.print(f"  {r.outcome} {r.pool}/{r.image}: {r.reason}")


@canary.command("verdict", epilog=EXIT_CODES_HELP)
@click.option("--stage", "stage_name", type=click.Choice(STAGES), required=True, help="the stage whose results are judged")
@click.option("--window", default="30m", show_default=True,
              help="the shortest window judged (seconds, or 30m, 2h): each canary is judged over the whole number of "
              "these that holds its minimum evidence (up to 12), or its definition's evidenceWindow, against the same "
              "span before it (else against its objectives); the JSON says which window each canary used")
@click.option("--baseline", default=None, metavar="ARM",
              help="an image (ami-…): each other image's results in --window (node-pool and daemon canaries) are judged "
              "against its, canary by canary")
@click.option("--canary", "only", multiple=True, metavar="NAME", help="judge only this canary's results (repeatable)")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the judge's thresholds (YAML)")
@click.option("--state", "state_spec", default=None, metavar="STORE", help=STATE_HELP)
@click.pass_context
def canary_verdict(ctx: click.Context, stage_name: str, window: str, baseline: str | None, only: tuple[str, ...],
                   config_file: Path | None, state_spec: str | None) -> None:
    """The stage's verdict from the canaries' stored results, as JSON."""
    verdict = judge_stage(platform(), VerdictRequest(stage_name, window, baseline, only, config_file, state_spec))
    emit_json(verdict.to_dict())
    sys.exit({"pass": EXIT_PASS, "fail": EXIT_FAIL}.get(verdict.verdict, EXIT_INCONCLUSIVE))
