"""Who is acting, as the records of every command that changes something name them (the release ledger, a
rotation's pause, resume and abort): the STS caller's ARN against a real AWS account, else ``user@host``."""

from __future__ import annotations

import getpass
import os
import socket


def who() -> str:
    if os.environ.get("AWS_ACCESS_KEY_ID") and not os.environ.get("AWS_ENDPOINT_URL"):
        try:
            from platformctl.aws import client

            return str(client("sts").get_caller_identity()["Arn"])
        except Exception:  # no answer from STS (offline, expired credentials): say who locally instead
            pass
    return f"{getpass.getuser()}@{socket.gethostname()}"
