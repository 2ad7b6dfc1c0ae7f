"""The story of one stage on the embedded local region (``platformctl demo``).

It reads the stage from its stack file, provisions the local region (moto and one simulated cluster per cluster of the
stage), fills the member clusters with workloads, and lives through an hour of virtual time: batch jobs come and go,
an instance fails and its auto scaling group replaces it, and an operator drains a node through the eviction API while
the budgets pace it. Then a new image reaches every node the way it does in production, with the functions the
commands call: a manifest change, ``ami build`` (``app.images.build``), ``stage deploy`` (the deployer seam's local
implementation: new launch template versions), and ``rotate run --stage`` (``app.rotation.rotate``: the executor, wave
by wave under the budgets) with the canary health gate: before each wave the cluster's canaries run (a node-pool
canary: pods pinned to each pool and image, so the new image is measured beside the old) and their verdict decides
whether the next wave starts. It ends with what happened, the canaries' verdicts, and the invariants checked on the
event log.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ami.build import ImageStore
from ami.manifest import default_manifest_dir, load_manifests
from infra.materialize import materialize
from platformctl.app.demo.narration import Narrator, Tabular, bad, heading, judged
from platformctl.app.images import BuildRequest, build
from platformctl.app.rotation import Rotation, Scope, rotate
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
    from upgrade_service.running.gate import Question


@dataclass
class ClusterTally:
    """What a cluster's event log and objects say at the end."""

    nodes: int
    nodes_ready: int
    pods: int
    pods_running: int
    pods_pending: int
    pods_started: int
    pods_succeeded: int
    pdbs: int


@dataclass
class ClusterRotated:
    """One cluster's rotation onto the new images: the run's report and what the event log says of it."""

    status: str
    waves: int
    nodes_rotated: int
    estimated_seconds: float | None
    seconds: float
    gate_seconds: float
    evictions: int
    refused_evictions: int
    pods_disrupted_more_than_once: int
    lowest_budget_headroom: dict[str, object] | None
    images: dict[str, int]
    budget_violations: list[str]
    pods_lost_with_node: list[str]
    deleted_without_eviction: list[str]
    cordoned: list[str]

    @property
    def harm(self) -> int:
        return len(self.budget_violations) + len(self.pods_lost_with_node) + len(self.deleted_without_eviction)


@dataclass(frozen=True)
class GateAnswer:
    cluster: str
    wave: int
    verdict: str
    reason: str


@dataclass
class GateTally:
    asked: int
    passed: int
    inconclusive: int
    failed: int
    last: GateAnswer | None

    def to_dict(self) -> dict[str, object]:
        return {"asked": self.asked, "pass": self.passed, "inconclusive": self.inconclusive, "fail": self.failed,
                "last": dataclasses.asdict(self.last) if self.last else None}


@dataclass
class CanarySummary:
    gate: dict[str, GateTally]
    results: int
    verdict: str
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"gate": {c: t.to_dict() for c, t in self.gate.items()}, "results": self.results, "verdict": self.verdict,
                "reason": self.reason}


@dataclass
class RotationChapter:
    """The new images: the manifest's version, what ``ami build`` rebuilt, the deploy and each cluster's rotation."""

    version: str
    rebuilt: list[str]
    launch_templates_updated: int
    images: dict[str, str]
    clusters: dict[str, ClusterRotated]
    all_on_new_images: bool
    harm: int
    canaries: CanarySummary
    minutes: float

    def to_dict(self) -> dict[str, object]:
        return {"version": self.version, "rebuilt": self.rebuilt, "launch_templates_updated": self.launch_templates_updated,
                "images": self.images, "clusters": {n: dataclasses.asdict(c) for n, c in self.clusters.items()},
                "all_on_new_images": self.all_on_new_images, "harm": self.harm, "canaries": self.canaries.to_dict()}


