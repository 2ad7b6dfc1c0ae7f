"""The project's error types.

``PlatformError`` is the one error a user can cause (bad YAML, a missing field, an unknown cluster,
a malformed snapshot). Its message names the file and the field; the CLI prints it on one line and
exits 2. ``Unavailable`` is an API's or a store's fault (``ApiFault``: a Kubernetes API that refused or did not
answer; ``StoreUnavailable``: the state store), said on one line with exit 1: never the user's mistake.
Everything else is a bug and may surface as a traceback.
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


class Unavailable(Exception):
    """A fault of an API or a store, not the user's mistake: it did not answer, or refused for a reason of its own
    (throttled past its retries, an outage, permissions it lacks). A command says it on one line and exits 1.
    ``transient`` says whether it may pass by itself (an outage, throttling) or needs someone (permissions)."""

    def __init__(self, message: str, *, transient: bool = True) -> None:
        super().__init__(message)
        self.transient = transient


class ApiFault(Unavailable):
    """A Kubernetes API's fault, not the user's input: it refused (``ApiRefused``) or did not answer
    (``ApiUnreachable``). Said as ``<kubeconfig>: <context>: <message>``; a command exits 1 on it, as on any
    ``Unavailable``. ``transient``: whether it may pass by itself."""

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.detail = message
        super().__init__(": ".join([*(p for p in (file, field) if p), message]), transient=self.transient)

    transient = True


class ApiRefused(ApiFault):
    """An API answered a request with an error other than not-found (403 RBAC, 409 conflict, 500): said on one
    line with the API's own status, and never a traceback."""

    TRANSIENT = frozenset({429, 500, 502, 503, 504})  # too many requests, the server's faults: may pass if asked again

    def __init__(self, message: str, status: int, *, file: str | None = None, field: str | None = None) -> None:
        self.status = status
        self.transient = status in self.TRANSIENT  # the same request may succeed when asked again later
        super().__init__(message, file=file, field=field)
        self.retry_after: float | None = None  # seconds the API asked to be left alone (a 429's or 503's Retry-After)


class ApiUnreachable(ApiFault):
    """An API that did not answer at all (refused, reset, timed out): transient by nature. ``no_connection``: no
    connection was made (refused, or a host name that does not resolve), as against one lost or timed out."""

    no_connection = False


# What a file nested thousands of levels deep is told (the parsers recurse; Python's stack is not a user's concern).
TOO_DEEP = "nested too deeply to read (a snapshot, a policy or a sample is a few levels deep, not thousands)"


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a fault that may pass by itself, so that the same step asked again later may go through: an
    API or a store that did not answer (a timeout, a reset, refused), or answered with a typed transient refusal
    (429, 5xx, throttling; each adapter sets ``transient`` on what it raises in place of its SDK's error). A user's
    mistake, a 403, a 409 or a bug is not: it needs someone. Decided on the error's type and its typed flag, never
    on its words."""
    if isinstance(exc, (TimeoutError, ConnectionError)):  # ConnectionError: reset, refused, aborted, broken pipe
        return True
    flag = getattr(exc, "transient", None)
    if isinstance(flag, bool):
        return flag
    reason = getattr(exc, "reason", None)  # urllib's URLError wraps the socket's own error
    return isinstance(reason, BaseException) and reason is not exc and is_transient(reason)
