"""Make a stage's local region from the Pulumi program: every resource it declares, created for real.

``materialize(stage)`` runs ``infra.program`` under Pulumi's mock engine with ``MotoBackend`` as
the engine's provider: each AWS resource the program registers is created through the project's
boto3 clients (moto in process, or the local region server's moto endpoint), with the inputs the
program gave it, and the ids and outputs AWS returns flow back into the program (so a subnet is
created in the VPC moto made, and a launch template boots the AMI the stack config names). Every
Kubernetes object goes to ``kube_sink(cluster, manifest)``. So the local VPCs, clusters, launch
templates and auto scaling groups are exactly the ones the program declares.

The one type moto has no API for, EKS access entries, is recorded without an AWS call
(``RECORDED_ONLY``). A type the program declares that this module cannot create fails loudly.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from infra.mocked import StageRun, run_stage
from platformctl.emulator.local_region import Provisioned
from platformctl.kernel import aws
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import TOPOLOGY_KEY, Stage, read_stack_config

IMAGE_LOCK_KEY = "platformctl:imageLock"
IMAGES_FROM_LOCK_KEY = "platformctl:imagesFromLock"  # a deploy's own: the lock's images over the pins
RELEASE_KEY = "platformctl:release"

KubeSink = Callable[[str, dict[str, Any]], None]
# Types moto has no API for: the program's declaration is kept, nothing is called.
RECORDED_ONLY = frozenset({"aws:eks/accessEntry:AccessEntry"})
COMPONENTS = "platformctl:infra:"


def _tag_specs(kind: str, tags: dict[str, str] | None) -> list[dict[str, Any]]:
    return [{"ResourceType": kind, "Tags": aws.tag_list(tags or {})}] if tags else []


def _plain(value: Any) -> Any:
    """Numbers as the Kubernetes API wants them: the engine turns every integer into a float."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


