"""The local region's IAM in front of its AWS (moto): a pod's role through its service-account token, and every call
that role makes allowed or refused by the role's policies, with AWS's error.

**Credentials as EKS gives them (IAM roles for service accounts).** The kubelet writes a pod whose service account is
annotated ``eks.amazonaws.com/role-arn`` a projected token, a JWT its cluster's OIDC issuer signs (``Issuers``):
``iss`` the cluster's issuer URL, ``sub`` ``system:serviceaccount:<namespace>:<name>``, ``aud`` ``sts.amazonaws.com``,
24 hours of the region's time. boto3 exchanges it with ``sts:AssumeRoleWithWebIdentity`` (an unsigned call): the gate
checks the signature, the expiry, that the account has an OIDC provider for the issuer whose client ids hold the
audience, and that the role's trust policy lets that provider's principal in with the token's ``<issuer>:sub`` and
``<issuer>:aud`` (``policy.trusts``), and answers as STS does when one fails (``InvalidIdentityToken``,
``ExpiredTokenException``, ``AccessDenied``); then moto makes the session's credentials.

**Every call of a role's session judged.** A call signed with a session's key is evaluated against the role's inline
and attached policies (``policy.evaluate``) with the resource ARN and the condition keys AWS's Service Authorization
Reference gives the action (``_request``): an Auto Scaling group's ARN and ``aws:ResourceTag/*`` for its writes, an
instance's for EC2's, a cluster's for EKS's, a parameter's for SSM's, a table's and ``dynamodb:LeadingKeys`` for
DynamoDB's (one decision per table a transaction writes); an image build's, one decision per resource the action
authorizes (``_image_requests``: RunInstances on its image, network, volumes and the instance with the tags it is made
with, and ``ec2:CreateTags`` with ``ec2:CreateAction`` for tags set at creation, as EC2 asks both). A refused call
never reaches moto: its answer is AWS's (``AccessDenied``, EC2's ``UnauthorizedOperation``, ``AccessDeniedException``
for JSON services) with AWS's message (``User: <session ARN> is not authorized to perform: <action> on resource:
<ARN> because no identity-based policy allows the <action> action``). ``sts:GetCallerIdentity`` is never refused, as in AWS.

Calls signed with any other key are the account's own (the operator's, the region's provisioning) and pass, as an
administrator's would. Signatures are not verified (moto's own check is left to moto's enforcement, which is off).
Every decision on a session is kept (``decisions``, the last 20,000), served at ``/platformctl/v1/iam-decisions``: what
each job called, and what it was refused.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import urllib.parse
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from platformctl.emulator.server.policy import Decision, Request, evaluate, trusts

ACCOUNT = "123456789012"  # moto's account
TOKEN_SECONDS = 86_400  # a projected token's expirationSeconds as the EKS pod identity webhook asks it
AUDIENCE = "sts.amazonaws.com"
KEPT = 20_000
# Actions with no resource-level permissions: only Resource "*" allows them.
UNSCOPED = ("Describe", "List", "Get")
ASG_WRITES = ("SetDesiredCapacity", "TerminateInstanceInAutoScalingGroup", "SuspendProcesses", "ResumeProcesses",
              "UpdateAutoScalingGroup", "DeleteAutoScalingGroup", "CreateOrUpdateTags", "DetachInstances",
              "SetInstanceProtection", "StartInstanceRefresh", "CancelInstanceRefresh")
ITEM_ACTIONS = ("GetItem", "PutItem", "UpdateItem", "DeleteItem")
IMAGE_ACTIONS = ("RunInstances", "CreateImage", "CopyImage", "CreateTags", "DeregisterImage", "DeleteSnapshot")
EC2_KINDS = {"ami-": "image", "snap-": "snapshot", "i-": "instance", "lt-": "launch-template", "vol-": "volume",
             "subnet-": "subnet", "sg-": "security-group", "eni-": "network-interface"}
JSON_PREFIXES = {"AmazonSSM": "ssm", "DynamoDB_20120810": "dynamodb"}


def _b64(data: str) -> bytes:
    return base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))


class Issuers:
    """Each cluster's service-account token issuer: an RSA key per issuer URL, made when first asked."""

    def __init__(self) -> None:
        self._keys: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _key(self, issuer: str) -> Any:
        from joserfc.jwk import RSAKey

        with self._lock:
            if issuer not in self._keys:
                self._keys[issuer] = RSAKey.generate_key(2048, parameters={"kid": uuid.uuid4().hex})
            return self._keys[issuer]

    def mint(self, issuer: str, namespace: str, service_account: str, now: float, audience: str = AUDIENCE,
             seconds: int = TOKEN_SECONDS) -> str:
        from joserfc import jwt

        key = self._key(issuer)
        claims = {"iss": issuer, "sub": f"system:serviceaccount:{namespace}:{service_account}", "aud": [audience],
                  "iat": int(now), "nbf": int(now), "exp": int(now) + seconds,
                  "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": service_account}}}
        return str(jwt.encode({"alg": "RS256", "kid": key.kid}, claims, key))

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims when its issuer signed it; ``ValueError`` otherwise (expiry is the caller's to judge)."""
        from joserfc import jwt
        from joserfc.errors import JoseError

        try:
            claims = json.loads(_b64(token.split(".")[1]))
            issuer = str(claims["iss"])
        except (IndexError, KeyError, ValueError, TypeError):
            raise ValueError("the token is not a JWT") from None
        with self._lock:
            key = self._keys.get(issuer)
        if key is None:
            raise ValueError(f"Couldn't retrieve verification key from your identity provider, {issuer}")
        try:
            return dict(jwt.decode(token, key, algorithms=["RS256"]).claims)
        except JoseError:
            raise ValueError("the token's signature is not its issuer's") from None


class TokenIssuer:
    """One cluster's issuer as its kubelet asks it for a pod's token (``kubelet.Identity``): the region's time."""

    def __init__(self, issuers: Issuers, issuer: str, region: str, now: Callable[[], float]) -> None:
        self.issuers, self.issuer, self.region, self.now = issuers, issuer, region, now

    def token(self, namespace: str, service_account: str, audience: str = AUDIENCE, seconds: int = TOKEN_SECONDS) -> str:
        return self.issuers.mint(self.issuer, namespace, service_account, self.now(), audience, seconds)


class IamGate:
    """WSGI middleware in front of moto's application: sessions' calls judged, web identities exchanged."""

    def __init__(self, app: Any, issuers: Issuers, now: Callable[[], float] | None = None) -> None:
        self.app = app
        self.issuers = issuers
        self.now = now or time.time
        self.decisions: deque[dict[str, Any]] = deque(maxlen=KEPT)
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        form = _form(environ, body)
        if form.get("Action") == "AssumeRoleWithWebIdentity":
            refusal = self._web_identity(form)
            if refusal is not None:
                return _respond(start_response, *refusal)
            return self.app(environ, start_response)
        session = self._session(environ)
        if session is None:
            return self.app(environ, start_response)
        service, action = _operation(environ, body, form)
        requests = _requests(service, action, environ, body, form, _scope_region(environ))
        role_arn, session_arn = session
        documents = _policies(role_arn)
        for request in requests:
            decision = Decision.ALLOWED if request.action == "sts:GetCallerIdentity" else evaluate(documents, request)
            self._record(role_arn, request, decision)
            if decision is not Decision.ALLOWED:
                return _respond(start_response, *_refusal(service, session_arn, request, decision))
        return self.app(environ, start_response)

    def _record(self, role_arn: str, request: Request, decision: Decision) -> None:
        entry = {"time": time.time(), "role": role_arn.rsplit("/", 1)[-1], "action": request.action,
                 "resource": request.resource, "decision": decision.value}
        try:
            entry["virtual_time"] = self.now()
        except Exception:  # the region is still starting: no clock yet
            pass
        with self.lock:
            self.decisions.append(entry)

    def query(self, role: str | None = None, refused: bool = False) -> list[dict[str, Any]]:
        with self.lock:
            return [d for d in self.decisions if (role is None or d["role"] == role)
                    and (not refused or d["decision"] != Decision.ALLOWED.value)]

    # ---------------------------------------------------------------- who signed it

    @staticmethod
    def _session(environ: Mapping[str, Any]) -> tuple[str, str] | None:
        """(role ARN, session ARN) of the STS session whose key signed the request; None for any other key."""
        from moto.sts.models import sts_backends

        auth = str(environ.get("HTTP_AUTHORIZATION") or "")
        key = auth.partition("Credential=")[2].partition("/")[0]
        if not key:
            return None
        for assumed in sts_backends[ACCOUNT]["aws"].assumed_roles:
            if assumed.access_key_id == key:
                role = assumed.role_arn.rsplit("/", 1)[-1]
                return assumed.role_arn, f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{assumed.session_name}"
        return None

    def _web_identity(self, form: Mapping[str, str]) -> tuple[int, str, str, str] | None:
        """STS's refusal of the exchange, or None when the token, the provider and the trust policy admit it."""
        from moto.iam.models import iam_backends

        try:
            claims = self.issuers.verify(form.get("WebIdentityToken", ""))
        except ValueError as exc:
            return _sts_error(400, "InvalidIdentityToken", str(exc))
        now = self.now()
        if float(claims.get("exp", 0)) <= now:
            return _sts_error(400, "ExpiredTokenException", "Token expired: current date/time "
                              f"{int(now)} must be before the expiration date/time {claims.get('exp')}")
        issuer = str(claims["iss"]).removeprefix("https://")
        backend = iam_backends[ACCOUNT]["aws"]
        provider = next((p for p in backend.open_id_providers.values() if p.url == issuer), None)
        if provider is None:
            return _sts_error(400, "InvalidIdentityToken",
                              f"No OpenIDConnect provider found in your account for https://{issuer}")
        aud = claims.get("aud")
        audiences = [str(a) for a in aud] if isinstance(aud, list) else [str(aud)]
        if not set(audiences) & set(provider.client_id_list):
            return _sts_error(400, "InvalidIdentityToken", "Incorrect token audience")
        try:
            role = backend.get_role_by_arn(form.get("RoleArn", ""))
        except Exception:
            role = None
        context = {f"{issuer}:sub": [str(claims.get("sub"))], f"{issuer}:aud": audiences}
        if role is None or not trusts(json.loads(role.assume_role_policy_document), provider.arn,
                                      "sts:AssumeRoleWithWebIdentity", context):
            with self.lock:
                self.decisions.append({"time": time.time(), "role": form.get("RoleArn", "").rsplit("/", 1)[-1],
                                       "action": "sts:AssumeRoleWithWebIdentity", "resource": form.get("RoleArn", ""),
                                       "decision": Decision.IMPLICIT_DENY.value, "subject": claims.get("sub")})
            return _sts_error(403, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
        return None


# ---------------------------------------------------------------- the request as IAM sees it

def _form(environ: Mapping[str, Any], body: bytes) -> dict[str, str]:
    fields: dict[str, str] = {}
    if not environ.get("HTTP_X_AMZ_TARGET") and "json" not in str(environ.get("CONTENT_TYPE") or ""):
        fields.update({k: v[0] for k, v in urllib.parse.parse_qs(body.decode(errors="replace")).items()})
    fields.update({k: v[0] for k, v in urllib.parse.parse_qs(str(environ.get("QUERY_STRING") or "")).items()})
    return fields


def _scope_region(environ: Mapping[str, Any]) -> str:
    auth = str(environ.get("HTTP_AUTHORIZATION") or "")
    parts = auth.partition("Credential=")[2].partition(",")[0].split("/")
    return parts[2] if len(parts) > 2 else "us-east-1"


def _operation(environ: Mapping[str, Any], body: bytes, form: Mapping[str, str]) -> tuple[str, str]:
    """(service, action) of the request: the query protocol's ``Action``, the JSON protocol's target, or EKS's route."""
    auth = str(environ.get("HTTP_AUTHORIZATION") or "")
    scope = auth.partition("Credential=")[2].partition(",")[0].split("/")
    service = scope[3] if len(scope) > 3 else ""
    target = str(environ.get("HTTP_X_AMZ_TARGET") or "")
    if target:
        prefix, _, action = target.rpartition(".")
        return JSON_PREFIXES.get(prefix, service), action
    if "Action" in form:
        return service, form["Action"]
    if service == "eks":
        return service, _eks_action(str(environ.get("REQUEST_METHOD")), str(environ.get("PATH_INFO") or ""))
    return service, f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')}"


def _eks_action(method: str, path: str) -> str:
    parts = [p for p in path.split("/") if p]
    routes = {("GET", 1): "ListClusters", ("POST", 1): "CreateCluster", ("GET", 2): "DescribeCluster",
              ("DELETE", 2): "DeleteCluster", ("POST", 3): "UpdateClusterVersion", ("GET", 3): "ListUpdates",
              ("GET", 4): "DescribeUpdate"}
    if parts[:1] == ["clusters"] and len(parts) > 2 and parts[2] not in ("updates", "update-config"):
        kinds = {"node-groups": "Nodegroup", "access-entries": "AccessEntry", "addons": "Addon"}
        kind = kinds.get(parts[2], parts[2])
        verb = {"GET": "Describe" if len(parts) > 3 else "List", "POST": "Create", "DELETE": "Delete"}.get(method, method)
        return f"{verb}{kind}{'s' if verb == 'List' else ''}"
    if parts[:1] == ["clusters"] and len(parts) == 3 and parts[2] == "update-config":
        return "UpdateClusterConfig"
    return routes.get((method, len(parts)), f"{method} {path}")


def _requests(service: str, action: str, environ: Mapping[str, Any], body: bytes, form: Mapping[str, str],
              region: str) -> list[Request]:
    """What IAM judges for the call: one request, or one per table a DynamoDB batch or transaction writes."""
    name = f"{service}:{action}"
    if service == "eks":  # every EKS action but ListClusters is on a cluster's ARN, with the cluster's tags
        parts = [p for p in str(environ.get("PATH_INFO") or "").split("/") if p]
        if len(parts) < 2:
            return [Request(name)]
        return [Request(name, f"arn:aws:eks:{region}:{ACCOUNT}:cluster/{parts[1]}",
                        _tag_keys(_cluster_tags(parts[1], region), "eks"))]
    if service == "ssm" and action.endswith(("Parameter", "Parameters")):
        data = _json(body)
        names = data.get("Names") or [data.get("Name", "")]
        return [Request(name, f"arn:aws:ssm:{region}:{ACCOUNT}:parameter/{str(n).lstrip('/')}") for n in names]
    if service == "dynamodb":
        return _dynamodb(action, _json(body), region)
    if service == "ec2" and action in IMAGE_ACTIONS:
        return _image_requests(action, form, region)
    if action.startswith(UNSCOPED):  # EC2's and Auto Scaling's reads have no resource-level permissions
        return [Request(name)]
    if service == "autoscaling" and action in ASG_WRITES:
        group = form.get("AutoScalingGroupName") or _group_of(form.get("InstanceId", ""), region)
        arn = f"arn:aws:autoscaling:{region}:{ACCOUNT}:autoScalingGroup:*:autoScalingGroupName/{group}"
        return [Request(name, arn, _tag_keys(_group_tags(group, region), "autoscaling"))]
    if service == "ec2" and form.get("InstanceId.1"):
        ids = [v for k, v in form.items() if k.startswith("InstanceId.")]
        return [Request(name, f"arn:aws:ec2:{region}:{ACCOUNT}:instance/{i}", _tag_keys(_ec2_tags(i, region), "ec2"))
                for i in ids]
    if service == "ec2" and (form.get("LaunchTemplateId") or form.get("LaunchTemplateName")):
        template = form.get("LaunchTemplateId") or _template_id(form.get("LaunchTemplateName", ""), region)
        return [Request(name, f"arn:aws:ec2:{region}:{ACCOUNT}:launch-template/{template}",
                        _tag_keys(_ec2_tags(template, region), "ec2"))]
    return [Request(name)]


def _ec2_arn(resource_id: str, region: str) -> str:
    """An EC2 resource's ARN from its id's prefix (an image's and a snapshot's name no account)."""
    kind = next((k for prefix, k in EC2_KINDS.items() if resource_id.startswith(prefix)), "resource")
    return f"arn:aws:ec2:{region}:{'' if kind in ('image', 'snapshot') else ACCOUNT}:{kind}/{resource_id or '*'}"


def _numbered(form: Mapping[str, str], prefix: str) -> list[str]:
    """``Prefix.1``, ``Prefix.2``, … of a query request, in order."""
    return [form[f"{prefix}.{i}"] for i in range(1, len(form) + 1) if f"{prefix}.{i}" in form]


def _request_tags(form: Mapping[str, str], kind: str | None) -> dict[str, list[str]]:
    """The tags a request puts on what it makes (``TagSpecification.N`` of ``kind``; ``Tag.N`` of CreateTags) as
    ``aws:RequestTag/K`` and ``aws:TagKeys``."""
    if kind is None:
        specs = [""]
    else:
        specs = [f"TagSpecification.{i}." for i in range(1, 9) if form.get(f"TagSpecification.{i}.ResourceType") == kind]
    tags = {form[f"{spec}Tag.{j}.Key"]: form.get(f"{spec}Tag.{j}.Value", "")
            for spec in specs for j in range(1, 51) if f"{spec}Tag.{j}.Key" in form}
    if not tags:
        return {}
    return {**{f"aws:RequestTag/{k}": [v] for k, v in tags.items()}, "aws:TagKeys": list(tags)}


def _image_requests(action: str, form: Mapping[str, str], region: str) -> list[Request]:
    """What IAM authorizes for the calls of an image build, as the Service Authorization Reference lists them: a
    RunInstances on the image it launches from, the subnet, network interface, security group and volumes, and the
    instance it makes (with the tags it is made with); a tag set at creation also needs ``ec2:CreateTags`` with
    ``ec2:CreateAction``; CreateImage on the instance and the new image; CopyImage on the new image; CreateTags and
    the removals on each resource they name, with its tags."""
    name = f"ec2:{action}"

    def existing(resource_id: str) -> Request:
        return Request(name, _ec2_arn(resource_id, region), _tag_keys(_ec2_tags(resource_id, region), "ec2"))

    def made(kind: str, tags: dict[str, list[str]], owner: str = ACCOUNT) -> list[Request]:
        arn = f"arn:aws:ec2:{region}:{owner}:{kind}/*"
        tagging = [Request("ec2:CreateTags", arn, {**tags, "ec2:CreateAction": [action]})] if tags else []
        return [Request(name, arn, tags), *tagging]

    if action == "RunInstances":
        network = [Request(name, f"arn:aws:ec2:{region}:{ACCOUNT}:{kind}/*") for kind in ("subnet", "security-group")]
        return [existing(form.get("ImageId", "")), *network,
                *[r for kind in ("network-interface", "volume", "instance") for r in made(kind, _request_tags(form, kind))]]
    if action == "CreateImage":
        return [existing(form.get("InstanceId", "")),
                *[r for kind in ("image", "snapshot") for r in made(kind, _request_tags(form, kind), owner="")]]
    if action == "CopyImage":
        return [r for kind in ("image", "snapshot") for r in made(kind, _request_tags(form, kind), owner="")]
    if action == "CreateTags":
        tags = _request_tags(form, None)
        return [Request(name, r.resource, {**r.context, **tags}) for r in map(existing, _numbered(form, "ResourceId"))]
    return [existing(form.get("ImageId") or form.get("SnapshotId") or "")]  # DeregisterImage, DeleteSnapshot


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _dynamodb(action: str, data: dict[str, Any], region: str) -> list[Request]:
    """A table's ARN and the partition-key values the call touches (``dynamodb:LeadingKeys``) per table."""
    def table_arn(table: str) -> str:
        return f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{table}"

    def leading(table: str, item: Mapping[str, Any]) -> list[str]:
        key = _hash_key(table, region)
        value = item.get(key) if key else None
        return [str(next(iter(value.values())))] if isinstance(value, dict) and value else []

    name = f"dynamodb:{action}"
    if action in ITEM_ACTIONS:
        table = str(data.get("TableName"))
        keys = leading(table, data.get("Key") or data.get("Item") or {})
        return [Request(name, table_arn(table), {"dynamodb:LeadingKeys": keys} if keys else {})]
    if action == "Query":
        table = str(data.get("TableName"))
        values = data.get("ExpressionAttributeValues") or {}
        key = _hash_key(table, region)
        condition = str(data.get("KeyConditionExpression") or "")
        names = data.get("ExpressionAttributeNames") or {}
        found = [str(next(iter(v.values()))) for placeholder, v in values.items()
                 if isinstance(v, dict) and v and _equality_on(condition, names, key, placeholder)]
        return [Request(name, table_arn(table), {"dynamodb:LeadingKeys": found[:1]} if found else {})]
    if action == "TransactWriteItems":
        out = []
        for entry in data.get("TransactItems") or []:
            for kind, body in entry.items():
                verb = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                        "ConditionCheck": "ConditionCheckItem"}.get(kind, kind)
                table = str(body.get("TableName"))
                keys = leading(table, body.get("Key") or body.get("Item") or {})
                out.append(Request(f"dynamodb:{verb}", table_arn(table), {"dynamodb:LeadingKeys": keys} if keys else {}))
        return out or [Request(name)]
    if "TableName" in data:
        return [Request(name, table_arn(str(data["TableName"])))]
    return [Request(name)]


def _equality_on(condition: str, names: Mapping[str, str], key: str | None, placeholder: str) -> bool:
    if key is None:
        return False
    aliases = [key, *[alias for alias, real in names.items() if real == key]]
    compact = condition.replace(" ", "")
    return any(f"{alias}={placeholder}" in compact or f"{placeholder}={alias}" in compact for alias in aliases)


def _hash_key(table: str, region: str) -> str | None:
    from moto.dynamodb.models import dynamodb_backends

    try:
        return str(dynamodb_backends[ACCOUNT][region].get_table(table).hash_key_attr)
    except Exception:
        return None


def _group_tags(group: str, region: str) -> dict[str, str]:
    from moto.autoscaling.models import autoscaling_backends

    found = autoscaling_backends[ACCOUNT][region].autoscaling_groups.get(group)
    return {str(t["Key"]): str(t["Value"]) for t in (found.tags if found is not None else [])}


def _group_of(instance_id: str, region: str) -> str:
    from moto.autoscaling.models import autoscaling_backends

    for group in autoscaling_backends[ACCOUNT][region].autoscaling_groups.values():
        if any(state.instance.id == instance_id for state in group.instance_states):
            return str(group.name)
    return "*"


def _tag_keys(tags: Mapping[str, str], service: str) -> dict[str, list[str]]:
    """The resource's tags as the condition keys AWS gives them: ``aws:ResourceTag/K`` and the service's own."""
    return {f"{prefix}:ResourceTag/{k}": [v] for k, v in tags.items() for prefix in ("aws", service)}


def _ec2_tags(resource_id: str, region: str) -> dict[str, str]:
    from moto.ec2.models import ec2_backends

    return {str(k): str(v) for k, v in ec2_backends[ACCOUNT][region].tags.get(resource_id, {}).items()}


def _template_id(name: str, region: str) -> str:
    from moto.ec2.models import ec2_backends

    return str(ec2_backends[ACCOUNT][region].launch_template_name_to_ids.get(name, name))


def _cluster_tags(cluster: str, region: str) -> dict[str, str]:
    from moto.eks.models import eks_backends

    found = eks_backends[ACCOUNT][region].clusters.get(cluster)
    return {str(k): str(v) for k, v in ((found.tags if found is not None else None) or {}).items()}


def _policies(role_arn: str) -> list[dict[str, Any]]:
    """The role's inline and attached policies' documents, as IAM holds them now."""
    from moto.iam.models import iam_backends

    try:
        role = iam_backends[ACCOUNT]["aws"].get_role_by_arn(role_arn)
    except Exception:
        return []
    documents = [json.loads(urllib.parse.unquote(d)) if isinstance(d, str) else d for d in role.policies.values()]
    for policy in role.managed_policies.values():
        default = next(v for v in policy.versions if v.is_default)
        documents.append(json.loads(default.document) if isinstance(default.document, str) else default.document)
    return documents


# ---------------------------------------------------------------- AWS's answers

def _message(session_arn: str, request: Request, decision: Decision) -> str:
    why = ("with an explicit deny in an identity-based policy" if decision is Decision.EXPLICIT_DENY
           else f"because no identity-based policy allows the {request.action} action")
    return f"User: {session_arn} is not authorized to perform: {request.action} on resource: {request.resource} {why}"


def _refusal(service: str, session_arn: str, request: Request, decision: Decision) -> tuple[int, str, str, str]:
    message = _message(session_arn, request, decision)
    request_id = str(uuid.uuid4())
    if service == "ec2":
        body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>UnauthorizedOperation</Code>"
                f"<Message>You are not authorized to perform this operation. {_xml(message)}</Message></Error></Errors>"
                f"<RequestID>{request_id}</RequestID></Response>")
        return 403, body, "text/xml", "UnauthorizedOperation"
    if service in ("dynamodb", "ssm"):
        return 400, json.dumps({"__type": "com.amazon.coral.service#AccessDeniedException", "Message": message}), \
            "application/x-amz-json-1.0" if service == "dynamodb" else "application/x-amz-json-1.1", "AccessDeniedException"
    if service == "eks":
        return 403, json.dumps({"message": message}), "application/json", "AccessDeniedException"
    return _sts_error(403, "AccessDenied", message)


def _sts_error(status: int, code: str, message: str) -> tuple[int, str, str, str]:
    body = (f"<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type>"
            f"<Code>{code}</Code><Message>{_xml(message)}</Message></Error>"
            f"<RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>")
    return status, body, "text/xml", code


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _respond(start_response: Any, status: int, body: str, content_type: str, code: str) -> Iterable[bytes]:
    reasons = {400: "Bad Request", 403: "Forbidden"}
    data = body.encode()
    start_response(f"{status} {reasons.get(status, 'Error')}", [
        ("Content-Type", content_type), ("Content-Length", str(len(data))), ("x-amzn-RequestId", str(uuid.uuid4())),
        ("x-amzn-ErrorType", code)])
    return [data]
