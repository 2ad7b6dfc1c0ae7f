"""What both benchmarks measure against: a synthetic cluster's snapshot on disk and ``json.load`` of it."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.model import save_snapshot


@dataclass(frozen=True)
class SnapshotTiming:
    path: str
    size_bytes: int
    json_load_seconds: float


def save_and_time_load(sim: SimulatedCluster, folder: str) -> SnapshotTiming:
    """Save ``sim``'s snapshot in ``folder`` and time ``json.load`` of it: the unit every ratio is in."""
    path = os.path.join(folder, "snapshot.json")
    save_snapshot(sim.snapshot(), path)
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        json.load(f)
    return SnapshotTiming(path, os.path.getsize(path), time.perf_counter() - t0)
