"""What every command shares for its output: the ``--output`` option, the console, JSON emission."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console

OUTPUT = click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True,
                      help="text for people, json for machines")
# the local region's time (`local up`, `demo-pipeline`): on by default, PLATFORMCTL_LOCAL_SKIP=false turns it off
SKIP = click.option("--skip/--no-skip", default=True, show_default=True, envvar="PLATFORMCTL_LOCAL_SKIP",
                    help="skip to the next instant something is due whenever every registered client (the toolkit's "
                    "own commands) waits and no other request is in flight")


class Seconds(click.ParamType):
    """A number of seconds between ``low`` and ``high``: ``nan`` and ``inf`` are not durations (``inf`` would make a
    lease that never expires)."""

    name = "seconds"

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not self.low <= seconds <= self.high:
            self.fail(f"{value!r} is not a number of seconds from {self.low:g} to {self.high:g}", param, ctx)
        return seconds


LEASE_TTL = Seconds(1.0, 3600.0)


def console() -> Console:
    # Piped output is read by people too (CI logs, `| less`): do not squeeze tables into 80 columns.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def writable_file(path: Path, option: str) -> Path:
    """An output file's folder must exist and take a file, and the path must not be a folder: checked before any work
    (a file is made in the folder and removed at once: permissions alone do not say it, for root or on /proc)."""
    from platformctl.kernel.errors import PlatformError

    if path.is_dir():
        raise PlatformError("is a folder, not a file", file=str(path), field=option)
    if not path.parent.is_dir():
        raise PlatformError(f"folder {path.parent} does not exist", file=str(path), field=option)
    _probe(path.parent, path, option)
    return path


def _probe(folder: Path, path: Path, option: str) -> None:
    import tempfile

    from platformctl.kernel.errors import PlatformError

    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise PlatformError(f"cannot be written ({exc.strerror})", file=str(path), field=option) from None


def writable_folder(path: Path, option: str) -> Path:
    """An output folder is made if missing (its parent must exist); a file in its place is an error."""
    from platformctl.kernel.errors import PlatformError

    if path.exists() and not path.is_dir():
        raise PlatformError("is a file, not a folder", file=str(path), field=option)
    if not path.parent.is_dir():
        raise PlatformError(f"folder {path.parent} does not exist", file=str(path), field=option)
    try:  # made and written to now, so that a folder the work cannot be saved in is said before the work
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise PlatformError(f"cannot be written ({exc.strerror})", file=str(path), field=option) from None
    _probe(path, path, option)
    return path


STATE_HELP = ("the state store: PATH, sqlite:///PATH or dynamodb://TABLE (default: $PLATFORMCTL_STATE, else the local "
              "region's own when the cluster is one of its, else the stage's table as its stack file names it)")
