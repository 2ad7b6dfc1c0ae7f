"""The canary runner's stop, in process: a Ctrl-C (or SIGTERM turned into one) while every cluster's check is under
way ends each check and deletes its namespace before ``run_canaries`` returns, however slowly each delete answers."""

from __future__ import annotations

import _thread
import signal
import threading
import time
from pathlib import Path

from e2e_canary.definitions import parse_canary
from platformctl.app.canaries import CanaryRun, run_canaries
from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.state.sqlite import SQLiteStore

LABEL = "platformctl.io/canary"


class PacedClock(VirtualClock):
    """A cluster's time that takes wall time to pass, as a real cluster's does (600x): a check is under way for a
    while instead of over at once."""

    speed = 600.0

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0) / self.speed)
        super().sleep(seconds)


class SlowToDelete(SimulatedCluster):
    """A cluster whose API takes ``delete_seconds`` of wall time to answer a namespace's delete."""

    delete_seconds = 0.0

    def delete_namespace(self, name: str) -> None:
        time.sleep(self.delete_seconds)
        super().delete_namespace(name)


def _cluster(name: str, delete_seconds: float) -> SlowToDelete:
    sim = SlowToDelete(name, clock=PacedClock())
    sim.delete_seconds = delete_seconds
    sim.add_pool(NodePoolSpec("general", "us-east-1a", "m6i.2xlarge", "ami-0000000000000001a", 2))
    sim.run_until_settled()
    return sim


def _under_way(sims: list[SlowToDelete]) -> bool:
    try:
        return all(sim.list_namespaces(LABEL) for sim in sims)
    except Exception:  # a runner thread changed the namespaces while this one read them: look again
        return False


def test_an_interrupt_mid_check_on_every_cluster_returns_only_once_each_has_deleted_its_namespace(tmp_path: Path) -> None:
    # The first cluster answers its delete slowest: the run must wait for it, not only for the quick ones.
    sims = [_cluster("c1", 1.5), _cluster("c2", 0.05), _cluster("c3", 0.05)]
    canary = parse_canary({"name": "batch", "kind": "batch", "deadline": 600, "interval": "1m"}, "batch")
    run = CanaryRun("dev", [canary], SQLiteStore(tmp_path / "state.db"), {s.name: s for s in sims}, once=False,
                    lease_ttl=30.0, retention=86400.0, metrics=None)

    def interrupt_when_every_check_is_under_way() -> None:
        deadline = time.monotonic() + 60
        while not _under_way(sims) and time.monotonic() < deadline:
            time.sleep(0.01)
        _thread.interrupt_main()  # what Ctrl-C does; `canary run` turns SIGTERM into the same

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises here, whatever ran in this process before
    threading.Thread(target=interrupt_when_every_check_is_under_way, daemon=True).start()
    report = run_canaries(run, say=lambda message: None, on_attempt=lambda cluster, attempt: None)

    assert report.exit_code == 0
    assert {s.name: s.list_namespaces(LABEL) for s in sims} == {"c1": [], "c2": [], "c3": []}
    assert not [t.name for t in threading.enumerate() if t.name.startswith("canaries ")]
