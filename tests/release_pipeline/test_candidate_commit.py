"""A candidate is the whole change: `release start` records the commit of the operator's repository and refuses a
checkout whose infra/ or ami/ differ from it (exit 2, naming the files, nothing written); what a stage's deploy
applies is that commit's tree (its stack file: Kubernetes version, components), extracted with `git archive`, never
the checkout the tick runs in, so a version bump reaches a stage only with the candidate that carries it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from platformctl.cli import cli
from platformctl.kernel.topology import load_stage
from tests.release_pipeline.test_release_cli import lock_everywhere

CHECKOUT = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The operator's repository: a clone of this one."""
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(CHECKOUT), str(clone)], check=True)
    git(clone, "config", "user.email", "op@example.com")
    git(clone, "config", "user.name", "op")
    return clone


def release(repo: Path, tmp_path: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--infra-dir", str(repo / "infra"), "release", *args, "--pipeline",
                                    str(repo / "release_pipeline" / "pipeline.yaml"), "--ledger",
                                    str(tmp_path / "ledger.db")], catch_exceptions=False)


def bump(repo: Path, version: str) -> None:
    path = repo / "infra" / "Pulumi.dev.yaml"
    text = path.read_text()
    config = yaml.safe_load(text)["config"]
    old = config.get("platformctl:kubernetesVersion")
    line = f"  platformctl:kubernetesVersion: \"{version}\"\n"
    if old is None:
        text = text.replace("config:\n", "config:\n" + line, 1)
    else:
        text = "".join(line if "platformctl:kubernetesVersion" in x else x for x in text.splitlines(keepends=True))
    path.write_text(text)


def test_a_checkout_that_differs_from_its_commit_is_refused_naming_the_files(repo: Path, tmp_path: Path) -> None:
    lock = lock_everywhere(tmp_path)
    bump(repo, "1.33")
    (repo / "ami" / "notes.txt").write_text("untracked, but part of the tree the candidate would not be\n")
    out = release(repo, tmp_path, "start", "--lock-file", str(lock))
    assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
    assert "infra/Pulumi.dev.yaml" in out.output and "ami/notes.txt" in out.output and "commit them" in out.output
    assert not (tmp_path / "ledger.db").exists()  # nothing written
    (repo / "ami" / "notes.txt").unlink()
    git(repo, "commit", "-qam", "dev: Kubernetes 1.33")
    made = json.loads(release(repo, tmp_path, "start", "--lock-file", str(lock), "-o", "json").output)
    assert made["infra_revision"] == git(repo, "rev-parse", "HEAD")
    assert made["stages"]["dev"]["kubernetes_version"] == "1.33"


def two_candidates(repo: Path, tmp_path: Path) -> tuple[str, str]:
    """Two candidates started from two commits: the first's dev stack on Kubernetes 1.31, the second's on 1.32."""
    lock = lock_everywhere(tmp_path)
    made = []
    for version in ("1.31", "1.32"):
        bump(repo, version)
        git(repo, "commit", "-qam", f"dev: Kubernetes {version}")
        made.append(json.loads(release(repo, tmp_path, "start", "--lock-file", str(lock), "-o", "json").output)["id"])
    return made[0], made[1]


def test_each_candidate_deploys_its_own_commits_stack_file_whatever_the_checkout_holds(repo: Path, tmp_path: Path) -> None:
    from platformctl.app.release_source import candidate_source
    from platformctl.kernel.state import open_store
    from release_pipeline.ledger import Ledger

    first, second = two_candidates(repo, tmp_path)
    bump(repo, "1.33")  # what the checkout the tick runs in holds now: neither candidate's
    ledger = Ledger(open_store(str(tmp_path / "ledger.db")))
    work = tmp_path / "work"
    for cid, version in ((first, "1.31"), (second, "1.32"), (first, "1.31")):  # the rollback's deploy: the first again
        candidate = ledger.candidate(cid)
        assert candidate is not None
        source = candidate_source(candidate, repo / "infra", work)
        assert source != repo / "infra" and (source.parent / ".venv").exists()
        stack = yaml.safe_load(Path(load_stage("dev", source).source).read_text())["config"]
        assert stack["platformctl:kubernetesVersion"] == version, cid
    assert len(list((work / "source").iterdir())) == 2  # each commit extracted once


def test_a_tick_whose_checkout_has_no_repository_fetches_the_candidates_commit_from_the_pipelines(
        repo: Path, tmp_path: Path) -> None:
    """The jobs' image carries the toolkit's files, not the operator's repository: the tick fetches the candidate's
    one commit from the pipeline's `repository:` (here a file:// URL of the operator's), and says what to do when
    none is named."""
    import dataclasses
    import shutil

    from platformctl.app.release_source import candidate_source
    from platformctl.kernel.errors import PlatformError
    from platformctl.kernel.state import open_store
    from release_pipeline.ledger import Ledger

    first, second = two_candidates(repo, tmp_path)
    image = tmp_path / "opt" / "platformctl"  # as the Dockerfile copies the checkout's data: no .git
    shutil.copytree(repo, image, ignore=shutil.ignore_patterns(".git"))
    ledger = Ledger(open_store(str(tmp_path / "ledger.db")))
    candidate = ledger.candidate(first)
    assert candidate is not None
    with pytest.raises(PlatformError, match="repository:"):
        candidate_source(candidate, image / "infra", tmp_path / "work")
    assert not (tmp_path / "work" / "source").exists()  # nothing half made
    for cid, version in ((first, "1.31"), (second, "1.32")):
        candidate = ledger.candidate(cid)
        assert candidate is not None
        source = candidate_source(candidate, image / "infra", tmp_path / "work", repository=f"file://{repo}")
        stack = yaml.safe_load(Path(load_stage("dev", source).source).read_text())["config"]
        assert stack["platformctl:kubernetesVersion"] == version, cid
        assert (source.parent / ".venv").exists() and (source.parent / "ami").is_dir()
    shallow = git(tmp_path / "work" / "repository.git", "rev-parse", "--is-shallow-repository")
    assert shallow == "true"  # one commit a candidate, not the repository's history
    unknown = dataclasses.replace(candidate, infra_revision="f" * 40)  # a commit the repository does not have
    with pytest.raises(PlatformError, match=f"from file://{repo}"):
        candidate_source(unknown, image / "infra", tmp_path / "work", repository=f"file://{repo}")


def test_a_pipeline_repository_that_git_would_take_for_an_option_is_refused(tmp_path: Path) -> None:
    from release_pipeline.pipeline import load_pipeline

    (tmp_path / "upgrade_service").symlink_to(CHECKOUT / "upgrade_service")  # the policies it names
    (tmp_path / "release_pipeline").mkdir()
    path = tmp_path / "release_pipeline" / "pipeline.yaml"
    text = (CHECKOUT / "release_pipeline" / "pipeline.yaml").read_text()
    path.write_text(text + "repository: --upload-pack=touch /tmp/x\n")
    out = CliRunner().invoke(cli, ["release", "status", "--pipeline", str(path), "--ledger", str(tmp_path / "l.db")])
    assert out.exit_code == 2 and "repository" in out.output and "Traceback" not in out.output, out.output
    assert len(out.output.strip().splitlines()) == 1
    path.write_text(text + "repository: https://git.example.com/platform/platform.git\n")
    assert load_pipeline(path).repository == "https://git.example.com/platform/platform.git"
