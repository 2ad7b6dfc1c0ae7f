"""``platformctl local up|status|down``: the local region as a background server.

``up`` starts (detached) a server holding one stage's local region, or several stages' (``--stage all``,
or ``--stage`` repeated), each in its own AWS region of one moto: moto's AWS endpoint and a Kubernetes
API per simulated cluster, with a kubeconfig, all on 127.0.0.1, and each cluster's canary runner pod run as a
process. It is idempotent: while a region runs, ``up`` reports it instead of starting another. Other
commands use the running region whenever no live target is given.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.table import Table

from platformctl.cli.context import platform
from platformctl.cli.output import OUTPUT, SKIP, console, emit_json
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import STAGES


def _print_status(info: dict[str, Any], headline: str) -> None:
    from platformctl.kernel.region_client import for_stage, stages_of

    out = console()
    held = [for_stage(info, s) or info for s in stages_of(info)]
    where = ", ".join(f"{h['stage']} ({h['region']})" for h in held)
    out.print(f"[bold]{headline}[/]: stage{'s' if len(held) > 1 else ''} {where}, pid {info['pid']}, "
              f"virtual time {info['virtual_time']} at {info['speed']:g}× wall time"
              f"{', skipping what nobody waits through' if info.get('skip', False) else ''}")
    clock = info.get("clock") or {}
    if clock.get("jumps"):
        out.print(f"  clock          skipped {clock['skipped_seconds']:.0f} s in {clock['jumps']} jumps; "
                  f"{len(clock.get('clients') or [])} registered client(s)")
    if clock.get("held_seconds"):
        silent = clock.get("silent_holds")
        out.print(f"  clock          held {clock['held_seconds']:.0f} s back for clients at work"
                  + (f"; {silent} hold(s) outlasted {clock['hold_seconds']:g} s of silence" if silent else ""))
    out.print(f"  AWS endpoint   {info['aws_endpoint']}   (commands here use it; elsewhere: export AWS_ENDPOINT_URL={info['aws_endpoint']})")
    out.print(f"  kubeconfig     {info['kubeconfig']}   (kubectl --kubeconfig {info['kubeconfig']} get nodes)")
    for h in held:
        out.print(f"  {h['stage']:<14} state {h['state']}")
    for name, server in (info.get("real_control_planes") or {}).items():
        out.print(f"  real control plane {server}: context {name} (its nodes are {name}'s instances; the table below is "
                  "the simulated copy the region's own jobs use)")
    runners = info.get("canary_runners") or []
    if runners:
        alive = sum(r["running"] for r in runners)
        restarts = sum(r.get("restarts", 0) for r in runners)
        out.print(f"  canary runners {alive} of {len(runners)} running, one a cluster"
                  + (f", {restarts} restart(s)" if restarts else "")
                  + " (kubectl logs -n platformctl-canary deploy/platformctl-canary-runner --context <cluster>)")
    elif "canaries" in info:
        out.print("  canary runners none (--no-canaries)")
    table = Table("stage", "cluster (context)", "server", "nodes", "ready", "pods")
    for c in info["clusters"]:
        table.add_row(c.get("stage", info["stage"]), c["name"], c["server"], str(c["nodes"]), str(c["nodes_ready"]),
                      str(c["pods"]))
    out.print(table)


@click.group()
def local() -> None:
    """The local region as a running place: AWS (moto) and Kubernetes APIs on 127.0.0.1."""


@local.command("up")
@click.option("--stage", "stage_names", type=click.Choice((*STAGES, "all")), multiple=True, default=("dev",),
              show_default=True, help="the stage the region holds; repeat it, or say all, for several (each in its own "
              "AWS region of one moto, on one virtual clock)")
@click.option("--speed", type=click.FloatRange(min=1.0, max=100_000.0), default=300.0, show_default=True,
              help="virtual seconds per wall second while anyone works (300: a 300 s node boot takes a second)")
@SKIP
@click.option("--workloads/--no-workloads", default=True, show_default=True,
              help="fill the member clusters with synthetic services, stateful sets, jobs and budgets")
@click.option("--pods-per-node", type=click.FloatRange(min=1.0, max=110.0), default=30.0, show_default=True,
              help="how densely --workloads fills the member clusters (a 3,000-node cluster at 40: 120,000 pods)")
@click.option("--canaries/--no-canaries", default=True, show_default=True,
              help="run the canary runner Deployment the Pulumi program puts in each cluster: its pod as a process")
@click.option("--run-jobs", is_flag=True, help="run the pods of the toolkit's own Jobs (its image's: the scheduled "
              "rotation, remediation, the release tick) as processes, which a drain's eviction sends SIGTERM")
@click.option("--control-plane", type=click.Choice(["emulated", "real"]), default="emulated", show_default=True,
              help="real: serve each --cluster with a real Kubernetes control plane (etcd, kube-apiserver, controller "
              "manager, scheduler; kwok for the kubelets), built by `make real-k8s`, whose nodes are the cluster's instances")
@click.option("--cluster", "real_clusters", multiple=True, metavar="NAME",
              help="a cluster --control-plane real serves (repeatable)")
@click.option("--owner-pid", type=click.IntRange(min=1), default=None, envvar="PLATFORMCTL_LOCAL_OWNER",
              help="stop the region (and every process it runs) once this process has ended: a CI job's or a test "
              "session's, so that a job killed before its `local down` leaves nothing running")
@OUTPUT
@click.pass_context
def local_up(ctx: click.Context, stage_names: tuple[str, ...], speed: float, skip: bool, workloads: bool,
             pods_per_node: float, canaries: bool, run_jobs: bool, control_plane: str, real_clusters: tuple[str, ...],
             owner_pid: int | None, output: str) -> None:
    """Start the local region of a stage, or of several, in the background (or report the one running)."""
    from platformctl.kernel import region_client as control

    stages = list(STAGES) if "all" in stage_names else [s for s in STAGES if s in stage_names]  # in the pipeline's order
    names: set[str] = set()
    for name in stages:
        # a broken stack file fails here, in one line, not in the server log
        names |= {c.name for c in platform().stage(name).clusters()}
    if owner_pid is not None and not control.process_alive(owner_pid):  # else the region would start, then stop at once
        raise PlatformError(f"no process {owner_pid} runs here to own the region", field="--owner-pid")
    if (control_plane == "real") != bool(real_clusters):
        raise PlatformError("--control-plane real and --cluster NAME go together", field="--cluster")
    unknown = sorted(set(real_clusters) - names)
    if unknown:
        raise PlatformError(f"no cluster {', '.join(unknown)} in {', '.join(stages)} (one of {', '.join(sorted(names))})",
                            field="--cluster")
    if real_clusters:
        from platformctl.emulator.realk8s import binaries

        binaries()  # built here (once per machine, minutes), before the region starts and waits for it
    info, started = control.up(platform().environment, stages, speed, platform().infra_dir_given, workloads, canaries, skip=skip, run_jobs=run_jobs,
                               pods_per_node=pods_per_node, real_clusters=tuple(dict.fromkeys(real_clusters)),
                               owner_pid=owner_pid)
    if output == "json":
        emit_json({**info, "started": started})
        return
    _print_status(info, "started" if started else "already running")


@local.command("status")
@OUTPUT
def local_status(output: str) -> None:
    """Endpoints, clusters and virtual time of the running local region (exit 1 when none runs)."""
    from platformctl.kernel import region_client as control

    info = control.running(platform().home)
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
    from platformctl.kernel import region_client as control

    info = control.down(platform().home)
    if output == "json":
        emit_json({"stopped": info is not None, **({"pid": info["pid"], "stage": info["stage"],
                                                    "stages": control.stages_of(info)} if info else {})})
    elif info is None:
        console().print("no local region was running")
    else:
        console().print(f"stopped the local region of {', '.join(control.stages_of(info))} (pid {info['pid']})")



# ---------------------------------------------------------------------------------------- faults

def _show_faults(answer: dict[str, Any], output: str, headline: str) -> None:
    if output == "json":
        emit_json(answer)
        return
    out = console()
    out.print(headline)
    for f in answer.get("faults", []):
        what = ", ".join(f"{k} {v}" for k, v in f.items() if k not in ("kind", "since"))
        out.print(f"  {f['kind']}: {what}")


def _inject(body: dict[str, Any], output: str, headline: str) -> None:
    from platformctl.kernel import region_client as control

    _show_faults(control.faults(platform().home, "POST", body), output, headline)


@local.group("fault")
def local_fault() -> None:
    """Break the running local region as production breaks: it shows through the Kubernetes API and AWS exactly
    as a real node's or instance's fault would (conditions, taints, events, pods marked not Ready)."""


@local_fault.command("node-notready")
@click.argument("node")
@click.option("--status", type=click.Choice(["Unknown", "False"]), default="Unknown", show_default=True,
              help="Unknown: the kubelet stops posting status (hung instance, lost network); False: it posts NotReady "
              "(container runtime down)")
@OUTPUT
def fault_node_notready(node: str, status: str, output: str) -> None:
    """NODE stops being Ready: tainted, its pods marked not Ready, and after 300 s deleted by the taint manager."""
    _inject({"kind": "node-notready", "node": node, "status": status}, output, f"{node}: kubelet fault (Ready {status})")


@local_fault.command("node-condition")
@click.argument("node")
@click.argument("type_", metavar="TYPE")
@click.option("--status", type=click.Choice(["True", "False", "Unknown"]), default="True", show_default=True)
@click.option("--reason", default="", help="the condition's reason (default: TYPE + Detected)")
@click.option("--message", default="", help="the condition's message")
@OUTPUT
def fault_node_condition(node: str, type_: str, status: str, reason: str, message: str, output: str) -> None:
    """NODE reports condition TYPE (DiskPressure, MemoryPressure, PIDPressure, NetworkUnavailable, or a
    node-problem-detector's such as KernelDeadlock)."""
    _inject({"kind": "node-condition", "node": node, "type": type_, "status": status, "reason": reason,
             "message": message}, output, f"{node}: {type_}={status}")


@local_fault.command("instance-no-join")
@click.argument("pool")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="how many of the pool's next instances never join")
@OUTPUT
def fault_instance_no_join(pool: str, count: int, output: str) -> None:
    """POOL's next instances boot and never register a node (a failed bootstrap). POOL is CLUSTER/POOL, the auto
    scaling group's name, or a pool name only one cluster has."""
    _inject({"kind": "instance-no-join", "pool": pool, "count": count}, output,
            f"{pool}: the next {count} instance(s) will not join")


