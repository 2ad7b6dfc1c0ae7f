"""`platformctl rotate plan` as operators and automation run it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from platformctl.cli import cli
from platformctl.kernel.humanize import hms

POLICY = """\
targets: {system: ami-0new, general: ami-0new, custom: ami-0new, ml: ami-0newgpu}
poolOrder: {general: [system], ml: [general]}
maxInFlight: 3
durations: {nodeBootSeconds: {default: 180, ml: 420}, podStartSeconds: 30}
"""


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def stage_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dev stage's clusters as the demo leaves them, one snapshot per cluster."""
    out = tmp_path_factory.mktemp("dev")
    result = run("demo", "--stage", "dev", "--minutes", "5", "--save-snapshots", str(out), "--output", "json")
    assert result.exit_code == 0
    return out


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture(scope="module")
def blocking_snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("snap") / "cluster.json"
    assert run("snapshot", "generate", "--nodes", "40", "--blocking-pdbs", "2", "--out", str(path)).exit_code == 0
    return path


def test_plan_json_is_the_default_when_piped(blocking_snapshot: Path, policy: Path) -> None:
    result = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(policy))
    assert result.exit_code == 0
    plan = json.loads(result.stdout)
    assert plan["cluster"] == "cluster" and plan["policy"] == str(policy)
    waved = [n for w in plan["waves"] for n in w["nodes"]]
    blocked = [b["node"] for b in plan["blocked"]]
    assert len(waved) + len(blocked) == plan["nodes_to_rotate"] == 40
    # Waves overlap: the plan ends when its last wave does, each wave's own time is still its own.
    assert plan["estimated_seconds"] == max(w["ends_at_seconds"] for w in plan["waves"])
    assert plan["estimated_seconds"] < sum(w["estimated_seconds"] for w in plan["waves"])
    starts = [w["starts_at_seconds"] for w in plan["waves"]]
    assert starts == sorted(starts) and all(w["ends_at_seconds"] > w["starts_at_seconds"] for w in plan["waves"])
    assert all(len(w["nodes"]) <= 3 and w["reasons"] for w in plan["waves"])
    assert blocked and all("singleton" in b["reason"] and "429" in b["reason"] for b in plan["blocked"])


def test_plan_to_a_file_and_a_table_on_screen(blocking_snapshot: Path, policy: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    result = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(policy), "--output", str(out))
    assert result.exit_code == 0
    assert "waves" in json.loads(out.read_text())
    assert "Nodes that cannot be rotated now" in result.stdout and f"wrote {out}" in result.stdout
    table = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(policy), "-o", "text")
    assert "estimate" in table.stdout and "blocked" in table.stdout
    # Waves overlap: the table says when each starts and ends, and the latest end (a wave still settling may end
    # after the next starts) is the header's estimate.
    written = json.loads(out.read_text())
    estimate = hms(written["estimated_seconds"])
    latest = max(written["waves"], key=lambda w: w["ends_at_seconds"])
    row = next(line for line in table.stdout.splitlines() if line.startswith(f"│ {latest['index']} "))
    assert latest["ends_at_seconds"] == written["estimated_seconds"]
    assert f"estimated {estimate}" in table.stdout and row.rstrip(" │").endswith(estimate)


def test_explain_says_why_a_node_is_where_it_is(blocking_snapshot: Path, policy: Path) -> None:
    plan = json.loads(run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(policy)).stdout)
    node = plan["waves"][-1]["nodes"][0]
    result = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(policy), "--explain", node, "-o", "text")
    assert result.exit_code == 0
    assert f"wave {plan['waves'][-1]['index']} of {len(plan['waves'])}" in result.stdout
    assert "order:" in result.stdout  # the ml pool waits for general, which waits for system
    blocked = plan["blocked"][0]["node"]
    why = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(policy), "--explain", blocked, "-o", "text")
    assert "blocked: it cannot be rotated now" in why.stdout
    missing = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(policy), "--explain", "nope")
    assert missing.exit_code == 2 and "no node 'nope'" in missing.stderr


