"""``platformctl canary``: the canaries' definitions and their judge (the runner and verdicts follow)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from platformctl.cli.output import LEASE_TTL, OUTPUT, console, emit_json
from platformctl.topology import STAGES

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


from platformctl.cli.rotate import STATE_HELP  # noqa: E402

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
    import random

    from e2e_canary.definitions import default_canary_dir, load_canaries
    from platformctl.errors import PlatformError
    from platformctl.humanize import parse_duration

    try:
        keep = float(parse_duration(retention))
    except ValueError as exc:
        raise PlatformError(str(exc), field="--retention") from None
    if not keep > 0:
        raise PlatformError("must be longer than 0", field="--retention")
    from e2e_canary.runner import Runner, stream_of
    from platformctl.cli.stores import store_for
    from platformctl.cluster.live import LiveCluster
    from platformctl.errors import PlatformError
    from platformctl.region_client import default_kubeconfig
    from platformctl.state import LeaseHeld
    from platformctl.state.lease import LeaseKeeper, holder_id
    from platformctl.topology import load_stage

    stage = load_stage(stage_name, ctx.obj["infra_dir"])
    names = [c.name for c in stage.clusters()]
    if only is not None and only not in names:
        raise PlatformError(f"no cluster {only!r} in stage {stage_name} (clusters: {', '.join(names)})", field="--cluster")
    canaries = load_canaries(folder or default_canary_dir())
    from e2e_canary.metrics import CanaryMetrics, check_address, serve
    from e2e_canary.verdict import judge_canaries

    serving = metrics_port != 0 and not once
    if serving:
        check_address(metrics_address, metrics_port)
    store = store_for(state_spec, stage=stage_name, infra_dir=ctx.obj["infra_dir"])
    config = default_kubeconfig(kubeconfig)
    clusters = {n: LiveCluster.from_kubeconfig(config, n) for n in ([only] if only else names)}
    quiet = output == "json"
    say = (lambda m: None) if quiet else click.echo
    holder = holder_id()
    keepers = []
    import signal

    def stop(signum: int, frame: Any) -> None:  # a Deployment's pod is stopped with SIGTERM: clean up as on ^C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    report: dict[str, Any] = {"stage": stage_name, "clusters": []}
    code = 0
    try:
        runners = {}
        for name, cluster in clusters.items():
            keeper = LeaseKeeper(store, stream_of(stage_name, name), holder, lease_ttl)
            try:
                keeper.acquire()
            except LeaseHeld as held:
                report["clusters"].append({"cluster": name, "lease_held_by": held.lease.holder})
                code = 3
                continue
            keepers.append(keeper)
            runners[name] = Runner(stage_name, name, cluster, store, progress=say, retention=keep)
        entries: dict[str, dict[str, Any]] = {name: {"cluster": name, "reaped": runner.reap(), "canaries": []}
                                              for name, runner in runners.items()}
        due = {(n, c.name): 0.0 for n in runners for c in canaries}
        metrics = CanaryMetrics(stage_name)
        for name, runner in runners.items():
            for c in canaries:
                metrics.watch(name, c.name, runner.clock)
        recent: dict[str, list[dict[str, Any]]] = {name: [] for name in runners}
        if serving and runners:
            serve(metrics, metrics_address, metrics_port)
            say(f"metrics on http://{metrics_address}:{metrics_port}/metrics")
        while runners:
            for name, runner in runners.items():
                for c in canaries:
                    if runner.clock.now() < due[(name, c.name)]:
                        continue
                    for keeper in keepers:
                        keeper.check()
                    attempt = runner.run(c)
                    metrics.observe(name, c.name, attempt.results)
                    recent[name] = _recent(recent[name] + attempt.results, runner.clock.now())
                    metrics.set_verdict(name, judge_canaries([r for r in recent[name] if r["at"] < runner.clock.now() - VERDICT_WINDOW],
                                                             [r for r in recent[name] if r["at"] >= runner.clock.now() - VERDICT_WINDOW])["verdict"])
                    due[(name, c.name)] = runner.clock.now() + c.interval + random.uniform(0, c.jitter)
                    if once:  # a runner that runs for months keeps its results in the store, not in memory
                        entries[name]["canaries"].append({"canary": c.name, "namespace": attempt.namespace,
                                                          "outcomes": dict(attempt.outcomes), "skipped": attempt.skipped,
                                                          "results": attempt.results})
                    if attempt.outcomes.get("fail") or attempt.outcomes.get("timeout"):
                        code = max(code, 1) if code != 3 else code
                    if not quiet:
                        _print_attempt(name, attempt)
            if once:
                break
            next(iter(runners.values())).clock.sleep(5.0)
        report["clusters"] += list(entries.values())
    except KeyboardInterrupt:
        pass
    finally:
        for keeper in keepers:
            keeper.release()
    if quiet:
        emit_json({**report, "exit_code": code})
    sys.exit(code)


VERDICT_WINDOW = 1800.0  # the metrics' verdict: the last 30 minutes against the 30 before


def _recent(rows: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    return [r for r in rows if float(r["at"]) >= now - 2 * VERDICT_WINDOW]


def _print_attempt(cluster: str, attempt: Any) -> None:
    out = console()
    if attempt.skipped:
        out.print(f"[dim]{cluster} {attempt.canary}: {attempt.skipped}[/]")
        return
    counts = ", ".join(f"{n} {k}" for k, n in sorted(attempt.outcomes.items())) or "no results"
    colour = "green" if set(attempt.outcomes) <= {"ok", "disrupted"} else "red"
    out.print(f"[bold]{cluster}[/] {attempt.canary}: [{colour}]{counts}[/]")
    for r in attempt.results:
        if r["outcome"] != "ok":
            out.print(f"  {r['outcome']} {r['pool']}/{r['image']}: {r['reason']}")


@canary.command("verdict", epilog=EXIT_CODES_HELP)
@click.option("--stage", "stage_name", type=click.Choice(STAGES), required=True, help="the stage whose results are judged")
@click.option("--window", default="30m", show_default=True, help="how far back results count (seconds, or 30m, 2h)")
@click.option("--baseline", default=None, metavar="ARM",
              help="an image (ami-…): each other image's results (node-pool and daemon canaries) are judged against "
              "its, canary by canary (default: this window against the one before)")
@click.option("--canary", "only", multiple=True, metavar="NAME", help="judge only this canary's results (repeatable)")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="the judge's thresholds (YAML)")
@click.option("--state", "state_spec", default=None, metavar="STORE", help=STATE_HELP)
@click.pass_context
def canary_verdict(ctx: click.Context, stage_name: str, window: str, baseline: str | None, only: tuple[str, ...],
                   config_file: Path | None, state_spec: str | None) -> None:
    """The stage's verdict from the canaries' stored results, as JSON."""
    import time

    from e2e_canary.judge import load_config
    from e2e_canary.runner import newest_at, results
    from e2e_canary.verdict import stage_verdict
    from platformctl.cli.stores import store_for
    from platformctl.errors import PlatformError
    from platformctl.humanize import parse_duration as seconds

    try:
        span = float(seconds(window))
    except ValueError as exc:
        raise PlatformError(str(exc), field="--window") from None
    if span <= 0:
        raise PlatformError("must be longer than 0", field="--window")
    config = load_config(config_file)
    store = store_for(state_spec, stage=stage_name, infra_dir=ctx.obj["infra_dir"])
    # The window ends now, or at the newest result when that is later (a local region's clock runs ahead of the wall).
    now = max(time.time(), newest_at(store, stage_name) or 0.0)
    # This window and the one before it (the default baseline): what is read is what is judged, not the history.
    rows = results(store, stage_name, since=now - (span if baseline else 2 * span), until=now)
    if only:
        unknown = sorted(set(only) - {r["canary"] for r in rows})
        if unknown:
            raise PlatformError(f"no result of canary {unknown[0]!r} in stage {stage_name}", field="--canary")
        rows = [r for r in rows if r["canary"] in only]
    verdict = stage_verdict(rows, now, span, baseline, config)
    emit_json({"stage": stage_name, "state": store.location, **verdict})
    sys.exit({"pass": EXIT_PASS, "fail": EXIT_FAIL}.get(verdict["verdict"], EXIT_INCONCLUSIVE))
