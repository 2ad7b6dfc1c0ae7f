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
``system:basic-user`` (self subject access reviews) for ``system:authenticated``. Writing a ClusterRole or a binding
is checked for escalation as kube-apiserver checks it (``escalate``/``bind``, or holding what it grants). A refusal is kube-apiserver's 403:
``<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource "<resource>" in API group "<group>" in the
namespace "<ns>"``. The region has no Roles or RoleBindings (the program uses neither) and no aggregated ClusterRoles.
"""

from __future__ import annotations

import base64
import calendar
import json
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from platformctl.emulator.server.admission import admit
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


# The bootstrap ClusterRoles a binding may name (the rest of the bootstrap policy is above, bound as kube binds it).
BOOTSTRAP_ROLES: dict[str, list[Mapping[str, Any]]] = {
    "cluster-admin": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}, {"nonResourceURLs": ["*"], "verbs": ["*"]}],
}


def role_rules(stored: Mapping[str, Mapping[tuple[str, str], Mapping[str, Any]]], name: str) -> list[Mapping[str, Any]] | None:
    """A ClusterRole's rules (a bootstrap one's too); None when there is no such role."""
    role = (stored.get("clusterroles") or {}).get(("", name))
    if role is not None:
        return list(role.get("rules") or [])
    return BOOTSTRAP_ROLES.get(name)


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
    for binding in (stored.get("clusterrolebindings") or {}).values():
        ref = binding.get("roleRef") or {}
        if ref.get("kind") != "ClusterRole" or not _binds(binding, user):
            continue
        if any(_rule_allows(r, attrs) for r in role_rules(stored, str(ref.get("name"))) or []):
            return True
    return False


def forbidden(user: User, attrs: Attributes) -> ApiError:
    """kube-apiserver's 403 for it, word for word (``responsewriters.forbiddenMessage`` in ``errors.NewForbidden``: the
    group-qualified resource and name, then the resource with its subresource; a namespace's own requests are in
    that namespace, as ``RequestInfoFactory`` makes them)."""
    if not attrs.is_resource:
        return ApiError(403, "Forbidden", f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"')
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    what = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    namespace = attrs.namespace or (attrs.name if attrs.resource == "namespaces" else "")
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return ApiError(403, "Forbidden", f'{what} is forbidden: User "{user.name}" cannot {attrs.verb} resource '
                    f'"{resource}" in API group "{attrs.api_group}"{where}',
                    {k: v for k, v in (("name", attrs.name), ("group", attrs.api_group), ("kind", attrs.resource)) if v})


def go_quoted(values: Sequence[str]) -> str:
    """A list of strings as Go's ``%q`` prints a ``[]string``: ``["a" "b"]``."""
    return "[" + " ".join(json.dumps(v) for v in values) + "]"


