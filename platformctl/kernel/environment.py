"""Where this process's platform is, worked out once: the toolkit's only reader of the process environment.

What a command takes from its environment (``PLATFORMCTL_HOME``, ``PLATFORMCTL_STATE``, ``KUBECONFIG``, the AWS
target: ``AWS_ENDPOINT_URL``, ``AWS_PROFILE``, keys and region, ``PLATFORMCTL_FAILPOINT``) is read into one
``Environment`` where the command starts (``platformctl``'s root group, the local region server's ``main``) and
installed for the command's life (``using``); below, code asks ``current()``, and the AWS clients, the stores, the
kubeconfig and the local region's files all come from that one value. Nothing writes ``os.environ``: a command that
finds the local region running (and no other AWS target named) reaches the region's AWS through the target
``region_client.local_aws`` answers, passed to the adapter that calls AWS, and a child process gets its environment
from ``child`` (the AWS target's variables with it). Code run with no command around it (a test, a library caller)
gets an ``Environment`` read afresh at each ``current()``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# What clients of moto (the local region's AWS) authenticate with: anything, as long as it is something.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
}

# Any of these names an AWS target of the operator's: the local region is then never assumed.
AWS_TARGET_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_ACCESS_KEY_ID")
STATE_VARIABLE = "PLATFORMCTL_STATE"
HOME_VARIABLE = "PLATFORMCTL_HOME"
FAILPOINT_VARIABLE = "PLATFORMCTL_FAILPOINT"


@dataclass(frozen=True)
class AwsTarget:
    """Which AWS a client talks to: an endpoint (moto's, or none: AWS's own), a default region, and keys when the
    target brings its own (the local region's fake ones); without keys, boto3's credential chain decides."""

    endpoint: str | None = None
    region: str | None = None
    credentials: Mapping[str, str] = field(default_factory=dict)
    configured: bool = False  # the environment named this target (an endpoint, a profile or keys)
    local: bool = False  # the running local region's AWS: its keys vouch for nobody

    def variables(self) -> dict[str, str]:
        """What a child process needs in its environment to reach this target."""
        out = dict(self.credentials)
        if self.endpoint:
            out["AWS_ENDPOINT_URL"] = self.endpoint
        if self.region:
            out["AWS_REGION"] = self.region
        return out


@dataclass(frozen=True)
class Environment:
    """The process environment as the toolkit reads it: one copy, taken where a command starts."""

    variables: Mapping[str, str] = field(default_factory=dict)
    aws_target: AwsTarget | None = None  # an AWS the command chose (the local region's), over the variables'

    @classmethod
    def from_os(cls) -> Environment:
        return cls(dict(os.environ))

    def get(self, name: str, default: str = "") -> str:
        return self.variables.get(name) or default

    @property
    def home(self) -> Path:
        """The toolkit's folder: its default state store and the local region's files."""
        return Path(self.get(HOME_VARIABLE, ".platformctl"))

    @property
    def state(self) -> str:
        """``$PLATFORMCTL_STATE``: the store every command uses when ``--state`` does not say ("" when unset)."""
        return self.get(STATE_VARIABLE)

    @property
    def kubeconfig(self) -> str | None:
        """``$KUBECONFIG`` as set (one path or several, joined as kubectl joins them), else None."""
        return self.get("KUBECONFIG") or None

    @property
    def kubeconfig_path(self) -> Path:
        """The one kubeconfig file a command reads when none is given: ``$KUBECONFIG``'s first, else kubectl's."""
        first = self.get("KUBECONFIG").split(os.pathsep)[0]
        return Path(first).expanduser() if first else Path.home() / ".kube" / "config"

    @property
    def failpoint(self) -> str:
        return self.get(FAILPOINT_VARIABLE)

    @property
    def aws(self) -> AwsTarget:
        """The AWS target this environment names (``configured`` False: none; the keys, a profile or a role are boto3's
        credential chain's to find)."""
        if self.aws_target is not None:
            return self.aws_target
        return AwsTarget(endpoint=self.get("AWS_ENDPOINT_URL") or None,
                         region=self.get("AWS_REGION") or self.get("AWS_DEFAULT_REGION") or None,
                         configured=any(self.get(k) for k in AWS_TARGET_VARIABLES))

    def with_aws(self, target: AwsTarget | None) -> Environment:
        """This environment with ``target`` as its AWS (None: unchanged)."""
        return self if target is None else Environment(self.variables, target)

    def child(self, **overrides: str | None) -> dict[str, str]:
        """The environment of a child process: this one (with the AWS target it was given), with ``overrides``
        (None: left out)."""
        out = dict(self.variables)
        if self.aws_target is not None:
            out.update(self.aws_target.variables())
        for key, value in overrides.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out


_installed: Environment | None = None
_lock = threading.Lock()


def current() -> Environment:
    """The environment of the command that runs (read afresh when no command installed one)."""
    return _installed if _installed is not None else Environment.from_os()


def install(environment: Environment) -> None:
    """Install ``environment`` for the rest of this process's life: a long-lived process's edge (the local region's
    server, once it knows its own AWS)."""
    global _installed
    with _lock:
        _installed = environment


@contextmanager
def using(environment: Environment) -> Iterator[Environment]:
    """Install ``environment`` for every thread of this process while the block runs (a command's life)."""
    global _installed
    with _lock:
        saved, _installed = _installed, environment
    try:
        yield environment
    finally:
        with _lock:
            _installed = saved
