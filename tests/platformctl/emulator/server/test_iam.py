"""The local region's IAM (``platformctl.emulator.server.iam``): a pod's token exchanged for its role only as EKS and
STS would, and every call of the role's session allowed or refused by its policies, with AWS's errors. The roles are
the program's (``infra.access``'s grants, ``infra.components.iam``'s trust); what is checked is what boto3 gets back
and what moto holds after (a refused call changes nothing)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from infra import access
from infra.components.iam import web_identity_trust
from platformctl.emulator.server.iam import IamGate, Issuers
from platformctl.emulator.server.policy import Decision, Request, evaluate

REGION = "us-west-2"
ISSUER = "https://oidc.eks.us-west-2.amazonaws.com/id/0123456789ABCDEF"
ADMIN = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": REGION}


class Account:
    """moto behind the region's IAM gate, on a port of its own, with an OIDC provider for one cluster's issuer."""

    def __init__(self) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        from platformctl.emulator import moto_extensions

        moto_extensions.install()  # EC2 as the local region answers it (tags set as images are made, among others)
        self.issuers = Issuers()
        self.now = time.time()
        self.gate = IamGate(DomainDispatcherApplication(create_backend_app), self.issuers, lambda: self.now)
        self.server = make_server("127.0.0.1", 0, self.gate, True, request_handler=MotoRequestHandler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        self.provider = self.admin("iam").create_open_id_connect_provider(
            Url=ISSUER, ClientIDList=["sts.amazonaws.com"], ThumbprintList=["9" * 40])["OpenIDConnectProviderArn"]

    def admin(self, service: str) -> Any:
        return boto3.client(service, endpoint_url=self.endpoint, **ADMIN)  # type: ignore[call-overload]

    def role(self, name: str, namespace: str, account: str, grants: list[access.Grant]) -> str:
        iam = self.admin("iam")
        arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=web_identity_trust(
            self.provider, ISSUER, namespace, account))["Role"]["Arn"]
        iam.put_role_policy(RoleName=name, PolicyName=name, PolicyDocument=access.document(grants))
        return str(arn)

    def session(self, role: str, namespace: str, account: str, tmp: Path, issuers: Issuers | None = None,
                now: float | None = None) -> boto3.Session:
        """What boto3 in the pod makes of IRSA's environment: the role's session through the token."""
        token = tmp / f"token-{namespace}-{account}"
        token.write_text((issuers or self.issuers).mint(ISSUER, namespace, account, self.now if now is None else now))
        sts = boto3.client("sts", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="", aws_secret_access_key="")
        sts.meta.events.register("choose-signer.sts.*", lambda **_: __import__("botocore").UNSIGNED)
        found = sts.assume_role_with_web_identity(RoleArn=role, RoleSessionName="pod", WebIdentityToken=token.read_text())
        c = found["Credentials"]
        return boto3.Session(aws_access_key_id=c["AccessKeyId"], aws_secret_access_key=c["SecretAccessKey"],
                             aws_session_token=c["SessionToken"], region_name=REGION)

    def client(self, session: boto3.Session, service: str) -> Any:
        return session.client(service, endpoint_url=self.endpoint)  # type: ignore[call-overload]

    def group(self, name: str, cluster: str, stage: str) -> None:
        ec2 = self.admin("ec2")
        template = ec2.create_launch_template(LaunchTemplateName=name, LaunchTemplateData={
            "ImageId": "ami-12c6146b", "InstanceType": "m6i.large"},
            TagSpecifications=[{"ResourceType": "launch-template", "Tags": [
                {"Key": "platformctl.io/stage", "Value": stage}]}])["LaunchTemplate"]
        self.admin("autoscaling").create_auto_scaling_group(
            AutoScalingGroupName=name, MinSize=0, MaxSize=5, DesiredCapacity=1,
            LaunchTemplate={"LaunchTemplateId": template["LaunchTemplateId"], "Version": "$Latest"},
            AvailabilityZones=[f"{REGION}a"],
            Tags=[{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": name, "ResourceType": "auto-scaling-group"}
                  for k, v in {"platformctl.io/stage": stage, "platformctl.io/cluster": cluster}.items()])

    def desired(self, group: str) -> int:
        return int(self.admin("autoscaling").describe_auto_scaling_groups(
            AutoScalingGroupNames=[group])["AutoScalingGroups"][0]["DesiredCapacity"])


@pytest.fixture
def account() -> Iterator[Account]:
    from moto.backends import get_backend

    made = Account()
    yield made
    made.server.shutdown()
    for name in ("iam", "sts", "autoscaling", "ec2", "dynamodb"):  # moto's accounts are the process's: left empty
        get_backend(name).reset()  # type: ignore[call-overload]


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_a_pods_token_is_exchanged_only_for_the_role_its_service_account_may_assume(account: Account, tmp_path: Path) -> None:
    role = account.role("dev-usw2a-01-remediation", "platformctl-system", "platformctl-remediation",
                        access.remediation("dev-usw2a-01", REGION, "arn:aws:dynamodb:us-west-2:123456789012:table/t"))
    session = account.session(role, "platformctl-system", "platformctl-remediation", tmp_path)
    arn = account.client(session, "sts").get_caller_identity()["Arn"]
    assert arn.startswith("arn:aws:sts::123456789012:assumed-role/dev-usw2a-01-remediation/")
    # The canary runner's token (another service account, another namespace) does not open the remediation's role.
    with pytest.raises(ClientError) as refused:
        account.session(role, "platformctl-canaries", "platformctl-canary-runner", tmp_path)
    assert code(refused) == "AccessDenied" and "sts:AssumeRoleWithWebIdentity" in str(refused.value)
    # A token its issuer did not sign (another key for the same issuer URL), and one past its expiry.
    with pytest.raises(ClientError) as forged:
        account.session(role, "platformctl-system", "platformctl-remediation", tmp_path, issuers=Issuers())
    assert code(forged) == "InvalidIdentityToken"
    with pytest.raises(ClientError) as expired:
        account.session(role, "platformctl-system", "platformctl-remediation", tmp_path, now=account.now - 86_401)
    assert code(expired) == "ExpiredTokenException"
    assert [d["decision"] for d in account.gate.query(refused=True)] == ["implicitDeny"]


def test_a_remediation_surges_and_retires_in_its_own_clusters_groups_and_is_refused_anywhere_else(
        account: Account, tmp_path: Path) -> None:
    account.group("dev-usw2a-01-general", "dev-usw2a-01", "dev")
    account.group("dev-usw2b-01-general", "dev-usw2b-01", "dev")
    role = account.role("dev-usw2a-01-remediation", "platformctl-system", "platformctl-remediation",
                        access.remediation("dev-usw2a-01", REGION, "arn:aws:dynamodb:us-west-2:123456789012:table/t"))
    session = account.session(role, "platformctl-system", "platformctl-remediation", tmp_path)
    autoscaling, ec2 = account.client(session, "autoscaling"), account.client(session, "ec2")
    assert len(autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]) == 2
    ec2.describe_launch_template_versions(LaunchTemplateName="dev-usw2a-01-general")
    autoscaling.set_desired_capacity(AutoScalingGroupName="dev-usw2a-01-general", DesiredCapacity=2)
    assert account.desired("dev-usw2a-01-general") == 2
    with pytest.raises(ClientError) as refused:
        autoscaling.set_desired_capacity(AutoScalingGroupName="dev-usw2b-01-general", DesiredCapacity=3)
    assert code(refused) == "AccessDenied" and refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert "autoscaling:SetDesiredCapacity on resource: arn:aws:autoscaling:us-west-2:123456789012:autoScalingGroup:" \
           "*:autoScalingGroupName/dev-usw2b-01-general" in str(refused.value)
    assert account.desired("dev-usw2b-01-general") == 1  # the refused call never reached the group
    # Its instance in the other cluster's group: the group's tags decide, as AWS resolves the instance's group.
    other = account.admin("autoscaling").describe_auto_scaling_groups(
        AutoScalingGroupNames=["dev-usw2b-01-general"])["AutoScalingGroups"][0]["Instances"][0]["InstanceId"]
    with pytest.raises(ClientError) as retire:
        autoscaling.terminate_instance_in_auto_scaling_group(InstanceId=other, ShouldDecrementDesiredCapacity=False)
    assert code(retire) == "AccessDenied"
    with pytest.raises(ClientError) as terminate:  # EC2's own terminate is not granted at all: EC2's error for it
        ec2.terminate_instances(InstanceIds=[other])
    assert code(terminate) == "UnauthorizedOperation"
    states = account.admin("ec2").describe_instances(InstanceIds=[other])["Reservations"][0]["Instances"][0]["State"]
    assert states["Name"] == "running"


def use_keys(monkeypatch: pytest.MonkeyPatch, account: Account, keys: Any = None) -> None:
    """The environment boto3 reads: the account's admin keys, or a role session's ``keys``."""
    for key, value in {"AWS_ENDPOINT_URL": account.endpoint, "AWS_REGION": REGION,
                       "AWS_ACCESS_KEY_ID": keys.access_key if keys else "testing",
                       "AWS_SECRET_ACCESS_KEY": keys.secret_key if keys else "testing"}.items():
        monkeypatch.setenv(key, value)
    if keys:
        monkeypatch.setenv("AWS_SESSION_TOKEN", keys.token)
    else:
        monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # boto3's default session keeps the keys it first found


def test_each_job_writes_only_its_own_partitions_of_its_stages_table(
        account: Account, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each job's own writes, made by its own code's names (a journal under its lease, a day's canary results, the
    tick's promoted, launched and frozen records), pass under its role; another job's, another cluster's and another
    stage's are refused with AWS's error and leave nothing in the table."""
    from e2e_canary.results import CanaryResult, ResultStream, keep
    from platformctl.kernel.errors import PlatformError
    from platformctl.kernel.nodegroups import LaunchSpec
    from platformctl.kernel.state.base import StoreUnavailable
    from platformctl.kernel.state.dynamodb import DynamoDBStore, create_table
    from platformctl.kernel.state.frozen import HandFreeze, frozen_in, record_frozen
    from platformctl.kernel.state.promoted import Promoted, launched_of, promote, promoted_in, record_launches
    from upgrade_service.journal import remediation as remediation_journal
    from upgrade_service.journal import rotation as rotation_journal

    use_keys(monkeypatch, account)
    for stage in ("dev", "prod"):
        create_table(f"platformctl-state-{stage}", REGION)
    dev = f"arn:aws:dynamodb:{REGION}:123456789012:table/platformctl-state-dev"
    host, member = "dev-usw2-host", "dev-usw2a-01"
    roles = {"rotation": ("platformctl-system", "platformctl-rotation", access.rotation("dev", REGION, dev, [host, member])),
             "remediation": ("platformctl-system", "platformctl-remediation", access.remediation(member, REGION, dev)),
             "canary": ("platformctl-canary", "platformctl-canary-runner", access.canary("dev", member, dev)),
             "tick": ("platformctl-system", "platformctl-release", access.release_tick(
                 "dev", REGION, dev, f"arn:aws:dynamodb:{REGION}:123456789012:table/platformctl-release", "file:///s",
                 [host, member]))}
    arns = {job: account.role(f"dev-{job}", ns, sa, grants) for job, (ns, sa, grants) in roles.items()}

    def store(job: str, table: str = "platformctl-state-dev") -> DynamoDBStore:
        namespace, account_name, _ = roles[job]
        use_keys(monkeypatch, account, account.session(arns[job], namespace, account_name, tmp_path).get_credentials())
        return DynamoDBStore(table, region=REGION)

    def journal(s: DynamoDBStore, stream: str) -> None:  # a run's: its lease taken, renewed, a fenced record, given back
        lease = s.acquire(stream, "holder", 60.0)
        s.append(stream, {"kind": "started"}, fence=s.renew(lease, 60.0))
        s.release(lease)

    day = 1_764_720_000.0  # 2025-12-03 UTC
    result = CanaryResult("dns", "dns", "a-1", "dev", member, None, None, None, "ok", "", {}, day)
    refused: list[str] = []

    def refuse(*attempts: Any) -> None:
        for attempt in attempts:
            with pytest.raises(StoreUnavailable) as exc:
                attempt()
            refused.append(str(exc.value))

    rotation = store("rotation")
    for cluster in (host, member):
        journal(rotation, rotation_journal.stream_of(cluster))
    refuse(lambda: journal(rotation, remediation_journal.stream_of(member)),
           lambda: keep(rotation, result),
           lambda: promote(rotation, Promoted("dev", {"general": "ami-1"}, "c-1", day)))
    remediation = store("remediation")
    journal(remediation, remediation_journal.stream_of(member))
    refuse(lambda: journal(remediation, remediation_journal.stream_of(host)),  # another cluster's
           lambda: journal(remediation, rotation_journal.stream_of(member)),
           lambda: record_frozen(remediation, "dev", [HandFreeze("x", day)], day))
    canary = store("canary")
    lease = canary.acquire(ResultStream("dev", member).name, "runner", 60.0)
    keep(canary, result)
    keep(canary, dataclasses.replace(result, at=day + 86_400))  # the next day's stream, registered too
    canary.release(lease)
    refuse(lambda: keep(canary, dataclasses.replace(result, cluster=host)),  # another cluster's results
           lambda: canary.acquire(ResultStream("dev", host).name, "runner", 60.0),
           lambda: journal(canary, rotation_journal.stream_of(member)),  # a rotation's lease: it could stop one
           lambda: canary.append(rotation_journal.stream_of(member), {"kind": "abort-requested"}))
    tick = store("tick")
    journal(tick, rotation_journal.stream_of(member))
    promote(tick, Promoted("dev", {"general": "ami-1"}, "c-1", day))
    assert record_launches(tick, "dev", "c-1", {"dev-usw2a-01-general": LaunchSpec("lt-1", "2")}, day)
    assert record_frozen(tick, "dev", [HandFreeze("by hand", day, by="alice")], day)
    refuse(lambda: promote(tick, Promoted("prod", {"general": "ami-1"}, "c-1", day)),  # another stage's, in its table
           lambda: journal(tick, remediation_journal.stream_of(member)),
           lambda: keep(tick, result))
    with pytest.raises(PlatformError, match="AccessDeniedException"):  # another stage's table: not even opened
        store("tick", "platformctl-state-prod")

    assert all("AccessDeniedException" in r for r in refused), refused
    assert len(account.gate.query(refused=True)) == len(refused) + 1 == 14
    use_keys(monkeypatch, account)
    ddb = account.admin("dynamodb")
    written = {i["pk"]["S"] for i in ddb.scan(TableName="platformctl-state-dev")["Items"]}
    assert written == {"i#", f"s#rotation/{host}", f"s#rotation/{member}", "i#rotation",
                       f"s#remediation/{member}", "i#remediation",
                       f"s#canary/dev/{member}/2025-12-03", f"s#canary/dev/{member}/2025-12-04", "i#canary",
                       "s#promoted/dev", "i#promoted", f"s#{launched_of('dev')}", "i#launched", "s#frozen/dev", "i#frozen"}
    assert ddb.scan(TableName="platformctl-state-prod")["Count"] == 0
    admin = DynamoDBStore("platformctl-state-dev", region=REGION)
    assert promoted_in(admin, "dev") is not None and [f.by for f in frozen_in(admin, "dev")] == ["alice"]


