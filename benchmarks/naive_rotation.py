"""The baseline a rotation is measured against: one node at a time, as a script around `kubectl drain` does it.

For each outdated node in name order, as an EKS managed node group's update does it one node at a time: add a node to
its group and wait until it is Ready (without it, the pods of a pool's only node that may run nowhere else would wait
for a node that only the drain's end brings, and the drain would never end); cordon the old node; evict every pod a
drain evicts (not a DaemonSet's, a mirror pod or a finished one) through the eviction API, asking again every 5 s
while it answers 429 (as ``kubectl drain`` retries); once its pods are gone, terminate its instance and give the
capacity back; wait for the node to leave the cluster; go on. No plan, no journal, no budgets read: the eviction API
alone keeps them.

Used by ``benchmarks/rotate_run.py``, in the simulator's virtual time; not part of the test run.
"""

from __future__ import annotations

from dataclasses import dataclass

from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.drain import drain_blocks_on

POLL_SECONDS = 1.0  # kubectl drain looks for the evicted pods' deletion every second
RETRY_SECONDS = 5.0  # and asks again for an eviction the API refused with 429 after five


@dataclass
class NaiveResult:
    nodes: int  # rotated
    seconds: float  # virtual
    evictions: int
    refused: int
    evicted_again: int  # pods it evicted that it had moved once already (made after it began)


def naive_rotate(sim: SimulatedCluster, image: str, limit: int | None = None, give_up_seconds: float = 86400.0) -> NaiveResult:
    """Rotate the nodes not on ``image`` (the first ``limit`` of them) one at a time; what it took."""
    began = sim.now()
    pods = sim.informer("pods")
    pods.start()
    nodes = sorted(n.name for n in sim.list_nodes() if n.image != image)[:limit]
    evictions = refused = again = 0
    for name in nodes:
        pool = sim.pool_of(name)
        if pool is not None:
            ready = {n.name for n in sim.pool_nodes(pool) if n.ready}
            sim.scale_pool(pool, sim.pool(pool).desired + 1)
            while not {n.name for n in sim.pool_nodes(pool) if n.ready} - ready:
                sim.advance(POLL_SECONDS)
        sim.cordon(name)
        deadline = sim.now() + give_up_seconds
        asked: set[str] = set()
        while True:
            pods.sync()
            here = [p for p in pods.pods_on(name) if drain_blocks_on(p)]
            if not here:
                break
            wait = POLL_SECONDS
            for pod in here:
                if pod.deletion_time is not None or pod.uid in asked:
                    continue
                answer = sim.evict(pod.namespace, pod.name)
                if answer.code == 429:
                    refused += 1
                    wait = RETRY_SECONDS
                elif answer.code < 300:
                    evictions += 1
                    asked.add(pod.uid)
                    again += pod.created > began
            if sim.now() > deadline:
                raise RuntimeError(f"the naive loop could not drain {name} in {give_up_seconds:.0f} s")
            sim.advance(wait)
        sim.terminate_instance(name, decrement_desired=pool is not None)
        while any(n.name == name for n in sim.list_nodes()):
            sim.advance(POLL_SECONDS)
    pods.close()
    return NaiveResult(len(nodes), sim.now() - began, evictions, refused, again)
