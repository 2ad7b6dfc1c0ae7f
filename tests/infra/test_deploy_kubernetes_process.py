"""``stage deploy`` applies the program's Kubernetes objects to the local region's API servers, as ``pulumi up``'s
Kubernetes provider does: a changed object is replaced at the version read, with the deployer's own kubeconfig, and
the cluster's refusal stops the deploy on one line. What is checked is what an operator sees: the command's output and
exit code, and the object kubectl reads back."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.process import region_fixture, run

region = region_fixture("--no-workloads")
ROTATE = "platformctl-rotate"


def schedule(region: dict[str, Any]) -> str:
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is not installed (.ci/run installs it)"
    out = subprocess.run([binary, "--kubeconfig", region["kubeconfig"], "get", "cronjob", ROTATE, "-n",
                          "platformctl-system", "-o", "json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return str(json.loads(out.stdout)["spec"]["schedule"])


def test_a_changed_cronjob_is_applied_with_the_deployers_kubeconfig_and_a_refusal_is_one_line(
        region: dict[str, Any], tmp_path: Path) -> None:
    home = region["home"]
    assert schedule(region) == "0 3 * * 1-5"  # dev's, as shipped
    infra = tmp_path / "infra"  # the operator's change: dev's scheduled rotation an hour later
    shutil.copytree(Path("infra"), infra, ignore=shutil.ignore_patterns("__pycache__"))
    stack = infra / "Pulumi.dev.yaml"
    stack.write_text(stack.read_text().replace('schedule: "0 3 * * 1-5"', 'schedule: "0 4 * * 1-5"', 1))

    # Credentials the clusters do not take (an expired token): the API server's 401, on one line, and nothing applied.
    kubeconfig = yaml.safe_load(Path(region["kubeconfig"]).read_text())
    for user in kubeconfig["users"]:
        user["user"] = {"token": "expired"}
    stale = tmp_path / "stale-kubeconfig"
    stale.write_text(yaml.safe_dump(kubeconfig))
    refused = run(home, "--infra-dir", str(infra), "stage", "deploy", "--stage", "dev", check=False,
                  env={"KUBECONFIG": str(stale)})
    assert refused.returncode == 1, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert line == f"platformctl: error: {stale}: context dev-usw2-host: discovery: answered 401 Unauthorized: Unauthorized"
    assert schedule(region) == "0 3 * * 1-5"

    # The operator's own kubeconfig (the region's): the CronJob is replaced, and only it.
    done = json.loads(run(home, "--infra-dir", str(infra), "stage", "deploy", "--stage", "dev", "-o", "json").stdout)
    changed = [(c["action"], c["type"], c["detail"]) for c in done["changes"] if c["action"] != "unchanged"]
    assert changed == [("update", "kubernetes:batch/v1:CronJob", "changed (spec)")], changed
    assert schedule(region) == "0 4 * * 1-5"
    again = json.loads(run(home, "--infra-dir", str(infra), "stage", "deploy", "--stage", "dev", "-o", "json").stdout)
    assert set(again["summary"]) == {"unchanged"}, again["summary"]