def compact_rule(rule: Mapping[str, Any]) -> str:
    """``rbacv1helpers.CompactString``: the rule's non-empty fields in Go's order, each as ``%q``."""
    parts = [f"{label}:{go_quoted(rule[key])}" for label, key in (
        ("APIGroups", "apiGroups"), ("Resources", "resources"), ("NonResourceURLs", "nonResourceURLs"),
        ("ResourceNames", "resourceNames"), ("Verbs", "verbs")) if rule.get(key)]
    return "{" + ", ".join(parts) + "}"


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
        self._verified: dict[str, dict[str, Any]] = {}  # token -> its claims, once its signature was checked

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
        known = self._verified.get(token)  # a token is verified once (a runner sends the same one hundreds of times)
        if known is None:
            try:
                known = self.issuers.verify(token)
            except ValueError:
                return None
            if len(self._verified) >= KEPT:
                self._verified.clear()
            self._verified[token] = known
        claims: dict[str, Any] = known
        aud = claims.get("aud")
        audiences = [str(a) for a in aud] if isinstance(aud, list) else [str(aud)]
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

    def check(self, state: Any, cluster: str, endpoint: str, args: Mapping[str, Any], request: Any) -> User:
        """The caller of ``request`` to ``cluster`` (``state``, a ``ClusterState``), once authenticated, authorized
        and admitted by the cluster's admission policies; ``ApiError`` (401, 403, the policy's code) otherwise."""
        stored = state.stored
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
        if endpoint in ("access_review", "subject_access_review"):
            attrs = Attributes("create", "authorization.k8s.io",
                               "selfsubjectaccessreviews" if endpoint == "access_review" else "subjectaccessreviews")
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
        if attrs.resource in ("clusterroles", "clusterrolebindings") and attrs.verb in ("create", "update", "patch"):
            self._no_escalation(stored, cluster, user, attrs, request)
        if attrs.is_resource:
            admit(stored, user.name, user.groups, attrs.verb, attrs.api_group, str(args.get("version", "")),
                  attrs.resource, attrs.subresource, attrs.namespace, attrs.name, lambda: _object(request),
                  lambda: _current(state, attrs), lambda ns: _namespace(state, ns))
        return user

    def _no_escalation(self, stored: Any, cluster: str, user: User, attrs: Attributes, request: Any) -> None:
        """RBAC's escalation check (``pkg/registry/rbac``): a ClusterRole is written only by one who holds every
        permission it grants or may ``escalate`` it; a binding only by one who holds its role's or may ``bind`` it.
        ``system:masters`` always may. A PATCH is judged by ``escalate``/``bind`` alone (the region does not work out
        the patched role first), which only those two verbs' holders and the masters ever send here."""
        if MASTERS in user.groups:
            return
        body = _object(request) if attrs.verb != "patch" else {}
        binding = attrs.resource == "clusterrolebindings"
        name = str(((body.get("roleRef") or {}).get("name") if binding else (body.get("metadata") or {}).get("name"))
                   or attrs.name)
        verb = "bind" if binding else "escalate"
        if allowed(stored, user, Attributes(verb, "rbac.authorization.k8s.io", "clusterroles", name=name)):
            return
        if binding:
            found = role_rules(stored, name)
            if found is None:  # kube cannot work out what the binding grants: it refuses it
                raise ApiError(404, "NotFound", f'clusterroles.rbac.authorization.k8s.io "{name}" not found',
                               {"name": name, "group": "rbac.authorization.k8s.io", "kind": "clusterroles"})
            rules = found
        else:
            rules = list(body.get("rules") or [])
        missing = [m for rule in rules for m in (_breakdown(rule) if attrs.verb != "patch" else [rule])
                   if attrs.verb == "patch" or not _held(stored, user, m)]
        if missing or (attrs.verb == "patch"):
            # ConfirmNoEscalation: the missing rules broken down to one verb each, compacted by resource, sorted.
            lines = sorted({compact_rule(r) for r in _compacted(missing)})
            error = ApiError(403, "Forbidden", f'{attrs.resource}.rbac.authorization.k8s.io "{attrs.name or name}" is '
                             f'forbidden: user "{user.name}" (groups={go_quoted(user.groups)}) is attempting to grant '
                             "RBAC permissions not currently held:\n" + "\n".join(lines),
                             {"name": attrs.name or name, "group": "rbac.authorization.k8s.io", "kind": attrs.resource})
            self.decisions.add(cluster, user, Attributes(verb, "rbac.authorization.k8s.io", "clusterroles", name=name), False)
            raise error


    def _impersonated(self, stored: Any, cluster: str, user: User, request: Any) -> User:
        """``kubectl --as``: the user (and groups) named, when RBAC lets the caller impersonate them (403 otherwise);
        a service account's user is in its groups, and everyone but the anonymous in ``system:authenticated``."""
        name = str(request.headers.get("Impersonate-User"))
        # a WSGI server joins a repeated header's values with commas (kubectl sends one header a group)
        groups = [g.strip() for h in request.headers.getlist("Impersonate-Group") for g in str(h).split(",") if g.strip()]
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


