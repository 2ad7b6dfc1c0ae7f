"""The platform the running command acts on: built once by ``platformctl``'s root command (``cli``), read by every
subcommand here and handed to each application call."""

from __future__ import annotations

import click

from platformctl.app.platform import Platform


def platform() -> Platform:
    """The running command's platform (``cli`` made it from the process environment and ``--infra-dir``)."""
    found = click.get_current_context().find_root().obj
    if not isinstance(found, Platform):  # a subcommand invoked without the root group (a test's): this process's
        found = Platform.from_os()
    return found