class MotoBackend:
    """The engine's provider for the local region: creates what the program declares with boto3."""

    def __init__(self, region: str, kube_sink: KubeSink | None = None, target: aws.AwsTarget | None = None) -> None:
        self.region = region
        self.kube_sink = kube_sink
        self.kubernetes: list[tuple[str, dict[str, Any]]] = []
        # boto3 makes clients from one shared session, which is not thread-safe; the engine
        # registers resources from several threads, so every client is made here, up front.
        self.clients = {s: aws.client(s, region, target=target) for s in ("ec2", "autoscaling", "eks", "iam", "kms", "dynamodb")}
        self.lock = threading.Lock()
        # moto's backends are not safe to change from several threads at once (two auto scaling groups
        # launching into one subnet race on its pool of free addresses): one AWS create at a time.
        self.aws_lock = threading.Lock()

    def create(self, type_: str, name: str, inputs: dict[str, Any], provider: str) -> tuple[str, dict[str, Any]]:
        if type_.startswith(COMPONENTS) or type_.startswith("pulumi:providers:"):
            return f"{name}", {}
        if type_.startswith("kubernetes:"):
            return self._kubernetes(inputs, provider)
        if type_ in RECORDED_ONLY:
            return f"{inputs.get('clusterName')}:{inputs.get('principalArn')}", {}
        handler = getattr(self, "_" + type_.split(":")[1].replace("/", "_"), None)
        if handler is None:
            raise NotImplementedError(f"the local region cannot create {type_} ({name}): add it to infra/materialize.py")
        with self.aws_lock:
            return handler(inputs)

    # ------------------------------------------------------------------ network

    def _ec2_vpc(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ec2 = self.clients["ec2"]
        vpc = ec2.create_vpc(CidrBlock=i["cidrBlock"], TagSpecifications=_tag_specs("vpc", i.get("tags")))["Vpc"]
        for attribute in ("enableDnsSupport", "enableDnsHostnames"):
            if i.get(attribute) is not None:
                ec2.modify_vpc_attribute(VpcId=vpc["VpcId"], **{attribute[0].upper() + attribute[1:]: {"Value": _flag(i[attribute])}})
        return vpc["VpcId"], {"arn": f"arn:aws:ec2:{self.region}:{vpc['OwnerId']}:vpc/{vpc['VpcId']}"}

    def _ec2_subnet(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        subnet = self.clients["ec2"].create_subnet(
            VpcId=i["vpcId"], CidrBlock=i["cidrBlock"], AvailabilityZone=i["availabilityZone"],
            TagSpecifications=_tag_specs("subnet", i.get("tags")))["Subnet"]
        return subnet["SubnetId"], {"arn": subnet.get("SubnetArn", "")}

    def _ec2_internetGateway(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ec2 = self.clients["ec2"]
        gateway = ec2.create_internet_gateway(TagSpecifications=_tag_specs("internet-gateway", i.get("tags")))["InternetGateway"]
        ec2.attach_internet_gateway(InternetGatewayId=gateway["InternetGatewayId"], VpcId=i["vpcId"])
        return gateway["InternetGatewayId"], {}

    def _ec2_eip(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        address = self.clients["ec2"].allocate_address(Domain="vpc", TagSpecifications=_tag_specs("elastic-ip", i.get("tags")))
        return address["AllocationId"], {"publicIp": address["PublicIp"], "allocationId": address["AllocationId"]}

    def _ec2_natGateway(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        nat = self.clients["ec2"].create_nat_gateway(SubnetId=i["subnetId"], AllocationId=i["allocationId"],
                                                     TagSpecifications=_tag_specs("natgateway", i.get("tags")))["NatGateway"]
        return nat["NatGatewayId"], {}

    def _ec2_routeTable(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ec2 = self.clients["ec2"]
        table = ec2.create_route_table(VpcId=i["vpcId"], TagSpecifications=_tag_specs("route-table", i.get("tags")))["RouteTable"]
        for route in i.get("routes") or []:
            target = {"GatewayId": route["gatewayId"]} if route.get("gatewayId") else {"NatGatewayId": route["natGatewayId"]}
            ec2.create_route(RouteTableId=table["RouteTableId"], DestinationCidrBlock=route["cidrBlock"], **target)
        return table["RouteTableId"], {}

    def _ec2_routeTableAssociation(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        association = self.clients["ec2"].associate_route_table(RouteTableId=i["routeTableId"], SubnetId=i["subnetId"])
        return association["AssociationId"], {}

    def _ec2_securityGroup(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ec2 = self.clients["ec2"]
        group = ec2.create_security_group(GroupName=i["name"], Description=i.get("description") or i["name"], VpcId=i["vpcId"],
                                          TagSpecifications=_tag_specs("security-group", i.get("tags")))
        group_id = group["GroupId"]
        rules = [{"IpProtocol": str(r["protocol"]), "FromPort": int(r["fromPort"]), "ToPort": int(r["toPort"]),
                  **({"UserIdGroupPairs": [{"GroupId": g} for g in [*([group_id] if r.get("self") else []),
                                                                     *(r.get("securityGroups") or [])]]}
                     if r.get("self") or r.get("securityGroups") else {}),
                  **({"IpRanges": [{"CidrIp": c} for c in r["cidrBlocks"]]} if r.get("cidrBlocks") else {})}
                 for r in i.get("ingress") or []]
        if rules:
            ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=rules)
        return group_id, {"arn": f"arn:aws:ec2:{self.region}:123456789012:security-group/{group_id}"}

    # ------------------------------------------------------------------ keys and IAM

    def _kms_key(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        kms = self.clients["kms"]
        key = kms.create_key(Description=i.get("description", ""),
                             Tags=[{"TagKey": k, "TagValue": v} for k, v in sorted((i.get("tags") or {}).items())])["KeyMetadata"]
        if _flag(i.get("enableKeyRotation")):
            kms.enable_key_rotation(KeyId=key["KeyId"])
        return key["KeyId"], {"arn": key["Arn"], "keyId": key["KeyId"]}

    def _kms_alias(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.clients["kms"].create_alias(AliasName=i["name"], TargetKeyId=i["targetKeyId"])
        return i["name"], {}

    def _iam_role(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        role = self.clients["iam"].create_role(RoleName=i["name"], AssumeRolePolicyDocument=i["assumeRolePolicy"],
                                               Tags=aws.tag_list(i.get("tags") or {}))["Role"]
        return role["RoleName"], {"arn": role["Arn"], "uniqueId": role["RoleId"]}

    def _iam_rolePolicyAttachment(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.clients["iam"].attach_role_policy(RoleName=i["role"], PolicyArn=i["policyArn"])
        return f"{i['role']}-{i['policyArn'].rsplit('/', 1)[-1]}", {}

    def _iam_rolePolicy(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = i.get("name") or f"{i['role']}-policy"
        self.clients["iam"].put_role_policy(RoleName=i["role"], PolicyName=name, PolicyDocument=i["policy"])
        return f"{i['role']}:{name}", {"name": name}

    def _iam_instanceProfile(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        iam = self.clients["iam"]
        profile = iam.create_instance_profile(InstanceProfileName=i["name"], Tags=aws.tag_list(i.get("tags") or {}))["InstanceProfile"]
        iam.add_role_to_instance_profile(InstanceProfileName=i["name"], RoleName=i["role"])
        return i["name"], {"arn": profile["Arn"], "uniqueId": profile["InstanceProfileId"]}

    def _iam_openIdConnectProvider(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        arn = self.clients["iam"].create_open_id_connect_provider(
            Url=i["url"], ClientIDList=list(i.get("clientIdLists") or []), ThumbprintList=list(i.get("thumbprintLists") or []),
            Tags=aws.tag_list(i.get("tags") or {}))["OpenIDConnectProviderArn"]
        return arn, {"arn": arn}

    # ------------------------------------------------------------------ clusters and node pools

    def _eks_cluster(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        vpc = i.get("vpcConfig") or {}
        encryption = i.get("encryptionConfig") or {}
        created = self.clients["eks"].create_cluster(
            name=i["name"], version=i.get("version") or "1.32", roleArn=i["roleArn"],
            resourcesVpcConfig={"subnetIds": list(vpc.get("subnetIds") or []),
                                "securityGroupIds": list(vpc.get("securityGroupIds") or []),
                                "endpointPrivateAccess": _flag(vpc.get("endpointPrivateAccess")),
                                "endpointPublicAccess": _flag(vpc.get("endpointPublicAccess")),
                                **({"publicAccessCidrs": list(vpc["publicAccessCidrs"])} if vpc.get("publicAccessCidrs") else {})},
            kubernetesNetworkConfig={"serviceIpv4Cidr": (i.get("kubernetesNetworkConfig") or {}).get("serviceIpv4Cidr", "172.20.0.0/16")},
            encryptionConfig=[{"resources": list(encryption.get("resources") or []),
                               "provider": {"keyArn": (encryption.get("provider") or {}).get("keyArn", "")}}] if encryption else [],
            logging={"clusterLogging": [{"types": list(i.get("enabledClusterLogTypes") or []), "enabled": True}]},
            tags=i.get("tags") or {},
        )["cluster"]
        # moto gives every cluster one issuer (a constant made at import); EKS gives each its own,
        # and the program declares an OIDC provider per cluster, so the id part is made per cluster.
        issuer = created["identity"]["oidc"]["issuer"].rsplit("/", 1)[0] + "/" + hashlib.sha256(created["arn"].encode()).hexdigest()[:32].upper()
        return created["name"], {
            "arn": created["arn"], "endpoint": created["endpoint"].rstrip("/"),
            "certificateAuthority": {"data": created["certificateAuthority"]["data"]},
            "identities": [{"oidcs": [{"issuer": issuer}]}],
            "status": created["status"], "platformVersion": created.get("platformVersion", ""),
        }

    def _ec2_launchTemplate(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        template = self.clients["ec2"].create_launch_template(
            LaunchTemplateName=i["name"], LaunchTemplateData=launch_template_data(i),
            TagSpecifications=_tag_specs("launch-template", i.get("tags")))["LaunchTemplate"]
        return template["LaunchTemplateId"], {"latestVersion": template["LatestVersionNumber"],
                                              "defaultVersion": template["DefaultVersionNumber"],
                                              "arn": f"arn:aws:ec2:{self.region}:123456789012:launch-template/{template['LaunchTemplateId']}"}

    def launch_template_drift(self, template_id: str, i: dict[str, Any]) -> str | None:
        """What the template's newest version (what a group on ``$Latest`` launches) boots that the program's data
        does not: its image, or any setting a node carries (instance type, user data, disks, metadata options...),
        changed in EC2 since the last deploy, as ``pulumi up --refresh`` sees it; None when it is the program's."""
        from platformctl.kernel.nodegroups import NOT_CARRIED

        ec2 = self.clients["ec2"]
        versions = ec2.describe_launch_template_versions(LaunchTemplateId=template_id, Versions=["$Latest"])
        have = versions["LaunchTemplateVersions"][0]["LaunchTemplateData"] if versions["LaunchTemplateVersions"] else {}
        want = launch_template_data(i)
        keys = sorted((set(have) | set(want)) - (NOT_CARRIED - {"ImageId"}))
        changed = [f"{key} {have.get(key)} -> {want.get(key)}" if key in ("ImageId", "InstanceType") else key
                   for key in keys if have.get(key) != want.get(key)]
        return ", ".join(changed) or None

    def update_launch_template(self, template_id: str, i: dict[str, Any]) -> dict[str, Any]:
        """A changed template is a new version, made the default when the program asks (as pulumi-aws updates one)."""
        ec2 = self.clients["ec2"]
        version = ec2.create_launch_template_version(LaunchTemplateId=template_id,
                                                     LaunchTemplateData=launch_template_data(i))["LaunchTemplateVersion"]
        number = version["VersionNumber"]
        default = number
        if _flag(i.get("updateDefaultVersion")):
            ec2.modify_launch_template(LaunchTemplateId=template_id, DefaultVersion=str(number))
        else:
            default = ec2.describe_launch_templates(LaunchTemplateIds=[template_id])["LaunchTemplates"][0]["DefaultVersionNumber"]
        return {"latestVersion": number, "defaultVersion": default,
                "arn": f"arn:aws:ec2:{self.region}:123456789012:launch-template/{template_id}"}

    def update_auto_scaling_group(self, name: str, i: dict[str, Any]) -> None:
        """Sizes, subnets and template of an existing group; its desired capacity is not the program's (``ignore_changes``)."""
        spec: dict[str, Any] = {}
        if i.get("launchTemplate"):
            spec["LaunchTemplate"] = {"LaunchTemplateId": i["launchTemplate"]["id"], "Version": str(i["launchTemplate"]["version"])}
        self.clients["autoscaling"].update_auto_scaling_group(
            AutoScalingGroupName=name, MinSize=int(i["minSize"]), MaxSize=int(i["maxSize"]),
            VPCZoneIdentifier=",".join(i["vpcZoneIdentifiers"]), **spec)

    def _autoscaling_group(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        asg = self.clients["autoscaling"]
        spec: dict[str, Any] = {}
        if i.get("launchTemplate"):
            spec["LaunchTemplate"] = {"LaunchTemplateId": i["launchTemplate"]["id"], "Version": str(i["launchTemplate"]["version"])}
        else:
            mixed = i["mixedInstancesPolicy"]["launchTemplate"]
            template = mixed["launchTemplateSpecification"]
            spec["MixedInstancesPolicy"] = {"LaunchTemplate": {
                "LaunchTemplateSpecification": {"LaunchTemplateId": template["launchTemplateId"], "Version": str(template["version"])},
                "Overrides": [{"InstanceType": o["instanceType"]} for o in mixed.get("overrides") or []]}}
        asg.create_auto_scaling_group(
            AutoScalingGroupName=i["name"], MinSize=int(i["minSize"]), MaxSize=int(i["maxSize"]),
            DesiredCapacity=int(i["desiredCapacity"]), VPCZoneIdentifier=",".join(i["vpcZoneIdentifiers"]),
            HealthCheckType=i.get("healthCheckType", "EC2"), HealthCheckGracePeriod=int(i.get("healthCheckGracePeriod", 300)),
            Tags=[{"Key": t["key"], "Value": t["value"], "PropagateAtLaunch": _flag(t.get("propagateAtLaunch"))}
                  for t in i.get("tags") or []],
            **spec)
        if i.get("suspendedProcesses"):
            asg.suspend_processes(AutoScalingGroupName=i["name"], ScalingProcesses=list(i["suspendedProcesses"]))
        group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[i["name"]])["AutoScalingGroups"][0]
        return i["name"], {"arn": group["AutoScalingGroupARN"]}

    # ------------------------------------------------------------------ the state store

    def _dynamodb_table(self, i: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ddb = self.clients["dynamodb"]
        keys = [{"AttributeName": i["hashKey"], "KeyType": "HASH"}]
        if i.get("rangeKey"):
            keys.append({"AttributeName": i["rangeKey"], "KeyType": "RANGE"})
        table = ddb.create_table(
            TableName=i["name"], BillingMode=i.get("billingMode", "PAY_PER_REQUEST"), KeySchema=keys,
            AttributeDefinitions=[{"AttributeName": a["name"], "AttributeType": a["type"]} for a in i["attributes"]],
            SSESpecification={"Enabled": _flag((i.get("serverSideEncryption") or {}).get("enabled"))},
            Tags=aws.tag_list(i.get("tags") or {}))["TableDescription"]
        if _flag((i.get("pointInTimeRecovery") or {}).get("enabled")):
            ddb.update_continuous_backups(TableName=i["name"],
                                          PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
        ttl = i.get("ttl") or {}
        if _flag(ttl.get("enabled")) and ttl.get("attributeName"):
            ddb.update_time_to_live(TableName=i["name"], TimeToLiveSpecification={"Enabled": True,
                                                                                   "AttributeName": ttl["attributeName"]})
        return table["TableName"], {"arn": table["TableArn"], "name": table["TableName"]}

    # ------------------------------------------------------------------ Kubernetes

    def _kubernetes(self, inputs: dict[str, Any], provider: str) -> tuple[str, dict[str, Any]]:
        # The provider reference is "<provider urn>::<provider id>"; the urn ends with its name,
        # which is the cluster's (see infra/components/cluster.py).
        cluster = provider.split("::")[-2]
        manifest = kubernetes_manifest(inputs)
        with self.lock:
            self.kubernetes.append((cluster, manifest))
        if self.kube_sink is not None:
            self.kube_sink(cluster, manifest)
        meta = manifest.get("metadata") or {}
        ns = meta.get("namespace")
        return (f"{ns}/{meta['name']}" if ns else meta["name"]), {}


def kubernetes_manifest(inputs: dict[str, Any]) -> dict[str, Any]:
    """The object a Kubernetes resource's inputs declare, as its provider sends it to the API server."""
    return _plain({k: v for k, v in inputs.items() if k in ("apiVersion", "kind", "metadata", "spec", "rules", "roleRef",
                                                             "subjects", "value", "globalDefault", "preemptionPolicy",
                                                             "description", "data")})


def launch_template_data(i: dict[str, Any]) -> dict[str, Any]:
    """EC2's ``LaunchTemplateData`` for the program's launch template inputs."""
    metadata = i.get("metadataOptions") or {}
    data: dict[str, Any] = {
        "ImageId": i["imageId"], "InstanceType": i["instanceType"], "UserData": i.get("userData", ""),
        "EbsOptimized": _flag(i.get("ebsOptimized")),
        "MetadataOptions": {"HttpTokens": metadata.get("httpTokens", "optional"),
                            "HttpPutResponseHopLimit": int(metadata.get("httpPutResponseHopLimit", 2)),
                            "HttpEndpoint": metadata.get("httpEndpoint", "enabled")},
        "BlockDeviceMappings": [{"DeviceName": m["deviceName"], "Ebs": {
            "VolumeSize": int(m["ebs"]["volumeSize"]), "VolumeType": m["ebs"].get("volumeType", "gp3"),
            "Encrypted": _flag(m["ebs"].get("encrypted")), "DeleteOnTermination": _flag(m["ebs"].get("deleteOnTermination", True)),
        }} for m in i.get("blockDeviceMappings") or []],
        "SecurityGroupIds": list(i.get("vpcSecurityGroupIds") or []),
        "TagSpecifications": [{"ResourceType": s["resourceType"], "Tags": aws.tag_list(s.get("tags") or {})}
                              for s in i.get("tagSpecifications") or []],
    }
    if i.get("iamInstanceProfile"):
        data["IamInstanceProfile"] = {"Arn": i["iamInstanceProfile"]["arn"]}
    return data


def stage_config(stage: Stage, image_lock: Path | None = None, release: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stage's stack config, with the topology the caller holds, and the local region's lock file of
    the images it built (instead of the checkout's, whose ids belong to another account). ``release``: what the local
    region sets of the stack's ``release`` block (the ledger in its own account, the tick suspended)."""
    config = read_stack_config(Path(stage.source))
    config[TOPOLOGY_KEY] = stage.topology.model_dump(mode="json", by_alias=True, exclude_defaults=False)
    if image_lock is not None:
        config[IMAGE_LOCK_KEY] = str(image_lock.resolve())
    if release is not None:
        own = config.get(RELEASE_KEY)
        config[RELEASE_KEY] = {**(own if isinstance(own, dict) else {}), **release}
    return config


def check_images(stage: Stage, image_lock: Path | None, over_pins: bool, target: aws.AwsTarget | None = None,
                 kubernetes_version: str | None = None) -> None:
    """Refuse, before anything changes, a deploy whose nodes could not boot or join: an image its region does not
    hold (a placeholder pin, an image of another region or account: EC2 takes the launch template, and every launch
    fails ``InvalidAMIID.NotFound``), or an image whose kubelet (its ``platformctl:kubernetes-version`` tag) is newer
    than the stage's control planes or more than ``KUBELET_SKEW`` minor versions older. ``over_pins``: a candidate's
    deploy, which boots the lock file's images whatever the stage pins."""
    from ami.lock import newest_in_lock
    from infra.settings import KUBELET_SKEW, kubelet_skew, parse_settings

    control_plane = kubernetes_version or parse_settings(read_stack_config(Path(stage.source)), stage.name,
                                                         stage.source).kubernetes_version
    lock: dict[str, Any] | None = None
    ec2 = aws.client("ec2", stage.region, None, target)
    for family in sorted({p.image_family for c in stage.clusters() for p in c.node_pools}):
        pinned = None if over_pins else stage.topology.images.get(family)
        image: str | None
        if pinned:
            image, file, field = pinned, stage.source, f"config.platformctl:topology.images.{family}"
        else:
            if image_lock is None:
                continue
            if lock is None:
                try:
                    lock = json.loads(image_lock.read_text())
                except (OSError, ValueError):
                    lock = {}  # the program says what is wrong with it
            image, file, field = newest_in_lock(lock or {}, family, stage.region), str(image_lock), f"images.{family}"
            if image is None:
                continue  # the program says the lock file has none
        # By filter: an id EC2 does not hold is an empty answer, not InvalidAMIID.NotFound.
        found = ec2.describe_images(Filters=[{"Name": "image-id", "Values": [image]}])["Images"]
        if not found:
            raise PlatformError(f"{image} does not exist in {stage.region} (a placeholder, or an image of another "
                                "region or account): every instance launched from it would fail", file=file, field=field)
        kubelet = {t["Key"]: t["Value"] for t in found[0].get("Tags", [])}.get("platformctl:kubernetes-version")
        if kubelet and not kubelet_skew(kubelet, control_plane):
            raise PlatformError(
                f"{image} ({family}) runs kubelet {kubelet}, and {stage.name}'s control planes run {control_plane}: a "
                f"kubelet may be up to {KUBELET_SKEW} minor versions older than its API server, never newer",
                file=stage.source, field="config.platformctl:kubernetesVersion")


def materialize(stage: Stage, kube_sink: KubeSink | None = None, image_lock: Path | None = None,
                release: Mapping[str, Any] | None = None) -> Provisioned:
    """Create ``stage``'s resources in the current AWS endpoint from the Pulumi program (with the ``release tick`` job,
    its role and access entries, when ``release`` gives what the region sets of the stack's ``release`` block)."""
    check_images(stage, image_lock, False)
    backend = MotoBackend(stage.region, kube_sink)
    run = run_stage(stage.name, backend, config=stage_config(stage, image_lock, release), source=Path(stage.source),
                    release=release is not None)
    return provisioned(run, backend)


def checkpoint_of(run: StageRun) -> list[dict[str, Any]]:
    """The run's resources as JSON values: what Pulumi would keep as the stack's state."""
    return json.loads(json.dumps([{"type": r.type, "name": r.name, "id": r.id, "inputs": r.inputs, "state": r.outputs}
                                  for r in run.resources], default=str))


def provisioned(run: StageRun, backend: MotoBackend) -> Provisioned:
    outputs = run.outputs
    subnets = {r.inputs["availabilityZone"]: r.id for r in run.of_type("aws:ec2/subnet:Subnet")
               if (r.inputs.get("tags") or {}).get("platformctl.io/tier") == "private"}
    pools = {p["autoScalingGroup"]: (p["cluster"], p["pool"], p["launchTemplate"]) for p in outputs["nodePools"].values()}
    return Provisioned(vpc_id=outputs["vpcId"], subnets=subnets, pools=pools,
                       kubernetes=[(c, m) for c, m in backend.kubernetes], outputs=json.loads(json.dumps(outputs)),
                       checkpoint=checkpoint_of(run))
