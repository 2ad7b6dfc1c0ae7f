"""The eviction subresource's rules: which budget a pod spends, and the answer the API server gives."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from platformctl.kernel.cluster.model.objects import PDBStatus, Pod, PodDisruptionBudget


@dataclass(frozen=True, slots=True)
class EvictionResult:
    """The answer of the eviction subresource, as the API server gives it."""

    code: int
    message: str = ""
    reason: str = ""
    causes: tuple[tuple[str, str], ...] = ()
    retry_after_seconds: int = 0

    @property
    def allowed(self) -> bool:
        return self.code in (200, 201)

    def to_status(self) -> dict[str, Any]:
        """The ``v1 Status`` body the API returns."""
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success" if self.allowed else "Failure",
        }
        if self.message:
            out["message"] = self.message
        if self.reason:
            out["reason"] = self.reason
        details: dict[str, Any] = {}
        if self.causes:
            details["causes"] = [{"reason": t, "message": m} for t, m in self.causes]
        if self.retry_after_seconds:
            details["retryAfterSeconds"] = self.retry_after_seconds
        if details:
            out["details"] = details
        out["code"] = self.code
        return out

    @classmethod
    def from_status(cls, body: Mapping[str, Any], code: int) -> EvictionResult:
        details = body.get("details") or {}
        causes = tuple((c.get("reason", ""), c.get("message", "")) for c in details.get("causes") or [])
        return cls(
            code=int(body.get("code", code)),
            message=body.get("message", ""),
            reason=body.get("reason", ""),
            causes=causes,
            retry_after_seconds=int(details.get("retryAfterSeconds", 0)),
        )


# The eviction subresource's decision for one pod, as ``pkg/registry/core/pod/storage/eviction.go``
# makes it. The simulator answers evictions with it and the rotation planner predicts them with it.
EVICT_FREELY = "evict-freely"  # deleted without consulting any budget
EVICT_UNDER_BUDGET = "evict-under-budget"  # allowed, and spends the budget's disruptionsAllowed
EVICT_UNHEALTHY = "evict-unhealthy"  # an unready pod that goes without spending the budget
REFUSE_TWO_BUDGETS = "refuse-two-budgets"  # 500: the pod is covered by more than one budget
REFUSE_NOT_PROCESSED = "refuse-not-processed"  # 429: the disruption controller has not seen the budget's generation
REFUSE_NO_ROOM = "refuse-no-room"  # 429: disruptionsAllowed is 0


def exempt_from_budgets(pod: Pod) -> bool:
    """Terminal, pending and terminating pods are deleted without consulting budgets."""
    return pod.phase in ("Succeeded", "Failed", "Pending") or pod.deletion_time is not None


def eviction_decision(pod: Pod, budgets: tuple[PodDisruptionBudget, ...] | list[PodDisruptionBudget],
                      status: PDBStatus | None = None) -> str:
    """What the eviction API does with ``pod`` right now, given the budgets that cover it.

    ``status`` is the one budget's status when the caller computes it (the simulator); otherwise the
    budget's own ``status`` is used, as the API server reads it.
    """
    if exempt_from_budgets(pod):
        return EVICT_FREELY
    if len(budgets) > 1:
        return REFUSE_TWO_BUDGETS
    if not budgets:
        return EVICT_FREELY
    pdb = budgets[0]
    st = status if status is not None else pdb.status
    if not pod.ready:
        if pdb.unhealthy_pod_eviction_policy == "AlwaysAllow":
            return EVICT_UNHEALTHY
        if st.current_healthy >= st.desired_healthy and st.desired_healthy > 0:
            return EVICT_UNHEALTHY
    if st.observed_generation < pdb.generation:
        return REFUSE_NOT_PROCESSED
    if st.disruptions_allowed <= 0:
        return REFUSE_NO_ROOM
    return EVICT_UNDER_BUDGET


