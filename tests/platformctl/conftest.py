"""A moto server on loopback for the tests that use DynamoDB as a real account's tables (the state store's contract,
the dashboard's reads), and the environment that points boto3 at it: the local region's own front for moto
(``AwsCallLog``, which answers DynamoDB's requests one at a time, as serializable as DynamoDB's)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from platformctl.emulator.server.awslog import AwsCallLog, RecordingMotoServer


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = RecordingMotoServer(AwsCallLog, ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-west-2"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
