"""The Pulumi program of every stage, run under Pulumi's mock engine: what it declares and how it is wired."""

from __future__ import annotations

import base64
import inspect
import json
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws
import pytest
import yaml

from infra.components.common import REQUIRED_TAGS, STAGE_TAG
from infra.components.kubernetes import CANARY_NAMESPACE, FEDERATION_NAMESPACE, PRIORITY_TIERS, SYSTEM_NAMESPACE
from infra.mocked import StageRun, run_main, run_stage
from infra.policy.rules import TAGGABLE, tags_of, violations
from platformctl.kernel.topology import STAGES, load_stage, read_stack_config
from tests.infra.images import image_for, stack_config

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
EKS = "aws:eks/cluster:Cluster"
SUBNET = "aws:ec2/subnet:Subnet"


@cache
def declared(stage: str) -> StageRun:
    return run_stage(stage, config=stack_config(stage), release=True)  # as `pulumi up` declares it


def zone_of_subnet(run: StageRun, subnet_id: str) -> str:
    return run.by_id(subnet_id).inputs["availabilityZone"]


def tier_of_subnet(run: StageRun, subnet_id: str) -> str:
    return run.by_id(subnet_id).inputs["tags"]["platformctl.io/tier"]


def k8s_objects(run: StageRun, cluster: str, kind: str) -> list[dict[str, Any]]:
    return [r.inputs for r in run.resources if r.type.startswith("kubernetes:") and r.inputs.get("kind") == kind
            and r.provider.split("::")[-2] == cluster]


stages = pytest.mark.parametrize("stage_name", STAGES)


def assert_writable_home(pod: dict[str, Any]) -> None:
    """A pod with a read-only root whose container has somewhere to write: ``HOME`` (the AWS CLI caches IRSA's
    credentials there for the kubeconfig's ``aws eks get-token``), ``TMPDIR`` and ``PLATFORMCTL_HOME`` on a scratch
    volume, as kubectl would show the pod."""
    scratch = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    for container in pod["containers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"]
        writable = {m["mountPath"] for m in container["volumeMounts"] if m["name"] in scratch and not m.get("readOnly")}
        env = {e["name"]: e.get("value") for e in container["env"]}
        for name in ("HOME", "TMPDIR", "PLATFORMCTL_HOME"):
            assert env.get(name) in writable, (container["name"], name, env.get(name), writable)


@stages
def test_member_clusters_node_pools_live_only_in_their_zone(stage_name: str) -> None:
    stage, run = load_stage(stage_name), declared(stage_name)
    for member in stage.member_clusters:
        for pool in member.node_pools:
            group = run.named(ASG, f"{member.name}-{pool.name}").inputs
            zones = {zone_of_subnet(run, s) for s in group["vpcZoneIdentifiers"]}
            tiers = {tier_of_subnet(run, s) for s in group["vpcZoneIdentifiers"]}
            assert zones == {member.zone} and tiers == {"private"}, (member.name, pool.name)
        control_plane = run.named(EKS, member.name).inputs["vpcConfig"]["subnetIds"]
        cp_zones = [zone_of_subnet(run, s) for s in control_plane]
        assert len(set(cp_zones)) == 2 and member.zone in cp_zones  # EKS needs two zones for the endpoints


@stages
def test_host_cluster_spans_at_least_three_zones(stage_name: str) -> None:
    stage, run = load_stage(stage_name), declared(stage_name)
    host = stage.host_cluster
    control_plane = run.named(EKS, host.name).inputs["vpcConfig"]["subnetIds"]
    assert len({zone_of_subnet(run, s) for s in control_plane}) >= 3
    for pool in host.node_pools:
        group = run.named(ASG, f"{host.name}-{pool.name}").inputs
        assert {zone_of_subnet(run, s) for s in group["vpcZoneIdentifiers"]} == set(host.zones)


@stages
def test_every_pool_of_the_topology_is_a_template_and_a_group_of_its_size(stage_name: str) -> None:
    stage, run = load_stage(stage_name), declared(stage_name)
    expected = {f"{c.name}-{p.name}": (c, p) for c in stage.clusters() for p in c.node_pools}
    assert {r.inputs["name"] for r in run.of_type(ASG)} == set(expected)
    assert {r.inputs["name"] for r in run.of_type(LT)} == set(expected)
    for name, (cluster, pool) in expected.items():
        group, template = run.named(ASG, name).inputs, run.named(LT, name).inputs
        assert (group["minSize"], group["desiredCapacity"], group["maxSize"]) == (pool.min_size, pool.desired_size, pool.max_size)
        assert group["launchTemplate"] == {"id": run.named(LT, name).id, "version": "$Latest"}
        assert template["imageId"] == image_for(stage, pool)
        assert template["instanceType"] == pool.instance_type
        assert template["metadataOptions"]["httpTokens"] == "required"
        assert template["metadataOptions"]["httpPutResponseHopLimit"] == 1
        assert all(m["ebs"]["encrypted"] == "true" for m in template["blockDeviceMappings"])
        for tags in (template["tags"], tags_of(group)):
            assert tags["platformctl.io/node-pool"] == pool.name and tags["platformctl.io/cluster"] == cluster.name
            assert tags["platformctl.io/node-type"] == pool.node_type and tags[STAGE_TAG] == stage_name
            assert tags["platformctl.io/zone"] == ",".join(cluster.zones)
        boot = base64.b64decode(template["userData"]).decode()
        config = yaml.safe_load(boot.split("application/node.eks.aws\n\n", 1)[1].split("--//--")[0])
        assert config["spec"]["cluster"]["name"] == cluster.name
        assert config["spec"]["cluster"]["apiServerEndpoint"] == run.named(EKS, cluster.name).outputs["endpoint"]
        flags = " ".join(config["spec"]["kubelet"]["flags"])
        assert f"eks.amazonaws.com/nodegroup={pool.name}" in flags
        for taint in pool.taints:
            assert f"{taint.key}={taint.value}:{taint.effect}" in flags


