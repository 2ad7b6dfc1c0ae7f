"""The Dockerfile and the pods the Pulumi program runs it in, kept in step: what would make a job fail on its first night
and nothing else here can show (this machine has no container runtime to build the image).

The Dockerfile is read as Docker reads it (dockerfile-parse); the pods are the program's, declared under Pulumi's mock
engine, as `pulumi up` would apply them."""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

from infra.components.kubernetes import IMAGE_INFRA_DIR, WORK_DIR
from platformctl import __version__
from platformctl.kernel.topology import load_stage
from tests.infra.test_program import declared, k8s_objects

ROOT = Path(__file__).parents[2]


@cache
def dockerfile() -> DockerfileParser:
    return DockerfileParser(path=str(ROOT / "Dockerfile"))


def final_stage() -> list[dict[str, Any]]:
    """The instructions of the image that runs (after the last FROM)."""
    structure = dockerfile().structure
    last = max(i for i, s in enumerate(structure) if s["instruction"] == "FROM")
    return structure[last:]


def instruction(name: str) -> str:
    [value] = [s["value"] for s in final_stage() if s["instruction"] == name]
    return str(value)


def pinned(package: str) -> str:
    [line] = [line for line in (ROOT / "constraints.txt").read_text().splitlines()
              if re.fullmatch(rf"{re.escape(package)}==[^ ]+", line, re.IGNORECASE)]
    return line.split("==")[1]


def pods(stage: str) -> list[tuple[str, dict[str, Any]]]:
    """Every pod spec of platformctl's the stage runs: its CronJobs' and its canary runners'."""
    run, st = declared(stage), load_stage(stage)
    out = []
    for cluster in st.clusters():
        for cron in k8s_objects(run, cluster.name, "CronJob"):
            if cron["metadata"]["name"].startswith("platformctl-"):
                out.append((f"{cluster.name}/{cron['metadata']['name']}", cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
        for deployment in k8s_objects(run, cluster.name, "Deployment"):
            spec = deployment["spec"]["template"]["spec"]
            if any(c["image"].startswith("ghcr.io/platformctl/") for c in spec["containers"]):
                out.append((f"{cluster.name}/{deployment['metadata']['name']}", spec))
    return out


def test_the_image_runs_as_a_numeric_user_so_that_the_pods_run_as_non_root_admits_it() -> None:
    """The kubelet refuses a runAsNonRoot container whose image user is a name ("image has non-numeric user"), and one
    that is root; every pod of the program asks runAsNonRoot."""
    user = instruction("USER").split(":")[0]
    assert user.isdigit() and int(user) != 0
    found = pods("dev")
    assert {name.split("/")[1] for name, _ in found} >= {"platformctl-rotate", "platformctl-remediate", "platformctl-release-tick"}
    for name, pod in found:
        for container in pod["containers"]:
            assert container["securityContext"]["runAsNonRoot"], name
            assert "command" not in container, name  # the image's entrypoint runs: args only


def test_the_entrypoint_is_the_command_and_the_jobs_paths_are_where_the_image_puts_them() -> None:
    """Each job's arguments are platformctl's (the entrypoint), its --infra-dir is the image's copy of the checkout,
    and the checkout's data sits where checkout-relative defaults resolve (the WORKDIR)."""
    import json

    assert json.loads(instruction("ENTRYPOINT")) == ["platformctl"]
    checkout = instruction("WORKDIR")
    assert IMAGE_INFRA_DIR == f"{checkout}/infra"
    copied = {shlex.split(s["value"])[-1] for s in final_stage() if s["instruction"] == "COPY" and "--from" not in s["value"]}
    for needed in ("infra", "ami", "e2e_canary/canaries", "release_pipeline/pipeline.yaml"):
        assert f"{checkout}/{needed}" in copied, needed
    for name, pod in pods("dev"):
        args = pod["containers"][0]["args"]
        assert args[0] != "platformctl", name
        if "--infra-dir" in args:
            assert args[args.index("--infra-dir") + 1] == IMAGE_INFRA_DIR, name
    assert not WORK_DIR.startswith(checkout)  # what the jobs write is the scratch volume, never the image's files


def test_the_tools_in_the_image_are_the_versions_the_toolkit_pins() -> None:
    """The Pulumi CLI and the provider plugins the program's Python packages expect, the Python the toolkit is tested
    on, and an install that follows constraints.txt."""
    args = {}
    for s in dockerfile().structure:
        if s["instruction"] == "ARG" and "=" in s["value"]:
            key, value = s["value"].split("=", 1)
            args[key] = value
    assert args["PULUMI_VERSION"] == pinned("pulumi")
    assert args["PULUMI_AWS_VERSION"] == pinned("pulumi_aws")
    assert args["PULUMI_KUBERNETES_VERSION"] == pinned("pulumi_kubernetes")
    import sys

    assert args["PYTHON_VERSION"].rsplit(".", 1)[0] == f"{sys.version_info.major}.{sys.version_info.minor}"
    runs = " ".join(s["value"] for s in dockerfile().structure if s["instruction"] == "RUN")
    assert "pip install" in runs and "-c /src/constraints.txt" in runs
    for tool in ("pulumi-resource-aws", "pulumi-resource-kubernetes", "awscli-exe-linux"):
        assert tool in runs, tool
    env = dockerfile().envs
    path = env["PATH"].split(":")
    assert "/opt/pulumi" in path and "/opt/aws-cli/bin" in path  # the CLIs, and the plugins as ambient plugins


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_the_stack_files_run_the_image_of_this_version(stage: str) -> None:
    """A stage's jobs run the image built from this version of the toolkit, not another."""
    images = {c["image"] for _, pod in pods(stage) for c in pod["containers"]}
    assert images == {f"ghcr.io/platformctl/platformctl:{__version__}"}
