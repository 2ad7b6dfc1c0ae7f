"""Each rule of the eviction subresource, against the hand-written snapshot in kubectl format."""

from __future__ import annotations

import pytest

from platformctl.emulator.simulator import SimulatedCluster
from platformctl.kernel.cluster.drain import drain_blocks_on
from platformctl.kernel.cluster.model import EvictionResult

TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."


def refused(budget: str, needs: int, has: int) -> EvictionResult:
    return EvictionResult(
        429, TOO_MANY, "TooManyRequests",
        (("DisruptionBudget", f"The disruption budget {budget} needs {needs} healthy pods and has {has} currently"),),
    )


def test_min_available_integer_allows_evictions_down_to_the_floor_then_429(rules: SimulatedCluster) -> None:
    status = rules.get_pdb("web", "web").status
    assert (status.current_healthy, status.desired_healthy, status.expected_pods, status.disruptions_allowed) == (3, 2, 3, 1)

    assert rules.evict("web", "web-7d9c-a1") == EvictionResult(201)
    assert rules.get_pod("web", "web-7d9c-a1").terminating
    assert rules.evict("web", "web-7d9c-b2") == refused("web", 2, 2)
    assert not rules.get_pod("web", "web-7d9c-b2").terminating


def test_429_body_is_the_api_servers_status(rules: SimulatedCluster) -> None:
    rules.evict("web", "web-7d9c-a1")
    assert rules.evict("web", "web-7d9c-b2").to_status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": TOO_MANY,
        "reason": "TooManyRequests",
        "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]},
        "code": 429,
    }


def test_budget_regains_room_when_the_replacement_is_ready(rules: SimulatedCluster) -> None:
    rules.evict("web", "web-7d9c-a1")
    assert rules.evict("web", "web-7d9c-b2").code == 429
    rules.advance(60)  # the ReplicaSet's replacement starts and turns Ready; the evicted pod is gone
    assert rules.get_pdb("web", "web").status.disruptions_allowed == 1
    assert rules.evict("web", "web-7d9c-b2").code == 201


def test_budgets_are_scoped_to_their_namespace(rules: SimulatedCluster) -> None:
    # Same labels as the web pods, in another namespace: no budget covers them.
    assert rules.budgets_of(rules.get_pod("other", "web-5f5f-a1")) == []
    assert rules.evict("other", "web-5f5f-a1").code == 201
    assert rules.evict("other", "web-5f5f-b2").code == 201
    assert rules.get_pdb("web", "web").status.disruptions_allowed == 1


def test_max_unavailable_percentage_rounds_up(rules: SimulatedCluster) -> None:
    status = rules.get_pdb("api", "api").status
    # 50% of 4 expected pods may be unavailable: desired healthy 2, two disruptions allowed.
    assert (status.expected_pods, status.desired_healthy, status.disruptions_allowed) == (4, 2, 2)
    assert rules.evict("api", "api-66b-a1").code == 201
    assert rules.evict("api", "api-66b-b2").code == 201
    assert rules.evict("api", "api-66b-c3") == refused("api", 2, 2)


def test_match_expressions_select_exactly_the_matching_pods(rules: SimulatedCluster) -> None:
    covered = {p.name for p in rules.list_pods("exprs") if rules.budgets_of(p)}
    assert covered == {"cache-prod-0", "cache-prod-1"}
    assert rules.evict("exprs", "cache-prod-0").code == 201
    assert rules.evict("exprs", "cache-prod-1") == refused("prod-cache", 1, 1)
    assert rules.evict("exprs", "cache-dev-0").code == 201  # env NotIn (dev)
    assert rules.evict("exprs", "db-0").code == 201  # tier In (cache)


