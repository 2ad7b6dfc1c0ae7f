"""Image tests run against moto in process: one account, a home region and one region images are copied to."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

from ami.manifest import MANIFEST_DIR
from platformctl.emulator import moto_extensions
from tests.ami.accounts import COPY, REGION


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_REGION", REGION)):
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    moto_extensions.install()  # EC2 AMI deprecation, which moto lacks
    with mock_aws():
        for region in (REGION, COPY):  # what every AWS region holds: the EKS-optimised images the tree starts from
            moto_extensions.publish_eks_optimized_images(region)
        yield


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "manifests"
    shutil.copytree(MANIFEST_DIR, out)
    return out
