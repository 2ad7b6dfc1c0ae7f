"""The policy reference (``docs/policy-reference.md``), generated from the pydantic models that parse the policies.

``python -m platformctl.cli.reference > docs/policy-reference.md`` writes it again; ``tests/test_readme.py`` fails
when the file and the models disagree. Each key's description is its field's docstring.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from upgrade_service.planning.policy import RotationPolicy
from upgrade_service.remediation.policy import RemediationPolicy

PAGES: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("Rotation policy", RotationPolicy, "`rotate plan --policy`, `rotate run --policy`, and the stack's "
     "`platformctl:rotation.policy`; parsed by `upgrade_service/planning/policy.py`. More in [rotate.md](rotate.md)."),
    ("Remediation policy", RemediationPolicy, "`remediate --policy`, and the stack's `platformctl:remediation.policy`; "
     "parsed by `upgrade_service/remediation/policy.py`. More in [remediate.md](remediate.md)."),
)


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args if a is not type(None))
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (tuple, list):
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"map of {_type(args[0])} to {_type(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    return {int: "integer", str: "string", bool: "boolean", float: "number"}.get(annotation, "any")


_WORDS = (("ge", ">="), ("le", "<="), ("gt", ">"), ("lt", "<"), ("min_length", "at least"), ("pattern", "matching"))


def _constraints(annotation: Any) -> list[Any]:
    """The constraint objects (``Ge``, ``MinLen`` …) of an annotation, inside unions too (``Seconds | None``)."""
    out: list[Any] = []
    if typing.get_origin(annotation) is typing.Annotated:
        for extra in typing.get_args(annotation)[1:]:
            out += list(extra.metadata) if isinstance(extra, FieldInfo) else [extra]
    elif typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            out += _constraints(arg)
    return out


def _limits(info: FieldInfo) -> str:
    out = []
    for item in [*info.metadata, *_constraints(info.annotation)]:
        for name, word in _WORDS:
            value = getattr(item, name, None)
            if value is not None:
                out.append(f"{word} `{value}`")
    return ", ".join(out)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "see below"
    if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
        return "see description"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def _nested(annotation: Any) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    for arg in typing.get_args(annotation):
        found += _nested(arg)
    return found


def _table(model: type[BaseModel], prefix: str, seen: set[type[BaseModel]]) -> list[str]:
    lines = ["| key | type | default | limits | what it means |", "| --- | --- | --- | --- | --- |"]
    below: list[tuple[str, type[BaseModel]]] = []
    for name, info in model.model_fields.items():
        if info.exclude:
            continue
        key = f"{prefix}{info.alias or name}"
        description = " ".join((info.description or "").split()).replace("|", "\\|")
        lines.append(f"| `{key}` | {_type(info.annotation)} | {_default(info)} | {_limits(info)} | {description} |")
        for inner in _nested(info.annotation):
            if inner not in seen:
                seen.add(inner)
                many = typing.get_origin(typing.get_args(info.annotation)[0] if typing.get_origin(info.annotation)
                                         in (typing.Union, types.UnionType) else info.annotation) in (tuple, list)
                below.append((f"{key}[]." if many else f"{key}.", inner))
    out = lines
    for inner_prefix, inner in below:
        out += ["", f"`{inner_prefix.rstrip('.')}`:", "", *_table(inner, inner_prefix, seen)]
    return out


def render() -> str:
    lines = ["# Policy reference", "",
             "Generated from the pydantic models that parse each policy (`python -m platformctl.cli.reference > "
             "docs/policy-reference.md`); a test fails when this page and the models disagree. Every key is "
             "optional unless its default says required; an unknown key is refused with its likely spelling.", ""]
    for title, model, where in PAGES:
        lines += [f"## {title}", "", where, "", *_table(model, "", {model}), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
