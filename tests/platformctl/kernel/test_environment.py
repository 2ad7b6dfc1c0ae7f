"""The environment, worked out once where a command starts: nothing below the command reads or writes ``os.environ``;
each command sees its own; a child process gets the command's AWS target; the local region's keys vouch for nobody."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from moto import mock_aws

from platformctl.kernel import environment
from platformctl.kernel.environment import FAKE_CREDENTIALS, AwsTarget, Environment

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("platformctl", "e2e_canary", "release_pipeline", "upgrade_service", "ami", "infra")
# Where a process starts: the commands (platformctl's, the local region server's) and the one reader.
EDGES = ("platformctl/cli/", "platformctl/kernel/environment.py")


def _touches_the_environment(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" and \
                node.attr in ("environ", "environb", "getenv", "putenv", "unsetenv"):
            lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                any(a.name in ("environ", "getenv", "putenv") for a in node.names):
            lines.append(node.lineno)
    return lines


def _modules(skipped: tuple[str, ...]) -> Iterator[tuple[str, ast.AST]]:
    """Every module of the toolkit's packages but those under ``skipped``, with its syntax."""
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(skipped):
                yield relative, ast.parse(path.read_text())


def test_nothing_below_the_command_reads_or_writes_the_process_environment() -> None:
    found = [f"{relative}:{line}" for relative, tree in _modules(EDGES) for line in _touches_the_environment(tree)]
    assert found == []
    # and the rule can see a use: the one reader has its own
    assert _touches_the_environment(ast.parse((ROOT / "platformctl/kernel/environment.py").read_text()))


def test_each_command_reads_its_own_environment_and_leaves_none_installed(tmp_path: Path) -> None:
    from platformctl.cli import cli
    from platformctl.kernel.state import open_store

    for name in ("a", "b"):
        open_store(str(tmp_path / f"{name}.db")).append("canary/dev/x", {"at": 0})
    runner = CliRunner()
    seen = []
    for name in ("a", "b"):
        done = runner.invoke(cli, ["canary", "verdict", "--stage", "dev"], env={"PLATFORMCTL_STATE": str(tmp_path / f"{name}.db")})
        assert done.exit_code == 3, done.output  # inconclusive: nothing in the window
        seen.append(json.loads(done.stdout)["state"])
    assert seen == [str(tmp_path / "a.db"), str(tmp_path / "b.db")]
    assert environment._installed is None


def test_a_child_process_reaches_the_aws_its_command_was_given() -> None:
    local = AwsTarget(endpoint="http://127.0.0.1:5999", region="eu-west-1", credentials=FAKE_CREDENTIALS, configured=True,
                      local=True)
    given = Environment({"PATH": "/usr/bin:/bin", "KUBECONFIG": "/tmp/kube", "AWS_REGION": "eu-west-1"}).with_aws(local)
    script = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('AWS_ENDPOINT_URL', 'AWS_ACCESS_KEY_ID', " \
             "'AWS_REGION', 'KUBECONFIG', 'PLATFORMCTL_GATE')}))"
    out = subprocess.run([sys.executable, "-c", script], env=given.child(KUBECONFIG=None, PLATFORMCTL_GATE="x"),
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"AWS_ENDPOINT_URL": "http://127.0.0.1:5999", "AWS_ACCESS_KEY_ID": "testing",
                               "AWS_REGION": "eu-west-1", "KUBECONFIG": None, "PLATFORMCTL_GATE": "x"}


def test_the_local_regions_keys_vouch_for_nobody_and_a_configured_account_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from platformctl.kernel.who import who

    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with mock_aws():
        own = Environment.from_os().aws
        assert who(own).startswith("arn:aws:") and not who(own).endswith("(local)")  # STS answers for the keys moto set
        local = AwsTarget(region="us-east-1", credentials=FAKE_CREDENTIALS, configured=True, local=True)
        assert who(local).endswith("(local)")
        assert not who(own).endswith("(local)")


# Where `environment.current()` may still be asked: the commands, the local region's own process, and the one default
# left below them (the AWS client factory's, for a caller that names no target: the `ami` commands' image store).
CURRENT_READERS = ("platformctl/cli/", "platformctl/emulator/", "platformctl/kernel/environment.py",
                   "platformctl/kernel/aws.py")


def test_the_application_layer_and_the_subsystems_are_handed_their_platform_never_ask_for_it() -> None:
    found = [f"{relative}:{node.lineno}" for relative, tree in _modules(CURRENT_READERS) for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module == "platformctl.kernel.environment"
             and any(a.name == "current" for a in node.names)]
    assert found == []