@stages
def test_control_planes_are_private_encrypted_and_logged(stage_name: str) -> None:
    stage, run = load_stage(stage_name), declared(stage_name)
    keys = {k.outputs["arn"] for k in run.of_type("aws:kms/key:Key")}
    assert len(keys) == len(list(stage.clusters()))
    for cluster in stage.clusters():
        eks = run.named(EKS, cluster.name).inputs
        assert eks["vpcConfig"]["endpointPrivateAccess"] is True
        assert eks["vpcConfig"]["endpointPublicAccess"] is False  # no stage file lists public CIDRs
        assert eks["encryptionConfig"]["resources"] == ["secrets"] and eks["encryptionConfig"]["provider"]["keyArn"] in keys
        assert set(eks["enabledClusterLogTypes"]) == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
        assert eks["accessConfig"]["authenticationMode"] == "API"
        issuer = run.named(EKS, cluster.name).outputs["identities"][0]["oidcs"][0]["issuer"]
        assert [p.inputs["url"] for p in run.of_type("aws:iam/openIdConnectProvider:OpenIdConnectProvider")].count(issuer) == 1


@stages
def test_names_are_unique_across_the_stage_and_every_taggable_resource_is_tagged(stage_name: str) -> None:
    run = declared(stage_name)
    logical = Counter((r.type, r.name) for r in run.resources)
    assert max(logical.values()) == 1
    for type_ in (EKS, ASG, LT, "aws:iam/role:Role", "aws:ec2/securityGroup:SecurityGroup", "aws:iam/instanceProfile:InstanceProfile"):
        physical = Counter(r.inputs["name"] for r in run.of_type(type_))
        assert physical and max(physical.values()) == 1, type_
    # Every AWS type the program declares that takes tags is one the tag rule checks ...
    for type_ in {r.type for r in run.resources if r.type.startswith("aws:")}:
        module, cls = type_.split(":")[1].split("/")[0], type_.split(":")[2]
        takes_tags = "tags" in inspect.signature(getattr(getattr(pulumi_aws, module), cls)._internal_init).parameters
        assert takes_tags == (type_ in TAGGABLE), type_
    # ... and every one of them carries the stage's tags.
    for r in run.resources:
        if r.type in TAGGABLE:
            tags = tags_of(r.inputs)
            assert all(tags.get(t) for t in REQUIRED_TAGS) and tags[STAGE_TAG] == stage_name, (r.type, r.name)


@stages
def test_resources_are_children_of_the_components(stage_name: str) -> None:
    run = declared(stage_name)
    for r in run.resources:
        if r.type.startswith(("aws:", "kubernetes:", "pulumi:providers:")):
            assert run.parent(r.type, r.name).startswith("platformctl:infra:"), (r.type, r.name)
    assert run.parent(LT, f"{load_stage(stage_name).member_clusters[0].name}-system") == "platformctl:infra:NodePool"


