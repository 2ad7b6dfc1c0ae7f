"""An operator's checkout as the pipeline's story (and the tests that run every stage at once) make it: the stages'
stack files shrunk to run at once, the demo's rotation policy, judge and pipeline files, a new image tree, and a
commit of it all (a release candidate is a commit).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from platformctl.kernel.topology import STAGES

# Two nodes a wave, each next wave behind the canary gate: a bad image is caught on the first wave's nodes (the
# canaries' pods pinned to them never start) before a second wave starts. The gate judges a new image's node-pool arm
# against the images it replaces once it holds 5 results (JUDGE; first light asks as many), and so do the soaks'
# verdicts, which the story keeps to 15 minutes: the shipped judge's 20 of every canary would take a soak hours (the
# service canary attempts every 5 minutes). A minimum gates a pass, never a fail (a failure is judged on the attempts
# there are): five is enough for the story, whose bad image fails every pod. The shipped files themselves, first light
# and all, are run by benchmarks/shipped_pipeline.py.
JUDGE = ("# the demo's canary gate and soaks: one node a pool gives a new image fewer results than a full stage would\n"
         "minSamples: 5\nminAttempts: 5\n")
POLICY = ("strategy: surge\nmaxInFlight: 2\ndurations: {nodeBootSeconds: 180, podStartSeconds: 20}\n"
          "healthGate: {canary: {window: 30m, config: judge.yaml}}\ngateTimeoutSeconds: 7200\n"
          "# before wave 1, one node a pool on the new images, only the canaries' pods on it, judged first\n"
          "firstLight: {pools: all, minResults: 5, timeout: 2h}\n")
# Each stage's host cluster and its first member cluster: every cluster of a stage has its canary runner's pod and its
# rotation's thread, and all of them share two cores with the region server (18 clusters took 6 to 7 minutes of wall
# time for the story; the story is the same on one member cluster a stage).
MEMBERS = 1
SPEED = "300"  # virtual seconds a wall second while anyone works; the region holds it for a working client
SOAKED = ("    rotationPolicy: rotation.yaml\n    judge: judge.yaml\n    soak: 15m\n    minResults: 10\n    passFor: 5m\n"
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


def shrink_stacks(source: Path, folder: Path, pool_size: int = 1, members: int | None = MEMBERS) -> Path:
    """The stack files of ``source`` in ``folder``, every node pool at ``pool_size`` nodes (the host clusters' system
    pools at two) and each stage's first ``members`` member clusters (None: all): an operator's checkout shrunk to run
    every stage at once. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("Pulumi*.yaml")):
        data = yaml.safe_load(path.read_text())
        topology = (data.get("config") or {}).get("platformctl:topology") if isinstance(data, dict) else None
        if topology:
            if members is not None and topology.get("memberClusters"):
                topology["memberClusters"] = topology["memberClusters"][:members]
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
