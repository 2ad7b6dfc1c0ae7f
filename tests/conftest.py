from __future__ import annotations

from pathlib import Path

import pytest

from platformctl.cluster.model import load_snapshot
from platformctl.cluster.simulator import SimulatedCluster

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def rules() -> SimulatedCluster:
    """The hand-written kubectl-format snapshot of eviction cases, loaded into a simulator."""
    return SimulatedCluster.from_snapshot(load_snapshot(FIXTURES / "eviction_rules.json"), name="rules")
