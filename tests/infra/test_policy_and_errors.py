"""The policy pack's rules fail on deliberately broken resources; a bad stack file fails in one line naming file and key."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.mocked import run_stage
from infra.policy.rules import RULES, policies, violations
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import load_stage, read_stack_config
from tests.infra.images import stack_config

from .test_program import declared


def resource(stage: str, type_: str, name: str | None = None) -> dict[str, Any]:
    run = declared(stage)
    found = [r for r in run.resources if r.type == type_ and (name is None or r.name == name)]
    return copy.deepcopy(found[0].inputs)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(props: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = props
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value
    return mutate


def _wildcard_inline(props: dict[str, Any]) -> None:
    props["inlinePolicies"] = [{"name": "x", "policy": json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["ec2:Describe*"], "Resource": "*"}]})}]


def _too_many_clusters(props: dict[str, Any]) -> None:
    """A job's policy in a stage of 400 clusters: a journal's key and a lease's each."""
    document = json.loads(props["policy"])
    writes = next(s for s in document["Statement"] if "dynamodb:LeadingKeys" in json.dumps(s.get("Condition", {})))
    writes["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] += [
        f"{k}#rotation/dev-usw2a-{i:03}" for i in range(400) for k in "sl"]
    props["policy"] = json.dumps(document)


def _large_inline(props: dict[str, Any]) -> None:
    """Two inline policies of a role, each within the quota, over it together."""
    resources = [f"arn:aws:ec2:us-west-2:123456789012:instance/i-{i:017x}" for i in range(80)]
    props["inlinePolicies"] = [{"name": f"p{n}", "policy": json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["ec2:TerminateInstances"], "Resource": resources}]})} for n in range(2)]


LT = "aws:ec2/launchTemplate:LaunchTemplate"
EKS = "aws:eks/cluster:Cluster"


@pytest.mark.parametrize(("stage", "type_", "mutate", "rule"), [
    ("dev", LT, _set("metadataOptions.httpTokens", "optional"), "imdsv2-hop-limit-1"),
    ("dev", LT, _set("metadataOptions.httpPutResponseHopLimit", 2), "imdsv2-hop-limit-1"),
    ("dev", LT, lambda p: p["metadataOptions"].pop("httpPutResponseHopLimit"), "imdsv2-hop-limit-1"),
    ("dev", LT, _set("blockDeviceMappings.0.ebs.encrypted", "false"), "encrypted-volumes"),
    ("dev", LT, lambda p: p.pop("blockDeviceMappings"), "encrypted-volumes"),
    ("dev", "aws:ebs/volume:Volume", lambda p: p.update(encrypted=False, tags={"Name": "v", "platformctl.io/stage": "dev",
                                                                                "platformctl.io/managed-by": "pulumi"}),
     "encrypted-volumes"),
    ("dev", EKS, lambda p: p.pop("encryptionConfig"), "eks-secrets-encryption"),
    ("dev", EKS, _set("encryptionConfig.resources", []), "eks-secrets-encryption"),
    ("prod", EKS, _set("vpcConfig.endpointPublicAccess", True), "eks-no-public-endpoint-in-prod"),
    ("prod-canary", EKS, lambda p: p["vpcConfig"].pop("endpointPublicAccess"), "eks-no-public-endpoint-in-prod"),
    ("dev", EKS, lambda p: p["vpcConfig"].update(endpointPublicAccess=True, publicAccessCidrs=["0.0.0.0/0"]),
     "eks-no-public-endpoint-in-prod"),
    ("dev", EKS, _set("vpcConfig.endpointPrivateAccess", False), "eks-no-public-endpoint-in-prod"),
    ("dev", "aws:iam/rolePolicy:RolePolicy", lambda p: p.update(policy=p["policy"].replace("dynamodb:GetItem", "dynamodb:*", 1)),
     "iam-no-wildcard-actions"),  # every role policy (rotation, remediation, canary runner) reaches the state table
    ("dev", "aws:iam/role:Role", lambda p: p.update(assumeRolePolicy=p["assumeRolePolicy"].replace("sts:AssumeRole", "sts:*")),
     "iam-no-wildcard-actions"),
    ("dev", "aws:iam/role:Role", _wildcard_inline, "iam-no-wildcard-actions"),
    ("dev", "aws:iam/rolePolicy:RolePolicy", _too_many_clusters, "iam-policy-size"),
    ("dev", "aws:iam/role:Role", _large_inline, "iam-policy-size"),
    ("dev", "aws:ec2/subnet:Subnet", lambda p: p["tags"].pop("platformctl.io/stage"), "required-tags"),
    ("dev", "aws:autoscaling/group:Group", lambda p: p.update(tags=[t for t in p["tags"] if t["key"] != "Name"]), "required-tags"),
    ("dev", "aws:kms/key:Key", lambda p: p.pop("tags"), "required-tags"),
])
def test_each_rule_fails_on_a_broken_resource(stage: str, type_: str, mutate: Callable[[dict[str, Any]], None], rule: str) -> None:
    props = {} if type_ == "aws:ebs/volume:Volume" else resource(stage, type_)
    assert violations(type_, props) == [] or type_ == "aws:ebs/volume:Volume"
    mutate(props)
    found = violations(type_, props)
    assert [r for r, _ in found] == [rule], found


