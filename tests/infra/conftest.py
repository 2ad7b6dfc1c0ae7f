from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from platformctl.kernel.environment import FAKE_CREDENTIALS


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty AWS account (moto) with credentials, for the program run as ``pulumi up`` runs it (``run_main``): it
    reads the stage's state table for what the release pipeline promoted there."""
    for key, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield
