"""Who is acting, as the records of every command that changes something name them (the release ledger, a
rotation's pause, resume and abort): the identity the AWS credential chain resolves (the STS caller's ARN: keys,
a profile, SSO, an assumed role, an instance profile or IRSA alike), whenever one resolves; ``user@host (local)``
only when none does. ``$USER`` is anyone's to set: it never names an approver while a credential resolves. The local
region's fake keys vouch for nobody: under them, the identity is the local one."""

from __future__ import annotations

import getpass
import socket
from collections.abc import Collection

from platformctl.kernel.environment import AwsTarget

LOCAL = " (local)"  # marks an identity no credential vouches for


def who(target: AwsTarget) -> str:
    """Who acts, for the records: the STS caller of ``target`` (the command's AWS), else this user on this host."""
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


# The roles the platform's own jobs assume (infra/program.py names each ``<cluster>-<job>``): never an approver's.
JOB_ROLE_SUFFIXES = ("-release", "-rotation", "-remediation", "-canary")
SSO_ROLE_PREFIX = "AWSReservedSSO_"  # IAM Identity Center's roles: their session name is the signed-in user's


def person_of(arn: str, identity_roles: Collection[str] = ()) -> str | None:
    """The person an STS caller ARN stands for, as approvals count people (the same person under two roles or two
    permission sets is one), or None when the ARN names no one in particular:

    - an IAM user: ``user/NAME@ACCOUNT``;
    - the account's root user: ``root@ACCOUNT``;
    - a role session of IAM Identity Center (``AWSReservedSSO_*``) or of a role in ``identity_roles`` (roles your
      identity provider's SAML or OIDC federation assumes, which set the session name to the signed-in user and
      which nobody can assume under a name of their own choosing): the session name;
    - any other role session (the session name is the caller's to choose, so one person could be two), a role of the
      platform's own jobs, a federated user (named by whoever called GetFederationToken): None."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn":
        return None
    account, resource = parts[4], parts[5]
    if resource == "root":
        return f"root@{account}"
    if resource.startswith("user/"):
        return f"user/{resource.rsplit('/', 1)[-1]}@{account}"
    if resource.startswith("assumed-role/"):
        _, role, session = (resource.split("/", 2) + ["", ""])[:3]
        if not session or role.endswith(JOB_ROLE_SUFFIXES):
            return None
        if role.startswith(SSO_ROLE_PREFIX) or role in identity_roles:
            return session
    return None


def caller_arn(target: AwsTarget) -> str:
    """The STS caller's ARN, or a ``PlatformError`` saying why there is none: no credential resolves, the local
    region's keys (which vouch for nobody), or STS did not answer (never a silent fall back to ``$USER``)."""
    from platformctl.kernel.errors import PlatformError

    if target.local:
        raise PlatformError("the local region's keys vouch for nobody: no identity to approve as", field="identity")
    import boto3

    if boto3.session.Session().get_credentials() is None:
        raise PlatformError("no AWS credential resolves: approvals need an identity AWS vouches for", field="identity")
    from platformctl.kernel.aws import QUICK, client

    try:
        return str(client("sts", None, QUICK, target).get_caller_identity()["Arn"])
    except Exception as exc:
        raise PlatformError(f"STS did not say who you are ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}): "
                            "an approval needs it", field="identity") from None
