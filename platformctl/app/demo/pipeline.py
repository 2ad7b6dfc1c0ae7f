"""The release pipeline's story on the local region of every stage (``platformctl demo-pipeline``), in virtual time.

It does what an operator and the pipeline's CronJob would, with the functions their commands call: shrinks the
checkout's stages (every pool to one node, the host clusters' to two) into a scratch folder, starts the local region of
every stage there (``local up --stage all``: each stage in its own AWS region of one moto, each cluster running its
canary runner pod, the region server a process of its own), builds a new image tree (``ami build``), and releases it (``release start``,
then ``release tick`` once a virtual minute, as the CronJob runs it) through ``dev``, ``staging``, ``prod-canary`` and
``prod``: deployed, rotated under the canary gate, soaked and judged in each. Then a second tree whose images break
every container (``local fault bad-image``): the canaries catch it in ``dev``, the pipeline halts it and rolls ``dev``
back, and it never reaches a later stage: first light boots one node a pool of the first cluster on it, only the
canaries' pods run there, and no workload moves. It ends with how many instances ever booted the bad images, beside
what the first wave would have been, and stops the region.

The story is one of the region's own jobs (``take_part``): between ticks it sleeps a minute on the region's clock,
which skips to the next instant something is due once every job waits.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from platformctl.app import release
from platformctl.app.dashboard import DashboardRequest
from platformctl.app.demo.checkout import SPEED, new_tree, shrink_stacks, write_files
from platformctl.app.demo.narration import Narrator, Tabular, aside, heading
from platformctl.app.images import BuildRequest, build, default_lock_file, image_store
from platformctl.app.platform import Platform
from platformctl.app.release_status import PipelineStatus
from platformctl.kernel import failpoints, region_client
from platformctl.kernel.clock import Clock
from platformctl.kernel.environment import Environment, using
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.topology import STAGES
from release_pipeline.candidates import Candidate

TICK_SECONDS = 60.0  # the release CronJob's schedule: every minute
VIRTUAL_LIMIT = 3 * 86400.0  # a candidate that has not got there in three virtual days will not


@dataclass
class PipelineStory:
    """What a test or a person checks: where each candidate got, and how far the bad image went."""

    home: Path
    good: str = ""
    bad: str = ""
    stages: dict[str, JSONObject] = field(default_factory=dict)
    bad_reached: list[str] = field(default_factory=list)
    bad_booted: dict[str, int] = field(default_factory=dict)
    bad_first_light: dict[str, int] = field(default_factory=dict)
    first_wave: int = 0
    bad_evictions: int = 0
    ticks: int = 0
    virtual_hours: float = 0.0
    wall_seconds: float = 0.0
    dashboard: str | None = None

    @property
    def ok(self) -> bool:
        """The good candidate reached ``prod``; the bad one never left ``dev``."""
        return bool(self.stages) and self.stages["prod"].get("last_good") == self.good and self.bad_reached == ["dev"]

    def to_dict(self) -> dict[str, object]:
        return {"home": str(self.home), "good": self.good, "bad": self.bad, "stages": self.stages,
                "dashboard": self.dashboard, "bad_reached": self.bad_reached, "bad_booted": self.bad_booted,
                "bad_first_light": self.bad_first_light, "first_wave": self.first_wave,
                "bad_evictions": self.bad_evictions, "ticks": self.ticks, "virtual_hours": round(self.virtual_hours, 1),
                "wall_seconds": round(self.wall_seconds)}


def story_environment(home: Path) -> Environment:
    """The environment the story's commands run in: the operator's (read where the story starts: it is a command of
    its own), without an AWS, a store or a kubeconfig of their own, with ``home`` as the toolkit's folder (where the
    region's files and every stage's store are)."""
    kept = {k: v for k, v in Environment.from_os().variables.items()
            if not k.startswith(("AWS_", "PLATFORMCTL_")) and k != "KUBECONFIG"}
    return Environment({**kept, "PLATFORMCTL_HOME": str(home)})


class _Operator:
    """The operator's commands, called as the commands call them (each with the story's platform), and the pipeline's
    CronJob."""

    def __init__(self, platform: Platform, say: Narrator) -> None:
        self.platform, self.say = platform, say
        home = self.home = platform.home
        self.pipeline, self.ledger = home / "pipeline.yaml", str(home / "ledger.db")
        self.ticks = 0
        self.clock: Clock | None = None

    def build(self, manifests: Path) -> None:
        # what `ami build` does: reach the running local region's AWS (the platform's target, handed to the image store)
        build(BuildRequest(image_store(self.platform, None), default_lock_file(self.platform), manifests, workers=2))

    def start(self, note: str) -> Candidate:
        return release.start_candidate(self.platform, release.StartRequest(self.pipeline, None, note, self.ledger)).candidate

    def status(self, aws: bool = True) -> PipelineStatus:
        return release.pipeline_status(self.platform, release.LedgerRequest(self.pipeline, self.ledger), aws)

    def history(self) -> list[dict[str, object]]:
        return list(release.pipeline_history(self.platform, release.LedgerRequest(self.pipeline, self.ledger)))

    def tick_until(self, done: Callable[[PipelineStatus], bool], clock: Clock) -> PipelineStatus:
        """``release tick`` once a virtual minute until ``done`` says so of ``release status``."""
        began = clock.now()
        while clock.now() - began < VIRTUAL_LIMIT:
            try:
                errors = release.release_tick(self.platform, release.TickRequest(self.pipeline, self.ledger),
                                              say=lambda m: self.say.say(aside("  tick "), str(m))).report.errors
            except release.EveryStageHeld:
                errors = []
            self.ticks += 1
            for error in errors:
                self.say.say(aside("  tick "), f"stage {error.stage}: {error.error['type']}: {error.error['message']}")
            # where the candidates are is the ledger's; the instances they booted (EC2's too) once, at the end
            if done(self.status(aws=False)):
                return self.status()
            clock.sleep(TICK_SECONDS)
        raise PlatformError(f"the pipeline did not get there in {VIRTUAL_LIMIT / 3600:.0f} virtual hours",
                            field="demo-pipeline")

    def nodes(self, region: Mapping[str, object]) -> dict[str, list[str]]:
        """Each stage's nodes' images, as kubectl shows them."""
        from platformctl.kernel.cluster.live import LiveCluster

        out: dict[str, list[str]] = {str(s): [] for s in _list(region["stages"])}
        for c in _list(region["clusters"]):
            assert isinstance(c, dict)
            live = LiveCluster.from_kubeconfig(str(region["kubeconfig"]), context=c["name"])
            out[c["stage"]] += [n.image or "" for n in live.list_nodes()]
        return out


def _list(value: object) -> list[object]:
    assert isinstance(value, list)
    return value


def _images(candidate: Candidate, stage: str) -> set[str]:
    return {str(i["id"]) for i in candidate.stages[stage].images.values()}


@contextmanager
def every_stage(home: Path, infra_dir: Path, say: Narrator, skip: bool = True,
                keep: bool = False) -> Iterator[tuple[Platform, dict[str, object]]]:
    """``local up --stage all`` on ``infra_dir``'s stacks shrunk by ``shrink_stacks`` (one member cluster a stage, one
    node a pool) in ``home``, with the demo's rotation policy, judge and pipeline written beside them, in the story's
    environment: yields the story's platform (the shrunk stacks, the region) and the region's status, and stops the
    region (unless ``keep``)."""
    environment = story_environment(home)
    failpoints.arm(environment.failpoint)  # the story's own environment names none, whatever the operator's shell does
    with using(environment):
        infra = shrink_stacks(infra_dir, home / "infra")
        write_files(home)
        stages = list(STAGES)
        before = Platform(environment, infra)
        for name in stages:
            before.stage(name)
        say.say(heading("1. Every stage at once"), ": `local up --stage all` on the checkout's stacks shrunk to one member "
                f"cluster a stage and one node a pool (in {home})")
        region, _ = region_client.up(environment, stages, float(SPEED), infra, workloads=False, canaries=True, skip=skip)
        try:
            yield before.with_region_looked_again(), region
        finally:
            if not keep:
                region_client.down(environment.home)


def run_story(infra_dir: Path, manifests: Path, say: Narrator, keep: bool = False,
              export: Callable[[Platform, DashboardRequest, Path], object] | None = None,
              skip: bool = True) -> PipelineStory:
    """Tell it through ``say``; ``export`` writes the dashboard's page (the command's renderer) before the region
    stops; ``skip`` is ``local up``'s (``benchmarks/local_time.py`` times the story both ways). Returns what a test
    or a person checks."""
    home = Path(tempfile.mkdtemp(prefix="platformctl-pipeline-demo-"))
    story = PipelineStory(home)
    started = time.monotonic()
    with every_stage(home, infra_dir, say, skip, keep) as (platform, region):
        _tell(story, _Operator(platform, say), region, manifests, say)
        if export is not None:
            page = home / "dashboard.html"
            export(platform, DashboardRequest(home / "pipeline.yaml", str(home / "ledger.db"), None), page)
            story.dashboard = str(page)
            say.say(heading("5. The dashboard"), f" (one self-contained file, to attach to a change review): {page}")
    story.wall_seconds = time.monotonic() - started
    say.say(heading("done"), f" in {story.wall_seconds:.0f} s of wall time: {story.ticks} ticks over "
            f"{story.virtual_hours:.1f} virtual hours")
    return story


@dataclass
class Release:
    """Where one candidate got through every stage (``release_one``): promoted to ``prod``, or halted and why."""

    candidate: str
    promoted: bool
    halted_in: str | None
    why: str
    ticks: int
    virtual_hours: float
    wall_seconds: float


def release_one(infra_dir: Path, manifests: Path, pipeline: str, say: Narrator, skip: bool = True,
                version: str = "9.1.0") -> Release:
    """A good candidate (a new image tree at ``version``, nothing wrong with it) through every stage of ``pipeline``
    (its text, replacing the demo's: ``benchmarks/release_aa.py`` gives the shipped soaks), once a virtual minute as
    the CronJob ticks: promoted to ``prod``, or where it halted and why (an A/A run: a halt is a false alarm)."""
    home = Path(tempfile.mkdtemp(prefix="platformctl-release-"))
    started = time.monotonic()
    with every_stage(home, infra_dir, say, skip) as (platform, region):
        (home / "pipeline.yaml").write_text(pipeline)
        region_client.take_part()
        clock = _region_clock(region)
        began = clock.now()
        op = _Operator(platform, say)
        op.build(new_tree(manifests, home / f"tree-{version}", version))
        cid = op.start(f"base {version}").id

        def settled(status: PipelineStatus) -> bool:
            return status.stages["prod"].last_good == cid or status.candidates[cid].status == "halted"

        now = op.tick_until(settled, clock)
        halt = next((e for e in op.history() if e["candidate"] == cid and e["decision"] == "halt"), None)
        virtual_hours = (clock.now() - began) / 3600
    return Release(cid, now.stages["prod"].last_good == cid, None if halt is None else str(halt["stage"]),
                   "" if halt is None else str(halt["reason"]), op.ticks, virtual_hours, time.monotonic() - started)


def _region_clock(region: dict[str, object]) -> Clock:
    first = _list(region["clusters"])[0]
    assert isinstance(first, dict)
    clock = region_client.clock_for_context(Path(str(region["kubeconfig"])), str(first["name"]))
    if clock is None:
        raise PlatformError("the local region's clock does not answer", field="demo-pipeline")
    return clock


def _tell(story: PipelineStory, op: _Operator, region: dict[str, object], manifests: Path, say: Narrator) -> None:
    region_client.take_part()  # one of the region's own jobs, as `release tick` is: its sleeps let the clock skip
    clock = _region_clock(region)
    began = clock.now()
    by_stage = region["by_stage"]
    assert isinstance(by_stage, dict)
    names = [str(s) for s in _list(region["stages"])]
    where = ", ".join(f"{s} ({by_stage[s]['region']})" for s in names)
    say.say(f"  {len(_list(region['clusters']))} clusters in {where}; "
            f"{len(_list(region['canary_runners']))} canary runners; virtual time {region['virtual_time']} at "
            f"{float(str(region['speed'])):g}x")
    say.say(heading("2. A new image tree"), ": base 9.1.0, built into dev's region and copied to the others")
    op.build(new_tree(manifests, story.home / "tree-9.1.0", "9.1.0"))
    good = op.start("base 9.1.0")
    story.good = good.id
    say.say(heading(f"3. Candidate {good.id}"), f" through {' -> '.join(names)}, one tick a virtual minute")
    op.tick_until(lambda s: s.stages["prod"].last_good == good.id, clock)
    nodes = op.nodes(region)
    table = Tabular(("stage", "nodes", f"on {good.id}'s images"), "after the good candidate")
    for stage in names:
        table.add(stage, len(nodes[stage]), sum(i in _images(good, stage) for i in nodes[stage]))
    say.show(table)

    say.say(heading("4. A broken image tree"), ": base 9.2.0, whose images fail every container (`local fault bad-image`)")
    op.build(new_tree(manifests, story.home / "tree-9.2.0", "9.2.0"))
    bad = op.start("base 9.2.0, broken")
    story.bad = bad.id
    for ami in sorted(set().union(*(_images(bad, s) for s in names))):
        region_client.faults(op.home, "POST", {"kind": "bad-image", "image": ami})
    now = op.tick_until(lambda s: s.candidates[bad.id].status == "halted" and s.stages["dev"].step == "idle",
                        clock)
    _the_bad_one(story, op, region, now, good, bad, names, say)
    story.stages = {n: now.stages[n].to_dict() for n in names}
    story.ticks, story.virtual_hours = op.ticks, (clock.now() - began) / 3600


def _the_bad_one(story: PipelineStory, op: _Operator, region: dict[str, object], now: PipelineStatus, good: Candidate,
                 bad: Candidate, names: list[str], say: Narrator) -> None:
    """Where the bad candidate got, and how many instances ever booted its images."""
    history = op.history()
    halt = next(e for e in history if e["candidate"] == bad.id and e["decision"] == "halt")
    inputs = halt["inputs"]
    assert isinstance(inputs, dict)
    clusters = (inputs.get("result") or {}).get("clusters", [])
    lit = [c for c in clusters if c.get("first_light")]
    story.first_wave = max((int(c.get("planned_first_wave") or 0) for c in lit), default=0)
    story.bad_evictions = sum(int(c.get("evictions") or 0) for c in clusters)
    mine = now.candidates[bad.id].boots
    booted, by_first_light = mine.by_stage, mine.first_light_by_stage
    story.bad_booted, story.bad_first_light = dict(booted), dict(by_first_light)
    story.bad_reached = sorted({str(e["stage"]) for e in history if e["candidate"] == bad.id and e["stage"]})
    nodes = op.nodes(region)
    table = Tabular(("stage", f"instances that booted {bad.id}'s images", "nodes now", f"on {good.id}'s images"),
                    f"{bad.id}: halted in {', '.join(story.bad_reached)}")
    for stage in names:
        table.add(stage, booted.get(stage, 0), len(nodes[stage]), sum(i in _images(good, stage) for i in nodes[stage]))
    say.show(table)
    say.say(f"  why: {str(halt['reason'])[:300]}")
    where = ", ".join(f"{c['cluster']} ({', '.join(c['first_light']['pools'])})" for c in lit) or "no cluster"
    say.say(f"  the bad images reached {sum(booted.values())} instance(s), all in dev, {sum(by_first_light.values())} of "
            f"them first light's: one a pool of {where}, where only the canaries' pods ran; the first wave would have been "
            f"{story.first_wave} node(s) (maxInFlight 2) with the workloads evicted onto them; {story.bad_evictions} "
            f"eviction(s); dev rolled back to {now.stages['dev'].last_good}")
    say.say(f"  `platformctl release history`, `status` and `replay` read it all from {op.ledger}")