@dataclass
class DemoReport:
    stage: str
    region: str
    virtual_start: float = 0.0
    virtual_end: float = 0.0
    wall_seconds: float = 0.0
    clusters: dict[str, ClusterTally] = field(default_factory=dict)
    story: list[str] = field(default_factory=list)
    evictions: int = 0
    evictions_refused: int = 0
    budget_violations: list[str] = field(default_factory=list)
    pods_lost_with_node: int = 0
    nodes_replaced: int = 0
    snapshots: list[str] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)  # image name -> the AMI the demo built
    rotation: RotationChapter | None = None  # the new images' build, deploy and rotation

    @property
    def ok(self) -> bool:
        """No budget broken, nothing harmed by the rotation, every node on its launch template's image."""
        return not self.budget_violations and self.rotation is not None and not self.rotation.harm \
            and self.rotation.all_on_new_images

    def as_dict(self) -> dict[str, object]:
        return {
            "stage": self.stage,
            "region": self.region,
            "images": self.images,
            "virtual_start": format_time(self.virtual_start),
            "virtual_end": format_time(self.virtual_end),
            "virtual_minutes": round((self.virtual_end - self.virtual_start) / 60, 1),
            "wall_seconds": round(self.wall_seconds, 2),
            "clusters": {n: dataclasses.asdict(c) for n, c in self.clusters.items()},
            "story": self.story,
            "evictions": self.evictions,
            "evictions_refused": self.evictions_refused,
            "budget_violations": self.budget_violations,
            "pods_lost_with_node": self.pods_lost_with_node,
            "nodes_replaced": self.nodes_replaced,
            "snapshots": self.snapshots,
            "rotation": self.rotation.to_dict() if self.rotation else {},
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


def _rotation_chapter(region: LocalRegion, stage: Stage, lock: Path, say: Narrator) -> RotationChapter:
    """A new image, the way it reaches nodes: a manifest change, `ami build`, `stage deploy`, `rotate run --stage`."""
    from infra.deploy import LocalDeployer
    from platformctl.app.nodegroups import node_groups
    from platformctl.kernel.state.sqlite import SQLiteStore
    from upgrade_service.planning.policy import parse_policy
    from upgrade_service.running.run_types import Options, Target

    folder = lock.parent
    manifests_dir = folder / "manifests"
    shutil.copytree(default_manifest_dir(), manifests_dir, dirs_exist_ok=True)
    version = _bump_patch(manifests_dir / "general.yaml")
    built = build(BuildRequest(ImageStore(stage.region), lock, manifests_dir, workers=2))
    rebuilt = [s.name for s in built.plan.build]
    say.say(heading("A new image"), f": an operator bumps general to {version} in ami/manifests/general.yaml. `ami build` "
            f"rebuilds {' and '.join(rebuilt)} (what inherits from general) and records them in the lock file.")

    checkpoint = folder / "stack.json"
    checkpoint.write_text(json.dumps({"stage": stage.name, "resources": region.checkpoint}))
    deployed = LocalDeployer(checkpoint, "the local region").deploy(stage, lock)
    updates = [c for c in deployed.changes if c.action == "update"]
    say.say(f"`stage deploy` runs the Pulumi program again: {len(updates)} launch templates get a new version booting "
            f"the new images ({sum(1 for c in deployed.changes if c.action == 'unchanged')} resources unchanged); no node "
            "moves yet.")

    boot = {p.name: p.boot_seconds for c in stage.clusters() for p in c.node_pools}
    policy = parse_policy({"maxInFlight": 3, "durations": {"nodeBootSeconds": boot, "podStartSeconds": 20},
                           "healthGate": {"canary": {"window": "30m"}}}, "demo policy")
    state = SQLiteStore(folder / "state.db")
    gate, asked = _canary_gate(region, stage, state)
    groups = node_groups(stage.region)
    began = {name: len(sim.events) for name, sim in region.clusters.items()}
    start = region.clock.now()
    say.say("`rotate run --stage dev` (no targets in its policy: each pool follows what its launch template boots now), "
            "one zone at a time, the host cluster last:")
    names = [c.name for c in stage.clusters()]
    result = rotate(Rotation(policy, Scope(names, stage), state, {n: Target(n, region.cluster(n), groups) for n in names},
                             Options(stage=stage.name, canary=gate)))
    clusters: dict[str, ClusterRotated] = {}
    for outcome in result.outcomes:
        r = outcome.report
        assert r is not None, outcome.reason  # every cluster's run read its journal: the demo holds every lease
        sim = region.cluster(outcome.cluster)
        events = sim.events[began[outcome.cluster]:]
        clusters[outcome.cluster] = ClusterRotated(
            outcome.status, len(r.get("waves", [])), r.get("nodes_rotated", 0), r.get("estimated_seconds"),
            r.get("duration_seconds", 0.0), r.get("gate_seconds", 0.0), r.get("evictions", 0), r.get("refused_evictions", 0),
            r.get("pods_disrupted_more_than_once", 0), r.get("lowest_budget_headroom"),
            dict(Counter(n.image or "" for n in sim.list_nodes())), eviction_budget_violations(sim.events),
            lost_pods(events), deleted_without_eviction(events), [n.name for n in sim.list_nodes() if n.unschedulable])
    say.show(_rotation_table(clusters))
    harm = sum(c.harm for c in clusters.values())
    on_new = all(set(c.images) <= set(deployed.images.values()) for c in clusters.values())
    left_cordoned = any(c.cordoned for c in clusters.values())
    say.say("Every node on its launch template's image: ", judged(on_new, "yes" if on_new else "no"),
            "; nothing left cordoned: ", judged(not left_cordoned, "no" if left_cordoned else "yes"), ". From the event log: ",
            judged(harm == 0, "no eviction broke a budget, no pod went down with its node, none was deleted without the "
                   "eviction API" if harm == 0 else f"{harm} harmful events"),
            f". {(region.clock.now() - start) / 60:.0f} virtual minutes.")
    canaries = _canary_summary(asked, state, stage, deployed.images, say)
    return RotationChapter(version, rebuilt, len(updates), dict(deployed.images), clusters, on_new, harm, canaries,
                           (region.clock.now() - start) / 60)


def _rotation_table(clusters: dict[str, ClusterRotated]) -> Tabular:
    table = Tabular(("cluster", "waves", "nodes rotated", "estimate", "actual", "of which gate", "evictions", "refused",
                     "disrupted twice", "lowest headroom"), "Rotation onto the new images")
    for name, c in clusters.items():
        lowest = c.lowest_budget_headroom
        table.add(name, c.waves, c.nodes_rotated, f"{(c.estimated_seconds or 0) / 60:.0f} min", f"{c.seconds / 60:.0f} min",
                  f"{c.gate_seconds / 60:.0f} min", c.evictions, c.refused_evictions, c.pods_disrupted_more_than_once,
                  f"{lowest['headroom']} ({lowest['budget']})" if lowest else "-")
    return table


DEMO_CANARY = {"name": "node-pool", "kind": "node-pool", "podsPerArm": 10, "deadline": "2m"}


def _canary_gate(region: LocalRegion, stage: Stage, store: StateStore) -> tuple[Callable[[Question], Verdict],
                                                                                 list[GateAnswer]]:
    """The rotation's canary gate, with the canaries run where the demo can: before each ask, the cluster's
    node-pool canary runs once (in production `canary run` runs beside the rotation, on every cluster)."""
    from e2e_canary.definitions import parse_canary
    from e2e_canary.runner import Runner
    from e2e_canary.verdict import canary_gate

    canary = parse_canary(DEMO_CANARY, "demo canary")
    runners = {c.name: Runner(stage.name, c.name, region.cluster(c.name), store) for c in stage.clusters()}
    judge = canary_gate(store, 1800.0)
    asked: list[GateAnswer] = []

    def gate(question: Question) -> Verdict:
        runners[question.cluster].run(canary)
        # The canary ran just now: judge the window that ends now, which holds what it measured.
        answer = judge(dataclasses.replace(question, now=region.clock.now()))
        asked.append(GateAnswer(question.cluster, question.wave, answer.verdict, answer.reason))
        return answer

    return gate, asked


def _canary_summary(asked: list[GateAnswer], store: StateStore, stage: Stage, images: dict[str, str],
                    say: Narrator) -> CanarySummary:
    """What the canaries said: each cluster's gate answers, and the new images against the old over the run."""
    from e2e_canary.results import results
    from e2e_canary.verdict import judge_canaries

    table = Tabular(("cluster", "gate asked", "pass", "inconclusive (waited)", "fail", "last answer"), "Canary gate")
    per_cluster: dict[str, GateTally] = {}
    for cluster in [c.name for c in stage.clusters()]:
        mine = [a for a in asked if a.cluster == cluster]
        counts = Counter(a.verdict for a in mine)
        per_cluster[cluster] = GateTally(len(mine), counts["pass"], counts["inconclusive"], counts["fail"],
                                         mine[-1] if mine else None)
        table.add(cluster, len(mine), counts["pass"], counts["inconclusive"], counts["fail"], mine[-1].reason if mine else "-")
    say.show(table)
    rows = results(store, stage.name)
    new = set(images.values())
    verdict = judge_canaries([r for r in rows if r.image and r.image not in new], [r for r in rows if r.image in new])
    pods = (verdict.canaries or {}).get("node-pool")
    startup = pods.judged.metrics.get("pod_startup_seconds") if pods is not None else None
    medians = startup.medians if startup is not None else None
    said = f"; pod startup median {medians[1]:.2f} s against {medians[0]:.2f} s" if medians else ""
    mark = {"pass": judged(True, verdict.verdict), "fail": bad(verdict.verdict)}.get(verdict.verdict, verdict.verdict)
    say.say(f"Canary verdict, the new images' pods against the old ones' ({len(rows)} results): ", mark,
            f" — {verdict.reason}{said}")
    return CanarySummary(per_cluster, len(rows), verdict.verdict, verdict.reason)


def run_demo(stage: Stage, minutes: int, say: Narrator, save_dir: Path | None = None) -> DemoReport:
    """Tell the story of ``stage`` through ``say``; returns what happened (and saves each cluster's snapshot in
    ``save_dir`` when given)."""
    wall = time.perf_counter()
    report = DemoReport(stage.name, stage.region)

    say.say(heading(f"Stage {stage.name}"), f" in {stage.region}, read from {stage.source}")
    table = Tabular(("cluster", "kind", "zones", "node pools"))
    for cluster in stage.clusters():
        pools = ", ".join(f"{p.name} {p.desired_size}×{p.instance_type}" for p in cluster.node_pools)
        table.add(cluster.name, "host" if isinstance(cluster, HostCluster) else "member", ",".join(cluster.zones), pools)
    say.show(table)

    lock = Path(tempfile.mkdtemp(prefix="platformctl-demo-")) / "images.lock.json"

    def build_image_tree(st: Stage) -> None:
        """Build the image tree in the local region's AWS, into the region's own lock file: the stage's
        unpinned pools boot the newest build the lock names, as `pulumi up` would."""
        built = build(BuildRequest(ImageStore(st.region), lock, workers=2))
        order = load_manifests().order()
        report.images = {n: built.report.ids[n] for n in order}
        say.say(heading("Images"), f": built {', '.join(f'{n} {built.report.ids[n]}' for n in order)} from ami/manifests, "
                "parents first, and published them under /platformctl/ami/.")

    with LocalRegion(stage, provisioner=functools.partial(materialize, image_lock=lock), prepare=build_image_tree) as region:
        report.virtual_start = region.clock.now()
        say.say(heading("Local region"), f": AWS is moto. Ran {stage.name}'s Pulumi program (infra/) under Pulumi's mock "
                f"engine, creating what it declares: VPC {region.vpc_id}, {len(region.subnets)} private subnets, "
                f"{len(region.outputs.get('clusters', {}))} EKS control planes, {len(region.pools)} launch templates "
                f"(IMDSv2, encrypted root volume) and auto scaling groups, and {len(region.kubernetes)} Kubernetes objects.")
        region.wait_until_ready()
        nodes = sum(len(s.list_nodes()) for s in region.clusters.values())
        say.say(f"{nodes} instances joined their clusters as nodes and turned Ready "
                f"after {(region.clock.now() - report.virtual_start) / 60:.0f} virtual minutes of boot.")

        summaries = region.populate_workloads()
        region.advance(120)
        table = Tabular(("cluster", "nodes", "workloads", "pods", "PDBs"), "Workloads")
        for name, summary in summaries.items():
            sim = region.cluster(name)
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(summary.workloads.items()))
            table.add(name, len(sim.list_nodes()), kinds, len(sim.list_pods()), summary.pdbs)
        say.show(table)

        _live_through(region, stage, minutes, report, say)
        report.rotation = _rotation_chapter(region, stage, lock, say)
        report.virtual_end = region.clock.now()
        _tally(region, report, save_dir)
    report.wall_seconds = time.perf_counter() - wall
    return report


