"""The one place boto3 clients are made.

Every AWS call of the toolkit goes through ``client()``: the target it is given (the local region's AWS, which
``region_client.local_aws`` finds), else the command's environment's (``AWS_ENDPOINT_URL``, a profile or keys,
``AWS_REGION``), in the region it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import boto3
from botocore.config import Config

from platformctl.kernel.environment import FAKE_CREDENTIALS, AwsTarget, current

_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5})

# For a read that only adds to a report (a status): one attempt, a few seconds, then the report says it could not ask.
QUICK = Config(retries={"mode": "standard", "max_attempts": 1}, connect_timeout=3, read_timeout=10)

# boto3.client makes its client from boto3's default session, and a session is not thread-safe (a client is, once
# made): threads making clients at once (a rotation's clusters, a state store's writers) can see a half-built session
# (boto/boto3#1592, boto/botocore#2991). One client is made at a time.
_MAKING = threading.Lock()


def client(service: str, region: str | None = None, config: Config | None = None, target: AwsTarget | None = None) -> Any:
    target = target or current().aws
    keys = {}
    if target.credentials:
        keys = {"aws_access_key_id": target.credentials.get("AWS_ACCESS_KEY_ID"),
                "aws_secret_access_key": target.credentials.get("AWS_SECRET_ACCESS_KEY"),
                "aws_session_token": target.credentials.get("AWS_SESSION_TOKEN")}
    with _MAKING:
        return boto3.client(service, region_name=region or target.region or "us-east-1",
                            endpoint_url=target.endpoint or None, config=config or _CONFIG, **keys)


def image_tags(region: str, images: Sequence[str], key: str, target: AwsTarget | None = None) -> dict[str, str]:
    """Image id -> the value of its ``key`` tag, for those of ``images`` EC2 holds in ``region`` (by filter: an id it
    does not hold is left out, not an error; so is an image without the tag). ``Unavailable`` when EC2 does not answer
    or refuses (one line: its code and message)."""
    from botocore.exceptions import BotoCoreError, ClientError

    from platformctl.kernel.errors import Unavailable

    try:
        found = client("ec2", region, target=target).describe_images(Filters=[{"Name": "image-id", "Values": list(images)}])
    except (BotoCoreError, ClientError) as exc:
        raise Unavailable(f"ec2:DescribeImages in {region}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                          transient=not isinstance(exc, ClientError)) from None
    return {i["ImageId"]: tag["Value"] for i in found["Images"] for tag in i.get("Tags", []) if tag["Key"] == key}


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]


__all__ = ["FAKE_CREDENTIALS", "QUICK", "AwsTarget", "client", "image_tags", "tag_list"]
