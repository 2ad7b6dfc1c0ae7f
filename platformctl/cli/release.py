"""``platformctl release``: candidates, where they are, what was decided and why, freezes and approvals."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from platformctl.app import release as app
from platformctl.cli.context import platform
from platformctl.cli.output import LEASE_TTL, OUTPUT, console, emit_json
from platformctl.kernel.cluster.model import format_time
from platformctl.kernel.region_client import take_part
from platformctl.kernel.topology import STAGES

PIPELINE = click.option("--pipeline", "pipeline_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                        help="the pipeline file (default: release_pipeline/pipeline.yaml of this checkout)")
LEDGER = click.option("--ledger", default=None, metavar="STORE",
                      help="the ledger's store (default: the pipeline file's ledger, else .platformctl/release.db)")


@click.group()
def release() -> None:
    """The release pipeline: candidates carried dev -> staging -> prod-canary -> prod, each stage gated by its canaries."""


@release.command("start")
@click.option("--lock-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the AMI lock file (default: the one the stage's stack file names)")
@click.option("--note", default="", help="what the change is, for people")
@PIPELINE
@LEDGER
@OUTPUT
@click.pass_context
def release_start(ctx: click.Context, lock_file: Path | None, note: str, pipeline_file: Path | None, ledger: str | None,
                  output: str) -> None:
    """Record the lock file's images for every stage as one immutable candidate (the same content is the same one)."""
    started = app.start_candidate(platform(), app.StartRequest(pipeline_file, lock_file, note, ledger))
    record = {**started.candidate.to_record(), "new": started.new, "ledger": started.ledger}
    if output == "json":
        emit_json(record)
        return
    said = "recorded" if started.new else "already recorded (the same content is the same candidate)"
    console().print(f"candidate [bold]{started.candidate.id}[/] {said} in {started.ledger}")
    for name, stage in started.candidate.stages.items():
        images = ", ".join(f"{family} {i['version']} {i['id']}" for family, i in stage.images.items())
        console().print(f"  {name} ({stage.region}): {images}")


EXIT_DRIFT = 4  # `release status`: a stage launches what the pipeline did not put there


@release.command("status")
@PIPELINE
@LEDGER
@OUTPUT
def release_status(pipeline_file: Path | None, ledger: str | None, output: str) -> None:
    """Per stage: the candidate in flight, the last good one, the step and what it waits for. Exit 0; 4 when a stage
    has drifted (a pool's launch template boots another image than the pipeline says the stage runs, or with settings
    its deploys did not make: the last tick's reading, named pool by pool); 2 bad input."""
    status = app.pipeline_status(platform(), app.LedgerRequest(pipeline_file, ledger))
    drifted = [(name, d) for name, s in status.stages.items() for d in s.drift]
    if output == "json":
        emit_json(status.to_dict())
        sys.exit(EXIT_DRIFT if drifted else 0)
    table = Table("stage", "current", "last good", "step", "waiting for")
    for name, s in status.stages.items():
        waits = s.waiting_for or ""
        if s.opens_at:
            waits += f" (can open {format_time(s.opens_at)})"
        if s.rollback and s.rollback.failures:
            waits = (f"[red]rollback to {s.rollback.to or 'what it ran before'} failed {s.rollback.failures} time(s)[/]: "
                     "the stage stays closed; the next tick tries again (docs/release.md: a failed rollback)")
        if s.error:
            error = s.error.error or {}
            waits += f" [red]error at {format_time(s.error.at)}: {error.get('type')}: {error.get('message')}[/]"
        table.add_row(name, s.current or "-", s.last_good or "-", s.step, waits)
    console().print(table)
    if status.candidates:
        booted = Table("candidate", "status", "stage", "instances that booted its images", "of which first light",
                       "by stage (first light + waves)", title="Candidates")
        for cid, c in status.candidates.items():
            b = c.boots
            stages = ", ".join(f"{n} {b.first_light_by_stage[n]}+{b.in_waves_by_stage[n]}"
                               for n, count in b.by_stage.items() if count)
            counted = b.total is not None  # a finished one no stage runs: not counted again
            booted.add_row(cid, c.status, c.stage or "-", str(b.total) if counted else "-",
                           str(b.first_light) if counted else "-", stages or "-")
        console().print(booted)
    for f in status.freezes:
        until = format_time(f.until) if f.until else "unfrozen by hand"
        console().print(f"[yellow]frozen[/] {'every stage' if f.stage == '*' else f.stage}: {f.reason} "
                        f"(by {f.by}, until {until})")
    if status.refused:
        console().print(f"[red]not admitted[/]: {len(status.refused)} entries a stage's tick wrote that only people or "
                        f"another stage decide (`release history` shows them): {', '.join(status.refused)}")
    if drifted:
        table = Table("stage", "cluster", "pool", "launches", "should launch", "settings the pipeline did not deploy",
                      title="[red]Drift[/]: no step there until put back")
        for name, d in drifted:
            found = d.found or "nothing"
            table.add_row(name, d.cluster, d.pool, found if found == d.expected else f"[red]{found}[/]", d.expected,
                          f"[red]{', '.join(d.settings)}[/]" if d.settings else "-")
        console().print(table)
        sys.exit(EXIT_DRIFT)


