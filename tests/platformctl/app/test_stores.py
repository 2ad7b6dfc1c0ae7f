"""Which state store a command uses when --state does not say: the stage's own, never the current directory's by accident."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from moto import mock_aws

from platformctl.app.platform import Platform
from platformctl.app.stores import store_for
from platformctl.kernel.state.dynamodb import DynamoDBStore, create_table
from platformctl.kernel.state.sqlite import SQLiteStore


@pytest.fixture
def no_region(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No local region runs, no store named in the environment, no AWS endpoint of a developer's."""
    monkeypatch.setenv("PLATFORMCTL_HOME", str(tmp_path / "home"))
    for key in ("PLATFORMCTL_STATE", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-west-2")


def test_a_stage_of_a_real_account_reads_and_writes_the_table_its_program_creates(no_region: None) -> None:
    with mock_aws():
        create_table("platformctl-state-prod", "us-east-1")  # in prod's region, not the shell's (us-west-2)
        platform = Platform.from_os()
        store = store_for(platform, None, stage="prod")
        assert isinstance(store, DynamoDBStore) and store.location == "dynamodb://platformctl-state-prod?region=us-east-1"
        assert platform.stage_table("prod") == "platformctl-state-prod"
        # A cluster of that stage, named by its context, finds the same table through the stage's stack file.
        from platformctl.kernel.topology import load_stage

        member = next(c.name for c in load_stage("prod").clusters())
        assert platform.stage_of(member).name == "prod"  # type: ignore[union-attr]
        assert store_for(platform, None, cluster=member).location == "dynamodb://platformctl-state-prod?region=us-east-1"


def test_the_table_a_stage_names_is_the_one_used(no_region: None, tmp_path: Path) -> None:
    import shutil

    from platformctl.kernel.topology import default_infra_dir

    infra = tmp_path / "infra"
    shutil.copytree(default_infra_dir(), infra)
    stack = infra / "Pulumi.staging.yaml"
    text = stack.read_text()
    assert "  platformctl:rotation:\n" in text and "stateTable" not in text
    stack.write_text(text.replace("  platformctl:rotation:\n", "  platformctl:rotation:\n    stateTable: team-state-staging\n", 1))
    with mock_aws():
        create_table("team-state-staging", "us-east-2")
        assert store_for(Platform.from_os(infra), None, stage="staging").location == "dynamodb://team-state-staging?region=us-east-2"


def test_state_or_the_environment_overrides_and_an_unknown_cluster_keeps_the_local_file(no_region: None,
                                                                                         tmp_path: Path,
                                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    given = store_for(Platform.from_os(), str(tmp_path / "mine.db"), stage="prod")
    assert isinstance(given, SQLiteStore) and given.path == tmp_path / "mine.db"
    monkeypatch.setenv("PLATFORMCTL_STATE", f"sqlite:///{tmp_path / 'env.db'}")
    assert store_for(Platform.from_os(), None, stage="prod").location == f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.delenv("PLATFORMCTL_STATE")
    local = store_for(Platform.from_os(), None, cluster="a-cluster-no-stage-has")
    assert isinstance(local, SQLiteStore) and local.path == Path(os.environ["PLATFORMCTL_HOME"]) / "state.db"


@pytest.mark.parametrize("args", [
    ["canary", "verdict", "--stage", "dev", "--state", "{missing}"],
    ["rotate", "status", "--stage", "dev", "--state", "{missing}"],
    ["rotate", "pause", "--stage", "dev", "--state", "{missing}"],
    ["remediate", "status", "--stage", "dev", "--state", "{missing}"],
    ["release", "status", "--ledger", "{missing}"],
    ["release", "history", "--ledger", "{missing}"],
])
def test_a_command_that_reads_a_store_a_mistyped_path_names_is_exit_2_and_makes_nothing(
        args: list[str], no_region: None, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from platformctl.cli import cli

    missing = tmp_path / "stat.db"  # the operator meant state.db
    done = CliRunner().invoke(cli, [a.format(missing=missing) for a in args])
    assert done.exit_code == 2, done.output
    assert done.stderr.count("\n") == 1 and f"no state store at {missing}" in done.stderr, done.stderr
    assert ("--ledger" if "--ledger" in args else "--state") in done.stderr
    assert not missing.exists()


def test_a_store_the_environment_names_that_is_not_there_is_named_as_the_environments(no_region: None, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from platformctl.cli import cli

    missing = tmp_path / "nowhere.db"
    done = CliRunner().invoke(cli, ["canary", "verdict", "--stage", "dev"], env={"PLATFORMCTL_STATE": str(missing)})
    assert done.exit_code == 2 and "PLATFORMCTL_STATE" in done.stderr and not missing.exists(), done.output