@stages
def test_kubernetes_objects_of_each_cluster(stage_name: str) -> None:
    stage, run = load_stage(stage_name), declared(stage_name)
    config = read_stack_config(Path(stage.source))
    for cluster in stage.clusters():
        namespaces = {o["metadata"]["name"] for o in k8s_objects(run, cluster.name, "Namespace")}
        assert CANARY_NAMESPACE in namespaces
        assert any(o["metadata"]["namespace"] == CANARY_NAMESPACE for o in k8s_objects(run, cluster.name, "ServiceAccount"))
    for member in stage.member_clusters:
        tiers = {o["metadata"]["name"]: o for o in k8s_objects(run, member.name, "PriorityClass")}
        assert set(tiers) == {"reserved", "ondemand", "preemptible"}
        assert tiers["reserved"]["value"] > tiers["ondemand"]["value"] > tiers["preemptible"]["value"]
        assert [t for t, o in tiers.items() if o["globalDefault"]] == ["ondemand"]
        assert tiers["preemptible"]["preemptionPolicy"] == "Never"
    host = stage.host_cluster.name
    assert not k8s_objects(run, host, "PriorityClass") and len(PRIORITY_TIERS) == 3
    assert {FEDERATION_NAMESPACE, SYSTEM_NAMESPACE} <= {o["metadata"]["name"] for o in k8s_objects(run, host, "Namespace")}
    [crd] = k8s_objects(run, host, "CustomResourceDefinition")
    assert crd["spec"]["names"]["kind"] == "MemberCluster"
    registered = {o["metadata"]["name"]: o["spec"] for o in k8s_objects(run, host, "MemberCluster")}
    assert set(registered) == {m.name for m in stage.member_clusters}
    for member in stage.member_clusters:
        assert registered[member.name]["zone"] == member.zone
        assert registered[member.name]["endpoint"] == run.named(EKS, member.name).outputs["endpoint"]
    [cron] = [o for o in k8s_objects(run, host, "CronJob") if o["metadata"]["name"] == "platformctl-rotate"]
    rotation = config.get("platformctl:rotation", {})
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert cron["spec"]["schedule"] == rotation.get("schedule", "0 3 * * 1-5")
    assert container["image"] == rotation.get("image", "ghcr.io/platformctl/platformctl:0.1.0")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    # It runs `rotate run` as the CLI parses it: the stage, the stack's policy and a kubeconfig from its
    # ConfigMap, the stage's state table.
    table = run.outputs["stateTable"]
    assert table == f"platformctl-state-{stage_name}"
    assert container["args"] == ["rotate", "run", "--stage", stage_name, "--policy", "/etc/platformctl/policy.yaml",
                                 "--kubeconfig", "/etc/platformctl/kubeconfig", "--state", f"dynamodb://{table}",
                                 "--output", "json"]
    from platformctl.cli import cli

    run_command = cli.get_command(None, "rotate").get_command(None, "run")  # type: ignore[union-attr]
    assert run_command.make_context("run", container["args"][2:]).params["state_spec"] == f"dynamodb://{table}"
    [configmap] = [o for o in k8s_objects(run, host, "ConfigMap") if o["metadata"]["name"] == "platformctl-rotation"]
    from release_pipeline.pipeline import load_pipeline
    from upgrade_service.planning.policy import load_policy, parse_policy

    # The policy the pipeline rotates the stage with (no stack file gives one), under the pipeline file's freezes: a
    # scheduled rotation is gated, lit and frozen as the pipeline's own (issue 66, item 3).
    assert "policy" not in rotation
    policy = parse_policy(json.loads(configmap["data"]["policy.yaml"]), "policy.yaml")
    pipeline = load_pipeline(Path("release_pipeline/pipeline.yaml"))
    shipped = pipeline.policy_path(stage_name)
    assert shipped is not None
    assert policy.model_dump(exclude={"exclusions"}) == load_policy(shipped).model_dump(exclude={"exclusions"})
    assert policy.health_gate is not None and policy.health_gate.canary is not None
    assert policy.first_light is not None and policy.first_light.proven is (stage_name != pipeline.names[0])
    freezes = {f"freeze {f.name}": f for f in pipeline.freezes if f.applies_to(stage_name)}
    assert {e.name for e in policy.exclusions} == set(freezes) and "freeze year-end" in freezes
    windows = ("timezone", "rrule", "cron", "duration", "start", "end")
    for exclusion in policy.exclusions:
        assert exclusion.model_dump(include=set(windows)) == freezes[exclusion.name].model_dump(include=set(windows))
    kubeconfig = yaml.safe_load(configmap["data"]["kubeconfig"])
    assert sorted(c["name"] for c in kubeconfig["contexts"]) == sorted(c.name for c in stage.clusters())
    servers = {c["name"]: c["cluster"]["server"] for c in kubeconfig["clusters"]}
    assert servers == {c.name: run.named(EKS, c.name).outputs["endpoint"] for c in stage.clusters()}
    assert all(u["user"]["exec"]["args"][:2] == ["eks", "get-token"] for u in kubeconfig["users"])
    mounts = container["volumeMounts"]
    assert mounts[0]["mountPath"] == "/etc/platformctl" and mounts[0]["readOnly"]
    # It rotates the cluster it runs on: a drain of its own node evicts it. The eviction is no failure (its Job makes
    # another pod at once, which resumes the journal), SIGTERM has time to stop at a safe point and give the leases
    # back, a crash is tried once more, and what `rotate run` answered itself ends the job.
    job = cron["spec"]["jobTemplate"]["spec"]
    rules = job["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailJob" and rules[1]["onExitCodes"]["containerName"] == container["name"]
    assert {1, 2, 3, 4, 130} <= set(rules[1]["onExitCodes"]["values"]) and job["backoffLimit"] >= 1
    assert job["template"]["spec"]["restartPolicy"] == "Never"  # what podFailurePolicy requires
    assert job["template"]["spec"]["terminationGracePeriodSeconds"] >= 60
    assert_writable_home(job["template"]["spec"])
    # The job's service account assumes the rotation role, which only that account may assume and
    # which every cluster (the host too: the job rotates it) admits into the group its RBAC names.
    [account] = [o for o in k8s_objects(run, host, "ServiceAccount") if o["metadata"]["name"] == "platformctl-rotation"]
    role_arn = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role_arn == run.outputs["rotationRoleArn"]
    entries = [r.inputs for r in run.of_type("aws:eks/accessEntry:AccessEntry") if r.inputs["principalArn"] == role_arn]
    assert sorted(e["clusterName"] for e in entries) == sorted(c.name for c in stage.clusters())
    for cluster in stage.clusters():
        [binding] = [o for o in k8s_objects(run, cluster.name, "ClusterRoleBinding")
                     if o["metadata"]["name"] == "platformctl:rotation"]
        assert binding["subjects"][0]["name"] == entries[0]["kubernetesGroups"][0]
        [role] = [o for o in k8s_objects(run, cluster.name, "ClusterRole") if o["metadata"]["name"] == "platformctl:rotation"]
        assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in role["rules"]
    # Its AWS permissions: the rotation's named actions anywhere, the state store's on its table only, its writes
    # only in each cluster's journal and lease (and their registry).
    [policy] = [r.inputs for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.name == f"{host}-rotation"]
    statements = json.loads(policy["policy"])["Statement"]
    state = [st for st in statements if any(a.startswith("dynamodb:") for a in st["Action"])]
    assert all(st["Resource"] == [run.named("aws:dynamodb/table:Table", f"{stage_name}-state").outputs["arn"]] for st in state)
    actions = {a for st in state for a in st["Action"]}
    assert "dynamodb:PutItem" in actions and "dynamodb:DeleteTable" not in actions
    [writes] = [st for st in state if "dynamodb:PutItem" in st["Action"]]
    assert set(writes["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"]) == \
        {f"{k}#rotation/{c.name}" for c in stage.clusters() for k in "sl"} | {"i#rotation", "i#"}
    declared_table = run.named("aws:dynamodb/table:Table", f"{stage_name}-state").inputs
    assert (declared_table["hashKey"], declared_table["rangeKey"]) == ("pk", "sk")
    assert declared_table["pointInTimeRecovery"]["enabled"] and declared_table["serverSideEncryption"]["enabled"]
    # Canary results expire through the table's TTL; a fenced append needs the condition check; nothing scans.
    assert declared_table["ttl"] == {"attributeName": "expires_at", "enabled": True}
    assert "dynamodb:ConditionCheckItem" in actions and "dynamodb:Scan" not in actions


def allowed(document: dict[str, Any], action: str, resource: str = "*",
            context: dict[str, list[str]] | None = None) -> bool:
    """Whether AWS would let a role holding ``document`` do it (the local region's evaluation of IAM policies)."""
    from platformctl.emulator.server.policy import Decision, Request, evaluate

    return evaluate([document], Request(action, resource, context or {})) is Decision.ALLOWED


def group(stage: Any, cluster: str, stage_of: str | None = None) -> tuple[str, dict[str, list[str]]]:
    """A group of ``cluster`` in ``stage`` (tagged as the program tags it) as IAM sees a write to it: ARN, tags."""
    tags = {"platformctl.io/cluster": cluster, "platformctl.io/stage": stage_of or stage.name}
    return (f"arn:aws:autoscaling:{stage.region}:123456789012:autoScalingGroup:uuid:autoScalingGroupName/{cluster}-general",
            {f"aws:ResourceTag/{k}": [v] for k, v in tags.items()})


@stages
def test_every_cluster_runs_remediation_as_its_own_account_with_the_stacks_policy(stage_name: str) -> None:
    from platformctl.cli import cli
    from upgrade_service.remediation.policy import parse_remediation_policy

    stage, run = load_stage(stage_name), declared(stage_name)
    config = read_stack_config(Path(stage.source)).get("platformctl:remediation", {})
    command = cli.get_command(None, "remediate")
    assert command is not None
    table = run.outputs["stateTable"]
    for cluster in stage.clusters():
        [cron] = [o for o in k8s_objects(run, cluster.name, "CronJob") if o["metadata"]["name"] == "platformctl-remediate"]
        assert cron["spec"]["concurrencyPolicy"] == "Forbid" and cron["spec"]["schedule"] == config.get("schedule", "*/5 * * * *")
        pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert_writable_home(pod)
        args = pod["containers"][0]["args"]
        params = command.make_context("remediate", args[1:]).params  # what the CLI makes of them
        assert (params["context"], params["state_spec"], params["once"]) == (cluster.name, f"dynamodb://{table}", True)
        [configmap] = [o for o in k8s_objects(run, cluster.name, "ConfigMap") if o["metadata"]["name"] == "platformctl-remediation"]
        assert parse_remediation_policy(json.loads(configmap["data"]["policy.yaml"]), "p").model_dump() == \
            parse_remediation_policy(config.get("policy", {}), "p").model_dump()
        kubeconfig = yaml.safe_load(configmap["data"]["kubeconfig"])
        assert [c["name"] for c in kubeconfig["contexts"]] == [cluster.name]  # in-cluster, as its service account
        assert kubeconfig["users"][0]["user"]["tokenFile"].endswith("/serviceaccount/token")
        [account] = [o for o in k8s_objects(run, cluster.name, "ServiceAccount") if o["metadata"]["name"] == pod["serviceAccountName"]]
        role_arn = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
        [role] = [r for r in run.of_type("aws:iam/role:Role") if r.outputs.get("arn") == role_arn]
        trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]
        assert f"system:serviceaccount:{SYSTEM_NAMESPACE}:{pod['serviceAccountName']}" in json.dumps(trust["Condition"])
        [policy] = [r.inputs for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.name == f"{cluster.name}-remediation"]
        document = json.loads(policy["policy"])
        # It surges before it drains, then retires the node: on its own cluster's groups, and no one else's.
        for action in ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"):
            assert allowed(document, action, *group(stage, cluster.name)), action
            assert not allowed(document, action, *group(stage, "another-cluster")), action
        assert allowed(document, "ec2:DescribeLaunchTemplateVersions")
        # Its journal under its lease, in the stage's table: its own cluster's, never another's nor a rotation's.
        table_arn = run.named("aws:dynamodb/table:Table", f"{stage_name}-state").outputs["arn"]
        for key, own in ((f"s#remediation/{cluster.name}", True), (f"l#remediation/{cluster.name}", True),
                         ("s#remediation/another-cluster", False), (f"l#rotation/{cluster.name}", False)):
            assert allowed(document, "dynamodb:PutItem", table_arn, {"dynamodb:LeadingKeys": [key]}) is own, key
        [binding] = [o for o in k8s_objects(run, cluster.name, "ClusterRoleBinding") if o["metadata"]["name"] == "platformctl:remediation"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": SYSTEM_NAMESPACE}]
        [rbac] = [o for o in k8s_objects(run, cluster.name, "ClusterRole") if o["metadata"]["name"] == "platformctl:remediation"]
        assert {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]} in rbac["rules"]