def _print_entries(entries: list[dict[str, Any]]) -> None:
    table = Table("id", "at", "stage", "candidate", "decision", "reason", "by")
    for e in entries:
        table.add_row(e["id"], format_time(e["at"]), e["stage"] or "-", e["candidate"] or "-", e["decision"], e["reason"],
                      e.get("by", ""))
    console().print(table)


@release.command("history")
@click.option("--stage", type=click.Choice(STAGES), default=None, help="only this stage's entries")
@PIPELINE
@LEDGER
@OUTPUT
def release_history(stage: str | None, pipeline_file: Path | None, ledger: str | None, output: str) -> None:
    """Every step and decision, oldest first, with who, when, why and its inputs (never pruned)."""
    entries = app.pipeline_history(platform(), app.LedgerRequest(pipeline_file, ledger, stage))
    if output == "json":
        emit_json(entries)
    else:
        _print_entries(entries)


@release.command("replay")
@click.argument("decision_id", metavar="DECISION")
@PIPELINE
@LEDGER
@OUTPUT
def release_replay(decision_id: str, pipeline_file: Path | None, ledger: str | None, output: str) -> None:
    """Take a stored decision again from its stored inputs with today's code: exit 0 the same, 1 different."""
    result = app.replay_decision(platform(), app.LedgerRequest(pipeline_file, ledger), decision_id)
    if output == "json":
        emit_json(result)
    else:
        mark = "[green]the same[/]" if result["same"] else "[red]different[/]"
        console().print(f"{decision_id}: {mark}: stored {result['stored']['decision']} ({result['stored']['reason']}); "
                        f"today {result['replayed']['decision']} ({result['replayed']['reason']})")
    sys.exit(0 if result["same"] else 1)


def _scope(all_stages: bool, stage: str | None) -> str | None:
    if all_stages == (stage is not None):
        raise click.UsageError("give exactly one of --all or --stage S")
    return stage


@release.command("freeze")
@click.option("--all", "all_stages", is_flag=True, help="every stage")
@click.option("--stage", type=click.Choice(STAGES), default=None)
@click.option("--reason", required=True, help="why, for the ledger and the people waiting")
@click.option("--until", default=None, help="a duration from now (4h) or a time with its offset (2026-12-24T18:00+01:00)")
@PIPELINE
@LEDGER
@OUTPUT
def release_freeze(all_stages: bool, stage: str | None, reason: str, until: str | None, pipeline_file: Path | None,
                   ledger: str | None, output: str) -> None:
    """Stop candidates entering a stage (or every stage) until unfrozen or --until."""
    request = app.FreezeRequest(_scope(all_stages, stage), reason, until, pipeline_file, ledger)
    entry = app.freeze(platform(), request)
    if output == "json":
        emit_json(entry.to_dict())
    else:
        _print_entries([entry.to_dict()])
    for line in app.tell_stages(platform(), request):  # the stages' scheduled rotations read it there
        click.echo(f"warning: {line}", err=True)


@release.command("unfreeze")
@click.option("--all", "all_stages", is_flag=True, help="every stage")
@click.option("--stage", type=click.Choice(STAGES), default=None)
@click.option("--reason", default="", help="why, for the ledger")
@PIPELINE
@LEDGER
@OUTPUT
def release_unfreeze(all_stages: bool, stage: str | None, reason: str, pipeline_file: Path | None, ledger: str | None,
                     output: str) -> None:
    """Lift the freezes set by hand on a stage (or on every stage); the pipeline file's windows stay."""
    request = app.FreezeRequest(_scope(all_stages, stage), reason, None, pipeline_file, ledger)
    entry = app.unfreeze(platform(), request)
    if output == "json":
        emit_json(entry.to_dict())
    else:
        _print_entries([entry.to_dict()])
    for line in app.tell_stages(platform(), request):  # the stages' scheduled rotations read it there
        click.echo(f"warning: {line}", err=True)


@release.command("approve")
@click.argument("candidate")
@click.option("--stage", type=click.Choice(STAGES), required=True)
@click.option("--reason", default="", help="why, for the ledger")
@click.option("--override-freeze", "override_freeze", default=None, metavar="REASON",
              help="let the candidate enter during a freeze, for this reason (recorded with who and when)")