def _live_through(region: LocalRegion, stage: Stage, minutes: int, report: DemoReport, say: Narrator) -> None:
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
    label = f"{minutes} minutes of {stage.name}"
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
        region.advance(60.0)
        say.progress(label, min((region.clock.now() - start) / 60, minutes), minutes)


def _tally(region: LocalRegion, report: DemoReport, save_dir: Path | None) -> None:
    """What each cluster's event log says happened, and its snapshot when asked for."""
    for name, sim in region.clusters.items():
        happened = Counter(e.kind for e in sim.events)
        pods = sim.list_pods()
        report.clusters[name] = ClusterTally(
            len(sim.list_nodes()), sum(n.ready for n in sim.list_nodes()), len(pods),
            sum(p.phase == "Running" for p in pods), len(sim.pending_pods()), happened[sim_events.POD_READY],
            happened[sim_events.POD_SUCCEEDED], len(sim.list_pdbs()))
        report.evictions += happened[sim_events.POD_EVICTED]
        report.evictions_refused += happened[sim_events.EVICTION_REFUSED]
        report.budget_violations += eviction_budget_violations(sim.events)
        report.pods_lost_with_node += len(lost_pods(sim.events))
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            saved = save_dir / f"{name}.json"
            save_snapshot(sim.snapshot(), saved)
            report.snapshots.append(str(saved))
