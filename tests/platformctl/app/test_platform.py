"""A command works its platform out once: each stage's stack file read once, the local region looked at once, however
many of its calls ask; a stack file that does not load is refused the same way at every ask."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from platformctl.app import platform as platform_module
from platformctl.app.platform import Platform
from platformctl.kernel import region_client
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import default_infra_dir


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, list[Any]]:
    """Every read of a stack file and every look at the local region, as the platform makes them (no region runs)."""
    monkeypatch.setenv("PLATFORMCTL_HOME", str(tmp_path / "home"))
    for key in ("PLATFORMCTL_STATE", "KUBECONFIG", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    seen: dict[str, list[Any]] = {"stacks": [], "looks": []}
    read, look = platform_module.read_stack_config, region_client.running

    def reading(path: Path) -> Any:
        seen["stacks"].append(path.name)
        return read(path)

    def looking(home: Path) -> Any:
        seen["looks"].append(home)
        return look(home)

    monkeypatch.setattr(platform_module, "read_stack_config", reading)
    monkeypatch.setattr(region_client, "running", looking)
    return seen


def test_a_stage_is_read_once_and_the_region_looked_at_once_however_often_they_are_asked(
        counted: dict[str, list[Any]]) -> None:
    platform = Platform.from_os()
    for _ in range(3):
        assert platform.stage("dev").name == "dev"
        assert platform.stage_table("dev") == "platformctl-state-dev"
        assert platform.stage_of("dev-usw2a-01") is not None and platform.stage_of("dev-usw2a-01").name == "dev"  # type: ignore[union-attr]
        assert platform.region is None and platform.reached is None and platform.kubeconfig(None) is None
        assert not platform.aws.local
    assert counted["stacks"] == ["Pulumi.dev.yaml"]  # dev declares the cluster: no other stage is read for it
    assert len(counted["looks"]) == 1
    assert Platform.from_os().stage("dev") is not platform.stage("dev")  # the next command reads it afresh


def test_a_stack_file_that_does_not_load_is_refused_the_same_way_each_time_and_read_once(
        counted: dict[str, list[Any]], tmp_path: Path) -> None:
    infra = tmp_path / "infra"
    shutil.copytree(default_infra_dir(), infra)
    (infra / "Pulumi.staging.yaml").write_text("config:\n  aws:region: us-east-2\n")
    platform = Platform.from_os(infra)
    said = []
    for _ in range(2):
        with pytest.raises(PlatformError) as refused:
            platform.stage("staging")
        said.append(str(refused.value))
    assert said[0] == said[1] and "Pulumi.staging.yaml" in said[0] and "topology" in said[0]
    assert counted["stacks"] == ["Pulumi.staging.yaml"]
    # a cluster of another stage is still found: the file that does not load names no cluster
    assert platform.stage_of("dev-usw2a-01").name == "dev"  # type: ignore[union-attr]


def test_a_command_reads_its_stage_once_and_looks_for_the_local_region_at_most_once(
        counted: dict[str, list[Any]], tmp_path: Path) -> None:
    from platformctl.cli import cli
    from platformctl.kernel.state import open_store

    store = tmp_path / "state.db"
    open_store(str(store)).append("canary/dev/x", {"at": 0})
    for args in (["rotate", "status", "--stage", "dev"], ["remediate", "status", "--stage", "dev"],
                 ["canary", "verdict", "--stage", "dev"], ["stage", "show", "dev"]):
        counted["stacks"].clear()
        counted["looks"].clear()
        given = [] if args[0] == "stage" else ["--state", str(store)]
        done = CliRunner().invoke(cli, [*args, *given] + ([] if args[0] == "canary" else ["-o", "json"]))
        assert done.exit_code in (0, 3), done.output  # 3: the verdict is inconclusive, nothing in its window
        assert json.loads(done.stdout)
        assert counted["stacks"] == ([] if args[0] == "canary" else ["Pulumi.dev.yaml"]), args  # a verdict: the store
        assert len(counted["looks"]) <= 1, args
