"""``platformctl demo``: a short story of one stage on the embedded local region.

It reads the stage from its stack file, provisions the local region (moto and one simulated
cluster per cluster of the stage), fills the member clusters with workloads, and lives through an
hour of virtual time: batch jobs come and go, an instance fails and its auto scaling group replaces
it, and an operator drains a node through the eviction API while the budgets pace it. Then a new
image reaches every node the way it does in production: a manifest change, ``ami build``,
``stage deploy`` (new launch template versions), and ``rotate run --stage`` (the executor, wave by
wave under the budgets) with the canary health gate: before each wave the cluster's canaries run (a
node-pool canary: pods pinned to each pool and image, so the new image is measured beside the old)
and their verdict decides whether the next wave starts. It ends with what happened, the canaries'
verdicts, and the invariants checked on the event log.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from infra.materialize import materialize
from platformctl.emulator import simulator as sim_events
from platformctl.emulator.invariants import deleted_without_eviction, eviction_budget_violations, lost_pods
from platformctl.emulator.local_region import LocalRegion
from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.drain import drain
from platformctl.kernel.cluster.model import (
    ANNOTATION_RUN_SECONDS,
    ANNOTATION_START_SECONDS,
    LABEL_NODE_TYPE,
    Container,
    Pod,
    Resources,
    format_time,
    save_snapshot,
)
from platformctl.kernel.topology import HostCluster, Stage

if TYPE_CHECKING:
    from e2e_canary.verdict import Verdict
    from platformctl.kernel.state import StateStore
    from upgrade_service.running.gate import CanaryVerdict, Question


@dataclass
class DemoReport:
    stage: str
    region: str
    virtual_start: float = 0.0
    virtual_end: float = 0.0
    wall_seconds: float = 0.0
    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    story: list[str] = field(default_factory=list)
    evictions: int = 0
    evictions_refused: int = 0
    budget_violations: list[str] = field(default_factory=list)
    pods_lost_with_node: int = 0
    nodes_replaced: int = 0
    snapshots: list[str] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)  # image name -> the AMI the demo built
    rotation: dict[str, Any] = field(default_factory=dict)  # the new images' build, deploy and rotation

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "region": self.region,
            "images": self.images,
            "virtual_start": format_time(self.virtual_start),
            "virtual_end": format_time(self.virtual_end),
            "virtual_minutes": round((self.virtual_end - self.virtual_start) / 60, 1),
            "wall_seconds": round(self.wall_seconds, 2),
            "clusters": self.clusters,
            "story": self.story,
            "evictions": self.evictions,
            "evictions_refused": self.evictions_refused,
            "budget_violations": self.budget_violations,
            "pods_lost_with_node": self.pods_lost_with_node,
            "nodes_replaced": self.nodes_replaced,
            "snapshots": self.snapshots,
            "rotation": self.rotation,
        }


def _batch_job(namespace: str, name: str, cpu: int, minutes: int) -> Pod:
    requests = Resources(cpu, 512 * 1024**2)
    return Pod(
        namespace=namespace, name=name, uid="",
        labels={"job-name": name, "team": "reports"},
        annotations={ANNOTATION_START_SECONDS: "15", ANNOTATION_RUN_SECONDS: str(minutes * 60)},
        containers=(Container("report", "registry.example.com/report:4.2", requests),),
        requests=requests, priority=-100, priority_class_name="preemptible", grace_seconds=10,
        node_selector={LABEL_NODE_TYPE: "general"},
    )


def _replace_node(region: LocalRegion, target: SimulatedCluster, group: str, report: DemoReport) -> str:
    """What an operator does to replace a node by hand: surge the group by one, wait for the new
    node, drain the old one through the eviction API, and terminate it with its capacity."""
    asg = region.autoscaling()
    began = region.clock.now()
    selector = f"eks.amazonaws.com/nodegroup={region.pools[group].pool.name}"
    old = max(target.list_nodes(selector), key=lambda n: (len(target.list_pods(node_name=n.name)), n.name))
    desired = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]["DesiredCapacity"]
    asg.set_desired_capacity(AutoScalingGroupName=group, DesiredCapacity=desired + 1)
    while region.clock.now() - began < 1800:
        nodes = target.list_nodes(selector)
        if len(nodes) > desired and all(n.ready for n in nodes):
            break
        region.advance(region.sync_seconds)
    result = drain(target, [old.name], poll_seconds=5, timeout_seconds=1800)
    asg.terminate_instance_in_auto_scaling_group(InstanceId=old.instance_id, ShouldDecrementDesiredCapacity=True)
    region.advance(region.sync_seconds)
    report.nodes_replaced += 1
    outcome = "done" if result.complete else "timed out"
    report.story.append(
        f"{format_time(began)} operator replaced {old.name}: surged {group} by one, drained the old node "
        f"({result.evictions} pods evicted, {sum(result.refusals.values())} evictions refused by budgets and retried, "
        f"{outcome} in {result.seconds:.0f} s) and terminated its instance")
    return old.name


def _bump_patch(path: Path) -> str:
    text = path.read_text()
    line = next(line for line in text.splitlines() if line.startswith("version:"))
    major, minor, patch = line.split(":", 1)[1].strip().split(".")
    version = f"{major}.{minor}.{int(patch) + 1}"
    path.write_text(text.replace(line, f"version: {version}", 1))
    return version


def _rotation_chapter(region: LocalRegion, stage: Stage, lock: Path, say: Any, console: Console, quiet: bool) -> dict[str, Any]:
    """A new image, the way it reaches nodes: a manifest change, `ami build`, `stage deploy`, `rotate run --stage`."""
    from ami.build import ImageStore, build_images, plan_builds, write_lock
    from ami.manifest import default_manifest_dir, load_manifests
    from infra.deploy import LocalDeployer
    from platformctl.kernel.nodegroups.aws import AutoScalingNodeGroups
    from platformctl.kernel.state.sqlite import SQLiteStore
    from upgrade_service.planning.order import ClusterPlace, cluster_steps
    from upgrade_service.planning.policy import parse_policy
    from upgrade_service.running.run_types import Options, Target
    from upgrade_service.running.runs import run_stage

    folder = lock.parent
    manifests_dir = folder / "manifests"
    shutil.copytree(default_manifest_dir(), manifests_dir, dirs_exist_ok=True)
    version = _bump_patch(manifests_dir / "general.yaml")
    manifests = load_manifests(manifests_dir)
    store = ImageStore(stage.region)
    plan = plan_builds(manifests, store)
    built = build_images(manifests, plan, store, workers=2)
    write_lock(lock, manifests, store, built.ids)
    rebuilt = [s.name for s in plan.build]
    say(f"\n[bold]A new image[/]: an operator bumps general to {version} in ami/manifests/general.yaml. `ami build` "
        f"rebuilds {' and '.join(rebuilt)} (what inherits from general) and records them in the lock file.")

    checkpoint = folder / "stack.json"
    checkpoint.write_text(json.dumps({"stage": stage.name, "resources": region.checkpoint}))
    deployed = LocalDeployer(checkpoint, "the local region").deploy(stage, lock)
    updates = [c for c in deployed.changes if c.action == "update"]
    say(f"`stage deploy` runs the Pulumi program again: {len(updates)} launch templates get a new version booting the "
        f"new images ({sum(1 for c in deployed.changes if c.action == 'unchanged')} resources unchanged); no node moves yet.")

    boot = {p.name: p.boot_seconds for c in stage.clusters() for p in c.node_pools}
    policy = parse_policy({"maxInFlight": 3, "durations": {"nodeBootSeconds": boot, "podStartSeconds": 20},
                           "healthGate": {"canary": {"window": "30m"}}}, "demo policy")
    state = SQLiteStore(folder / "state.db")
    gate, asked = _canary_gate(region, stage, state)
    places = [ClusterPlace(c.name, None if isinstance(c, HostCluster) else c.zones[0]) for c in stage.clusters()]
    steps, _ = cluster_steps(places, policy.host_cluster)
    groups = AutoScalingNodeGroups(stage.region)
    began = {name: len(sim.events) for name, sim in region.clusters.items()}
    start = region.clock.now()
    say("`rotate run --stage dev` (no targets in its policy: each pool follows what its launch template boots now), "
        "one zone at a time, the host cluster last:")
    outcomes = run_stage([[Target(n, region.cluster(n), groups) for n in step] for step in steps], policy,
                         state, Options(stage=stage.name, canary=gate), "demo")
    clusters: dict[str, dict[str, Any]] = {}
    table = Table("cluster", "waves", "nodes rotated", "estimate", "actual", "of which gate", "evictions", "refused",
                  "disrupted twice", "lowest headroom", title="Rotation onto the new images")
    for outcome in outcomes:
        r = outcome.report
        assert r is not None, outcome.reason  # every cluster's run read its journal: the demo holds every lease
        sim = region.cluster(outcome.cluster)
        events = sim.events[began[outcome.cluster]:]
        images = Counter(n.image for n in sim.list_nodes())
        clusters[outcome.cluster] = {
            "status": outcome.status, "waves": len(r["waves"]), "nodes_rotated": r["nodes_rotated"],
            "estimated_seconds": r["estimated_seconds"], "seconds": r["duration_seconds"], "gate_seconds": r["gate_seconds"],
            "evictions": r["evictions"],
            "refused_evictions": r["refused_evictions"], "pods_disrupted_more_than_once": r["pods_disrupted_more_than_once"],
            "lowest_budget_headroom": r["lowest_budget_headroom"], "images": dict(images),
            "budget_violations": eviction_budget_violations(sim.events), "pods_lost_with_node": lost_pods(events),
            "deleted_without_eviction": deleted_without_eviction(events),
            "cordoned": [n.name for n in sim.list_nodes() if n.unschedulable],
        }
        lowest = r["lowest_budget_headroom"]
        table.add_row(outcome.cluster, str(len(r["waves"])), str(r["nodes_rotated"]), f"{(r['estimated_seconds'] or 0) / 60:.0f} min",
                      f"{r['duration_seconds'] / 60:.0f} min", f"{r['gate_seconds'] / 60:.0f} min", str(r["evictions"]),
                      str(r["refused_evictions"]),
                      str(r["pods_disrupted_more_than_once"]), f"{lowest['headroom']} ({lowest['budget']})" if lowest else "-")
    say(table)
    harm = sum(len(c["budget_violations"]) + len(c["pods_lost_with_node"]) + len(c["deleted_without_eviction"])
               for c in clusters.values())
    on_new = all(set(c["images"]) <= set(deployed.images.values()) for c in clusters.values())
    verdict = "[green]no eviction broke a budget, no pod went down with its node, none was deleted without the eviction API[/]" \
        if harm == 0 else f"[red]{harm} harmful events[/]"
    say(f"Every node on its launch template's image: {'yes' if on_new else '[red]no[/]'}; nothing left cordoned: "
        f"{'yes' if not any(c['cordoned'] for c in clusters.values()) else '[red]no[/]'}. From the event log: {verdict}. "
        f"{(region.clock.now() - start) / 60:.0f} virtual minutes.")
    canaries = _canary_summary(asked, state, stage, region, deployed.images, say)
    return {"version": version, "rebuilt": rebuilt, "launch_templates_updated": len(updates), "images": deployed.images,
            "clusters": clusters, "all_on_new_images": on_new, "harm": harm, "canaries": canaries}


DEMO_CANARY = {"name": "node-pool", "kind": "node-pool", "podsPerArm": 10, "deadline": "2m"}


def _canary_gate(region: LocalRegion, stage: Stage, store: StateStore) -> tuple[CanaryVerdict, list[dict[str, Any]]]:
    """The rotation's canary gate, with the canaries run where the demo can: before each ask, the cluster's
    node-pool canary runs once (in production `canary run` runs beside the rotation, on every cluster)."""
    from e2e_canary.definitions import parse_canary
    from e2e_canary.runner import Runner
    from e2e_canary.verdict import canary_gate

    canary = parse_canary(DEMO_CANARY, "demo canary")
    runners = {c.name: Runner(stage.name, c.name, region.cluster(c.name), store) for c in stage.clusters()}
    judge = canary_gate(store, 1800.0)
    asked: list[dict[str, Any]] = []

    def gate(question: Question) -> Verdict:
        runners[question.cluster].run(canary)
        # The canary ran just now: judge the window that ends now, which holds what it measured.
        answer = judge(dataclasses.replace(question, now=region.clock.now()))
        asked.append({"cluster": question.cluster, "wave": question.wave, "verdict": answer.verdict,
                      "reason": answer.reason})
        return answer

    return gate, asked


def _canary_summary(asked: list[dict[str, Any]], store: Any, stage: Stage, region: LocalRegion, images: dict[str, str],
                    say: Any) -> dict[str, Any]:
    """What the canaries said: each cluster's gate answers, and the new images against the old over the run."""
    from e2e_canary.results import results
    from e2e_canary.verdict import judge_canaries

    table = Table("cluster", "gate asked", "pass", "inconclusive (waited)", "fail", "last answer", title="Canary gate")
    per_cluster: dict[str, Any] = {}
    for cluster in [c.name for c in stage.clusters()]:
        mine = [a for a in asked if a["cluster"] == cluster]
        counts = Counter(a["verdict"] for a in mine)
        per_cluster[cluster] = {"asked": len(mine), **{v: counts[v] for v in ("pass", "inconclusive", "fail")},
                                "last": mine[-1] if mine else None}
        table.add_row(cluster, str(len(mine)), str(counts["pass"]), str(counts["inconclusive"]), str(counts["fail"]),
                      (mine[-1]["reason"] if mine else "-"))
    say(table)
    rows = results(store, stage.name)
    new = set(images.values())
    verdict = judge_canaries([r for r in rows if r.image and r.image not in new], [r for r in rows if r.image in new])
    pods = (verdict.canaries or {}).get("node-pool")
    startup = pods.judged.metrics.get("pod_startup_seconds") if pods is not None else None
    colour = {"pass": "green", "fail": "red"}.get(verdict.verdict, "yellow")
    say(f"Canary verdict, the new images' pods against the old ones' ({len(rows)} results): [{colour}]{verdict.verdict}[/] — "
        f"{verdict.reason}" + (f"; pod startup median {startup.experiment['median']:.2f} s against "
                               f"{startup.baseline['median']:.2f} s" if startup is not None and startup.experiment.get("n")
                               else ""))
    return {"gate": per_cluster, "results": len(rows), "verdict": verdict.verdict, "reason": verdict.reason}


