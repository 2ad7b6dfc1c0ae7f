"""What every command shares for its output: the ``--output`` option, the console, JSON emission."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console

OUTPUT = click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True,
                      help="text for people, json for machines")


def console() -> Console:
    # Piped output is read by people too (CI logs, `| less`): do not squeeze tables into 80 columns.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))
