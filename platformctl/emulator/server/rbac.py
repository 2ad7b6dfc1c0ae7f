"""Who is calling the local region's API servers, and whether RBAC lets them, as kube-apiserver and EKS decide.

**Authentication** (a request's ``Authorization: Bearer`` token):

- the region's own token (the operator's kubeconfig, ``local up``'s) is the stack's creator, whom EKS makes a cluster
  admin: user ``kubernetes-admin``, group ``system:masters``; so is a request with no token that does not come from a
  pod's node (kubectl, by client-go's rule, sends no bearer token over plain HTTP, which the region's endpoints are);
- ``Impersonate-User``/``Impersonate-Group`` (``kubectl --as``) switch to the user named when RBAC lets the caller
  ``impersonate`` it, as kube-apiserver does;
- a service account's token, a JWT the cluster's issuer signed (``iam.Issuers``) for the API server's audience
  (``https://kubernetes.default.svc``), not expired, whose service account still exists: user
  ``system:serviceaccount:<ns>:<name>``, groups ``system:serviceaccounts`` and ``system:serviceaccounts:<ns>``;
- an IAM principal's token, as ``aws eks get-token`` makes it (``k8s-aws-v1.`` and a presigned STS
  ``GetCallerIdentity`` URL, signed less than 15 minutes ago, for this cluster's ``x-k8s-aws-id``): the STS session
  whose key presigned it, mapped through the cluster's EKS access entries for its role (their Kubernetes groups; the
  username ``arn:aws:sts::<account>:assumed-role/<role>/<session>``, EKS's default for a role);
- a token that is none of these is 401 ``Unauthorized``; no token at all is ``system:anonymous`` (group
  ``system:unauthenticated``), who may read ``/version`` and the health endpoints only. Every authenticated user is
  also in ``system:authenticated``.

**Authorization** is RBAC's (``k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac``): a request is allowed when a
ClusterRoleBinding binds the user (by name, by group, or as a service account) to a ClusterRole with a rule whose
verbs, API groups, resources (``resource/subresource`` for a subresource) and resource names (if any) match, or whose
``nonResourceURLs`` match a non-resource path; ``system:masters`` may do anything. The bootstrap policy every cluster
starts with is here too: ``system:discovery`` and ``system:public-info-viewer`` (discovery, version, health) and
``system:basic-user`` (self subject access reviews) for ``system:authenticated``. A refusal is kube-apiserver's 403:
``<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource "<resource>" in API group "<group>" in the
namespace "<ns>"``. The region has no Roles or RoleBindings (the program uses neither) and no aggregated ClusterRoles.
"""

from __future__ import annotations

import base64
import calendar
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from platformctl.emulator.server.network import FROM_NODE
from platformctl.emulator.server.objects import ApiError

