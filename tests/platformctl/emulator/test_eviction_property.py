"""Property: no sequence of evictions, deletions and waiting lets an eviction break a budget.

After every eviction the API admitted for a healthy pod, the budget's healthy pods are counted by
brute force from the listed pods (not from the simulator's counters) and compared with the desired
count worked out here from the budget's spec.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from platformctl.kernel.cluster.model import PodDisruptionBudget
from platformctl.kernel.cluster.selectors import IntOrPercent, LabelSelector
from tests.clusters import cluster
from tests.platformctl.emulator.helpers import template

budget_specs = st.one_of(
    st.none(),
    st.tuples(st.just("min"), st.integers(0, 7).map(IntOrPercent)),
    st.tuples(st.just("min"), st.integers(0, 100).map(lambda v: IntOrPercent(v, True))),
    st.tuples(st.just("max"), st.integers(0, 4).map(IntOrPercent)),
    st.tuples(st.just("max"), st.integers(0, 100).map(lambda v: IntOrPercent(v, True))),
)
workloads = st.lists(
    st.tuples(st.integers(1, 6), budget_specs, st.sampled_from([None, "AlwaysAllow", "IfHealthyBudget"]), st.integers(1, 40)),
    min_size=1, max_size=4,
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("evict"), st.integers(0, 3), st.integers(0, 9)),
        st.tuples(st.just("delete"), st.integers(0, 3), st.integers(0, 9)),
        st.tuples(st.just("wait"), st.integers(0, 30), st.just(0)),
    ),
    min_size=1, max_size=40,
)


def desired(spec: tuple[str, IntOrPercent], replicas: int) -> int:
    kind, value = spec
    if kind == "min":
        return math.ceil(value.value * replicas / 100) if value.percent else value.value
    unavailable = math.ceil(value.value * replicas / 100) if value.percent else value.value
    return max(replicas - unavailable, 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads, operations)
def test_no_eviction_breaks_a_budget(apps: list, ops: list) -> None:
    sim = cluster({"general": 3}, instance_type="m6i.xlarge")
    for i, (replicas, spec, policy, start) in enumerate(apps):
        sim.create_workload("ReplicaSet", template(name=f"app{i}", start=start, grace=5), replicas)
        if spec is not None:
            kind, value = spec
            sim.create_pdb(PodDisruptionBudget(
                "app", f"app{i}", f"u{i}", LabelSelector((("app", f"app{i}"),)),
                min_available=value if kind == "min" else None, max_unavailable=value if kind == "max" else None,
                unhealthy_pod_eviction_policy=policy,
            ))
    sim.advance(15)
    for op, app, index in ops:
        if op == "wait":
            sim.advance(app)
            continue
        if app >= len(apps):
            continue
        pods = sorted(sim.list_pods("app", f"app=app{app}"), key=lambda p: p.name)
        if not pods:
            continue
        pod = pods[index % len(pods)]
        if op == "delete":
            sim.delete_pod("app", pod.name)
            continue
        was_healthy = pod.ready and not pod.terminating and pod.phase == "Running"
        result = sim.evict("app", pod.name)
        replicas, spec, _, _ = apps[app]
        if spec is None:
            assert result.code == 201
            continue
        if spec is not None and not result.allowed:
            assert result.code == 429
            continue
        if was_healthy:
            healthy = sum(1 for p in sim.list_pods("app", f"app=app{app}") if p.ready and not p.terminating)
            assert healthy >= desired(spec, replicas), (spec, replicas, healthy)
            assert desired(spec, replicas) < replicas  # a budget that allows nothing never admits a healthy eviction
