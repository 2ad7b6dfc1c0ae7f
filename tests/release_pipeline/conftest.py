"""The reconciler's tests share one ledger fixture, and every ledger a test leaves is held to the rotation contract
(``contract.py``): what the fake stages answered is what the application layer's adapter answers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from platformctl.kernel.state import open_store
from release_pipeline.ledger import Ledger
from tests.release_pipeline.contract import rotation_results_keep_the_contract


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    made = Ledger(open_store(str(tmp_path / "release.db")))
    yield made
    rotation_results_keep_the_contract(e for _, e in made.entries())