ADMIN_TOKEN = "local-region"
API_AUDIENCE = "https://kubernetes.default.svc"
EKS_TOKEN_PREFIX = "k8s-aws-v1."
EKS_TOKEN_SECONDS = 15 * 60  # aws-iam-authenticator accepts a presigned URL this long after it was signed
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
ANONYMOUS, UNAUTHENTICATED = "system:anonymous", "system:unauthenticated"
# system:public-info-viewer, bound to system:authenticated and system:unauthenticated
PUBLIC_INFO = {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]}
KEPT = 20_000
# The bootstrap ClusterRoles every cluster has, bound to system:authenticated (plugin/pkg/auth/authorizer/rbac/bootstrappolicy).
BOOTSTRAP_RULES: tuple[Mapping[str, Any], ...] = (
    {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version",
                                           "/version/", "/healthz", "/livez", "/readyz"]},
    {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
     "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
    {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
)


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Attributes:
    """What a request asks (kube-apiserver's ``RequestInfo``)."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # a non-resource request's path

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


def _rule_allows(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if not attrs.is_resource:
        return any(u == "*" or u == attrs.path or (u.endswith("*") and attrs.path.startswith(u[:-1]))
                   for u in rule.get("nonResourceURLs") or [])
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.api_group not in groups:
        return False
    wanted = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    resources = rule.get("resources") or []
    if not any(r in ("*", wanted) or (attrs.subresource and r == f"*/{attrs.subresource}") for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def _binds(binding: Mapping[str, Any], user: User) -> bool:
    for subject in binding.get("subjects") or []:
        kind, name = subject.get("kind"), subject.get("name")
        if kind == "User" and name == user.name:
            return True
        if kind == "Group" and name in user.groups:
            return True
        if kind == "ServiceAccount" and user.name == f"system:serviceaccount:{subject.get('namespace')}:{name}":
            return True
    return False


def allowed(stored: Mapping[str, Mapping[tuple[str, str], Mapping[str, Any]]], user: User, attrs: Attributes) -> bool:
    """RBAC's answer for ``user`` over the cluster's ClusterRoles and ClusterRoleBindings (``stored``)."""
    if MASTERS in user.groups:
        return True
    if AUTHENTICATED in user.groups and any(_rule_allows(r, attrs) for r in BOOTSTRAP_RULES):
        return True
    if UNAUTHENTICATED in user.groups:
        return _rule_allows(PUBLIC_INFO, attrs)
    roles = stored.get("clusterroles") or {}
    for binding in (stored.get("clusterrolebindings") or {}).values():
        ref = binding.get("roleRef") or {}
        if ref.get("kind") != "ClusterRole" or not _binds(binding, user):
            continue
        role = roles.get(("", str(ref.get("name"))))
        if role is not None and any(_rule_allows(r, attrs) for r in role.get("rules") or []):
            return True
    return False


def forbidden(user: User, attrs: Attributes) -> ApiError:
    """kube-apiserver's 403 for it, word for word."""
    if not attrs.is_resource:
        return ApiError(403, "Forbidden", f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"')
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    what = f'{resource} "{attrs.name}"' if attrs.name else resource
    where = f' in the namespace "{attrs.namespace}"' if attrs.namespace else ""
    scope = "" if attrs.namespace else " at the cluster scope"
    return ApiError(403, "Forbidden", f'{what} is forbidden: User "{user.name}" cannot {attrs.verb} resource '
                    f'"{resource}" in API group "{attrs.api_group}"{where or scope}',
                    {"name": attrs.name, "group": attrs.api_group, "kind": attrs.resource} if attrs.name else
                    {"group": attrs.api_group, "kind": attrs.resource})


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


class Authenticator:
    """The region's answer to "who is this token?" for each cluster (``None``: 401)."""

    def __init__(self, issuers: Any, issuer_of: Callable[[str], str | None],
                 access_entries: Callable[[str], Sequence[Mapping[str, Any]]],
                 service_accounts: Callable[[str], Mapping[tuple[str, str], Any]],
                 now: Callable[[], float]) -> None:
        self.issuers = issuers
        self.issuer_of = issuer_of  # cluster -> its OIDC issuer URL
        self.access_entries = access_entries  # cluster -> its EKS access entries ({principalArn, kubernetesGroups})
        self.service_accounts = service_accounts  # cluster -> its ServiceAccounts
        self.now = now  # the region's time (a service account token's expiry)

    def user(self, cluster: str, header: str) -> User | None:
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        if not token:  # anonymous requests are on, as kube-apiserver's default: RBAC then says what they may see
            return User(ANONYMOUS, (UNAUTHENTICATED,))
        if token == ADMIN_TOKEN:
            return User("kubernetes-admin", (MASTERS, AUTHENTICATED))
        if token.startswith(EKS_TOKEN_PREFIX):
            return self._iam(cluster, token)
        return self._service_account(cluster, token)

    def _service_account(self, cluster: str, token: str) -> User | None:
        try:
            claims = self.issuers.verify(token)
        except ValueError:
            return None
        audiences = claims.get("aud") if isinstance(claims.get("aud"), list) else [claims.get("aud")]
        if claims.get("iss") != self.issuer_of(cluster) or API_AUDIENCE not in audiences or \
                float(claims.get("exp", 0)) <= self.now():
            return None
        sub = str(claims.get("sub", ""))
        parts = sub.split(":")
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or \
                (parts[2], parts[3]) not in self.service_accounts(cluster):
            return None
        return User(sub, ("system:serviceaccounts", f"system:serviceaccounts:{parts[2]}", AUTHENTICATED))

    def _iam(self, cluster: str, token: str) -> User | None:
        from moto.sts.models import sts_backends

        from platformctl.emulator.server.iam import ACCOUNT

        try:
            url = base64.urlsafe_b64decode(token[len(EKS_TOKEN_PREFIX):] + "=" * (-len(token) % 4)).decode()
        except ValueError:
            return None
        query = {k.lower(): v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).items()}
        if query.get("action") != "GetCallerIdentity" or "x-k8s-aws-id" not in query.get("x-amz-signedheaders", ""):
            return None
        try:
            signed = calendar.timegm(time.strptime(query.get("x-amz-date", ""), "%Y%m%dT%H%M%SZ"))
        except ValueError:
            return None
        if abs(time.time() - signed) > EKS_TOKEN_SECONDS:
            return None
        key = query.get("x-amz-credential", "").split("/")[0]
        session = next((s for s in sts_backends[ACCOUNT]["aws"].assumed_roles if s.access_key_id == key), None)
        if session is None:
            return None
        entries = [e for e in self.access_entries(cluster) if e.get("principalArn") == session.role_arn]
        if not entries:
            return None  # EKS: no access entry for the principal, no identity in the cluster
        role = session.role_arn.rsplit("/", 1)[-1]
        groups = tuple(dict.fromkeys(g for e in entries for g in e.get("kubernetesGroups") or []))
        return User(f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{session.session_name}", (*groups, AUTHENTICATED))


class Decisions:
    """Every authorization decision of the region's API servers (the last 20,000), as its audit log would hold them."""

    def __init__(self) -> None:
        self.kept: deque[dict[str, Any]] = deque(maxlen=KEPT)
        self.lock = threading.Lock()

    def add(self, cluster: str, user: User | None, attrs: Attributes | None, allowed_: bool) -> None:
        entry = {"time": time.time(), "cluster": cluster, "user": user.name if user else None, "allowed": allowed_}
        if attrs is not None:
            entry.update(verb=attrs.verb, group=attrs.api_group, resource=attrs.resource,
                         subresource=attrs.subresource, namespace=attrs.namespace, name=attrs.name, path=attrs.path)
        with self.lock:
            self.kept.append(entry)

    def query(self, user: str | None = None, refused: bool = False) -> list[dict[str, Any]]:
        with self.lock:
            return [d for d in self.kept if (user is None or d["user"] == user) and (not refused or not d["allowed"])]


class Gate:
    """What the API server asks of every request: who (401 when the token says nobody), and may they (403)."""

    def __init__(self, authenticator: Authenticator | None) -> None:
        """``authenticator``: None asks nobody (every caller a cluster admin, as the region was before RBAC)."""
        self.authenticator = authenticator
        self.decisions = Decisions()

    def check(self, stored: Any, cluster: str, endpoint: str, args: Mapping[str, Any], request: Any) -> User:
        if self.authenticator is None:
            return User("kubernetes-admin", (MASTERS, AUTHENTICATED))
        header = request.headers.get("Authorization", "")
        if not header and FROM_NODE not in request.environ:
            # kubectl sends no bearer token over plain HTTP (client-go), and the region's endpoints are HTTP: a request
            # with none from outside the stage's network is the operator's, the stack's creator (a pod's is anonymous).
            user: User | None = User("kubernetes-admin", (MASTERS, AUTHENTICATED))
        else:
            user = self.authenticator.user(cluster, header)
        if user is not None and request.headers.get("Impersonate-User"):
            user = self._impersonated(stored, cluster, user, request)
        if endpoint == "access_review":
            attrs = Attributes("create", "authorization.k8s.io", "selfsubjectaccessreviews")
        else:
            watch = request.args.get("watch") in ("1", "t", "T", "true", "True", "TRUE")
            attrs = request_attributes(request.method, endpoint, args, str(args.get("group", "")),
                                       str(args.get("plural", "")), watch, request.path.split(f"/clusters/{cluster}", 1)[-1])
        ok = user is not None and allowed(stored, user, attrs)
        self.decisions.add(cluster, user, attrs, ok)
        if user is None:
            raise unauthorized()
        if not ok:
            raise forbidden(user, attrs)
        return user


    def _impersonated(self, stored: Any, cluster: str, user: User, request: Any) -> User:
        """``kubectl --as``: the user (and groups) named, when RBAC lets the caller impersonate them (403 otherwise);
        a service account's user is in its groups, and everyone but the anonymous in ``system:authenticated``."""
        name = str(request.headers.get("Impersonate-User"))
        groups = [str(g) for g in request.headers.getlist("Impersonate-Group")]
        asked = [Attributes("impersonate", "", "serviceaccounts", namespace=name.split(":")[2], name=name.split(":")[3])
                 if name.startswith("system:serviceaccount:") and name.count(":") == 3 else
                 Attributes("impersonate", "", "users", name=name), *[Attributes("impersonate", "", "groups", name=g) for g in groups]]
        for attrs in asked:
            if not allowed(stored, user, attrs):
                self.decisions.add(cluster, user, attrs, False)
                raise forbidden(user, attrs)
        if name.startswith("system:serviceaccount:") and name.count(":") == 3:
            groups += ["system:serviceaccounts", f"system:serviceaccounts:{name.split(':')[2]}"]
        if name != ANONYMOUS:
            groups.append(AUTHENTICATED)
        return User(name, tuple(dict.fromkeys(groups)))


def request_attributes(method: str, endpoint: str, args: Mapping[str, Any], group: str, plural: str,
                       watch: bool, path: str) -> Attributes:
    """The verb and resource kube-apiserver's ``RequestInfoFactory`` makes of a request."""
    if endpoint not in ("collection", "item", "subresource"):
        return Attributes("get" if method in ("GET", "HEAD") else method.lower(), path=path)
    if endpoint == "collection":
        verb = {"GET": "watch" if watch else "list", "POST": "create", "DELETE": "deletecollection"}.get(method, method.lower())
    else:
        verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete", "POST": "create"}.get(method, method.lower())
    return Attributes(verb, group, plural, str(args.get("sub") or ""), str(args.get("ns") or ""), str(args.get("name") or ""))


def access_review(stored: Mapping[str, Mapping[tuple[str, str], Mapping[str, Any]]], user: User,
                  review: Mapping[str, Any]) -> dict[str, Any]:
    """A ``SelfSubjectAccessReview`` answered (``kubectl auth can-i``): the review with its ``status.allowed``."""
    spec = review.get("spec") or {}
    found = spec.get("resourceAttributes")
    if isinstance(found, dict):
        attrs = Attributes(str(found.get("verb") or ""), str(found.get("group") or ""), str(found.get("resource") or ""),
                           str(found.get("subresource") or ""), str(found.get("namespace") or ""),
                           str(found.get("name") or ""))
    else:
        other = spec.get("nonResourceAttributes") or {}
        attrs = Attributes(str(other.get("verb") or ""), path=str(other.get("path") or ""))
    ok = allowed(stored, user, attrs)
    return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec,
            "status": {"allowed": ok, **({"reason": "RBAC: allowed by ClusterRoleBinding"} if ok else {})}}