def test_a_stack_that_holds_its_tick_declares_the_cronjob_suspended() -> None:
    config = stack_config("dev")
    config["platformctl:release"] = {**(config.get("platformctl:release") or {}), "suspend": True}
    run = run_stage("dev", config=config, release=True)
    [cron] = [o for o in k8s_objects(run, load_stage("dev").host_cluster.name, "CronJob")
              if o["metadata"]["name"] == "platformctl-release-tick"]
    assert cron["spec"]["suspend"] is True and cron["spec"]["schedule"] == "* * * * *"


@stages
def test_the_host_cluster_runs_the_release_tick_of_its_stage_with_the_checkouts_pipeline(stage_name: str, tmp_path: Path) -> None:
    from platformctl.cli import cli
    from release_pipeline.pipeline import load_pipeline
    from upgrade_service.planning.policy import load_policy

    stage, run = load_stage(stage_name), declared(stage_name)
    host = stage.host_cluster.name
    [cron] = [o for o in k8s_objects(run, host, "CronJob") if o["metadata"]["name"] == "platformctl-release-tick"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid" and cron["spec"]["schedule"] == "* * * * *"
    assert "suspend" not in cron["spec"]  # it runs on its schedule unless the stack holds it (release.suspend)
    assert all(o["metadata"]["name"] != "platformctl-release-tick" for m in stage.member_clusters
               for o in k8s_objects(run, m.name, "CronJob"))
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    tick = cli.get_command(None, "release").get_command(None, "tick")  # type: ignore[union-attr]
    assert args[:4] == ["--infra-dir", "/opt/platformctl/infra", "release", "tick"]
    params = tick.make_context("tick", args[4:]).params  # what the CLI makes of them
    assert params["stages"] == (stage_name,) and params["ledger"] == "dynamodb://platformctl-release?region=us-east-1"
    assert_writable_home(pod)  # a read-only root: the lock files and Pulumi's workspace on a scratch volume
    # Its deploy is `pulumi up`: the backend the stack file names (the default here), logged in to with the passphrase
    # or token of the operator's Secret, Pulumi's own files on the scratch volume.
    [container] = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["PULUMI_BACKEND_URL"] == "s3://platformctl-pulumi-state?region=us-east-1"
    assert env["KUBECONFIG"] == "/etc/platformctl/kubeconfig"  # the stage's contexts, for its deploy's Kubernetes objects
    assert env["PULUMI_HOME"].startswith(env["HOME"] + "/")
    assert container["envFrom"] == [{"secretRef": {"name": "platformctl-pulumi"}}]
    # It rotates the stage in its own process: it asks for what a whole rotation of a 3,000-node, 130,000-pod cluster
    # took at its peak with a fifth more (853 MiB, benchmarks/rotate_run_memory.py, docs/benchmarks.md) and may use 1.8x.
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "1024Mi", "ephemeral-storage": "512Mi"},
                                      "limits": {"memory": "1536Mi"}}
    # The ConfigMap's files, mounted where the args say: the checkout's pipeline, which the tick's parser takes, each
    # stage's rotation policy beside it, and a kubeconfig of the stage's clusters.
    [configmap] = [o for o in k8s_objects(run, host, "ConfigMap") if o["metadata"]["name"] == "platformctl-release"]
    for name, text in configmap["data"].items():
        (tmp_path / name).write_text(text)
    pipeline = load_pipeline(tmp_path / "pipeline.yaml")
    shipped = load_pipeline(Path(__file__).resolve().parents[2] / "release_pipeline" / "pipeline.yaml")
    assert pipeline.names == shipped.names and pipeline.ledger is None
    for name in pipeline.names:
        policy = pipeline.policy_path(name)
        assert policy is not None and load_policy(policy).model_dump(exclude={"source"}) == \
            load_policy(shipped.policy_path(name)).model_dump(exclude={"source"})  # type: ignore[arg-type]
    kubeconfig = yaml.safe_load(configmap["data"]["kubeconfig"])
    assert sorted(c["name"] for c in kubeconfig["contexts"]) == sorted(c.name for c in stage.clusters())
    # Its own account and role: admitted by every cluster into the rotation's group, the ledger's table reachable.
    [account] = [o for o in k8s_objects(run, host, "ServiceAccount") if o["metadata"]["name"] == pod["serviceAccountName"]]
    role_arn = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    entries = [r.inputs for r in run.of_type("aws:eks/accessEntry:AccessEntry") if r.inputs["principalArn"] == role_arn]
    assert sorted(e["clusterName"] for e in entries) == sorted(c.name for c in stage.clusters())
    [policy] = [r.inputs for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.name == f"{host}-release"]
    statements = json.loads(policy["policy"])["Statement"]
    resources = {r for st in statements for r in ([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"])}
    assert "arn:aws:dynamodb:us-east-1:*:table/platformctl-release" in resources
    # prod's stack creates the ledger's table, in the ledger's region; no other stack does.
    ledgers = [r for r in run.of_type("aws:dynamodb/table:Table") if r.inputs["name"] == "platformctl-release"]
    assert len(ledgers) == (1 if stage_name == "prod" else 0)
    [role] = [r for r in run.of_type("aws:iam/role:Role") if r.outputs.get("arn") == role_arn]
    attached = [r.inputs["policyArn"] for r in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if r.inputs["role"] == role.outputs.get("name", role.inputs.get("name"))]
    assert attached == []  # no AdministratorAccess: what a candidate's deploy needs, in its own stage only
    document = json.loads(policy["policy"])
    template = f"arn:aws:ec2:{stage.region}:123456789012:launch-template/lt-1"
    assert allowed(document, "ec2:CreateLaunchTemplateVersion", template, {"aws:ResourceTag/platformctl.io/stage": [stage_name]})
    assert not allowed(document, "ec2:CreateLaunchTemplateVersion", template, {"aws:ResourceTag/platformctl.io/stage": ["x"]})
    assert allowed(document, "autoscaling:UpdateAutoScalingGroup", *group(stage, host))
    assert not allowed(document, "autoscaling:UpdateAutoScalingGroup", *group(stage, host, "another-stage"))
    for escalation in ("iam:PutRolePolicy", "iam:AttachRolePolicy", "iam:PassRole", "sts:AssumeRole", "ec2:RunInstances"):
        assert not allowed(document, escalation, "*"), escalation


@stages
def test_every_cluster_runs_the_canary_runner_with_the_checkouts_canaries(stage_name: str) -> None:
    from e2e_canary.definitions import CANARY_DIR, load_canaries, parse_canary
    from platformctl.cli import cli

    stage, run = load_stage(stage_name), declared(stage_name)
    canary = cli.get_command(None, "canary")
    assert canary is not None
    command = canary.get_command(None, "run")  # type: ignore[attr-defined]
    table = run.outputs["stateTable"]
    shipped = {c.name: c.model_dump() for c in load_canaries(CANARY_DIR)}
    for cluster in stage.clusters():
        [deployment] = [o for o in k8s_objects(run, cluster.name, "Deployment")
                        if o["metadata"]["name"] == "platformctl-canary-runner"]
        assert deployment["metadata"]["namespace"] == CANARY_NAMESPACE
        assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
        pod = deployment["spec"]["template"]["spec"]
        assert_writable_home(pod)
        container = pod["containers"][0]
        params = command.make_context("run", container["args"][2:]).params  # what the CLI makes of them
        assert (params["stage_name"], params["only"], params["state_spec"], params["once"]) == \
            (stage_name, cluster.name, f"dynamodb://{table}", False)
        assert container["ports"][0]["containerPort"] == params["metrics_port"] and params["metrics_address"] == "0.0.0.0"
        [configmap] = [o for o in k8s_objects(run, cluster.name, "ConfigMap") if o["metadata"]["name"] == "platformctl-canary-runner"]
        mounted = {item["path"]: configmap["data"][item["key"]] for item in pod["volumes"][0]["configMap"]["items"]}
        canaries = {path.removeprefix("canaries/").removesuffix(".yaml"): parse_canary(json.loads(text), path).model_dump()
                    for path, text in mounted.items() if path.startswith("canaries/")}
        assert canaries == shipped  # the checkout's definitions, as `canary run --canaries` reads them
        assert yaml.safe_load(mounted["kubeconfig"])["current-context"] == cluster.name
        [account] = [o for o in k8s_objects(run, cluster.name, "ServiceAccount") if o["metadata"]["name"] == pod["serviceAccountName"]]
        role_arn = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
        [role] = [r for r in run.of_type("aws:iam/role:Role") if r.outputs.get("arn") == role_arn]
        trust = json.dumps(json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"])
        assert f"system:serviceaccount:{CANARY_NAMESPACE}:{pod['serviceAccountName']}" in trust
        [policy] = [r.inputs for r in run.of_type("aws:iam/rolePolicy:RolePolicy") if r.name == f"{cluster.name}-canary"]
        reads, writes = json.loads(policy["policy"])["Statement"]  # the state table, and nothing else in AWS
        for statement in (reads, writes):
            assert all(a.startswith("dynamodb:") for a in statement["Action"])
            assert statement["Resource"] == [run.named("aws:dynamodb/table:Table", f"{stage_name}-state").outputs["arn"]]
        assert "Condition" not in reads and "dynamodb:PutItem" not in reads["Action"]
        assert writes["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] == [  # its own results and lease
            f"s#canary/{stage_name}/{cluster.name}/*", f"l#canary/{stage_name}/{cluster.name}", "i#canary", "i#"]
        [rbac] = [o for o in k8s_objects(run, cluster.name, "ClusterRole") if o["metadata"]["name"] == "platformctl:canary"]
        assert {"apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["get", "update", "patch"]} in rbac["rules"]
        assert not any("pods/eviction" in r["resources"] or "secrets" in r["resources"] for r in rbac["rules"])


def test_a_bad_canary_in_the_stack_config_names_the_key() -> None:
    from infra.settings import parse_settings, with_canaries

    settings = parse_settings({"platformctl:canary": {"canaries": {"web": {"name": "web", "kind": "webapp"}}}}, "dev",
                              "Pulumi.dev.yaml")
    with pytest.raises(Exception) as raised:
        with_canaries(settings, "Pulumi.dev.yaml", Path("infra"))
    assert "Pulumi.dev.yaml" in str(raised.value) and "config.platformctl:canary.canaries.web.kind" in str(raised.value)


@pytest.mark.parametrize("text, said", [
    (None, "no pipeline file at"),
    ("stages: [", "is not YAML"),
    ("freezes: []\n", "lists no stages"),
    ("stages:\n  - {name: dev, rotationPolicy: nowhere.yaml}\n", "stage dev's rotationPolicy"),
])
def test_a_pipeline_file_the_tick_would_trip_on_is_named_at_pulumi_up(tmp_path: Path, text: str | None, said: str) -> None:
    from infra.settings import parse_settings, release_config
    from platformctl.kernel.errors import PlatformError

    if text is not None:
        (tmp_path / "pipeline.yaml").write_text(text)
    settings = parse_settings({"platformctl:release": {"pipeline": "pipeline.yaml"}}, "dev", "Pulumi.dev.yaml")
    with pytest.raises(PlatformError) as raised:
        release_config(settings, "Pulumi.dev.yaml", tmp_path)
    assert str(raised.value).startswith("Pulumi.dev.yaml: config.platformctl:release.pipeline") and said in str(raised.value)


def test_a_stack_that_gives_its_scheduled_rotation_a_policy_keeps_it_under_the_pipelines_freezes(tmp_path: Path) -> None:
    from infra.settings import parse_settings, scheduled_policy
    from platformctl.kernel.errors import PlatformError

    (tmp_path / "pipeline.yaml").write_text(
        "stages:\n  - {name: dev, rotationPolicy: dev.yaml}\n  - {name: prod}\n"
        "freezes:\n  - {name: launch, stages: [prod], start: 2026-12-01T00:00:00, end: 2026-12-02T00:00:00,"
        " timezone: UTC}\n  - {name: all-hands, start: 2026-12-10T09:00:00, end: 2026-12-10T12:00:00, timezone: UTC}\n")
    (tmp_path / "dev.yaml").write_text("maxInFlight: 2\nexclusions: [{name: own, start: 2026-12-24T00:00:00, "
                                       "end: 2026-12-27T00:00:00, timezone: UTC}]\n")

    def scheduled(config: dict[str, Any], stage: str) -> dict[str, Any]:
        settings = parse_settings({"platformctl:release": {"pipeline": "pipeline.yaml"}, **config}, stage, "Pulumi.x.yaml")
        return scheduled_policy(settings, stage, "Pulumi.x.yaml", tmp_path)

    # the stage's pipeline policy: its own exclusions and the freezes that bind the stage, not the others
    assert scheduled({}, "dev")["maxInFlight"] == 2
    assert [e["name"] for e in scheduled({}, "dev")["exclusions"]] == ["own", "freeze all-hands"]
    # the stack's own policy wins over the pipeline's, the freezes still bind it; a stage with no policy: the defaults
    own = scheduled({"platformctl:rotation": {"policy": {"maxInFlight": 7}}}, "prod")
    assert own["maxInFlight"] == 7 and [e["name"] for e in own["exclusions"]] == ["freeze launch", "freeze all-hands"]
    assert [e["name"] for e in scheduled({}, "prod")["exclusions"]] == ["freeze launch", "freeze all-hands"]
    assert "maxInFlight" not in scheduled({}, "prod")
    (tmp_path / "dev.yaml").write_text("- not a policy\n")  # never an ungated job in its place
    with pytest.raises(PlatformError) as raised:
        scheduled({}, "dev")
    assert str(raised.value).startswith(f"{tmp_path / 'dev.yaml'}: expected a rotation policy")
    # a freeze a rotation policy cannot keep is named in the pipeline file, at `pulumi up`
    (tmp_path / "pipeline.yaml").write_text("stages: [{name: dev}]\nfreezes: [{name: x, start: 2026-12-01T00:00:00, "
                                            "end: 2026-12-02T00:00:00, timezone: Mars/Olympus}]\n")
    with pytest.raises(PlatformError) as raised:
        scheduled({}, "dev")
    assert str(raised.value).startswith(f"{tmp_path / 'pipeline.yaml'}: freezes") and "Mars/Olympus" in str(raised.value)


@stages
def test_stack_outputs_name_every_cluster_and_pool(stage_name: str) -> None:
    stage, run = load_stage(stage_name), declared(stage_name)
    outputs = run.outputs
    assert outputs["stage"] == stage_name and outputs["region"] == stage.region
    assert set(outputs["clusters"]) == {c.name for c in stage.clusters()}
    assert outputs["clusters"][stage.host_cluster.name]["role"] == "host"
    assert all(re.match(r"^https://", c["endpoint"]) for c in outputs["clusters"].values())
    for cluster in stage.clusters():
        for pool in cluster.node_pools:
            entry = outputs["nodePools"][f"{cluster.name}/{pool.name}"]
            assert entry["autoScalingGroup"] == run.named(ASG, f"{cluster.name}-{pool.name}").inputs["name"]
            assert entry["launchTemplate"] == run.named(LT, f"{cluster.name}-{pool.name}").inputs["name"]


@stages
def test_the_policy_pack_passes_on_the_real_program(stage_name: str) -> None:
    run = declared(stage_name)
    broken = [(r.type, r.name, v) for r in run.resources for v in [violations(r.type, r.inputs, r.name)] if v]
    assert broken == []


def test_prod_is_the_largest_stage() -> None:
    prod = load_stage("prod")
    assert len(prod.zones) >= 3
    per_zone = Counter(m.zone for m in prod.member_clusters)
    assert set(per_zone) == set(prod.zones) and min(per_zone.values()) >= 2
    size = {s: len(list(load_stage(s).clusters())) for s in STAGES}
    assert size["prod"] > size["staging"] > size["dev"]


def test_subnets_are_disjoint_and_inside_the_vpc() -> None:
    import ipaddress

    for stage_name in STAGES:
        run = declared(stage_name)
        vpc = ipaddress.ip_network(run.of_type("aws:ec2/vpc:Vpc")[0].inputs["cidrBlock"])
        blocks = [ipaddress.ip_network(s.inputs["cidrBlock"]) for s in run.of_type(SUBNET)]
        assert all(b.subnet_of(vpc) for b in blocks)
        assert not any(a.overlaps(b) for i, a in enumerate(blocks) for b in blocks[i + 1:])
        # one NAT gateway per zone, each in that zone's public subnet
        nats = run.of_type("aws:ec2/natGateway:NatGateway")
        assert sorted(zone_of_subnet(run, n.inputs["subnetId"]) for n in nats) == sorted(load_stage(stage_name).zones)
        assert {tier_of_subnet(run, n.inputs["subnetId"]) for n in nats} == {"public"}


def test_pulumi_entry_point_reports_a_bad_stack_file_in_one_line(account: None) -> None:
    config = stack_config("dev")
    config["platformctl:topology"]["memberClusters"][0]["zone"] = "us-west-2z"
    with pytest.raises(pulumi.RunError) as err:
        run_main("dev", config)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(str(Path(load_stage("dev").source)))
    assert "config.platformctl:topology.memberClusters[0].zone" in message and "us-west-2z" in message


def test_pulumi_entry_point_declares_the_stage(account: None) -> None:
    run = run_main("dev", stack_config("dev"))
    assert len(run.of_type(ASG)) == sum(len(c.node_pools) for c in load_stage("dev").clusters())


@stages
def test_the_host_clusters_nodes_reach_every_member_clusters_private_endpoint_on_443(stage_name: str) -> None:
    """Rotation and the release tick run on the host and call every member: each member's control plane (its endpoint
    ENIs carry the cluster's security group) admits the security group of the host's nodes on 443; the host's jobs
    reach the host's own endpoint through its group's rule for itself."""
    run = declared(stage_name)
    stage = load_stage(stage_name)
    groups = {r.inputs["name"]: r for r in run.of_type("aws:ec2/securityGroup:SecurityGroup")}
    planes = {r.inputs["name"]: r for r in run.of_type("aws:eks/cluster:Cluster")}
    templates = {r.inputs["name"]: r for r in run.of_type("aws:ec2/launchTemplate:LaunchTemplate")}
    host = stage.host_cluster.name
    host_nodes = {g for p in stage.host_cluster.node_pools
                  for g in templates[f"{host}-{p.name}"].inputs["vpcSecurityGroupIds"]}
    assert host_nodes == {groups[f"{host}-nodes"].id}
    assert any(r.get("self") and r["protocol"] == "-1" for r in groups[f"{host}-nodes"].inputs["ingress"])
    for member in stage.member_clusters:
        plane_groups = set(planes[member.name].inputs["vpcConfig"]["securityGroupIds"])
        assert planes[member.name].inputs["vpcConfig"]["endpointPrivateAccess"]
        admitted = {g for sg in plane_groups for r in groups[f"{member.name}-nodes"].inputs["ingress"]
                    if groups[f"{member.name}-nodes"].id == sg and r["protocol"] == "tcp"
                    and int(r["fromPort"]) <= 443 <= int(r["toPort"]) for g in r.get("securityGroups") or []}
        assert host_nodes <= admitted, (member.name, admitted)


@stages
def test_every_pod_the_program_runs_passes_pod_security_restricted_where_its_namespace_enforces_it(stage_name: str) -> None:
    from platformctl.emulator.server.podsecurity import refusal, violations

    stage, run = load_stage(stage_name), declared(stage_name)
    for cluster in stage.clusters():
        namespaces = {o["metadata"]["name"]: o for o in k8s_objects(run, cluster.name, "Namespace")}
        assert all(o["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
                   for o in namespaces.values()), cluster.name
        pods = [(o["metadata"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"])
                for o in k8s_objects(run, cluster.name, "CronJob")]
        pods += [(o["metadata"], o["spec"]["template"]["spec"]) for o in k8s_objects(run, cluster.name, "Deployment")]
        assert pods, cluster.name
        for meta, spec in pods:
            assert violations(spec) == [], (cluster.name, meta["name"])
            assert refusal(namespaces[meta["namespace"]], meta["name"], spec) is None
            assert all(v["emptyDir"].get("sizeLimit") for v in spec["volumes"] if "emptyDir" in v), meta["name"]
            assert all(c["resources"]["requests"].get("ephemeral-storage") for c in spec["containers"]), meta["name"]


@stages
def test_every_namespace_the_program_runs_pods_in_lets_them_reach_dns_and_https_only(stage_name: str) -> None:
    stage, run = load_stage(stage_name), declared(stage_name)
    for cluster in stage.clusters():
        policies = {o["metadata"]["namespace"]: o["spec"] for o in k8s_objects(run, cluster.name, "NetworkPolicy")}
        pods = [(o["metadata"]["namespace"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"])
                for o in k8s_objects(run, cluster.name, "CronJob")]
        pods += [(o["metadata"]["namespace"], o["spec"]["template"]["spec"]) for o in k8s_objects(run, cluster.name, "Deployment")]
        for namespace, spec in pods:
            policy = policies[namespace]  # every pod is selected: nothing unpoliced in a namespace with the program's pods
            assert policy["podSelector"] == {} and policy["policyTypes"] == ["Ingress", "Egress"], (cluster.name, namespace)
            served = {p["containerPort"] for c in spec["containers"] for p in c.get("ports", [])}
            assert {p["port"] for rule in policy["ingress"] for p in rule["ports"]} == served, (cluster.name, namespace)
            egress = {(p["protocol"], p["port"]) for rule in policy["egress"] for p in rule["ports"]}
            assert egress == {("UDP", 53), ("TCP", 53), ("TCP", 443)}, (cluster.name, namespace)
