"""Failpoints: named places where a crash test may have the process killed, as etcd's gofail and TiKV's fail-rs do.

``PLATFORMCTL_FAILPOINT=NAME#N`` (armed by ``platformctl``'s root command) makes the process SIGKILL itself the N-th time it passes ``NAME``
(N defaults to 1). Unset — always, outside crash tests — ``hit()`` is a comparison or two. Killing at a
named place, rather than after a timer, is what lets a test hit the narrow windows that matter (an
instance terminated and the journal not yet told) every time instead of by luck; the kill is a real
SIGKILL of the real process, so nothing gets a chance to clean up.

Names used: ``intent:<op>`` (the intent is journalled, the call not made), ``call:<op>`` (the call
returned, its result not journalled), ``phase:<phase>`` (a wave phase was journalled), ``wait:<what>``
(inside a wait, each poll).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_armed: tuple[str, int] | None = None  # the failpoint and the pass to die at
_hits = 0


def arm(spec: str) -> None:
    """Arm the failpoint ``spec`` (``NAME#N``; "" disarms): ``platformctl``'s root command arms the one its environment
    names, where the command starts (a process forked from a preloaded interpreter has its own environment by then)."""
    global _armed, _hits
    name, _, count = spec.partition("#")
    _armed = (name, int(count or 1)) if spec else None
    _hits = 0


class Killed(BaseException):
    """An in-process test's stand-in for SIGKILL at a failpoint: a BaseException, so no ``except Exception`` handles
    it and the code under test stops where it stands (only ``finally`` blocks run, none of which journal)."""


def hit(name: str) -> None:
    global _hits
    if _raise_at is not None and name == _raise_at[0]:
        _raise_at[1] -= 1
        if _raise_at[1] == 0:
            raise Killed(name)
    armed = _armed
    if armed is None or name != armed[0]:
        return
    _hits += 1
    if _hits == armed[1]:
        os.kill(os.getpid(), signal.SIGKILL)


_raise_at: list[Any] | None = None


@contextmanager
def killed_at(name: str, count: int = 1) -> Iterator[None]:
    """For in-process tests: raise ``Killed`` the ``count``-th time ``name`` is passed, within the block."""
    global _raise_at
    _raise_at = [name, count]
    try:
        yield
    finally:
        _raise_at = None