def test_a_public_endpoint_outside_prod_from_listed_cidrs_passes() -> None:
    props = resource("dev", EKS)
    props["vpcConfig"].update(endpointPublicAccess=True, publicAccessCidrs=["203.0.113.0/24"])
    assert violations(EKS, props) == []


def test_the_pack_serves_every_rule_as_a_mandatory_policy() -> None:
    served = policies()
    assert [p.name for p in served] == list(RULES)
    assert all(p.enforcement_level.value == "mandatory" for p in served)
    pack = Path(__file__).resolve().parents[2] / "infra" / "policy"
    assert (pack / "PulumiPolicy.yaml").exists() and "PolicyPack(" in (pack / "__main__.py").read_text()


# ---------------------------------------------------------------- bad stack files, through the program


def _broken(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    config = stack_config("dev")
    mutate(config)
    return config


@pytest.mark.parametrize(("mutate", "field", "message"), [
    (lambda c: c["platformctl:topology"]["memberClusters"][0].update(zone="us-west-2z"),
     "config.platformctl:topology.memberClusters[0].zone", "'us-west-2z' is not one of the region's zones"),
    (lambda c: c["platformctl:topology"]["memberClusters"][1].update(name="dev-usw2a-01"),
     "config.platformctl:topology.memberClusters[1].name", "already used by memberClusters[0]"),
    (lambda c: c["platformctl:topology"]["memberClusters"][0]["nodePools"][1].update(minSize=9),
     "config.platformctl:topology.memberClusters[0].nodePools[1].minSize", "greater than maxSize 8"),
    (lambda c: c["platformctl:topology"]["memberClusters"][0]["nodePools"][0].update(nodeType="gpu"),
     "config.platformctl:topology.memberClusters[0].nodePools[0].nodeType", "'system', 'general', 'ml' or 'custom'"),
    (lambda c: c.update({"platformctl:rotation": {"schedule": "every night"}}),
     "config.platformctl:rotation.schedule", "not a cron schedule"),
    (lambda c: c.update({"platformctl:rotatoin": {}}), "config.platformctl:rotatoin", "unknown field"),
    (lambda c: c.update({"platformctl:rotation": {"policy": {"maxInFlight": 0}}}),
     "config.platformctl:rotation.policy.maxInFlight", "greater than or equal to 1"),
    (lambda c: c.update({"platformctl:rotation": {"policy": {"strategy": "blue-green"}}}),
     "config.platformctl:rotation.policy.strategy", "'replace' or 'surge'"),
    (lambda c: c.update({"platformctl:publicAccessCidrs": ["10.0.0.0/33"]}), "config.platformctl:publicAccessCidrs[0]",
     "not a CIDR block"),
    (lambda c: c.update({"platformctl:kubernetesVersion": "v1.32"}), "config.platformctl:kubernetesVersion", "pattern"),
    (lambda c: c.update({"platformctl:release": {"pulumiBackend": "my-bucket"}}), "config.platformctl:release.pulumiBackend",
     "pattern"),
])
def test_a_bad_stack_file_names_the_file_and_the_key(mutate: Callable[[dict[str, Any]], None], field: str, message: str) -> None:
    source = Path(load_stage("dev").source)
    with pytest.raises(PlatformError) as err:
        run_stage("dev", config=_broken(mutate), source=source)
    assert err.value.file == str(source) and err.value.field == field
    assert message in err.value.detail and "\n" not in str(err.value)


def test_prod_stages_refuse_public_endpoints(tmp_path: Path) -> None:
    config = read_stack_config(Path(load_stage("prod").source))
    config["platformctl:publicAccessCidrs"] = ["203.0.113.0/24"]
    with pytest.raises(PlatformError) as err:
        run_stage("prod", config=config, source=Path(load_stage("prod").source))
    assert err.value.field == "config.platformctl:publicAccessCidrs" and "public endpoints off" in err.value.detail


def test_dev_with_public_cidrs_opens_the_endpoint_only_to_them() -> None:
    config = stack_config("dev")
    config["platformctl:publicAccessCidrs"] = ["203.0.113.0/24"]
    run = run_stage("dev", config=config, source=Path(load_stage("dev").source))
    for cluster in run.of_type(EKS):
        assert cluster.inputs["vpcConfig"]["endpointPublicAccess"] is True
        assert cluster.inputs["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]


def test_images_come_from_the_lock_file_when_the_stage_names_none(tmp_path: Path) -> None:
    stage = load_stage("dev")
    config = read_stack_config(Path(stage.source))
    assert "images" not in config["platformctl:topology"]  # dev follows the lock file
    lock = tmp_path / "images.lock.json"
    lock.write_text(json.dumps({"images": {
        "general": {"2.1.0": {"us-west-2": "ami-general210"}, "2.10.0": {"us-west-2": "ami-general2100"},
                    "3.0.0": {"eu-west-1": "ami-elsewhere"}},
        "ml": {"1.0.0": {"us-west-2": "ami-ml100"}}, "custom": {"0.3.0": {"us-west-2": "ami-custom030"}}}}))
    config["platformctl:imageLock"] = str(lock)
    run = run_stage("dev", config=config, source=Path(stage.source))
    images = {r.inputs["name"]: r.inputs["imageId"] for r in run.of_type(LT)}
    assert images["dev-usw2a-01-general"] == "ami-general2100"  # newest semver built for this region
    assert images["dev-usw2a-01-ml"] == "ami-ml100" and images["dev-usw2b-01-custom"] == "ami-custom030"
    lock.write_text(json.dumps({"images": {"general": {"2.1.0": {"us-west-2": "ami-general210"}}}}))
    with pytest.raises(PlatformError) as err:
        run_stage("dev", config=config, source=Path(stage.source))
    assert err.value.field == "config.platformctl:topology.images.custom" and "platformctl ami build" in err.value.detail


def test_a_member_cluster_whose_security_group_does_not_admit_the_host_on_443_is_refused() -> None:
    """Every endpoint is private: without the rule, the host's rotation and release tick time out on every call."""
    sg = "aws:ec2/securityGroup:SecurityGroup"
    props = resource("dev", sg, "dev-usw2a-01-nodes")
    assert violations(sg, props) == []
    props["ingress"] = [r for r in props["ingress"] if not r.get("securityGroups")]
    assert [r for r, _ in violations(sg, props)] == ["members-admit-the-host"]
    assert violations(sg, resource("dev", sg, "dev-usw2-host-nodes")) == []  # the host's own admits itself
