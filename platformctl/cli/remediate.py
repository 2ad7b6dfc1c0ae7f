"""``platformctl remediate``: replace broken nodes, rate-limited, behind a circuit breaker; and ``remediate status``."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.table import Table

from platformctl.app import remediation as app
from platformctl.cli.context import platform
from platformctl.cli.output import LEASE_TTL, OUTPUT, STATE_HELP, console, emit_json
from platformctl.kernel.cluster.model import format_time
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.region_client import take_part
from platformctl.kernel.topology import STAGES
from upgrade_service.remediation.remediate import Outcome

EXIT_CODES_HELP = ("exit 0 nothing to do or every broken node replaced, 1 circuit breaker open or a remediation failed, "
                   "2 bad input, 3 another run holds the lease")


def _print(outcome: Outcome) -> None:
    out = console()
    colour = {"ok": "green", "dry-run": "green"}.get(outcome.status, "red")
    out.print(f"[bold]{outcome.cluster}[/]: [{colour}]{outcome.status}[/] — {outcome.reason}")
    for r in outcome.remediated:
        mark = "[green]replaced[/]" if r["result"] == "replaced" else f"[yellow]{r['result']}[/]"
        out.print(f"  {mark} {r['subject']}: {r['detail']}")
    for d in outcome.decisions:
        if d["action"] == "skip":
            out.print(f"  [yellow]skipped[/] {d['subject']}: {d['why']} ({d['problem']['reason']})")
        elif outcome.status == "dry-run":
            out.print(f"  would remediate {d['subject']}: {d['why']}")
    for p in outcome.pending[:10]:
        out.print(f"  [dim]watching {p['subject']}: {p['reason']} (unhealthy from {format_time(p['due'])})[/]")
    if outcome.incident:
        for line in outcome.incident.get("scopes", []):
            out.print(f"  [red]breaker[/] {line}")


@click.group(invoke_without_command=True, epilog=EXIT_CODES_HELP)
@click.option("--policy", "policy_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the remediation policy (YAML)")
@click.option("--context", default=None, help="one cluster: this kubeconfig context")
@click.option("--stage", "stage_name", type=click.Choice(STAGES), default=None, help="every cluster of a stage")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig (default: $KUBECONFIG, else the running local region's, else ~/.kube/config)")
@click.option("--state", "state_spec", default=None, metavar="STORE", help=STATE_HELP)
@click.option("--region", default=None, help="AWS region of the clusters' auto scaling groups (default: the stage's that "
              "declares the cluster, else the nodes' topology.kubernetes.io/region, else AWS_REGION)")
@click.option("--once/--watch", default=True, show_default=True,
              help="one pass, or look again every intervalSeconds of the policy until interrupted")
@click.option("--lease-ttl", type=LEASE_TTL, default=60.0, show_default=True)
@click.option("--dry-run", is_flag=True, help="say what would be remediated and why; change nothing, write nothing")
@OUTPUT
@click.pass_context
def remediate(ctx: click.Context, policy_file: Path | None, context: str | None, stage_name: str | None,
              kubeconfig: str | None, state_spec: str | None, region: str | None, once: bool, lease_ttl: float,
              dry_run: bool, output: str) -> None:
    """Replace broken nodes (NotReady, under pressure, flagged, never joined) through the eviction API and
    their auto scaling groups, at most maxPerHour, and nothing while too many are broken at once."""
    take_part()  # a job of the local region's: it holds the region's time while it works
    if ctx.invoked_subcommand is not None:
        return
    if policy_file is None:
        raise PlatformError("missing option --policy FILE (the remediation policy)", field="remediate")
    remediation = app.prepare(platform(), app.RemediationRequest(policy_file, context=context, stage=stage_name, kubeconfig=kubeconfig,
                                                     state=state_spec, region=region, lease_ttl=lease_ttl,
                                                     dry_run=dry_run))
    quiet = output == "json"

    def say(message: str) -> None:
        if not quiet:
            click.echo(message)

    code = 0
    try:
        while True:
            done = app.remediate_pass(remediation, say)
            code = done.exit_code
            if output == "json":
                emit_json(done.to_dict())
            else:
                for outcome in done.outcomes:
                    _print(outcome)
            if once or dry_run:
                break
            remediation.sleep()
    except KeyboardInterrupt:
        pass
    sys.exit(code)


@remediate.command("status")
@click.option("--context", default=None, help="one cluster (its kubeconfig context name)")
@click.option("--stage", "stage_name", type=click.Choice(STAGES), default=None, help="every cluster of a stage")
@click.option("--state", "state_spec", default=None, metavar="STORE", help=STATE_HELP)
@click.option("--last", type=click.IntRange(min=1), default=10, show_default=True, help="how many decisions to show")
@OUTPUT
@click.pass_context
def remediate_status(ctx: click.Context, context: str | None, stage_name: str | None, state_spec: str | None, last: int,
                     output: str) -> None:
    """What remediation did and why, from the state store: the breaker, the hourly limit, the newest decisions."""
    store, clusters = app.remediation_status(platform(), context, stage_name, state_spec, last)
    if output == "json":
        emit_json({"state": store.location, "clusters": clusters})
        return
    out = console()
    out.print(f"[dim]state: {store.location}[/]")
    for c in clusters:
        colour = "red" if c["breaker"] == "open" else "green"
        out.print(f"[bold]{c['cluster']}[/]: breaker [{colour}]{c['breaker']}[/], {c['remediations_last_hour']} "
                  f"remediation(s) in the last hour, {len(c['in_progress'])} in progress")
        if c["incident"]:
            for line in c["incident"].get("scopes", []):
                out.print(f"  [red]{line}[/]")
            for u in c["incident"].get("unhealthy", [])[:20]:
                out.print(f"    {u['subject']}: {u['reason']}")
        if not c["recent"]:
            out.print("  no decisions recorded")
            continue
        table = Table("when", "decision", "node", "why")
        for r in c["recent"]:
            what = {"remediation-started": "remediating", "remediation-finished": r.get("result", "finished"),
                    "skipped": f"skipped ({r.get('code')})", "breaker-open": "breaker open",
                    "breaker-closed": "breaker closed"}.get(r["kind"], r["kind"])
            why = r.get("reason") or r.get("detail") or r.get("why") or "; ".join(r.get("scopes", []))
            table.add_row(format_time(float(r["at"])), what, r.get("subject") or "-", why)
        out.print(table)