def test_a_stages_tick_writes_its_own_partitions_of_the_ledger_and_what_it_forges_there_is_not_admitted(
        account: Account, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from platformctl.kernel.state.base import StoreUnavailable
    from platformctl.kernel.state.dynamodb import DynamoDBStore, create_table
    from release_pipeline.fold import Kind
    from release_pipeline.ledger import CANDIDATES, DEPLOYS, LEDGER, Ledger, checkpoints, partition, stage_lease

    use_keys(monkeypatch, account)
    create_table("platformctl-release", REGION)
    stages = ("dev", "prod")
    people = Ledger(DynamoDBStore("platformctl-release", region=REGION), stages)  # an operator's credentials
    people.append("c-1", None, Kind.START, 0.5, "started", {"ready_in": ["dev"]}, "alice")
    prod_lease = people.store.acquire(stage_lease("prod"), "prod-tick", 600.0)  # prod's tick holds prod's lease
    ledger_arn = f"arn:aws:dynamodb:{REGION}:123456789012:table/platformctl-release"
    role = account.role("dev-release", "platformctl-system", "platformctl-release", access.release_tick(
        "dev", REGION, f"arn:aws:dynamodb:{REGION}:123456789012:table/platformctl-dev", ledger_arn, "file:///state",
        ["dev-usw2-host"]))
    use_keys(monkeypatch, account, account.session(role, "platformctl-system", "platformctl-release", tmp_path).get_credentials())
    dev = Ledger(DynamoDBStore("platformctl-release", region=REGION), stages)
    with dev.stage_leases("dev-tick", 60.0)("dev") as held:  # its own stage: the lease, fenced entries, all of it
        assert held
        dev.append("c-1", "dev", Kind.ENTER, 1.0, "entered")
        dev.add_deploy("dev", {"at": 1.0, "candidate": "c-1", "lock_holder": "x"})
        dev.add_boots("c-1", "dev", {"ami-1": ["i-1"]})
        dev.checkpoint(dev.state(), ["dev"])
        # what it may write, it may not decide: an approval for prod, a freeze, prod's promotion, in its own partition
        forged = [dev.append("c-1", "prod", Kind.APPROVE, 2.0, "forged approval", by="dev-tick").id,
                  dev.append(None, None, Kind.FREEZE, 2.0, "forged freeze", {"until": None}, "dev-tick").id,
                  dev.append("c-1", "prod", Kind.PROMOTE, 2.0, "forged promotion", {"ready_in": []}, "dev-tick").id]
    assert [(e.decision, e.writer) for _, e in dev.entries()] == [(Kind.START, None), (Kind.ENTER, "dev")] + \
        [(k, "dev") for k in (Kind.APPROVE, Kind.FREEZE, Kind.PROMOTE)]
    state = people.state()  # prod's checkpoints (none yet) and every entry: the forgeries passed over
    assert state.stage("dev").current == "c-1" and state.refused == forged
    assert state.approvals == {} and state.freezes == [] and state.stage("prod").last_good is None
    assert people.boots("c-1") == {"dev": {"ami-1/i-1"}}
    refused = []
    for attempt in (lambda: dev.stage_leases("dev-tick", 60.0)("prod").__enter__(),  # prod's lease, held or not
                    lambda: dev.store.release(prod_lease),
                    lambda: dev.store.append(DEPLOYS + "prod", {"at": 2.0, "candidate": "c-1", "cleared": "x"}),
                    lambda: dev.store.append(CANDIDATES, {"id": "c-forged"}),
                    lambda: dev.store.append(partition("prod"), {"id": "d-x"}, sequence=LEDGER),  # prod's entries
                    lambda: dev.store.append(LEDGER, {"id": "d-y"}, sequence=LEDGER),  # the people's
                    lambda: dev.store.append(checkpoints("prod"), {"version": 6, "state": {}}),  # prod's checkpoints
                    lambda: dev.add_boots("c-1", "prod", {"ami-1": ["i-2"]})):
        with pytest.raises(StoreUnavailable) as exc:
            attempt()
        refused.append(str(exc.value))
    assert all("AccessDeniedException" in r for r in refused), refused
    assert people.store.read(DEPLOYS + "prod") == [] and people.store.read(CANDIDATES) == []
    assert people.store.read(partition("prod")) == [] and people.store.last(checkpoints("prod")) is None
    assert [e.id for _, e in people.entries()] == [e.id for _, e in dev.entries()]  # nothing else was written
    assert people.store.lease(stage_lease("prod")) == prod_lease  # still prod's tick's, unchanged
    assert [d["decision"] for d in account.gate.query(refused=True)] == ["implicitDeny"] * 8


@pytest.mark.parametrize(("statement", "request_", "decision"), [
    # An explicit deny wins over any allow.
    ([{"Effect": "Allow", "Action": "ec2:*", "Resource": "*"},
      {"Effect": "Deny", "Action": "ec2:TerminateInstances", "Resource": "*"}],
     Request("ec2:TerminateInstances", "arn:aws:ec2:r:1:instance/i-1"), Decision.EXPLICIT_DENY),
    # Actions match case-insensitively; resources case-sensitively.
    ([{"Effect": "Allow", "Action": "EC2:describe*", "Resource": "*"}], Request("ec2:DescribeInstances"), Decision.ALLOWED),
    ([{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::Bucket/*"}],
     Request("s3:GetObject", "arn:aws:s3:::bucket/k"), Decision.IMPLICIT_DENY),
    # A condition key the request lacks fails a positive operator, passes a negated one and ...IfExists.
    ([{"Effect": "Allow", "Action": "a:B", "Resource": "*", "Condition": {"StringEquals": {"aws:ResourceTag/t": "x"}}}],
     Request("a:B"), Decision.IMPLICIT_DENY),
    ([{"Effect": "Allow", "Action": "a:B", "Resource": "*", "Condition": {"StringNotEquals": {"aws:ResourceTag/t": "x"}}}],
     Request("a:B"), Decision.ALLOWED),
    ([{"Effect": "Allow", "Action": "a:B", "Resource": "*",
       "Condition": {"StringEqualsIfExists": {"aws:ResourceTag/t": "x"}}}], Request("a:B"), Decision.ALLOWED),
    # ForAllValues holds for every value the request carries; a failed Allow condition is passed over, not a deny.
    ([{"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": "*",
       "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["s#canary/*"]}}},
      {"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": "*"}],
     Request("dynamodb:PutItem", "t", {"dynamodb:LeadingKeys": ["l#rotation"]}), Decision.ALLOWED),
    ([{"Effect": "Allow", "Action": "dynamodb:PutItem", "Resource": "*",
       "Condition": {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["s#canary/*"]}}}],
     Request("dynamodb:PutItem", "t", {"dynamodb:LeadingKeys": ["l#rotation"]}), Decision.IMPLICIT_DENY),
    # NotAction: everything but what it names; an operator the region does not know never allows.
    ([{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}], Request("iam:PassRole"), Decision.IMPLICIT_DENY),
    ([{"Effect": "Allow", "Action": "a:B", "Resource": "*", "Condition": {"DateGreaterThan": {"aws:CurrentTime": "x"}}}],
     Request("a:B"), Decision.IMPLICIT_DENY),
])
def test_policies_are_evaluated_as_aws_documents_it(statement: list[dict[str, Any]], request_: Request,
                                                     decision: Decision) -> None:
    assert evaluate([{"Version": "2012-10-17", "Statement": statement}], request_) is decision


def test_an_image_build_under_its_role_builds_copies_and_publishes_the_tree_and_reaches_no_other_instance(
        account: Account, tmp_path: Path) -> None:
    """``ami build`` with the image build's role (``infra.access.image_build``), through the region's IAM: the shipped
    tree built, copied and published with no call refused; its grants used, every one; and what the role may not do
    (launch an instance not tagged as a builder, terminate another instance, remove an image not its own) refused."""
    from ami.build import ImageStore, build_images, plan_builds, write_lock
    from ami.manifest import load_manifests
    from platformctl.emulator.moto_extensions import publish_eks_optimized_images
    from platformctl.kernel.environment import AwsTarget

    for region in (REGION, "us-east-1"):
        publish_eks_optimized_images(region)
    role = account.role("dev-usw2-host-image-build", "platformctl-system", "platformctl-image-build", access.image_build())
    session = account.session(role, "platformctl-system", "platformctl-image-build", tmp_path)
    keys = session.get_credentials().get_frozen_credentials()
    target = AwsTarget(account.endpoint, REGION, {"AWS_ACCESS_KEY_ID": keys.access_key, "AWS_SECRET_ACCESS_KEY":
                                                  keys.secret_key, "AWS_SESSION_TOKEN": keys.token or ""})
    manifests = load_manifests()
    store = ImageStore(REGION, ["us-east-1"], target)
    report = build_images(manifests, plan_builds(manifests, store), store, workers=2)
    write_lock(tmp_path / "images.lock.json", manifests, store, report.ids)
    assert account.gate.query(refused=True) == []
    assert sorted(report.ids) == sorted(manifests.images)
    ec2 = account.admin("ec2")
    for name, image_id in report.ids.items():
        assert account.admin("ssm").get_parameter(Name=f"/platformctl/ami/{name}/latest")["Parameter"]["Value"] == image_id
    east = boto3.client("ec2", endpoint_url=account.endpoint, **{**ADMIN, "region_name": "us-east-1"})
    assert {i["ImageId"] for i in east.describe_images(Owners=["self"])["Images"]} >= {
        c for b in report.images for c in b.copies.values()} != set()
    builders = [i for r in ec2.describe_instances(Filters=[{"Name": "tag-key", "Values": ["platformctl:builder"]}])[
        "Reservations"] for i in r["Instances"]]
    assert builders and all(i["State"]["Name"] in ("terminated", "shutting-down") for i in builders)
    unused = [g.what for g in access.image_build() if not used_grant(g, account.gate.query())]
    assert unused == [], unused  # every statement allowed some call (the last one: the commit's tag on images ours)

    # What it may not do. An instance not tagged as a builder, or any other instance:
    client = account.client(session, "ec2")
    with pytest.raises(ClientError) as untagged:
        client.run_instances(ImageId=report.ids["base"], InstanceType="m6i.large", MinCount=1, MaxCount=1)
    assert code(untagged) == "UnauthorizedOperation" and "instance/*" in str(untagged.value)
    other = ec2.run_instances(ImageId=report.ids["base"], InstanceType="m6i.large", MinCount=1, MaxCount=1)[
        "Instances"][0]["InstanceId"]
    for call in (lambda: client.terminate_instances(InstanceIds=[other]),
                 lambda: client.create_image(InstanceId=other, Name="not-a-build")):
        with pytest.raises(ClientError) as refused:
            call()
        assert code(refused) == "UnauthorizedOperation" and f"instance/{other}" in str(refused.value)
    # an image the account holds that no build made: neither removed, nor first tagged as ours to be removed
    foreign = ec2.create_image(InstanceId=other, Name="someone-elses")["ImageId"]
    with pytest.raises(ClientError) as deregister:
        client.deregister_image(ImageId=foreign)
    assert code(deregister) == "UnauthorizedOperation" and f"image/{foreign}" in str(deregister.value)
    with pytest.raises(ClientError) as claimed:
        client.create_tags(Resources=[foreign], Tags=[{"Key": "platformctl:name", "Value": "base"}])
    assert code(claimed) == "UnauthorizedOperation" and "ec2:CreateTags" in str(claimed.value)
    assert "Tags" not in ec2.describe_images(ImageIds=[foreign])["Images"][0] or not any(
        t["Key"] == "platformctl:name" for t in ec2.describe_images(ImageIds=[foreign])["Images"][0]["Tags"])
    assert ec2.describe_images(ImageIds=[foreign])["Images"][0]["State"] == "available"
    assert ec2.describe_instances(InstanceIds=[other])["Reservations"][0]["Instances"][0]["State"]["Name"] == "running"


def used_grant(grant: access.Grant, decisions: list[dict[str, Any]]) -> bool:
    """Whether some allowed call was one of the grant's actions on one of its resources."""
    from platformctl.emulator.server.policy import matches

    return any(d["decision"] == "allowed" and d["action"] in grant.actions and
               any(matches(str(r), d["resource"]) for r in grant.resources) for d in decisions)


def test_a_failed_image_build_under_its_role_removes_what_it_made(account: Account, tmp_path: Path) -> None:
    """The build's commit (the fingerprint tag) refused by AWS: the image made in the home region and its copy, both
    tagged ours as they were made, are removed under the build's own role, nothing refused; and the commit tag on an
    image already ours is what the last grant is for."""
    import boto3 as boto

    from ami.build import ImageStore, build_images, plan_builds
    from ami.manifest import load_manifests
    from platformctl.emulator.moto_extensions import publish_eks_optimized_images
    from platformctl.kernel.environment import AwsTarget

    for region in (REGION, "us-east-1"):
        publish_eks_optimized_images(region)
    role = account.role("dev-usw2-host-image-build", "platformctl-system", "platformctl-image-build", access.image_build())
    keys = account.session(role, "platformctl-system", "platformctl-image-build", tmp_path).get_credentials(
        ).get_frozen_credentials()
    target = AwsTarget(account.endpoint, REGION, {"AWS_ACCESS_KEY_ID": keys.access_key, "AWS_SECRET_ACCESS_KEY":
                                                  keys.secret_key, "AWS_SESSION_TOKEN": keys.token or ""})
    manifests = load_manifests()
    store = ImageStore(REGION, ["us-east-1"], target)

    def refuse_the_commit(params: dict[str, Any], **_: object) -> None:
        if any(t["Key"] == "platformctl:fingerprint" for t in params.get("Tags", [])):
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "refused by the test"}}, "CreateTags")

    session = boto._get_default_session()
    session.events.register("before-parameter-build.ec2.CreateTags", refuse_the_commit)
    try:
        with pytest.raises(Exception, match="refused by the test"):
            build_images(manifests, plan_builds(manifests, store, ("base",)), store, workers=1)
    finally:
        session.events.unregister("before-parameter-build.ec2.CreateTags", refuse_the_commit)
    assert account.gate.query(refused=True) == []
    removed = [d for d in account.gate.query() if d["action"] == "ec2:DeregisterImage" and d["decision"] == "allowed"]
    assert len(removed) == 2  # the home region's image and its copy
    for where in (REGION, "us-east-1"):
        ec2 = boto3.client("ec2", endpoint_url=account.endpoint, **{**ADMIN, "region_name": where})
        assert [i for i in ec2.describe_images(Owners=["self"])["Images"] if i["State"] == "available"] == []
