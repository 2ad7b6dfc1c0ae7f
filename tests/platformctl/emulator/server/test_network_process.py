"""What a job's pod can reach, as the stage's security groups say (``local up --run-jobs``).

Every endpoint is private: the rotation and the release tick run on the host cluster and call every member, so each
member's security group admits the host's nodes on 443 (the program's rule; the scheduled rotation rotating every
member, in test_own_eviction_process, is the other half). Here an operator removes that rule from the region's EC2, and
the scheduled rotation, started as the CronJob would start it, cannot reach the member: its connections are dropped,
its retries run out, its pod fails, and nothing of the member is touched. Checked as an operator sees it: the Job and
its pod's log through kubectl, the member's nodes through the API, the security groups through boto3."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import boto3

from platformctl.kernel.cluster.live import LiveCluster
from tests.process import new_images, region_fixture
from tests.upgrade_service.running.test_own_eviction_process import NAMESPACE, host, kubectl, ungated

region = region_fixture("--no-workloads", "--run-jobs")


def ec2(region: dict[str, Any]) -> Any:
    return boto3.client("ec2", region_name="us-west-2", endpoint_url=region["aws_endpoint"],
                        aws_access_key_id="testing", aws_secret_access_key="testing")


def test_a_member_whose_security_group_does_not_admit_the_host_is_out_of_the_rotation_jobs_reach(
        region: dict[str, Any]) -> None:
    member = next(c["name"] for c in region["clusters"] if c["name"] != host(region))
    for cluster in region["clusters"]:  # remediation's CronJob (a process every 5 minutes) is not what is tried
        kubectl(region, "patch", "cronjob", "platformctl-remediate", "-n", NAMESPACE, "-p", '{"spec":{"suspend":true}}',
                context=cluster["name"])
    groups = {g["GroupName"]: g for g in ec2(region).describe_security_groups()["SecurityGroups"]}
    host_group, member_group = groups[f"{host(region)}-nodes"], groups[f"{member}-nodes"]
    [rule] = [r for r in member_group["IpPermissions"] if r.get("FromPort") == 443]
    assert [p["GroupId"] for p in rule["UserIdGroupPairs"]] == [host_group["GroupId"]]  # the program's rule
    ec2(region).revoke_security_group_ingress(GroupId=member_group["GroupId"], IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": 443, "ToPort": 443, "UserIdGroupPairs": [{"GroupId": host_group["GroupId"]}]}])
    new_images(region, "8.0.0")
    ungated(region)
    before = {n.name: n.unschedulable for n in LiveCluster.from_kubeconfig(region["kubeconfig"], context=member).list_nodes()}
    # the schedule's own run (weekdays at 03:00 UTC, which the region's fast clock may reach) is not what is tried
    kubectl(region, "patch", "cronjob", "platformctl-rotate", "-n", NAMESPACE, "-p", '{"spec":{"suspend":true}}')
    kubectl(region, "patch", "cronjob", "platformctl-rotate", "-n", NAMESPACE, "--type", "json", "-p",
            '[{"op":"replace","path":"/spec/jobTemplate/spec/backoffLimit","value":0}]')
    kubectl(region, "create", "job", "rotate-unreached", "--from=cronjob/platformctl-rotate", "-n", NAMESPACE)
    give_up = time.monotonic() + 300
    job: dict[str, Any] = {}
    while time.monotonic() < give_up:
        job = json.loads(kubectl(region, "get", "job", "rotate-unreached", "-n", NAMESPACE, "-o", "json"))
        if {c["type"] for c in job["status"].get("conditions", []) if c["status"] == "True"} & {"Complete", "Failed"}:
            break
        time.sleep(1)
    pods = json.loads(kubectl(region, "get", "pods", "-n", NAMESPACE, "-l", "job-name=rotate-unreached", "-o",
                              "json"))["items"]
    said = "".join(p.read_text() for p in Path(region["log"]).parent.glob(f"pods/*/{NAMESPACE}_rotate-unreached-*/log"))
    ended = {c["type"] for c in job["status"].get("conditions", []) if c["status"] == "True"}
    assert "Failed" in ended and not job["status"].get("succeeded"), (job["status"], said[-3000:])
    assert pods and all(p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] != 0 for p in pods)
    assert f"clusters/{member}" in said and "closed connection without response" in said, said[-3000:]
    server_log = Path(region["log"]).read_text()
    assert f"to {member}'s API server dropped: no ingress rule" in server_log
    after = LiveCluster.from_kubeconfig(region["kubeconfig"], context=member).list_nodes()
    assert {n.name: n.unschedulable for n in after} == before  # nothing of the member was touched