@local_fault.command("bad-image")
@click.argument("image", metavar="AMI")
@OUTPUT
def fault_bad_image(image: str, output: str) -> None:
    """Containers on nodes booted from AMI never start (CreateContainerError), as with a broken container runtime."""
    _inject({"kind": "bad-image", "image": image}, output, f"{image}: containers will not start")


@local_fault.command("slow-start")
@click.argument("image", metavar="AMI")
@click.argument("seconds", type=click.FloatRange(min=0))
@OUTPUT
def fault_slow_start(image: str, seconds: float, output: str) -> None:
    """Containers on nodes booted from AMI start SECONDS late (a slow image pull, a slow runtime)."""
    _inject({"kind": "slow-start", "image": image, "seconds": seconds}, output, f"{image}: containers start {seconds:g} s late")


@local_fault.command("api-errors")
@click.argument("cluster")
@click.argument("rate", metavar="RATE")
@click.option("--verbs", type=click.Choice(["create", "all"]), default="create", show_default=True,
              help="which requests fail: creates only, or every request but a watch (reads, patches, deletes, evictions)")
@click.option("--for", "lasting", default=None, metavar="DURATION",
              help="end by itself this long of the region's time after its first 503 (2m, 90s): an outage "
                   "(default: until cleared)")
@OUTPUT
def fault_api_errors(cluster: str, rate: str, verbs: str, lasting: str | None, output: str) -> None:
    """CLUSTER's API server answers creates (--verbs all: every request) 503 at RATE (0.2 or 20%); with --for, for
    that long (100% --verbs all --for 2m: a two-minute outage, as a control plane being scaled or upgraded)."""
    _inject({"kind": "api-errors", "cluster": cluster, "rate": rate, "verbs": verbs, "for": lasting}, output,
            f"{cluster}: {'creates' if verbs == 'create' else 'every request'} answered 503 at {rate}"
            + (f" for {lasting}" if lasting else ""))


@local_fault.command("clear")
@OUTPUT
def fault_clear(output: str) -> None:
    """End every fault: nodes recover, instances that never joined register."""
    from platformctl.kernel import region_client as control

    answer = control.faults(platform().home, "DELETE")
    if output == "json":
        emit_json(answer)
    else:
        console().print(f"cleared {len(answer.get('cleared', []))} fault(s)")


@local_fault.command("list")
@OUTPUT
def fault_list(output: str) -> None:
    """The faults in force."""
    from platformctl.kernel import region_client as control

    answer = control.faults(platform().home, "GET")
    _show_faults(answer, output, f"{len(answer.get('faults', []))} fault(s) in force")
