"""``platformctl canary``: the canaries' definitions and their judge (the runner and verdicts follow)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from platformctl.cli.output import OUTPUT, console, emit_json

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
