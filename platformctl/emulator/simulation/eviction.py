"""The eviction subresource (``POST .../pods/<name>/eviction``), rule for rule: the rules are
``platformctl.kernel.cluster.model.eviction``'s, the budgets' status the budgets room's, and an eviction that is
allowed deletes the pod in the same step as the check, so the window the real ``status.disruptedPods``
map covers never opens and is not modelled."""

from __future__ import annotations

from platformctl.emulator.simulation.budgets import BudgetRoom
from platformctl.emulator.simulation.events import EVICTION_REFUSED, POD_EVICTED
from platformctl.emulator.simulation.pods import PodRoom
from platformctl.emulator.simulation.world import World
from platformctl.kernel.cluster.budget_status import healthy
from platformctl.kernel.cluster.model import (
    EVICT_FREELY,
    REFUSE_NO_ROOM,
    REFUSE_NOT_PROCESSED,
    REFUSE_TWO_BUDGETS,
    EvictionResult,
    Pod,
    eviction_decision,
)

MSG_TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."
MSG_TWO_PDBS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
SUCCESS = EvictionResult(201)


class Eviction:
    def __init__(self, world: World, budgets: BudgetRoom, pods: PodRoom) -> None:
        self.w = world
        self.budgets = budgets
        self.pods = pods

    def evict(self, namespace: str, name: str) -> EvictionResult:
        pod = self.w.pods.get((namespace, name))
        if pod is None:
            return EvictionResult(404, f'pods "{name}" not found', "NotFound")
        budgets = self.budgets.covering(pod)
        budget = budgets[0] if len(budgets) == 1 else None
        status = self.budgets.status(budget) if budget is not None else None
        decision = eviction_decision(pod, [b.pdb for b in budgets], status)
        if decision == EVICT_FREELY:
            self._evicted(pod, None, 0)
            return SUCCESS
        if decision == REFUSE_TWO_BUDGETS:
            return self._refused(pod, EvictionResult(500, MSG_TWO_PDBS))
        assert budget is not None and status is not None
        pdb = budget.pdb
        if decision == REFUSE_NOT_PROCESSED:
            return self._refused(
                pod,
                EvictionResult(429, MSG_TOO_MANY, "TooManyRequests",
                               (("DisruptionBudget", f"The disruption budget {pdb.name} is still being processed by the server."),),
                               retry_after_seconds=10),
            )
        if decision == REFUSE_NO_ROOM:
            state = (status.desired_healthy, status.current_healthy)
            result = budget.refusals.get(state)
            if result is None:
                result = budget.refusals[state] = EvictionResult(
                    429, MSG_TOO_MANY, "TooManyRequests",
                    (("DisruptionBudget", f"The disruption budget {pdb.name} needs {status.desired_healthy} "
                                          f"healthy pods and has {status.current_healthy} currently"),),
                )
            return self._refused(pod, result)
        self._evicted(pod, pdb.key, status.desired_healthy)
        return SUCCESS

    def _evicted(self, pod: Pod, budget: tuple[str, str] | None, desired: int) -> None:
        self.w.record(POD_EVICTED, pod.namespace, pod.name, (pod.uid, healthy(pod), budget, desired))
        self.pods.begin_termination(pod, evicted=True)

    def _refused(self, pod: Pod, result: EvictionResult) -> EvictionResult:
        self.w.record(EVICTION_REFUSED, pod.namespace, pod.name,
                      (result.code, result.causes[0][1] if result.causes else result.message))
        return result
