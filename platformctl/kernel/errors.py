"""The project's error types.

``PlatformError`` is the one error a user can cause (bad YAML, a missing field, an unknown cluster,
a malformed snapshot). Its message names the file and the field; the CLI prints it on one line and
exits 2. Everything else is a bug and may surface as a traceback.
"""

from __future__ import annotations


class PlatformError(Exception):
    """A mistake in the user's input, reported as ``<file>: <field>: <message>``."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.detail = message
        parts = [p for p in (file, field) if p]
        super().__init__(": ".join([*parts, message]))


class NotFoundError(PlatformError):
    """A named object (node, pod, cluster, stage) does not exist."""


class ApiRefused(PlatformError):
    """An API answered a request with an error other than not-found (403 RBAC, 409 conflict, 500): said on one
    line with the API's own status, and never a traceback."""

    TRANSIENT = frozenset({429, 500, 502, 503, 504})  # too many requests, the server's faults: may pass if asked again

    def __init__(self, message: str, status: int, *, file: str | None = None, field: str | None = None) -> None:
        super().__init__(message, file=file, field=field)
        self.status = status

    @property
    def transient(self) -> bool:
        """Whether the same request may succeed when asked again later."""
        return self.status in self.TRANSIENT


class ApiUnreachable(PlatformError):
    """An API that did not answer at all (refused, reset, timed out): transient by nature."""

    transient = True


# What a file nested thousands of levels deep is told (the parsers recurse; Python's stack is not a user's concern).
TOO_DEEP = "nested too deeply to read (a snapshot, a policy or a sample is a few levels deep, not thousands)"


class Unavailable(Exception):
    """A fault of an API or a store, not the user's mistake: it did not answer, or refused for a reason of its own
    (throttled past its retries, an outage, permissions it lacks). A command says it on one line and exits 1."""
