"""Reading the YAML files operators write (stack configs, rotation policies), with one-line errors.

Shared by every loader of operator-written YAML: ``read_yaml`` turns a missing file or a syntax
error into a ``PlatformError`` naming the file (and the line), and ``validation_error`` turns
pydantic's first error into one naming the file and the key path (``workloadRules[2].mode``).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from platformctl.kernel.errors import TOO_DEEP, PlatformError


def read_yaml(path: Path, what: str) -> Any:
    """The parsed document of ``path``; ``what`` names the file's kind in the not-found error."""
    source = str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise PlatformError(f"{what} not found", file=source) from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise PlatformError(f"cannot read {what} ({type(exc).__name__})", file=source) from None
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise PlatformError(TOO_DEEP, file=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "document"
        raise PlatformError(f"not valid YAML ({where})", file=source) from None


Model = typing.TypeVar("Model", bound=BaseModel)


def validate(model: type[Model], document: Any, source: str, what: str, empty: bool = False) -> Model:
    """``document`` (parsed YAML) as ``model``; not a mapping, or any field wrong, is a ``PlatformError``
    naming ``source`` and the key. ``empty``: an empty file means every default."""
    if document is None and empty:
        document = {}
    if not isinstance(document, dict):
        raise PlatformError(f"a {what} is a mapping of fields", file=source)
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        raise validation_error(exc, source, model=model) from None
    except RecursionError:
        raise PlatformError(TOO_DEEP, file=source) from None


def validation_error(exc: ValidationError, file: str, prefix: tuple[Any, ...] = (),
                     model: type[BaseModel] | None = None) -> PlatformError:
    """Pydantic's error as a ``PlatformError`` naming the file and the key path as the file spells it.

    With the ``model`` that was validated, the path is walked through it: the tags pydantic adds for the
    members of a union (``constrained-int``, ``dict[str,...]``) are left out, of a union's errors the one
    that reached deepest into the value is told, and an unknown key is told which known key it is most
    likely a typo of (``maxInflight`` -> ``maxInFlight``)."""
    errors = exc.errors()
    first = errors[0]
    if model is None:
        loc = tuple(part for part in first["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        return PlatformError(_message(first), file=file, field=key_path((*prefix, *loc)) or None)
    walked = [(_walk(model, e["loc"]), e) for e in errors]
    (head, _), _ = walked[0]
    same = [w for w in walked if w[0][0][: len(head)] == head]
    (loc, known), error = max(same, key=lambda w: len(w[0][0]))
    message = _message(error)
    if error["type"] == "extra_forbidden" and known:
        guess = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6) or \
            [k for k in known if k.lower() == str(loc[-1]).lower()]
        if guess:
            message += f" (did you mean {guess[0]}?)"
    return PlatformError(message, file=file, field=key_path((*prefix, *loc)) or None)


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """The model's keys as files spell them (aliases), and the field each names."""
    out = {}
    for name, info in model.model_fields.items():
        out[info.alias or name] = info
        out[name] = info
    return out


def _walk(model: type[BaseModel], loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[str]]:
    """``loc`` without pydantic's own tags, and the known keys of the last model it passed through."""
    out: list[Any] = []
    known: list[str] = []
    annotation: Any = model
    parts = list(loc)
    while parts:
        part = parts[0]
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is typing.Annotated:
            annotation = args[0]
            continue
        if isinstance(part, str) and part.startswith("function-"):
            parts.pop(0)
            continue
        if origin in (typing.Union, types.UnionType):
            # The part names the union member pydantic tried: follow that member, keep no trace of the tag.
            tag = str(part)
            members = [a for a in args if a is not type(None)]
            if len(members) == 1:  # X | None: pydantic tags no member
                annotation = members[0]
                continue
            chosen = next((a for a in members if typing.get_origin(a) in (dict, Mapping) and tag.startswith("dict")), None) \
                or next((a for a in members if typing.get_origin(a) in (list, tuple) and tag.startswith(("list", "tuple"))), None) \
                or next((a for a in members if isinstance(a, type) and issubclass(a, BaseModel) and tag == a.__name__), None)
            if chosen is None and tag.startswith(("dict", "list", "tuple")) or (chosen is None and not members):
                parts.pop(0)
                annotation = Any
                continue
            if chosen is None:
                chosen = next((a for a in members if typing.get_origin(a) not in (dict, Mapping, list, tuple)), members[0])
            parts.pop(0)
            annotation = chosen
            continue
        parts.pop(0)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = _fields(annotation)
            known = sorted({info.alias or name for name, info in annotation.model_fields.items()})
            info = fields.get(part)
            out.append(info.alias or part if info is not None else part)
            annotation = info.annotation if info is not None else Any
            continue
        out.append(part)
        if origin in (dict, Mapping) and len(args) == 2:
            annotation = args[1]
        elif origin in (list, tuple) and args:
            annotation = args[0]
        else:
            annotation = Any
    return tuple(out), known


def _message(error: Any) -> str:
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] == "extra_forbidden":
        return "unknown field"
    msg = error["msg"].removeprefix("Value error, ")
    return f"{msg} (got {error['input']!r})"


def key_path(loc: tuple[Any, ...]) -> str:
    """``("a", "b", 2, "c")`` as ``a.b[2].c``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
