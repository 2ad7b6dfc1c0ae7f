"""The release tick as the Pulumi program declares it: the host cluster's ``platformctl-release-tick`` CronJob (the local
region declares it suspended, as a stage is until bootstrapped), a Job made from it (``kubectl create job
--from=cronjob/platformctl-release-tick``) at a time, each pod run by the region's kubelet with the tick's own IAM role
(IRSA, through the region's STS) and its access entry's Kubernetes groups, under the region's IAM and RBAC
(``local up --run-jobs``).

An operator builds a new image tree and starts it as a candidate in the region's ledger (a DynamoDB table of the
region's account, which the first stage's stack creates); the tick's pods enter it into dev and deploy it. What is
checked is what AWS and kubectl show: each Job complete, dev's launch templates booting the candidate's images, the
ledger's entries made by the tick's role, and the region's decisions: every call the tick's pods made allowed, each
one of the tick's grants (``infra.access.release_tick``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from ami.manifest import MANIFEST_DIR
from infra import access
from infra.program import stage_regions
from platformctl.app.demo.checkout import new_tree
from tests.process import get, region_fixture, run

KUBECTL = shutil.which("kubectl")
NAMESPACE = "platformctl-system"
PIPELINE = Path(__file__).resolve().parents[2] / "release_pipeline" / "pipeline.yaml"
region = region_fixture("--no-workloads", "--run-jobs")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it)")


def kubectl(region: dict[str, Any], *args: str) -> str:
    host = region["clusters"][0]["name"]  # the host cluster comes first
    done = subprocess.run([str(KUBECTL), "--kubeconfig", region["kubeconfig"], "--context", host, "-n", NAMESPACE, *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def tick(region: dict[str, Any], name: str) -> dict[str, Any]:
    """One tick as the CronJob would run it: a Job from its template, waited for; its JSON report."""
    assert f"job.batch/{name} created" in kubectl(region, "create", "job", name, "--from=cronjob/platformctl-release-tick")
    deadline = time.monotonic() + 600
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = json.loads(kubectl(region, "get", "job", name, "-o", "json")).get("status") or {}
        if status.get("succeeded") or status.get("failed"):
            break
        time.sleep(1)
    log = kubectl(region, "logs", f"job/{name}")
    assert status.get("succeeded") == 1, log[-3000:]
    report: dict[str, Any] = json.loads(log[log.index("{"):])
    assert report["errors"] == [], report["errors"]
    return report


def default_images(ec2: Any) -> dict[str, str]:
    """Each launch template of the stage and the image its default version boots."""
    out = {}
    for template in ec2.describe_launch_templates()["LaunchTemplates"]:
        version = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"],
                                                        Versions=["$Default"])["LaunchTemplateVersions"][0]
        out[template["LaunchTemplateName"]] = version["LaunchTemplateData"]["ImageId"]
    return out


def test_the_ticks_pods_enter_and_deploy_a_candidate_with_the_ticks_own_role_and_nothing_is_refused(
        region: dict[str, Any]) -> None:
    home, host, where = region["home"], region["clusters"][0]["name"], region["region"]
    cronjob = json.loads(kubectl(region, "get", "cronjob", "platformctl-release-tick", "-o", "json"))
    assert cronjob["spec"]["suspend"] is True  # declared, and run only when asked
    kubectl(region, "get", "secret", "platformctl-pulumi")  # the bootstrap's Secret its pods read
    # An operator's change: a new image tree, built into every stage's region, started as a candidate in the ledger.
    tree = new_tree(MANIFEST_DIR, home / "manifests-2", "2.0.0")
    copies = [a for r in stage_regions() if r != where for a in ("--copy-to", r)]
    run(home, "ami", "build", "--manifests", str(tree), *copies, timeout=600)
    operator = {"AWS_ENDPOINT_URL": region["aws_endpoint"], "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": where}
    started = run(home, "release", "start", "--pipeline", str(PIPELINE), "--ledger", region["ledger"], "--note", "pods",
                  env=operator)
    candidate = started.stdout.split()[1]
    assert candidate.startswith("c-"), started.stdout

    steps: list[dict[str, Any]] = []
    for n in range(1, 5):
        steps += tick(region, f"tick-{n}")["steps"]
        if any(s["decision"] == "deployed" for s in steps):
            break
    decisions = [s["decision"] for s in steps]
    assert decisions[:3] == ["enter", "deploy", "deployed"], decisions
    assert all(s["candidate"] == candidate and s["stage"] == "dev" for s in steps)
    # Made by the tick's role, as the ledger records who acted: its pod's IRSA session.
    assert all(f":assumed-role/{host}-release/" in s["by"] for s in steps), [s["by"] for s in steps]
    # What EC2 shows: every launch template of dev boots the candidate's image of its family.
    wanted = {f: i["id"] for f, i in next(s for s in steps if s["decision"] == "deploy")["inputs"]["images"].items()}
    ec2 = boto3.client("ec2", endpoint_url=region["aws_endpoint"], region_name=where, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    booted = default_images(ec2)
    assert booted and set(booted.values()) <= set(wanted.values()), (booted, wanted)

    # Nothing refused, by AWS or by any API server; the tick's calls all its own role's, within its grants.
    assert get(region, "/platformctl/v1/iam-decisions?refused=1")["decisions"] == []
    assert get(region, "/platformctl/v1/rbac-decisions?refused=1")["decisions"] == []
    mine = get(region, f"/platformctl/v1/iam-decisions?role={host}-release")["decisions"]
    grants = access.release_tick("dev", where, "STATE_TABLE", "LEDGER", "s3://BUCKET", [host])
    made = {d["action"] for d in mine} - {"sts:GetCallerIdentity"}  # who acts: AWS answers it whatever the policies
    assert made <= {a for g in grants for a in g.actions}, made
    # the deploy's own: a new launch template version, made the default (the groups follow $Latest)
    assert {"ec2:CreateLaunchTemplateVersion", "ec2:ModifyLaunchTemplate"} <= made, sorted(made)