def run_demo(stage: Stage, minutes: int, console: Console, quiet: bool, save_dir: Path | None = None) -> DemoReport:
    wall = time.perf_counter()
    report = DemoReport(stage.name, stage.region)
    say = (lambda *a, **k: None) if quiet else console.print

    say(f"[bold]Stage {stage.name}[/] in {stage.region}, read from {stage.source}")
    table = Table("cluster", "kind", "zones", "node pools")
    for cluster in stage.clusters():
        pools = ", ".join(f"{p.name} {p.desired_size}×{p.instance_type}" for p in cluster.node_pools)
        kind = "host" if isinstance(cluster, HostCluster) else "member"
        table.add_row(cluster.name, kind, ",".join(cluster.zones), pools)
    say(table)

    lock = Path(tempfile.mkdtemp(prefix="platformctl-demo-")) / "images.lock.json"

    def build_image_tree(st: Stage) -> None:
        """Build the image tree in the local region's AWS, into the region's own lock file: the stage's
        unpinned pools boot the newest build the lock names, as `pulumi up` would."""
        from ami.build import ImageStore, build_images, plan_builds, write_lock
        from ami.manifest import load_manifests

        manifests = load_manifests()
        store = ImageStore(st.region)
        built = build_images(manifests, plan_builds(manifests, store), store, workers=2)
        write_lock(lock, manifests, store, built.ids)
        report.images = {n: built.ids[n] for n in manifests.order()}
        say(f"\n[bold]Images[/]: built {', '.join(f'{n} {built.ids[n]}' for n in manifests.order())} from ami/manifests, "
            "parents first, and published them under /platformctl/ami/.")

    with LocalRegion(stage, provisioner=functools.partial(materialize, image_lock=lock), prepare=build_image_tree) as region:
        report.virtual_start = region.clock.now()
        say(f"\n[bold]Local region[/]: AWS is moto. Ran {stage.name}'s Pulumi program (infra/) under Pulumi's mock "
            f"engine, creating what it declares: VPC {region.vpc_id}, {len(region.subnets)} private subnets, "
            f"{len(region.outputs.get('clusters', {}))} EKS control planes, {len(region.pools)} launch templates "
            f"(IMDSv2, encrypted root volume) and auto scaling groups, and {len(region.kubernetes)} Kubernetes objects.")
        region.wait_until_ready()
        nodes = sum(len(s.list_nodes()) for s in region.clusters.values())
        say(f"{nodes} instances joined their clusters as nodes and turned Ready "
            f"after {(region.clock.now() - report.virtual_start) / 60:.0f} virtual minutes of boot.")

        summaries = region.populate_workloads()
        region.advance(120)
        table = Table("cluster", "nodes", "workloads", "pods", "PDBs", title="Workloads")
        for name, summary in summaries.items():
            sim = region.cluster(name)
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(summary.workloads.items()))
            table.add_row(name, str(len(sim.list_nodes())), kinds, str(len(sim.list_pods())), str(summary.pdbs))
        say(table)

        _live_through(region, stage, minutes, report, console, quiet)
        report.rotation = _rotation_chapter(region, stage, lock, say, console, quiet)
        report.virtual_end = region.clock.now()
        _tally(region, report, save_dir)
    report.wall_seconds = time.perf_counter() - wall

    if not quiet:
        _print_ending(report, console)
    return report


