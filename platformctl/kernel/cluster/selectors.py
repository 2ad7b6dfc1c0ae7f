"""Label selectors and int-or-percent values, with Kubernetes' own semantics.

``LabelSelector`` is ``metav1.LabelSelector`` (matchLabels plus matchExpressions); a selector
string (``app=web,tier in (a,b),!canary``) is what the API's ``labelSelector`` parameter takes;
``NodeSelectorTerm`` adds ``Gt``/``Lt`` for node affinity. ``IntOrPercent.scaled`` is
``intstr.GetScaledValueFromIntOrPercent``, the rounding the disruption controller uses.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from platformctl.kernel.errors import PlatformError

LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
NODE_OPERATORS = (*LABEL_OPERATORS, "Gt", "Lt")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return labels.get(self.key) in self.values
        if op == "NotIn":
            # A missing label satisfies NotIn, as in Kubernetes.
            return labels.get(self.key) not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        value = labels.get(self.key)
        if value is None:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for requirement in self.match_expressions:
            if not requirement.matches(labels):
                return False
        return True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.match_labels:
            out["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            out["matchExpressions"] = [r.to_dict() for r in self.match_expressions]
        return out

    @classmethod
    def parse(cls, raw: Any, where: str, file: str | None = None) -> LabelSelector:
        """A ``metav1.LabelSelector`` from its JSON form; ``where`` names the field in errors."""
        if not isinstance(raw, dict):
            raise PlatformError("must be an object", file=file, field=where)
        labels = raw.get("matchLabels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise PlatformError("must map label keys to strings", file=file, field=f"{where}.matchLabels")
        expressions = raw.get("matchExpressions") or []
        if not isinstance(expressions, list):
            raise PlatformError("must be a list", file=file, field=f"{where}.matchExpressions")
        requirements = tuple(
            parse_requirement(e, f"{where}.matchExpressions[{i}]", LABEL_OPERATORS, file)
            for i, e in enumerate(expressions)
        )
        return cls(tuple(sorted(labels.items())), requirements)


def parse_requirement(
    raw: Any, where: str, operators: tuple[str, ...], file: str | None = None
) -> Requirement:
    if not isinstance(raw, dict) or not isinstance(raw.get("key"), str):
        raise PlatformError("must be an object with a string key", file=file, field=where)
    op = raw.get("operator")
    if op not in operators:
        raise PlatformError(
            f"operator must be one of {', '.join(operators)} (got {op!r})", file=file, field=f"{where}.operator"
        )
    values = raw.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise PlatformError("must be a list of strings", file=file, field=f"{where}.values")
    if op in ("In", "NotIn") and not values:
        raise PlatformError(f"{op} needs at least one value", file=file, field=f"{where}.values")
    if op in ("Exists", "DoesNotExist") and values:
        raise PlatformError(f"{op} takes no values", file=file, field=f"{where}.values")
    if op in ("Gt", "Lt") and (len(values) != 1 or not re.fullmatch(r"-?\d+", values[0])):
        raise PlatformError(f"{op} needs exactly one integer value", file=file, field=f"{where}.values")
    return Requirement(raw["key"], op, tuple(values))


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One term of ``requiredDuringSchedulingIgnoredDuringExecution``; terms are ORed."""

    match_expressions: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.match_expressions)

    def to_dict(self) -> dict[str, Any]:
        return {"matchExpressions": [r.to_dict() for r in self.match_expressions]}


_TOKEN = re.compile(
    r"\s*(?:(?P<notexists>!\s*(?P<nkey>[^\s,!=()]+))"
    r"|(?P<key>[^\s,!=()]+)\s*(?:(?P<op>==|!=|=)\s*(?P<value>[^\s,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<values>[^)]*)\)|))\s*(?:,|$)"
)


def parse_selector_string(text: str) -> LabelSelector:
    """A selector in the API's string syntax, as ``kubectl -l`` and ``labelSelector=`` take it."""
    equal: list[tuple[str, str]] = []
    requirements: list[Requirement] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise PlatformError(f"cannot parse label selector {text!r} at position {pos}", field="labelSelector")
        pos = m.end()
        if m.group("notexists"):
            requirements.append(Requirement(m.group("nkey"), "DoesNotExist"))
        elif m.group("op") in ("=", "=="):
            equal.append((m.group("key"), m.group("value")))
        elif m.group("op") == "!=":
            requirements.append(Requirement(m.group("key"), "NotIn", (m.group("value"),)))
        elif m.group("setop"):
            values = tuple(v.strip() for v in m.group("values").split(",") if v.strip())
            requirements.append(Requirement(m.group("key"), "In" if m.group("setop") == "in" else "NotIn", values))
        else:
            requirements.append(Requirement(m.group("key"), "Exists"))
    return LabelSelector(tuple(equal), tuple(requirements))


@dataclass(frozen=True, slots=True)
class IntOrPercent:
    value: int
    percent: bool = False

    def scaled(self, total: int, round_up: bool) -> int:
        """``intstr.GetScaledValueFromIntOrPercent``."""
        if not self.percent:
            return self.value
        exact = self.value * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)

    def to_json(self) -> int | str:
        return f"{self.value}%" if self.percent else self.value

    @classmethod
    def parse(cls, raw: Any, where: str, file: str | None = None) -> IntOrPercent:
        if isinstance(raw, bool):
            raise PlatformError("must be an integer or a percentage", file=file, field=where)
        if isinstance(raw, int):
            if raw < 0:
                raise PlatformError("must not be negative", file=file, field=where)
            return cls(raw)
        if isinstance(raw, str) and re.fullmatch(r"\d+%", raw):
            return cls(int(raw[:-1]), percent=True)
        raise PlatformError(f"must be an integer or a percentage like '50%' (got {raw!r})", file=file, field=where)
