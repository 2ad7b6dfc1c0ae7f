"""``platformctl demo-pipeline``: the release pipeline's story on the local region of every stage, in virtual time.

It does what an operator would, command by command, each a process of its own: shrinks the checkout's stages
(every pool to one node, the host clusters' to two) into a scratch folder, starts ``local up --stage all`` there (each
stage in its own AWS region of one moto, each with its canary runner), builds a new image tree, and releases it
with ``release start`` and ``release tick`` (as the CronJob runs it) through ``dev``, ``staging``, ``prod-canary`` and
``prod``: deployed, rotated under the canary gate, soaked and judged in each. Then a second tree whose images
break every container (``local fault bad-image``): the canaries catch it in ``dev``, the pipeline halts it and rolls
``dev`` back, and it never reaches a later stage: first light boots one node a pool of the first cluster on it, only the
canaries' pods run there, and no workload moves. It ends with how many instances ever booted the bad images, beside
what the first wave would have been, and stops the region.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import STAGES

# Two nodes a wave, each next wave behind the canary gate: a bad image is caught on the first wave's nodes (the
# canaries' pods pinned to them never start) before a second wave starts. The gate judges a new image's node-pool arm
# against the images it replaces once it holds 10 results (JUDGE): the shrunk stages have one node a pool, and each
# cluster's runner thread gives a new image a few pods a round (docs/release.md). On two cores, with every stage's
# runner beside the region server, a round comes more slowly than the canary's interval: the gate's window grows until
# it holds ten (prod's rotation took about two virtual hours on 2026-11-26).
# The soaks' verdict takes the same judge: each stage's window needs each canary's attempts, and the runners, beside the
# region server on two cores, carry the checks out at about half their cadence (docs/release.md, known gaps).
JUDGE = ("# the demo's canary gate and soaks: one node a pool gives a new image fewer results than a full stage would\n"
         "minSamples: 10\nminAttempts: 10\n")
POLICY = ("strategy: surge\nmaxInFlight: 2\ndurations: {nodeBootSeconds: 180, podStartSeconds: 20}\n"
          "healthGate: {canary: {window: 30m, config: judge.yaml}}\ngateTimeoutSeconds: 7200\n"
          "# before wave 1, one node a pool on the new images, only the canaries' pods on it, judged first\n"
          "firstLight: {pools: all, minResults: 10, timeout: 2h}\n")
SPEED = "100"  # virtual seconds a wall second: slow enough that every stage's canaries keep up on two cores
SOAKED = ("    rotationPolicy: rotation.yaml\n    judge: judge.yaml\n    soak: 30m\n    minResults: 20\n    passFor: 10m\n"
          "    deadline: 6h\n")
PIPELINE = ("# the demo's pipeline: short soaks, no freezes and no approvals, so that the story is told in minutes\n"
            "stages:\n" + "".join(f"  - name: {s}\n{SOAKED}" for s in STAGES[:-1])
            + "  - name: prod\n    rotationPolicy: rotation.yaml\n    judge: judge.yaml\n    soak: none\n    minResults: 0\n"
            "    passFor: 0\n")


def write_files(home: Path) -> None:
    """The demo's rotation policy (``rotation.yaml``), its gate's judge (``judge.yaml``) and pipeline (``pipeline.yaml``)
    in ``home``, as an operator's checkout holds them."""
    (home / "rotation.yaml").write_text(POLICY)
    (home / "judge.yaml").write_text(JUDGE)
    (home / "pipeline.yaml").write_text(PIPELINE)


def shrink_stacks(source: Path, folder: Path, pool_size: int = 1) -> Path:
    """The stack files of ``source`` in ``folder``, every node pool at ``pool_size`` nodes (the host clusters' system
    pools at two): an operator's checkout shrunk to run every stage at once. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("Pulumi*.yaml")):
        data = yaml.safe_load(path.read_text())
        topology = (data.get("config") or {}).get("platformctl:topology") if isinstance(data, dict) else None
        if topology:
            host = topology["hostCluster"]
            for cluster in [host, *topology.get("memberClusters", [])]:
                for pool in cluster.get("nodePools", []):
                    size = 2 if cluster is host else pool_size
                    pool.update(minSize=min(pool["minSize"], size), desiredSize=size, maxSize=max(2 * size, 2))
        (folder / path.name).write_text(yaml.safe_dump(data, sort_keys=False))
    commit_checkout(folder)
    return folder


def commit_checkout(folder: Path, message: str = "the stages, shrunk to run at once") -> str:
    """Commit ``folder`` in the git repository of its parent (made when there is none): an operator's checkout is a
    commit, and a release candidate is one (``release start`` refuses a checkout that differs from its commit).
    Returns the commit."""
    root = folder.parent

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), "-c", "user.name=platformctl demo", "-c",
                               "user.email=demo@platformctl.invalid", *args], capture_output=True, text=True,
                              check=True).stdout.strip()

    if not (root / ".git").exists():
        git("init", "-q")
    git("add", "--", folder.name)
    if git("status", "--porcelain", "--", folder.name):
        git("commit", "-q", "-m", message, "--", folder.name)
    return git("rev-parse", "HEAD")


def new_tree(manifests: Path, folder: Path, version: str) -> Path:
    """The checkout's image manifests in ``folder`` with the base image at ``version``: a new image tree."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in manifests.glob("*.yaml"):
        text = path.read_text()
        if path.name == "base.yaml":  # as a person edits it: the line, not the parsed document (it has its own tags)
            current = next(line for line in text.splitlines() if line.startswith("version:"))
            text = text.replace(current, f"version: {version}", 1)
        (folder / path.name).write_text(text)
    return folder


class Story:
    def __init__(self, home: Path, infra: Path, out: Console) -> None:
        self.home, self.infra, self.out = home, infra, out
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PLATFORMCTL_")) and k != "KUBECONFIG"}
        self.env["PLATFORMCTL_HOME"] = str(home)

    def run(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "platformctl", "--infra-dir", str(self.infra), *args], text=True,
                              capture_output=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise PlatformError(f"`platformctl {' '.join(args)}` exited {done.returncode}: "
                                f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}", field="demo-pipeline")
        return done

    def release(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("release", *args, "--pipeline", str(self.home / "pipeline.yaml"), "--ledger",
                        str(self.home / "ledger.db"), check=check)

    def status(self) -> dict[str, Any]:
        return dict(json.loads(self.release("status", "-o", "json").stdout))

    def tick_until(self, done: Callable[[dict[str, Any]], bool], ticks: int = 400) -> dict[str, Any]:
        for _ in range(ticks):
            said = self.release("tick", check=False)
            if said.returncode not in (0, 3):
                raise PlatformError(f"`release tick` exited {said.returncode}: {said.stderr.strip()[-300:]}",
                                    field="demo-pipeline")
            for line in said.stdout.splitlines():
                if line.strip() and line.strip() != "nothing to do":
                    self.out.print(f"  [dim]tick[/] {line.strip()}", soft_wrap=True)
            now = self.status()
            if done(now):
                return now
        raise PlatformError(f"the pipeline did not get there in {ticks} ticks", field="demo-pipeline")

    def nodes(self, region: dict[str, Any]) -> dict[str, list[str]]:
        """Each stage's nodes' images, as kubectl shows them."""
        from platformctl.kernel.cluster.live import LiveCluster

        out: dict[str, list[str]] = {s: [] for s in region["stages"]}
        for c in region["clusters"]:
            out[c["stage"]] += [n.image or "" for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=c["name"]).list_nodes()]
        return out


def images_of(candidate: dict[str, Any], stage: str) -> set[str]:
    return {i["id"] for i in candidate["stages"][stage]["images"].values()}


def run_story(infra_dir: Path, manifests: Path, out: Console, keep: bool = False) -> dict[str, Any]:
    """Tell it; returns what a test or a person checks: where each candidate got, and how far the bad image went."""
    home = Path(tempfile.mkdtemp(prefix="platformctl-pipeline-demo-"))
    story = Story(home, shrink_stacks(infra_dir, home / "infra"), out)
    write_files(home)
    started = time.monotonic()
    out.print(f"[bold]1. Every stage at once[/]: `local up --stage all` on the checkout's stacks shrunk to one node a pool "
              f"(in {home})")
    region = json.loads(story.run("local", "up", "--stage", "all", "--speed", SPEED, "--no-workloads", "-o",
                                  "json").stdout)
    try:
        where = ", ".join(f"{s} ({region['by_stage'][s]['region']})" for s in region["stages"])
        out.print(f"  {len(region['clusters'])} clusters in {where}; {len(region['canary_runners'])} canary runners; "
                  f"virtual time {region['virtual_time']} at {region['speed']:g}x")
        out.print("[bold]2. A new image tree[/]: base 9.1.0, built into dev's region and copied to the others")
        story.run("ami", "build", "--manifests", str(new_tree(manifests, home / "tree-9.1.0", "9.1.0")))
        good = json.loads(story.release("start", "--note", "base 9.1.0", "-o", "json").stdout)
        out.print(f"[bold]3. Candidate {good['id']}[/] through {' -> '.join(region['stages'])}, one tick at a time")
        story.tick_until(lambda s: s["stages"]["prod"]["last_good"] == good["id"])
        nodes = story.nodes(region)
        table = Table("stage", "nodes", f"on {good['id']}'s images", title="after the good candidate")
        for stage in region["stages"]:
            table.add_row(stage, str(len(nodes[stage])), str(sum(i in images_of(good, stage) for i in nodes[stage])))
        out.print(table)

        out.print("[bold]4. A broken image tree[/]: base 9.2.0, whose images fail every container (`local fault bad-image`)")
        story.run("ami", "build", "--manifests", str(new_tree(manifests, home / "tree-9.2.0", "9.2.0")))
        bad = json.loads(story.release("start", "--note", "base 9.2.0, broken", "-o", "json").stdout)
        for ami in sorted(set().union(*(images_of(bad, s) for s in region["stages"]))):
            story.run("local", "fault", "bad-image", ami)
        now = story.tick_until(lambda s: s["candidates"][bad["id"]]["status"] == "halted" and s["stages"]["dev"]["step"] == "idle")
        history = json.loads(story.release("history", "-o", "json").stdout)
        halt = next(e for e in history if e["candidate"] == bad["id"] and e["decision"] == "halt")
        clusters = halt["inputs"].get("result", {}).get("clusters", [])
        lit = [c for c in clusters if c.get("first_light")]
        first_wave = max((c.get("planned_first_wave") or 0 for c in lit), default=0)
        evictions = sum(int(c.get("evictions") or 0) for c in clusters)
        booted = now["candidates"][bad["id"]]["instances_booted_by_stage"]
        by_first_light = now["candidates"][bad["id"]]["instances_booted_first_light_by_stage"]
        reached = sorted({str(e["stage"]) for e in history if e["candidate"] == bad["id"] and e["stage"]})
        nodes = story.nodes(region)
        table = Table("stage", f"instances that booted {bad['id']}'s images", "nodes now", f"on {good['id']}'s images",
                      title=f"{bad['id']}: halted in {', '.join(reached)}")
        for stage in region["stages"]:
            table.add_row(stage, str(booted.get(stage, 0)), str(len(nodes[stage])),
                          str(sum(i in images_of(good, stage) for i in nodes[stage])))
        out.print(table)
        out.print(f"  why: {halt['reason'][:300]}")
        where = ", ".join(f"{c['cluster']} ({', '.join(c['first_light']['pools'])})" for c in lit) or "no cluster"
        out.print(f"  the bad images reached {sum(booted.values())} instance(s), all in dev, {sum(by_first_light.values())} "
                  f"of them first light's: one a pool of {where}, where only the canaries' pods ran; the first wave "
                  f"would have been {first_wave} node(s) (maxInFlight 2) with the workloads evicted onto them; "
                  f"{evictions} eviction(s); dev rolled back to {now['stages']['dev']['last_good']}")
        out.print(f"  `platformctl release history`, `status` and `replay` read it all from {home / 'ledger.db'}")
        page = home / "dashboard.html"
        story.run("dashboard", "--export", str(page), "--pipeline", str(home / "pipeline.yaml"), "--ledger", str(home / "ledger.db"))
        out.print(f"[bold]5. The dashboard[/] (one self-contained file, to attach to a change review): {page}")
        report = {"home": str(home), "good": good["id"], "bad": bad["id"], "stages": now["stages"], "dashboard": str(page),
                  "bad_reached": reached, "bad_booted": booted, "bad_first_light": by_first_light, "first_wave": first_wave,
                  "bad_evictions": evictions,
                  "wall_seconds": round(time.monotonic() - started)}
        out.print(f"[bold]done[/] in {report['wall_seconds']} s of wall time")
        return report
    finally:
        if not keep:
            story.run("local", "down", check=False)