def _breakdown(rule: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``BreakdownRule``: one rule per group, resource, name and verb (a non-resource rule per URL and verb)."""
    if rule.get("nonResourceURLs"):
        return [{"nonResourceURLs": [u], "verbs": [v]} for u in rule["nonResourceURLs"] for v in rule.get("verbs") or []]
    return [{"apiGroups": [g], "resources": [r], **({"resourceNames": [n]} if n else {}), "verbs": [v]}
            for g in rule.get("apiGroups") or [""] for r in rule.get("resources") or []
            for n in rule.get("resourceNames") or [""] for v in rule.get("verbs") or []]


def _compacted(rules: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``CompactRules``: single-group, single-resource rules with no names merged into one rule per group and
    resource, their verbs in the order met; the rest as they are."""
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
    for rule in rules:
        simple = (len(rule.get("apiGroups") or []) == 1 and len(rule.get("resources") or []) == 1
                  and not rule.get("resourceNames") and not rule.get("nonResourceURLs"))
        if not simple:
            out.append(dict(rule))
            continue
        key = (rule["apiGroups"][0], rule["resources"][0])
        if key in merged:
            merged[key]["verbs"] += [v for v in rule.get("verbs") or [] if v not in merged[key]["verbs"]]
        else:
            merged[key] = {"apiGroups": [key[0]], "resources": [key[1]], "verbs": list(rule.get("verbs") or [])}
            out.append(merged[key])
    return out


def _held(stored: Any, user: User, rule: Mapping[str, Any]) -> bool:
    """Whether ``user`` holds every permission ``rule`` grants (a ``*`` only by a ``*`` of its own)."""
    verbs = rule.get("verbs") or []
    if rule.get("nonResourceURLs"):
        return all(allowed(stored, user, Attributes(v, path=u)) for v in verbs for u in rule["nonResourceURLs"])
    names = rule.get("resourceNames") or [""]
    for verb in verbs:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule.get("resources") or []:
                main, _, sub = resource.partition("/")
                if not all(allowed(stored, user, Attributes(verb, group, main, sub, "", name)) for name in names):
                    return False
    return True


def _namespace(state: Any, name: str) -> dict[str, Any] | None:
    try:
        return dict(state.get_namespace(name))
    except Exception:  # no such namespace
        return None


def _current(state: Any, attrs: Attributes) -> dict[str, Any] | None:
    """The object as the cluster holds it (a namespace, or a kind kept as written), for ``oldObject``."""
    if attrs.resource == "namespaces":
        return _namespace(state, attrs.name)
    found = (state.stored.get(attrs.resource) or {}).get((attrs.namespace, attrs.name))
    return dict(found) if found is not None else None


def _object(request: Any) -> dict[str, Any]:
    from platformctl.emulator.server import protobuf

    raw = request.get_data(cache=True)
    if request.mimetype == protobuf.MEDIA_TYPE:
        return protobuf.decode(raw)
    try:
        found = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


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
                  review: Mapping[str, Any], own: bool = True) -> dict[str, Any]:
    """A ``SelfSubjectAccessReview`` answered (``kubectl auth can-i``), or (``own`` False) a ``SubjectAccessReview``
    of the user and groups its spec names (what a webhook or an operator asks of another): the review with its
    ``status.allowed``."""
    spec = review.get("spec") or {}
    if not own:
        user = User(str(spec.get("user") or ""), tuple(str(g) for g in spec.get("groups") or ()))
    found = spec.get("resourceAttributes")
    if isinstance(found, dict):
        attrs = Attributes(str(found.get("verb") or ""), str(found.get("group") or ""), str(found.get("resource") or ""),
                           str(found.get("subresource") or ""), str(found.get("namespace") or ""),
                           str(found.get("name") or ""))
    else:
        other = spec.get("nonResourceAttributes") or {}
        attrs = Attributes(str(other.get("verb") or ""), path=str(other.get("path") or ""))
    ok = allowed(stored, user, attrs)
    return {"kind": "SelfSubjectAccessReview" if own else "SubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None}, "spec": spec,
            "status": {"allowed": ok, **({"reason": "RBAC: allowed by ClusterRoleBinding"} if ok else {})}}
