"""Durations as people read them and write them, shared by every part that prints or parses one (the server's
tables, `ami prune`, `rotate`, canaries, policies)."""

from __future__ import annotations

import re
from typing import Any

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def human_duration(seconds: float) -> str:
    """Kubernetes' ``duration.HumanDuration``: 45s, 3m20s, 5h12m, 3d4h, 2y10d."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    days = hours // 24
    if hours < 24 * 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def hms(seconds: float) -> str:
    """A plan's or a rotation's length: ``1h02m30s``, ``4m05s``."""
    h, rest = divmod(int(seconds), 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def parse_duration(value: Any) -> int:
    """A duration as a number of seconds or as ``90d``, ``1h30m``, ``5m``, ``45s``."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a text such as 5m or 1h30m")
    if isinstance(value, int | float) and value >= 0:
        return int(value)
    if isinstance(value, str):
        if value.strip().isdigit():
            return int(value.strip())
        match = _DURATION.match(value.strip())
        if match and any(match.groups()):
            d, h, m, s = (int(g or 0) for g in match.groups())
            return d * 86400 + h * 3600 + m * 60 + s
    raise ValueError(f"{value!r} is not a duration (a number of seconds, or a text such as 5m, 1h30m or 90d)")
