"""`platformctl release tick` as the CronJob runs it, a new process each minute, against the local region with its
canary runners: a new image tree built, started as a candidate, entered, deployed, rotated, soaked and promoted, every
node on its images, and every decision replays."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ami.manifest import MANIFEST_DIR
from platformctl.cluster.live import LiveCluster
from tests.process import canary_runners, local_region, run, stop_all

POLICY = "strategy: surge\nmaxInFlight: 4\ndurations: {nodeBootSeconds: 180, podStartSeconds: 20}\n"


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("home")
    info = local_region(home, "--no-workloads")
    runners = canary_runners(home, info)
    yield info
    stop_all(runners)
    run(home, "local", "down", check=False)


def build_new_images(home: Path, version: str) -> None:
    manifests = home / "manifests"
    manifests.mkdir(exist_ok=True)
    for path in MANIFEST_DIR.glob("*.yaml"):
        text = path.read_text()
        if path.name == "base.yaml":
            current = next(line for line in text.splitlines() if line.startswith("version:"))
            text = text.replace(current, f"version: {version}", 1)
        (manifests / path.name).write_text(text)
    run(home, "ami", "build", "--manifests", str(manifests))


def test_a_candidate_is_carried_through_dev_and_promoted_with_every_node_on_its_images(region: dict[str, Any]) -> None:
    home = region["home"]
    (home / "rotation.yaml").write_text(POLICY)
    pipeline = home / "pipeline.yaml"
    pipeline.write_text("stages:\n  - name: dev\n    rotationPolicy: rotation.yaml\n    soak: 30m\n    minResults: 20\n"
                        "    passFor: 10m\n    deadline: 6h\n")
    ledger = str(home / "ledger.db")
    build_new_images(home, "9.1.0")
    made = json.loads(run(home, "release", "start", "--pipeline", str(pipeline), "--ledger", ledger, "--note", "base 9.1",
                          "-o", "json").stdout)
    cid, images = made["id"], set(i["id"] for i in made["stages"]["dev"]["images"].values())
    decisions: list[str] = []
    for _ in range(60):
        out = run(home, "release", "tick", "--pipeline", str(pipeline), "--ledger", ledger, "-o", "json", check=False,
                  timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        decisions += [s["decision"] for s in json.loads(out.stdout)["steps"]]
        if "promote" in decisions or "halt" in decisions:
            break
    history = json.loads(run(home, "release", "history", "--pipeline", str(pipeline), "--ledger", ledger, "-o", "json").stdout)
    assert "promote" in decisions, [(e["decision"], e["reason"]) for e in history][-6:]
    assert decisions[:5] == ["enter", "deploy", "deployed", "rotate", "rotated"], decisions
    status = json.loads(run(home, "release", "status", "--pipeline", str(pipeline), "--ledger", ledger, "-o", "json").stdout)
    assert status["stages"]["dev"]["last_good"] == cid and status["stages"]["dev"]["current"] is None
    for cluster in region["clusters"]:
        live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=cluster["name"])
        assert {n.image for n in live.list_nodes()} <= images, cluster["name"]  # every node on the candidate's images
    rotated = next(e for e in history if e["decision"] == "rotated")
    promoted = next(e for e in history if e["decision"] == "promote")
    assert promoted["at"] - rotated["at"] >= 1800  # soaked from the end of the rotation, on the region's clock
    for entry in history:
        if entry["decision"] in ("enter", "soak", "promote"):
            again = run(home, "release", "replay", entry["id"], "--pipeline", str(pipeline), "--ledger", ledger, check=False)
            assert again.returncode == 0, again.stdout
