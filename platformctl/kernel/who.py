"""Who is acting, as the records of every command that changes something name them (the release ledger, a
rotation's pause, resume and abort): the identity the AWS credential chain resolves (the STS caller's ARN: keys,
a profile, SSO, an assumed role, an instance profile or IRSA alike), whenever one resolves; ``user@host (local)``
only when none does. ``$USER`` is anyone's to set: it never names an approver while a credential resolves. The local
region's fake keys vouch for nobody: under them, the identity is the local one."""

from __future__ import annotations

import getpass
import socket

from platformctl.kernel.environment import current

LOCAL = " (local)"  # marks an identity no credential vouches for


def who() -> str:
    target = current().aws
    if target.local:
        return _local()
    try:
        import boto3

        session = boto3.session.Session()
        if session.get_credentials() is None:
            return _local()
        from platformctl.kernel.aws import QUICK, client

        return str(client("sts", None, QUICK, target).get_caller_identity()["Arn"])
    except Exception:  # no answer from STS (offline, expired credentials): say who locally instead, marked so
        return _local()


def os_user() -> str:
    """This process's user name; a container's UID with no passwd entry and no $USER: its number, never a crash."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        import os

        return f"uid-{os.getuid()}"


def _local() -> str:
    return f"{os_user()}@{socket.gethostname()}{LOCAL}"


def is_local(identity: str) -> bool:
    return identity.endswith(LOCAL)
