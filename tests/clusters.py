"""The one builder of test clusters: a simulated cluster whose node pools stand in for auto scaling groups."""

from __future__ import annotations

from collections.abc import Mapping

from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.model import Taint

OLD, NEW = "ami-0old", "ami-0new"


def cluster(pools: Mapping[str, int] | None = None, *, instance_type: str = "m6i.2xlarge", boot: float = 120.0,
            max_size: int | None = None, zone: str = "us-east-1a", node_type: str = "general", taints: tuple[Taint, ...] = (),
            image: str = OLD, images: Mapping[str, str] | None = None, clock: VirtualClock | None = None,
            name: str = "test") -> SimulatedCluster:
    """``pools`` (name -> nodes; default four ``general`` nodes) of ``instance_type`` in ``zone``, booting ``image`` (a
    pool ``images`` names: its own) in ``boot`` seconds, each group at most ``max_size`` (None: no ceiling)."""
    sim = SimulatedCluster(name, clock=clock)
    for pool, count in (pools or {"general": 4}).items():
        sim.add_pool(NodePoolSpec(pool, zone, instance_type, (images or {}).get(pool, image), count, boot, node_type, {},
                                  taints, zone[:-1], max_size))
    return sim
