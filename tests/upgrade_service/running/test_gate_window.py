"""A canary gate whose window cannot hold what a pass needs, at the pace the stage's canaries give an image's arm, is
refused before anything is touched: `rotate run` and the pipeline (`release start`, `release tick`) say so in one line,
exit 2, naming the policy file and `healthGate.canary.window`, and what it falls short of. At its boundary: a window
that holds exactly what is asked passes the check, one result short is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from e2e_canary.definitions import CANARY_DIR, arm_results_within, load_canaries
from platformctl.app.rotation import check_gate_window
from platformctl.cli import cli
from platformctl.kernel.errors import PlatformError
from release_pipeline.pipeline import default_pipeline_file, load_pipeline
from upgrade_service.planning.policy import load_policy

NODE_POOL = "name: node-pool\nkind: node-pool\ninterval: 3m\njitter: 30s\ndeadline: 3m\npodsPerArm: 5\n"


def _policy(tmp_path: Path, gate: str, extra: str = "") -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(f"healthGate: {{canary: {{{gate}}}}}\n{extra}")
    return path


def _canaries(tmp_path: Path, *documents: str) -> Path:
    folder = tmp_path / "canaries"
    folder.mkdir(exist_ok=True)
    for document in documents:
        name = document.split("\n", 1)[0].removeprefix("name: ")
        (folder / f"{name}.yaml").write_text(document)
    return folder


def test_the_shipped_policies_and_pipeline_hold_what_their_gates_ask() -> None:
    canaries = load_canaries(CANARY_DIR)
    found = arm_results_within(canaries, 1800)
    assert found is not None and found[0].name == "node-pool"
    assert found[1] == 8 * 5  # 30 minutes at one attempt of five pods an arm every 3 m 30 s
    pipeline = load_pipeline(default_pipeline_file())
    for stage in pipeline.names:
        path = pipeline.policy_path(stage)
        assert path is not None
        check_gate_window(load_policy(path), canaries=CANARY_DIR)  # nothing raised


def test_first_lights_min_results_at_the_windows_boundary(tmp_path: Path) -> None:
    canaries = _canaries(tmp_path, NODE_POOL)
    judge = tmp_path / "judge.yaml"
    judge.write_text("minSamples: 5\nminAttempts: 5\n")
    # 30 minutes hold 8 attempts of 5 pods: 40 results of an arm
    exactly = _policy(tmp_path, "window: 30m, config: judge.yaml", "firstLight: {minResults: 40}\n")
    check_gate_window(load_policy(exactly), canaries=canaries)
    short = _policy(tmp_path, "window: 30m, config: judge.yaml", "firstLight: {minResults: 41}\n")
    with pytest.raises(PlatformError) as refused:
        check_gate_window(load_policy(short), canaries=canaries)
    assert refused.value.file == str(short) and refused.value.field == "healthGate.canary.window"
    assert "holds 40 results of an image's arm" in refused.value.detail
    assert "firstLight.minResults 41" in refused.value.detail and "minSamples" not in refused.value.detail


def test_the_judges_minimums_are_named_with_where_they_come_from(tmp_path: Path) -> None:
    canaries = _canaries(tmp_path, NODE_POOL)
    policy = _policy(tmp_path, "window: 10m")  # 2 attempts of 5: 10 results, under the judge's defaults of 20
    with pytest.raises(PlatformError) as refused:
        check_gate_window(load_policy(policy), canaries=canaries)
    assert "minSamples (the judge's defaults) 20, minAttempts (the judge's defaults) 20" in refused.value.detail


def test_a_gate_with_no_node_pool_canary_to_judge_by_is_refused(tmp_path: Path) -> None:
    canaries = _canaries(tmp_path, "name: service\nkind: service\n")
    with pytest.raises(PlatformError) as refused:
        check_gate_window(load_policy(_policy(tmp_path, "window: 30m")), canaries=canaries)
    assert refused.value.field == "healthGate.canary" and "no node-pool canary" in refused.value.detail


def test_a_policy_without_a_canary_gate_is_not_checked(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("healthGate: {command: [\"true\"]}\n")
    check_gate_window(load_policy(path), canaries=_canaries(tmp_path, "name: service\nkind: service\n"))


def test_rotate_run_and_release_start_refuse_it_in_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(CANARY_DIR.parents[1])  # the checkout: its canaries are the stage's
    policy = _policy(tmp_path, "window: 10m")
    out = CliRunner().invoke(cli, ["rotate", "run", "--stage", "dev", "--policy", str(policy)])
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert f"{policy}: healthGate.canary.window: window 10m holds 10 results" in out.output
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("stages:\n  - name: dev\n    rotationPolicy: policy.yaml\n")
    ledger = tmp_path / "ledger.db"
    out = CliRunner().invoke(cli, ["release", "start", "--pipeline", str(pipeline), "--ledger", str(ledger)])
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert "healthGate.canary.window" in out.output and not ledger.exists()
