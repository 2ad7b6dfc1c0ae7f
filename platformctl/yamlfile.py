"""Reading the YAML files operators write (stack configs, rotation policies), with one-line errors.

Shared by every loader of operator-written YAML: ``read_yaml`` turns a missing file or a syntax
error into a ``PlatformError`` naming the file (and the line), and ``validation_error`` turns
pydantic's first error into one naming the file and the key path (``workloadRules[2].mode``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from platformctl.errors import PlatformError


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
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "document"
        raise PlatformError(f"not valid YAML ({where})", file=source) from None


def validation_error(exc: ValidationError, file: str, prefix: tuple[Any, ...] = ()) -> PlatformError:
    """The first of pydantic's errors as a ``PlatformError`` naming the file and the key path."""
    error = exc.errors()[0]
    loc = tuple(part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-")))
    return PlatformError(_message(error), file=file, field=key_path((*prefix, *loc)) or None)


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