def _live_through(region: LocalRegion, stage: Stage, minutes: int, report: DemoReport, console: Console, quiet: bool) -> None:
    """The stage's hour: batch jobs come and go, an instance fails, an operator drains a node."""
    member = next(c for c in stage.member_clusters)
    target = region.cluster(member.name)
    general = f"{member.name}-general"
    seconds = minutes * 60
    start = region.clock.now()
    failure_at = start + seconds * 0.15
    drain_at = start + seconds * 0.35
    failed_instance: str | None = None
    replaced_node: str | None = None
    jobs = 0
    step = 60.0

    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} min"),
                        TimeElapsedColumn(), console=console, disable=quiet, transient=False)
    with progress:
        task = progress.add_task(f"{minutes} minutes of {stage.name}", total=minutes)
        while region.clock.now() < start + seconds:
            now = region.clock.now()
            if int((now - start) // 60) % 15 == 0:
                jobs += 1
                target.create_workload("Job", _batch_job("reports", f"nightly-report-{jobs}", 250, 8), 4,
                                       completions=8, ttl_seconds=300)
            if failed_instance is None and now >= failure_at:
                node = min(target.list_nodes("eks.amazonaws.com/nodegroup=general"), key=lambda n: n.name)
                failed_instance = node.instance_id
                region.autoscaling().terminate_instance_in_auto_scaling_group(
                    InstanceId=failed_instance, ShouldDecrementDesiredCapacity=False)
                report.story.append(
                    f"{format_time(now)} instance {failed_instance} ({node.name}) of {general} failed; "
                    f"its auto scaling group launched a replacement")
                report.nodes_replaced += 1
            if replaced_node is None and now >= drain_at:
                replaced_node = _replace_node(region, target, general, report)
            region.advance(step)
            progress.update(task, completed=min((region.clock.now() - start) / 60, minutes))


def _tally(region: LocalRegion, report: DemoReport, save_dir: Path | None) -> None:
    """What each cluster's event log says happened, and its snapshot when asked for."""
    for name, sim in region.clusters.items():
        happened = Counter(e.kind for e in sim.events)
        pods = sim.list_pods()
        report.clusters[name] = {
            "nodes": len(sim.list_nodes()),
            "nodes_ready": sum(n.ready for n in sim.list_nodes()),
            "pods": len(pods),
            "pods_running": sum(p.phase == "Running" for p in pods),
            "pods_pending": len(sim.pending_pods()),
            "pods_started": happened[sim_events.POD_READY],
            "pods_succeeded": happened[sim_events.POD_SUCCEEDED],
            "pdbs": len(sim.list_pdbs()),
        }
        report.evictions += happened[sim_events.POD_EVICTED]
        report.evictions_refused += happened[sim_events.EVICTION_REFUSED]
        report.budget_violations += eviction_budget_violations(sim.events)
        report.pods_lost_with_node += len(lost_pods(sim.events))
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            saved = save_dir / f"{name}.json"
            save_snapshot(sim.snapshot(), saved)
            report.snapshots.append(str(saved))


def _print_ending(report: DemoReport, console: Console) -> None:
    console.print()
    for line in report.story:
        console.print(f"• {line}")
    table = Table("cluster", "nodes (Ready)", "pods running", "pending", "pods started", "pods completed", title="At the end")
    for name, c in report.clusters.items():
        table.add_row(name, f"{c['nodes']} ({c['nodes_ready']})", str(c["pods_running"]), str(c["pods_pending"]),
                      str(c["pods_started"]), str(c["pods_succeeded"]))
    console.print(table)
    virtual = (report.virtual_end - report.virtual_start) / 60
    console.print(f"{virtual:.0f} virtual minutes in {report.wall_seconds:.1f} s of wall time. "
                  f"{report.evictions} evictions, {report.evictions_refused} refused with 429 and retried.")
    verdict = "[green]no eviction broke a PodDisruptionBudget[/]" if not report.budget_violations else \
        f"[red]{len(report.budget_violations)} evictions broke a PodDisruptionBudget[/]"
    console.print(f"Invariants from the event log: {verdict}; {report.pods_lost_with_node} pods went down with the failed instance "
                  f"and were recreated by their controllers.")
    for path in report.snapshots:
        console.print(f"Snapshot (kubectl get nodes,pods,pdb -A -o json format): {path}")
