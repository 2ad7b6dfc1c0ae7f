"""A real control plane per test module (``make test-real-k8s``): its binaries built once per machine and pin."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from platformctl.emulator.realk8s import ControlPlane, binaries
from tests.real_k8s.fleet import Fleet, moto_aws


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("real"), binaries(), apiserver_args=(
        "--etcd-compaction-interval", "10s")).start()  # an expired continue within a test's patience
    yield plane
    assert plane.stop() == []  # each stopped on SIGTERM, none had to be killed


@pytest.fixture(scope="module")
def fleet(real: ControlPlane) -> Iterator[Fleet]:
    """A group of three nodes of the first image, its kubelets and the workloads (tests/real_k8s/fleet.py)."""
    with moto_aws() as env:
        made = Fleet(real, env)
        yield made
        made.close()
        assert made.kubelets.errors == [] and set(made.kubelets.never_joined) == made.refused  # none else refused
