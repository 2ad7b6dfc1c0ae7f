"""The Pulumi project, stack and policy pack files, read the way the Pulumi CLI reads them: YAML first, then the
documented fields and types (https://www.pulumi.com/docs/iac/concepts/projects/project-file/). A file Pulumi
cannot read stops `pulumi up` before the program runs, and no other test would notice."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from platformctl.kernel.topology import STAGES

INFRA = Path(__file__).parents[2] / "infra"
PROJECT_FIELDS = {"name", "runtime", "description", "config", "packages", "main", "stackConfigDir", "backend", "options",
                  "template", "plugins", "author", "license", "website"}
RUNTIMES = {"nodejs", "python", "go", "dotnet", "java", "yaml", "bun"}
STACK_FIELDS = {"config", "secretsprovider", "encryptedkey", "encryptionsalt", "environment"}
PROVIDERS = {"aws", "kubernetes", "pulumi"}


def load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        pytest.fail(f"{path}: not valid YAML, as Pulumi reads it: {exc}")


def check_runtime(runtime: Any, where: str) -> None:
    if isinstance(runtime, str):
        assert runtime in RUNTIMES, where
        return
    assert isinstance(runtime, dict) and set(runtime) <= {"name", "options"}, where
    assert runtime["name"] in RUNTIMES and isinstance(runtime.get("options", {}), dict), where
    if runtime["name"] == "python":
        options = runtime.get("options", {})
        assert set(options) <= {"toolchain", "virtualenv", "typechecker"}, where
        assert options.get("toolchain", "pip") in ("pip", "poetry", "uv"), where


def test_the_project_file_reads_as_pulumi_reads_it() -> None:
    project = load(INFRA / "Pulumi.yaml")
    assert isinstance(project, dict) and set(project) <= PROJECT_FIELDS, set(project) - PROJECT_FIELDS
    assert isinstance(project["name"], str) and re.fullmatch(r"[A-Za-z0-9_.-]+", project["name"])
    check_runtime(project["runtime"], "Pulumi.yaml: runtime")
    assert isinstance(project.get("description", ""), str)
    # The program's virtualenv is the one `make` builds.
    assert (INFRA / project["runtime"]["options"]["virtualenv"]).resolve() == (INFRA.parent / ".venv").resolve()
    assert (INFRA / "__main__.py").is_file()


@pytest.mark.parametrize("stage", STAGES)
def test_every_stack_file_reads_as_pulumi_reads_it(stage: str) -> None:
    project = load(INFRA / "Pulumi.yaml")
    stack = load(INFRA / f"Pulumi.{stage}.yaml")
    assert isinstance(stack, dict) and set(stack) <= STACK_FIELDS
    config = stack["config"]
    assert isinstance(config, dict)
    for key in config:
        namespace, _, name = key.partition(":")
        assert name and namespace in {project["name"], *PROVIDERS}, f"Pulumi.{stage}.yaml: config key {key!r}"


def test_the_policy_pack_file_reads_as_pulumi_reads_it() -> None:
    pack = load(INFRA / "policy" / "PulumiPolicy.yaml")
    assert isinstance(pack, dict) and set(pack) <= {"runtime", "description", "main", "version"}
    check_runtime(pack["runtime"], "PulumiPolicy.yaml: runtime")
    assert isinstance(pack.get("description", ""), str)