@PIPELINE
@LEDGER
@OUTPUT
def release_approve(candidate: str, stage: str, reason: str, override_freeze: str | None, pipeline_file: Path | None,
                    ledger: str | None, output: str) -> None:
    """Approve a candidate waiting to enter a stage (recorded with who and when); with --override-freeze, let it enter
    during a freeze."""
    approved = app.approve(platform(), app.ApproveRequest(candidate, stage, reason, pipeline_file, ledger, override_freeze))
    if output == "json":
        emit_json(approved.to_dict())
    else:
        _print_entries([e.to_dict() for e in (approved.approval, approved.override) if e is not None])


@release.command("promote")
@click.argument("candidate")
@click.option("--stage", type=click.Choice(STAGES), required=True)
@click.option("--reason", required=True, help="why, for the ledger and the people waiting")
@PIPELINE
@LEDGER
@OUTPUT
@click.pass_context
def release_promote(ctx: click.Context, candidate: str, stage: str, reason: str, pipeline_file: Path | None,
                    ledger: str | None, output: str) -> None:
    """Send a candidate to a stage by hand, even one older than the stage ran or superseded (recorded with who and why):
    it enters next, under the stage's freezes and approvals. A stage otherwise only moves forward."""
    entry = app.promote(platform(), app.PromoteRequest(candidate, stage, reason, pipeline_file, ledger))
    if output == "json":
        emit_json(entry.to_dict())
    else:
        _print_entries([entry.to_dict()])


@release.command("rollback")
@click.option("--stage", type=click.Choice(STAGES), required=True)
@click.option("--reason", required=True, help="why, for the ledger and the people waiting")
@PIPELINE
@LEDGER
@OUTPUT
@click.pass_context
def release_rollback(ctx: click.Context, stage: str, reason: str, pipeline_file: Path | None, ledger: str | None,
                     output: str) -> None:
    """Halt the stage's candidate and roll the stage back to the last good one as one unit (the next tick deploys and
    rotates back): the candidate in flight there, else the last one that passed it."""
    entry = app.rollback(platform(), app.RollbackRequest(stage, reason, pipeline_file, ledger))
    if output == "json":
        emit_json(entry.to_dict())
    else:
        _print_entries([entry.to_dict()])


@release.command("tick")
@click.option("--lease-ttl", type=LEASE_TTL, default=60.0, show_default=True, help="seconds the tick's lease lasts unrenewed")
@click.option("--stage", "stages", type=click.Choice(STAGES), multiple=True,
              help="act in this stage only (repeatable; default: every stage): each stage's CronJob acts in its region")
@click.option("--kubeconfig", default=None, help="the clusters' contexts (default: the local region's, or $KUBECONFIG)")
@PIPELINE
@LEDGER
@OUTPUT
@click.pass_context
def release_tick(ctx: click.Context, lease_ttl: float, stages: tuple[str, ...], kubeconfig: str | None,
                 pipeline_file: Path | None, ledger: str | None, output: str) -> None:
    """Advance every candidate at most one step (deploy, rotate, soak, gate, promote or halt and roll back); safe to run
    every minute. Each stage acts under its own lease, and a stage whose step fails is recorded and passed over. Exit 0
    done (a stage whose API or region did not answer is busy, tried again next tick, for up to 15 minutes), 1 a
    stage's step failed (named), 2 bad input, 3 another tick holds every stage this one would act in, or this one lost
    a stage's lease mid-step."""
    take_part()  # a job of the local region's: it holds the region's time while it works
    from platformctl.kernel.state import LeaseLost

    quiet = output == "json"
    try:
        ticked = app.release_tick(platform(), app.TickRequest(pipeline_file, ledger, lease_ttl, stages, kubeconfig),
                                  say=(lambda m: None) if quiet else (lambda m: console().print(m)))
    except app.EveryStageHeld as held:
        click.echo(str(held.detail), err=True)
        sys.exit(3)
    except LeaseLost as lost:
        click.echo(f"lost a stage's lease mid-tick, stopped before its next write: {str(lost).splitlines()[0]}", err=True)
        sys.exit(3)
    if quiet:
        emit_json(ticked.to_dict())
    else:
        report = ticked.report
        for waiting in report.waiting:
            console().print(f"waiting: {waiting}")
        for name in report.held:
            console().print(f"held: {name}: another tick holds its lease ({ticked.holders.get(name)})")
        if not report.steps and not report.waiting and not report.errors:
            console().print("nothing to do")
    for error in ticked.report.errors:
        said = f"stage {error.stage}: {error.error['type']}: {error.error['message']}"
        if error.stage not in ticked.failing:  # a transient fault, not yet for long: busy, tried again next tick
            said = f"busy: {said} (transient for {time.time() - error.since:.0f} s: tried again next tick)"
        click.echo(said, err=True)
    sys.exit(1 if ticked.failing else 0)
