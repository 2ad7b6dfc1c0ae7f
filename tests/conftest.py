from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.model import load_snapshot

FIXTURES = Path(__file__).parent / "fixtures"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests in a ``*_process.py`` module drive separate processes (the local region server, ``rotate run``,
    ``remediate``, ``canary run``) and kill them: ``make test-fast`` leaves them out (``-m "not process"``).

    Modules marked ``long`` go first, in the order collected: ``make test`` hands the process tests to two workers a
    module at a time (``--dist loadfile --no-loadscope-reorder``), and the longest started first end closest together."""
    for item in items:
        if item.path.name.endswith("_process.py"):
            item.add_marker(pytest.mark.process)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: the rest keep their order


@pytest.fixture(autouse=True, scope="session")
def _no_running_local_region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A local region a developer left running in this checkout must not become the tests' AWS or Kubernetes."""
    saved = os.environ.get("PLATFORMCTL_HOME")
    os.environ["PLATFORMCTL_HOME"] = str(tmp_path_factory.mktemp("platformctl-home"))
    yield
    if saved is None:
        os.environ.pop("PLATFORMCTL_HOME", None)
    else:
        os.environ["PLATFORMCTL_HOME"] = saved


@pytest.fixture(autouse=True)
def _no_test_takes_part_in_a_regions_time() -> Iterator[None]:
    """A command run in process (`rotate run` through click's runner) makes this process one of a local region's jobs
    (``region_client.take_part``): the next test's region must not find the test process holding its time."""
    from platformctl.kernel import region_client

    yield
    region_client._TAKING_PART = False
    for clock in list(region_client._SHARED.values()):
        clock.close()
    region_client._SHARED.clear()


@pytest.fixture(autouse=True)
def _signal_handlers_given_back() -> Iterator[None]:
    """A command run in process sets the process's signal handlers as its process would (`rotate run` ignores SIGINT
    and SIGTERM once nothing is left to interrupt, `canary run` turns SIGTERM into Ctrl-C): the next test in the same
    worker gets the handlers the test before it found (a test that interrupts its main thread would otherwise wait for
    ever on an ignored SIGINT)."""
    import signal

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


@pytest.fixture
def rules() -> SimulatedCluster:
    """The hand-written kubectl-format snapshot of eviction cases, loaded into a simulator."""
    return SimulatedCluster.from_snapshot(load_snapshot(FIXTURES / "eviction_rules.json"), name="rules")
