"""ValidatingAdmissionPolicies, as kube-apiserver's admission applies them after authorization (GA since 1.30).

A ``ValidatingAdmissionPolicyBinding`` (``validationActions`` with ``Deny``) names a ``ValidatingAdmissionPolicy``;
for a request that policy's ``matchConstraints.resourceRules`` match (API group, version, operation, resource or
``resource/subresource``, ``*`` wildcards) and all of whose ``matchConditions`` are true, every ``validations``
expression must be true, or the request is refused: ``<resource> "<name>" is forbidden: ValidatingAdmissionPolicy
'<policy>' with binding '<binding>' denied request: <message>``, with the code of the validation's ``reason``
(``Invalid``, 422, when it names none). An expression that fails to evaluate is the policy's ``failurePolicy``
(``Fail`` refuses). The expressions are CEL, evaluated by cel-python, over the variables kube gives them:
``request`` (operation, resource, subResource, name, namespace, userInfo), ``object`` (the object sent; for a patch,
the object as stored: the region does not evaluate the patch first), ``oldObject`` (as stored, for an update or a
delete) and ``namespaceObject`` (the request's namespace). ``params``, ``authorizer`` and ``variables`` are not
given (an expression that uses them fails, and its failure policy decides).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from platformctl.emulator.server.objects import ApiError

OPERATIONS = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE", "delete": "DELETE", "deletecollection": "DELETE"}
CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}


@lru_cache(maxsize=256)
def _program(expression: str) -> Any:
    import celpy

    environment = celpy.Environment()
    return environment.program(environment.compile(expression))


def _true(expression: str, activation: Mapping[str, Any]) -> bool:
    """The expression's answer; ``ValueError`` when it cannot be evaluated (its failure policy decides)."""
    import celpy

    try:
        answer = _program(expression).evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    except Exception as exc:  # celpy's CELEvalError, a compile error, a missing variable
        raise ValueError(str(exc)) from None
    if isinstance(answer, Exception):
        raise ValueError(str(answer))
    return bool(answer)


def _matches(rules: list[Mapping[str, Any]], group: str, version: str, operation: str, resource: str, sub: str) -> bool:
    wanted = f"{resource}/{sub}" if sub else resource
    for rule in rules:
        if not any(g in ("*", group) for g in rule.get("apiGroups") or []):
            continue
        if not any(v in ("*", version) for v in rule.get("apiVersions") or []):
            continue
        if not any(o in ("*", operation) for o in rule.get("operations") or []):
            continue
        names = rule.get("resources") or []
        if any(n == wanted or (not sub and n == "*") or (sub and n in ("*/*", f"*/{sub}", f"{resource}/*")) for n in names):
            return True
    return False


def admit(stored: Mapping[str, Mapping[tuple[str, str], Mapping[str, Any]]], username: str, groups: tuple[str, ...],
          verb: str, group: str, version: str, resource: str, sub: str, namespace: str, name: str,
          body: Callable[[], dict[str, Any]], current: Callable[[], dict[str, Any] | None],
          namespace_object: Callable[[str], dict[str, Any] | None]) -> None:
    """Raise kube-apiserver's refusal when a bound policy denies the request; nothing otherwise."""
    operation = OPERATIONS.get(verb)
    bindings = stored.get("validatingadmissionpolicybindings") or {}
    if operation is None or not bindings:
        return
    policies = stored.get("validatingadmissionpolicies") or {}
    activation: dict[str, Any] | None = None
    for binding in bindings.values():
        spec = binding.get("spec") or {}
        if "Deny" not in (spec.get("validationActions") or []):
            continue
        policy = policies.get(("", str(spec.get("policyName"))))
        if policy is None:
            continue
        rules = ((policy.get("spec") or {}).get("matchConstraints") or {}).get("resourceRules") or []
        if not _matches(rules, group, version, operation, resource, sub):
            continue
        if activation is None:
            old = current() if operation in ("UPDATE", "DELETE") else None
            sent = body() if operation == "CREATE" or verb == "update" else (old if verb == "patch" else None)
            activation = {
                "request": {"operation": operation, "name": name, "namespace": namespace, "subResource": sub,
                            "resource": {"group": group, "version": version, "resource": resource},
                            "userInfo": {"username": username, "groups": list(groups)}},
                "object": sent, "oldObject": old,
                "namespaceObject": namespace_object(namespace) if namespace else None,
            }
        _validate(policy, binding, activation, resource, name)


def _validate(policy: Mapping[str, Any], binding: Mapping[str, Any], activation: Mapping[str, Any], resource: str,
              name: str) -> None:
    spec = policy.get("spec") or {}
    fail = spec.get("failurePolicy", "Fail") == "Fail"
    what = f'{resource} "{name}"' if name else resource
    title = f"ValidatingAdmissionPolicy '{policy['metadata']['name']}' with binding '{binding['metadata']['name']}'"
    try:
        if not all(_true(str(c.get("expression")), activation) for c in spec.get("matchConditions") or []):
            return
        for validation in spec.get("validations") or []:
            if not _true(str(validation.get("expression")), activation):
                reason = str(validation.get("reason") or "Invalid")
                message = str(validation.get("message") or f"failed expression: {validation.get('expression')}")
                raise ApiError(CODES.get(reason, 422), reason, f"{what} is forbidden: {title} denied request: {message}")
    except ValueError as exc:
        if fail:
            raise ApiError(403, "Forbidden", f"{what} is forbidden: {title} denied request: expression "
                           f"evaluation error: {exc}") from None
