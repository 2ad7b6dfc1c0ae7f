"""The `platformctl` command as users run it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from platformctl.cli import cli
from platformctl.kernel.cluster.model import load_snapshot
from tests.conftest import FIXTURES

INFRA = Path(__file__).resolve().parents[2] / "infra"


def run(*args: str) -> CliRunner.invoke:  # type: ignore[name-defined]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_stage_show_json() -> None:
    result = run("stage", "show", "prod", "--output", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["region"] == "us-east-1" and len(data["zones"]) == 3
    kinds = [c["kind"] for c in data["clusters"]]
    assert kinds.count("host") == 1 and kinds.count("member") == 6
    assert data["clusters"][1]["node_pools"][0]["instanceTypes"] == ["m6i.large"]


def test_stage_show_table() -> None:
    result = run("stage", "show", "dev")
    assert result.exit_code == 0 and "dev-usw2a-01" in result.stdout and "g5.12xlarge" in result.stdout


def test_bad_stage_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    shutil.copy(INFRA / "Pulumi.dev.yaml", tmp_path / "Pulumi.dev.yaml")
    path = tmp_path / "Pulumi.dev.yaml"
    path.write_text(path.read_text().replace("zone: us-west-2b", "zone: us-west-2q"))
    result = CliRunner().invoke(cli, ["--infra-dir", str(tmp_path), "stage", "show", "dev"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"platformctl: error: {path}: config.platformctl:topology.memberClusters[1].zone: ")


def test_local_up_with_a_home_that_cannot_be_made_is_one_line_and_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    home = blocker / "home"  # under a file: no folder can be made there
    result = CliRunner(env={"PLATFORMCTL_HOME": str(home)}).invoke(cli, ["local", "up", "--stage", "dev", "--run-jobs"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"platformctl: error: {home / 'local'}: PLATFORMCTL_HOME: cannot make the local region's folder")
    assert not home.exists()


def test_snapshot_inspect_reports_blocking_budgets() -> None:
    result = run("snapshot", "inspect", str(FIXTURES / "eviction_rules.json"), "--output", "json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert (data["nodes"], data["pdbs"]) == (2, 12)
    blocking = {(b["namespace"], b["name"]) for b in data["pdbs_blocking"]}
    assert ("zero", "solo") in blocking and ("batch", "report") in blocking and ("web", "web") not in blocking
    report = next(b for b in data["pdbs_blocking"] if b["name"] == "report")
    assert "found no controllers" in report["reason"]


def test_snapshot_generate_then_inspect(tmp_path: Path) -> None:
    out = tmp_path / "cluster.json"
    result = run("snapshot", "generate", "--nodes", "20", "--blocking-pdbs", "2", "--out", str(out), "--output", "json")
    assert result.exit_code == 0
    made = json.loads(result.stdout)
    snap = load_snapshot(out)
    assert len(snap.nodes) == made["nodes"] == 20 and len(snap.pods) == made["pods"] and len(snap.pdbs) == made["pdbs"]
    table = run("snapshot", "inspect", str(out))
    assert table.exit_code == 0 and "20 nodes" in table.stdout
    inspected = json.loads(run("snapshot", "inspect", str(out), "--output", "json").stdout)
    assert sorted(b["name"] for b in inspected["pdbs_blocking"]) == ["singleton-000", "singleton-001"]


@pytest.mark.slow  # the whole demo, or a stage built for it: make test-fast leaves it out
def test_demo_tells_the_story_and_keeps_every_budget(tmp_path: Path) -> None:
    result = run("demo", "--minutes", "20", "--output", "json", "--save-snapshots", str(tmp_path))
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["stage"] == "dev" and data["budget_violations"] == []
    assert data["nodes_replaced"] == 2 and data["evictions"] > 0
    assert len(data["story"]) == 2 and "drained the old node" in data["story"][1] and "done in" in data["story"][1]
    canaries = data["rotation"]["canaries"]  # the canary gate was asked before every wave, and the new images pass
    assert canaries["verdict"] == "pass" and canaries["results"] > 0
    waves = {name: c["waves"] for name, c in data["rotation"]["clusters"].items()}
    assert all(canaries["gate"][name]["pass"] == waves[name] and canaries["gate"][name]["fail"] == 0 for name in waves)
    for name, cluster in data["clusters"].items():
        assert cluster["nodes"] == cluster["nodes_ready"] > 0
        assert load_snapshot(tmp_path / f"{name}.json").nodes


def test_user_errors_exit_2_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}, "spec": {}}]}')
    proc = subprocess.run([sys.executable, "-m", "platformctl", "snapshot", "inspect", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == f"platformctl: error: {bad}: items[0].spec.containers: a pod needs at least one container\n"
    assert proc.stdout == ""


def test_every_output_path_is_checked_before_any_work(tmp_path: Path) -> None:
    import time

    policy = tmp_path / "policy.yaml"
    policy.write_text("targets: {general: ami-1}\n")
    missing = tmp_path / "missing-dir"
    cases = [
        (["snapshot", "generate", "--nodes", "3000", "--out", str(missing / "x.json")], "--out: folder"),
        (["rotate", "plan", "--snapshot", str(FIXTURES / "eviction_rules.json"), "--policy", str(policy), "-o",
          str(missing / "plan.json")], "--output: folder"),
        (["demo", "--save-snapshots", str(missing / "snaps")], "--save-snapshots: folder"),
        (["demo", "--save-snapshots", "/proc/snaps"], "--save-snapshots: cannot be written"),  # its parent refuses it
        (["ami", "build", "--lock-file", str(missing / "images.lock.json")], "--lock-file: folder"),
        (["snapshot", "generate", "--out", str(tmp_path)], "is a directory"),
        (["snapshot", "generate", "--nodes", "3000", "--out", "/proc/x.json"], "--out: cannot be written"),  # even as root
    ]
    for args, message in cases:
        began = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "platformctl", *args], capture_output=True, text=True, timeout=120,
                                env={k: v for k, v in __import__("os").environ.items() if not k.startswith("AWS_")})
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr
        assert time.monotonic() - began < 20  # refused up front, not after building a 3,000-node cluster
    assert not missing.exists()


def test_usage_mistakes_are_one_line_naming_what_is_allowed(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "a",
                                      "clusters": [{"name": "a", "cluster": {"server": "http://127.0.0.1:9"}}],
                                      "contexts": [{"name": n, "context": {"cluster": "a", "user": "u"}} for n in ("a", "b")],
                                      "users": [{"name": "u", "user": {"token": "t"}}]}))
    policy = tmp_path / "policy.yaml"
    policy.write_text("targets: {general: ami-1}\n")
    cases = [
        (["stage", "show", "qa"], "'qa' is not one of 'dev', 'staging', 'prod-canary', 'prod'"),
        (["rotate", "run", "--stage", "qa", "--policy", str(policy)], "rotate run: Invalid value for '--stage'"),
        (["rotate", "run", "--stage", "dev"], "rotate run: Missing option '--policy'"),
        (["rotate", "plan", "--policy", str(policy), "--context", "c", "--kubeconfig", str(kubeconfig)],
         "--context: no context 'c' (contexts: a, b)"),
    ]
    for args, message in cases:
        result = subprocess.run([sys.executable, "-m", "platformctl", *args], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_defaults_come_from_the_checkout_the_operator_stands_in(tmp_path: Path) -> None:
    """Run from a second checkout (here: a copy of this one's ami/ and infra/), its files are read, not the
    package's; from a folder in no checkout, that is said instead of falling back."""
    repo = Path(__file__).resolve().parents[2]
    second = tmp_path / "second"
    shutil.copytree(repo / "ami" / "manifests", second / "ami" / "manifests")
    shutil.copytree(repo / "infra", second / "infra", ignore=shutil.ignore_patterns("__pycache__"))
    (second / "ami" / "manifests" / "general.yaml").write_text(
        (second / "ami" / "manifests" / "general.yaml").read_text().replace("net.core.somaxconn: 32768", "net.core.somaxconn: 65535", 1))
    base = second / "ami" / "manifests" / "base.yaml"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("AWS_")}

    def platformctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "platformctl", *args], capture_output=True, text=True, cwd=cwd,
                              env=env, timeout=120)

    resolved = platformctl("ami", "resolve", "general", "-o", "json", cwd=second / "infra")  # from a subfolder too
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(resolved.stdout)["image"]["sysctls"]["net.core.somaxconn"] == 65535
    stage = platformctl("stage", "show", "dev", "-o", "json", cwd=second)
    assert json.loads(stage.stdout)["source"] == str(second / "infra" / "Pulumi.dev.yaml")
    base.write_text(base.read_text().replace("source:", "parent: custom\nsource:", 1))
    cycle = platformctl("ami", "graph", cwd=second)
    assert cycle.returncode == 2 and str(second / "ami" / "manifests") in cycle.stderr
    nowhere = tmp_path / "nowhere"
    nowhere.mkdir()
    for args, option in ((["ami", "graph"], "--manifests"), (["stage", "show", "dev"], "--infra-dir")):
        result = platformctl(*args, cwd=nowhere)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert f"no {'ami/manifests' if option == '--manifests' else 'infra'}/" in result.stderr and option in result.stderr


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it (its own process: a RecursionError must not take the test runner with it)."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("AWS_", "PLATFORMCTL_")) and k != "KUBECONFIG"}
    return subprocess.run([sys.executable, "-m", "platformctl", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def test_inputs_that_once_gave_a_traceback_are_one_line_and_exit_2(tmp_path: Path) -> None:
    import sqlite3

    deep_json = tmp_path / "deep.json"
    deep_json.write_text("[" * 100_000 + "]" * 100_000)
    deep_yaml = tmp_path / "deep.yaml"
    deep_yaml.write_text("".join("  " * i + "k:\n" for i in range(3000)))
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    snapshot = str(FIXTURES / "eviction_rules.json")
    cases = [
        (["snapshot", "inspect", str(deep_json)], f"{deep_json}: nested too deeply to read"),
        (["canary", "judge", "--baseline", str(deep_json), "--experiment", str(deep_json)], f"{deep_json}: nested too deeply"),
        (["rotate", "plan", "--snapshot", snapshot, "--policy", str(deep_yaml)], f"{deep_yaml}: nested too deeply"),
        (["rotate", "run", "--context", "c", "--policy", str(deep_yaml), "--lease-ttl", "nan"],
         "'nan' is not a number of seconds from 1 to 3600"),
        (["rotate", "run", "--context", "c", "--policy", str(deep_yaml), "--lease-ttl", "inf"],
         "'inf' is not a number of seconds from 1 to 3600"),
        (["remediate", "--context", "c", "--lease-ttl", "inf"], "'inf' is not a number of seconds"),
        (["rotate", "status", "--context", "c", "--state", str(other)],
         f"{other}: --state: is not a platformctl state store: it holds another program's tables (users)"),
    ]
    for args, says in cases:
        result = _cli(*args)
        assert result.returncode == 2, (args, result.stderr[-1000:])
        assert result.stderr.count("\n") == 1 and says in result.stderr and "Traceback" not in result.stderr, result.stderr
    with sqlite3.connect(other) as conn:  # and the other program's file is as it was
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["users"]