@pytest.mark.slow  # the whole demo, or a stage built for it: make test-fast leaves it out
def test_stage_plan_orders_clusters_zone_by_zone_host_last(stage_dir: Path, policy: Path) -> None:
    result = run("rotate", "plan", "--stage", "dev", "--snapshot-dir", str(stage_dir), "--policy", str(policy))
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert [s["clusters"] for s in plan["steps"]] == [["dev-usw2a-01"], ["dev-usw2b-01"], ["dev-usw2-host"]]
    member = plan["clusters"]["dev-usw2a-01"]
    assert member["nodes_to_rotate"] == 7 and not member["blocked"]
    order = [w["pools"] for w in member["waves"]]
    assert order.index(["system"]) < order.index(["general"]) < order.index(["ml"])
    # The policy targets ml and custom, which only some clusters have: no warning.
    assert plan["warnings"] == [] and all(c["warnings"] == [] for c in plan["clusters"].values())
    text = run("rotate", "plan", "--stage", "dev", "--snapshot-dir", str(stage_dir), "--policy", str(policy), "-o", "text")
    assert "one zone at a time: zone us-west-2b follows zone us-west-2a" in text.stdout
    typo = policy.parent / "typo.yaml"
    typo.write_text(POLICY.replace("ml: ami-0newgpu}", "ml: ami-0newgpu, gpu: ami-0newgpu}"))
    # A target pool no cluster has is a typo: a CI check of the policy fails on it, naming the pools there are.
    failed = run("rotate", "plan", "--stage", "dev", "--snapshot-dir", str(stage_dir), "--policy", str(typo))
    assert failed.exit_code == 2 and failed.stdout == ""
    assert failed.stderr == (f"platformctl: error: {typo}: targets.gpu: no node of stage dev is in pool 'gpu' (label "
                             "eks.amazonaws.com/nodegroup; pools: custom, general, ml, system)\n")


@pytest.mark.slow  # the whole demo, or a stage built for it: make test-fast leaves it out
def test_stage_plan_mistakes(stage_dir: Path, policy: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run("rotate", "plan", "--stage", "dev", "--snapshot-dir", str(empty), "--policy", str(policy))
    assert result.exit_code == 2 and "dev-usw2-host.json: snapshot file not found" in result.stderr
    named = tmp_path / "named.yaml"
    named.write_text("cluster: dev-usw2a-01\n" + POLICY)
    result = run("rotate", "plan", "--stage", "dev", "--snapshot-dir", str(stage_dir), "--policy", str(named))
    assert result.exit_code == 2 and "named.yaml: cluster: names cluster 'dev-usw2a-01'" in result.stderr


@pytest.mark.parametrize("args", [
    [],
    ["--snapshot", "a.json", "--context", "x"],
    ["--snapshot", "a.json", "--snapshot-dir", "d"],
])
def test_one_source_of_cluster_state(policy: Path, args: list[str]) -> None:
    result = run("rotate", "plan", "--policy", str(policy), *args)
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1


def test_bad_policy_is_one_line_exit_2_and_writes_nothing(blocking_snapshot: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets: {general: ami-1}\nmaxInFlightPerPool: {gpu: 2}\n")
    out = tmp_path / "plan.json"
    result = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(bad), "-o", str(out))
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"platformctl: error: {bad}: maxInFlightPerPool.gpu: pool 'gpu' is not one this "
                                     "policy rotates (targets: general)")
    assert not out.exists()


def test_live_cluster_that_cannot_be_reached_is_one_line(policy: Path, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": "http://127.0.0.1:9"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
    }))
    result = run("rotate", "plan", "--context", "gone", "--kubeconfig", str(kubeconfig), "--policy", str(policy))
    assert result.exit_code == 2
    assert "cannot reach the Kubernetes API at http://127.0.0.1:9" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_target_pool_no_node_is_in_fails_the_plan(blocking_snapshot: Path, tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("targets: {genral: ami-0new}\n")
    result = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(typo))
    assert result.exit_code == 2 and result.stdout == ""
    assert "typo.yaml: targets.genral: no node of cluster cluster is in pool 'genral'" in result.stderr
    assert "pools: custom, general, ml, system" in result.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("targets: {general: ami-1}\nmaxInflight: 3\n", "maxInflight: unknown field (did you mean maxInFlight?)"),
    ("targets: {general: ami-1}\ndurations: {nodeBootSeconds: {general: -5}}\n",
     "durations.nodeBootSeconds.general: Input should be greater than or equal to 0 (got -5)"),
    ("targets: {general: ami-1}\nworkloadRules: [{selector: {matchLabels: {a: b}}, mode: skip, setleSeconds: 1}]\n",
     "workloadRules[0].setleSeconds: unknown field (did you mean settleSeconds?)"),
])
def test_policy_mistakes_read_as_the_file_spells_them(blocking_snapshot: Path, tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = run("rotate", "plan", "--snapshot", str(blocking_snapshot), "--policy", str(bad))
    assert result.exit_code == 2 and result.stderr.strip() == f"platformctl: error: {bad}: {message}"
    assert "constrained" not in result.stderr
