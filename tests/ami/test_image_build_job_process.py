"""The image build as the Pulumi program runs it: a Job made from the host cluster's suspended CronJob
(``kubectl create job --from=cronjob/platformctl-image-build``), its pod run by the region's kubelet with its own IAM
role's credentials (IRSA, through the region's STS), under the region's IAM and RBAC (``local up --run-jobs``).

The region's account starts with no image of ours (as a new account would): the Job builds the checkout's tree into
the stage's region, copies it to every other stage's region and publishes the ids. What is checked is what AWS and
kubectl show: the Job complete, every image in SSM and in each region, the builders terminated, and the region's
decisions: the build's role made the calls, every one allowed, and every statement of its policy used."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from typing import Any

import boto3
import pytest

from ami.build import tags_of
from ami.manifest import load_manifests
from infra import access
from infra.program import stage_regions
from tests.platformctl.emulator.server.test_iam import used_grant
from tests.process import get, region_fixture

KUBECTL = shutil.which("kubectl")
NAMESPACE = "platformctl-system"
region = region_fixture("--no-workloads", "--no-canaries", "--run-jobs")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it)")


def client(region: dict[str, Any], service: str, where: str) -> Any:
    return boto3.client(service, endpoint_url=region["aws_endpoint"], region_name=where, aws_access_key_id="testing",  # type: ignore[call-overload]
                        aws_secret_access_key="testing")


def ours(ec2: Any) -> list[dict[str, Any]]:
    return [i for i in ec2.describe_images(Owners=["self"])["Images"] if "platformctl:name" in tags_of(i)]


def builders_of(ec2: Any) -> list[dict[str, Any]]:
    return [i for r in ec2.describe_instances(Filters=[{"Name": "tag-key", "Values": ["platformctl:builder"]}])[
        "Reservations"] for i in r["Instances"]]


def test_the_image_build_job_builds_copies_and_publishes_the_tree_with_its_own_role_and_nothing_is_refused(
        region: dict[str, Any]) -> None:
    home = region["region"]
    host = region["clusters"][0]["name"]  # the host cluster comes first
    # A new account: none of our images or parameters (the region built the tree into its AWS when it started).
    ec2, ssm = client(region, "ec2", home), client(region, "ssm", home)
    for image in ours(ec2):
        ec2.deregister_image(ImageId=image["ImageId"])
    names = [p["Name"] for page in ssm.get_paginator("describe_parameters").paginate(ParameterFilters=[
        {"Key": "Name", "Option": "BeginsWith", "Values": ["/platformctl/ami/"]}]) for p in page["Parameters"]]
    for name in names:
        ssm.delete_parameter(Name=name)
    before = {i["InstanceId"] for i in builders_of(ec2)}  # the region's own build's, terminated

    def kubectl(*args: str) -> str:
        done = subprocess.run([KUBECTL, "--kubeconfig", region["kubeconfig"], "--context", host, "-n", NAMESPACE, *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cronjob = json.loads(kubectl("get", "cronjob", "platformctl-image-build", "-o", "json"))
    assert cronjob["spec"]["suspend"] is True  # a build runs when asked, never on its own
    assert "job.batch/build-1 created" in kubectl("create", "job", "build-1", "--from=cronjob/platformctl-image-build")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        status = json.loads(kubectl("get", "job", "build-1", "-o", "json")).get("status") or {}
        if status.get("succeeded") or status.get("failed"):
            break
        time.sleep(1)
    log = kubectl("logs", "job/build-1")
    assert status.get("succeeded") == 1, log[-3000:]

    refused = get(region, "/platformctl/v1/iam-decisions?refused=1")["decisions"]
    assert refused == [], refused
    assert get(region, "/platformctl/v1/rbac-decisions?refused=1")["decisions"] == []
    manifests = load_manifests()
    report = json.loads(log[log.index("{"):])
    built = {b["name"]: b for b in report["built"]}
    assert sorted(built) == sorted(manifests.images) and report["skipped"] == []
    others = [r for r in stage_regions() if r != home]
    assert others  # the checkout's other stages are in other regions: the build copies to each
    for name, image in built.items():
        assert ssm.get_parameter(Name=f"/platformctl/ami/{name}/latest")["Parameter"]["Value"] == image["image_id"]
        assert sorted(image["copies"]) == sorted(others)
        for where, copy in image["copies"].items():
            held = client(region, "ec2", where).describe_images(ImageIds=[copy])["Images"]
            assert held and tags_of(held[0])["platformctl:name"] == name
    builders = [i for i in builders_of(ec2) if i["InstanceId"] not in before]
    assert len(builders) == len(built) and all(i["State"]["Name"] in ("terminated", "shutting-down") for i in builders)
    # The build's own role made the calls (its pod's IRSA session), and used every statement of its policy.
    mine = get(region, f"/platformctl/v1/iam-decisions?role={host}-image-build")["decisions"]
    assert mine and all(d["decision"] == "allowed" for d in mine)
    unused = [g.what for g in access.image_build() if not used_grant(g, mine)]
    assert unused == [], unused  # every statement allowed some call (the cleanup's: the commit tag, on images ours)
    assert {d["action"] for d in mine} <= {a for g in access.image_build() for a in g.actions}
