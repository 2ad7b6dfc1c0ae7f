"""The one place boto3 clients are made.

Every AWS call of the toolkit goes through ``client()``, which honours ``AWS_ENDPOINT_URL`` (the
local region's moto server, or any other endpoint) and the region it is given.
"""

from __future__ import annotations

import os
from typing import Any

import boto3
from botocore.config import Config

_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5})


# What clients of moto (the local region's AWS) authenticate with: anything, as long as it is something.
FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


# For a read that only adds to a report (a status): one attempt, a few seconds, then the report says it could not ask.
QUICK = Config(retries={"mode": "standard", "max_attempts": 1}, connect_timeout=3, read_timeout=10)


def client(service: str, region: str | None = None, config: Config | None = None) -> Any:
    return boto3.client(
        service,
        region_name=region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
        config=config or _CONFIG,
    )


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in sorted(tags.items())]
