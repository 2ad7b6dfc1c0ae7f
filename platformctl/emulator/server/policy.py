"""AWS's evaluation of identity-based IAM policies, as the local region's IAM applies them to a role's session.

moto can enforce IAM (``INITIAL_NO_AUTH_ACTION_COUNT``), but only as far as the action: it matches every call against
the resource ``*`` (so a statement scoped to a table or a group never allows anything), evaluates no condition but
``StringEquals`` on ``sts:ExternalId``, and a statement whose condition fails *denies* where AWS passes it over
(``moto/iam/access_control.py``, 5.2.5). The region therefore evaluates the policies itself, by AWS's documented logic
(IAM User Guide, "Policy evaluation logic" and "IAM JSON policy elements: Condition operators"):

- an explicit ``Deny`` that applies wins; else an ``Allow`` that applies allows; else the call is implicitly denied;
- a statement applies when its ``Action`` (or ``NotAction``) matches the action, case-insensitively, with ``*`` and
  ``?`` wildcards; its ``Resource`` (or ``NotResource``) matches the request's resource ARN, case-sensitively, with
  the same wildcards; and every condition holds (operators AND-ed, keys AND-ed, a key's values OR-ed);
- a condition key the request does not carry fails a positive operator and passes a negated one (``StringNotEquals``,
  ``ArnNotLike``...); ``...IfExists`` passes when it is absent; ``Null`` tests absence itself; ``ForAllValues:`` holds
  when every value the request carries matches (and when it carries none), ``ForAnyValue:`` when at least one does.

Only identity-based policies are evaluated: the region has no SCPs, permissions boundaries, session policies or
resource-based policies (the toolkit uses none). Policy variables (``${aws:username}``) are not substituted. An
operator the region does not know fails its statement closed (an Allow does not apply; a Deny does), so a policy
cannot pass here by being misread.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any


class Decision(Enum):
    ALLOWED = "allowed"
    IMPLICIT_DENY = "implicitDeny"  # no statement allows it
    EXPLICIT_DENY = "explicitDeny"


@dataclass(frozen=True)
class Request:
    """One call as IAM sees it: the action (``service:Action``), the resource it acts on (``*`` where the action
    has no resource-level permissions) and the condition keys the request carries (a key may carry several values,
    as ``dynamodb:LeadingKeys`` does)."""

    action: str
    resource: str = "*"
    context: Mapping[str, Sequence[str]] = field(default_factory=dict)


@lru_cache(maxsize=4096)
def _pattern(glob: str, ignore_case: bool) -> re.Pattern[str]:
    # IAM's wildcards are * and ? only (no [..] classes, which fnmatch would read)
    translated = fnmatch.translate(glob.replace("[", "\0").replace("]", "\1")).replace("\0", r"\[").replace("\1", r"\]")
    return re.compile(translated, re.IGNORECASE if ignore_case else 0)


def matches(glob: str, value: str, ignore_case: bool = False) -> bool:
    return _pattern(glob, ignore_case).match(value) is not None


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def _equals(expected: str, actual: str) -> bool:
    return expected == actual


def _equals_ignore_case(expected: str, actual: str) -> bool:
    return expected.lower() == actual.lower()


def _like(expected: str, actual: str) -> bool:
    return matches(expected, actual)


def _bool(expected: str, actual: str) -> bool:
    return expected.lower() == actual.lower()


# operator -> (how one policy value matches one request value, negated)
OPERATORS = {
    "StringEquals": (_equals, False), "StringNotEquals": (_equals, True),
    "StringEqualsIgnoreCase": (_equals_ignore_case, False), "StringNotEqualsIgnoreCase": (_equals_ignore_case, True),
    "StringLike": (_like, False), "StringNotLike": (_like, True),
    "ArnEquals": (_like, False), "ArnLike": (_like, False), "ArnNotEquals": (_like, True), "ArnNotLike": (_like, True),
    "Bool": (_bool, False),
}


def _condition_holds(operator: str, key: str, expected: list[str], context: Mapping[str, Sequence[str]]) -> bool:
    """One operator on one key (its policy values OR-ed); an operator the region does not know raises ``KeyError``."""
    actual = _context_values(context, key)
    if operator == "Null":  # "true": the key must be absent; "false": present
        return (actual is None) == (expected[0].lower() == "true")
    qualifier, _, name = operator.rpartition(":")
    if_exists = name.endswith("IfExists")
    name = name.removesuffix("IfExists")
    test, negated = OPERATORS[name]
    if actual is None:
        return if_exists or negated or qualifier == "ForAllValues"

    def one(value: str) -> bool:
        hit = any(test(e, value) for e in expected)
        return not hit if negated else hit

    if qualifier == "ForAllValues":
        return all(one(v) for v in actual)
    if qualifier == "ForAnyValue":
        return any(one(v) for v in actual)
    if qualifier:
        raise KeyError(operator)
    return all(one(v) for v in actual) if negated else any(one(v) for v in actual)


def _context_values(context: Mapping[str, Sequence[str]], key: str) -> Sequence[str] | None:
    for name, values in context.items():  # condition keys are case-insensitive
        if name.lower() == key.lower():
            return values
    return None


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    """Whether the statement's action, resource and conditions all match; an unknown operator: an Allow does not
    apply, a Deny does (fail closed)."""
    if "NotAction" in statement:
        if any(matches(a, request.action, ignore_case=True) for a in _as_list(statement["NotAction"])):
            return False
    elif not any(matches(a, request.action, ignore_case=True) for a in _as_list(statement.get("Action"))):
        return False
    if "NotResource" in statement:
        if any(matches(r, request.resource) for r in _as_list(statement["NotResource"])):
            return False
    elif "Resource" in statement and not any(matches(r, request.resource) for r in _as_list(statement["Resource"])):
        return False
    for operator, keys in (statement.get("Condition") or {}).items():
        for key, values in (keys or {}).items():
            try:
                if not _condition_holds(operator, key, _as_list(values), request.context):
                    return False
            except KeyError:
                return statement.get("Effect") == "Deny"
    return True


def statements(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = document.get("Statement") or []
    return [found] if isinstance(found, dict) else list(found)


def evaluate(documents: Iterable[Mapping[str, Any]], request: Request) -> Decision:
    """AWS's decision for a principal holding ``documents`` (its identity-based policies)."""
    allowed = False
    for document in documents:
        for statement in statements(document):
            if not _applies(statement, request):
                continue
            if statement.get("Effect") == "Deny":
                return Decision.EXPLICIT_DENY
            if statement.get("Effect") == "Allow":
                allowed = True
    return Decision.ALLOWED if allowed else Decision.IMPLICIT_DENY


def trusts(document: Mapping[str, Any], federated: str, action: str, context: Mapping[str, Sequence[str]]) -> bool:
    """Whether a role's trust policy lets a federated principal (an OIDC provider's ARN) take ``action`` with the
    token's condition keys: an Allow whose ``Principal.Federated`` names it, and no Deny."""
    allowed = False
    for statement in statements(document):
        principal = statement.get("Principal") or {}
        names = _as_list(principal.get("Federated")) if isinstance(principal, dict) else _as_list(principal)
        if federated not in names and "*" not in names:
            continue
        if not _applies({k: v for k, v in statement.items() if k not in ("Resource", "NotResource")},
                        Request(action, "*", context)):
            continue
        if statement.get("Effect") == "Deny":
            return False
        allowed = allowed or statement.get("Effect") == "Allow"
    return allowed
