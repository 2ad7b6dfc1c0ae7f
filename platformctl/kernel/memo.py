"""An answer worked out once per key, a refusal included: a file that does not load is refused the same way at every
ask, without being read again (a command's stack files, a region's user data)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def remembered(cache: dict[K, V | Exception], key: K, make: Callable[[], V], refusal: type[Exception]) -> V:
    """``make()``'s answer for ``key``, made at the first ask; a ``refusal`` it raised is kept and raised again."""
    if key not in cache:
        try:
            cache[key] = make()
        except refusal as exc:
            cache[key] = exc
    found = cache[key]
    if isinstance(found, Exception):
        raise found
    return found