def test_pod_under_two_budgets_is_refused_with_500(rules: SimulatedCluster) -> None:
    result = rules.evict("double", "queue-0")
    assert result == EvictionResult(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
    assert result.to_status()["code"] == 500
    assert not rules.get_pod("double", "queue-0").terminating


def test_zero_budget_refuses_but_pending_and_terminating_pods_go(rules: SimulatedCluster) -> None:
    assert rules.get_pdb("zero", "solo").status.disruptions_allowed == 0
    assert rules.evict("zero", "solo-9f-a1") == refused("solo", 1, 1)
    # Pending, terminal and terminating pods are deleted without consulting any budget.
    assert rules.evict("zero", "solo-9f-pending").code == 201
    assert rules.evict("zero", "solo-9f-going").code == 201


def test_unready_pod_goes_when_the_budget_is_satisfied_without_spending_it(rules: SimulatedCluster) -> None:
    # IfHealthyBudget (the default): 2 healthy, 2 desired.
    assert rules.evict("unready", "svc-3").code == 201
    status = rules.get_pdb("unready", "svc").status
    assert (status.current_healthy, status.disruptions_allowed) == (2, 0)
    assert rules.evict("unready", "svc-1") == refused("svc", 2, 2)


def test_unready_pod_is_refused_when_the_budget_is_short(rules: SimulatedCluster) -> None:
    assert rules.evict("starved", "svc-2") == refused("svc", 2, 1)


def test_always_allow_lets_unready_pods_go_but_guards_ready_ones(rules: SimulatedCluster) -> None:
    assert rules.evict("always", "svc-2").code == 201
    assert rules.evict("always", "svc-3").code == 201
    assert rules.evict("always", "svc-1") == refused("svc", 2, 1)


def test_budget_over_pods_without_a_scale_fails_safe(rules: SimulatedCluster) -> None:
    status = rules.get_pdb("batch", "report").status
    assert status.disruptions_allowed == 0
    assert status.sync_failed is not None and "found no controllers for pod" in status.sync_failed
    assert rules.evict("batch", "report-x1").code == 429
    assert rules.evict("batch", "report-x0").code == 201  # Succeeded: terminal pods never block


def test_empty_selector_covers_the_namespace_and_no_selector_covers_nothing(rules: SimulatedCluster) -> None:
    for name in ("a-1", "b-1"):
        assert [b.name for b in rules.budgets_of(rules.get_pod("selectors", name))] == ["everything"]
    nothing = rules.get_pdb("selectors", "nothing").status
    assert (nothing.expected_pods, nothing.current_healthy) == (0, 0)
    assert rules.evict("selectors", "a-1") == refused("everything", 2, 2)


def test_unknown_pod_is_404(rules: SimulatedCluster) -> None:
    result = rules.evict("web", "nope")
    assert (result.code, result.reason, result.message) == (404, "NotFound", 'pods "nope" not found')


def test_daemonset_mirror_and_finished_pods_never_hold_up_a_drain(rules: SimulatedCluster) -> None:
    assert not drain_blocks_on(rules.get_pod("kube-system", "aws-node-x7k2p"))
    assert not drain_blocks_on(rules.get_pod("kube-system", "kube-proxy-ip-10-0-1-10"))
    assert not drain_blocks_on(rules.get_pod("batch", "report-x0"))
    assert drain_blocks_on(rules.get_pod("web", "web-7d9c-a1"))


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "replicas", "desired", "allowed"),
    [
        ("50%", None, 3, 2, 1),  # ceil(1.5)
        ("34%", None, 3, 2, 1),  # ceil(1.02)
        ("100%", None, 4, 4, 0),
        (None, "50%", 3, 1, 2),  # 3 - ceil(1.5)
        (None, "10%", 5, 4, 1),  # 5 - ceil(0.5)
        (None, "0%", 5, 5, 0),
        (None, 0, 5, 5, 0),
        (2, None, 3, 2, 1),
        (None, None, 3, 0, 0),  # neither set: expected pods 0, no disruption allowed
    ],
)
def test_desired_healthy_rounds_as_the_disruption_controller_does(
    min_available: object, max_unavailable: object, replicas: int, desired: int, allowed: int
) -> None:
    from platformctl.emulator.synthetic import synthetic_cluster
    from platformctl.kernel.cluster.model import Container, Pod, PodDisruptionBudget, Resources
    from platformctl.kernel.cluster.selectors import IntOrPercent, LabelSelector

    sim, _ = synthetic_cluster(4, pods_per_node=1)
    template = Pod("rounding", "app", "", labels={"app": "r"}, containers=(Container("c", "i", Resources(10, 1)),),
                   requests=Resources(10, 1))
    sim.create_workload("ReplicaSet", template, replicas)
    parse = lambda v, f: None if v is None else IntOrPercent.parse(v, f)  # noqa: E731
    sim.create_pdb(PodDisruptionBudget("rounding", "r", "uid-r", LabelSelector((("app", "r"),)),
                                       min_available=parse(min_available, "minAvailable"),
                                       max_unavailable=parse(max_unavailable, "maxUnavailable")))
    sim.advance(60)
    status = sim.get_pdb("rounding", "r").status
    assert (status.current_healthy, status.desired_healthy, status.disruptions_allowed) == (replicas, desired, allowed)
