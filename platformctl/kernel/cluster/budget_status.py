"""The status the disruption controller writes into a PodDisruptionBudget, as a pure function of what it reads.

``budget_status(pdb, pods, scales)``: given a budget, the pods it selects (in the order they joined it) and
the scale of the controllers that own them, the ``PDBStatus`` the controller computes:

- ``currentHealthy``: the selected pods that are Ready and not terminating;
- ``expectedPods`` and ``desiredHealthy``: with ``maxUnavailable`` or a percentage ``minAvailable``, the
  sum of the owning controllers' scale (percentages rounded up); an integer ``minAvailable`` counts the
  selected pods. A pod whose controller has no scale (a DaemonSet's, a Job's, a mirror pod) makes the
  controller fail safe: the old status kept, no disruption allowed (``getExpectedScale``'s error);
- ``disruptionsAllowed``: healthy minus desired, never below 0, and 0 while nothing is expected.

The simulator keeps the same counts incrementally as pods come and go and calls ``computed_status`` with
them (``platformctl.emulator.simulation.budgets``); the planner calls ``budget_status`` on a snapshot's pods as
``collected_pods`` leaves them (``upgrade_service.planning.disruption``), with the scales ``controller_scales`` infers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace

from platformctl.kernel.cluster.model import PDBStatus, Pod, PodDisruptionBudget

# Kinds whose scale the disruption controller can read (Deployments are reached through their
# ReplicaSets). A budget covering pods of any other controller fails safe with no disruptions.
SCALABLE_KINDS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})
# The controllers the simulator runs for the pods of a snapshot it loads (their scale inferred from the pods).
CONTROLLER_API = {"ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Job": "batch/v1"}


def healthy(pod: Pod) -> bool:
    """Whether ``pod`` counts towards a budget's ``currentHealthy``: Ready and not terminating."""
    return pod.ready and pod.deletion_time is None


def computed_status(pdb: PodDisruptionBudget, *, healthy: int, members: int, unsupported_pod: str | None,
                    expected_scale: Callable[[], int]) -> PDBStatus:
    """The status from the counts: ``healthy`` and ``members`` of the selected pods, the last selected pod whose
    controller has no scale (None: there is none) and the owning controllers' scale (asked only when needed)."""
    if pdb.max_unavailable is not None or (pdb.min_available is not None and pdb.min_available.percent):
        if unsupported_pod is not None:
            # getExpectedScale found a pod whose controller has no scale: failSafe keeps the old
            # status and allows no disruption.
            return replace(pdb.status, disruptions_allowed=0, sync_failed=f'found no controllers for pod "{unsupported_pod}"')
        expected = expected_scale()
        if pdb.max_unavailable is not None:
            desired = max(expected - pdb.max_unavailable.scaled(expected, round_up=True), 0)
        else:
            assert pdb.min_available is not None
            desired = pdb.min_available.scaled(expected, round_up=True)
    elif pdb.min_available is not None:
        desired = pdb.min_available.value
        expected = members
    else:
        desired = expected = 0
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    return PDBStatus(
        current_healthy=healthy, desired_healthy=desired, expected_pods=expected,
        disruptions_allowed=allowed, observed_generation=pdb.generation,
    )


def budget_status(pdb: PodDisruptionBudget, pods: Iterable[Pod], scales: Mapping[str, int]) -> PDBStatus:
    """The status of ``pdb`` over ``pods`` (those it selects), ``scales`` giving each controller's by uid (a
    controller not in it counts 0)."""
    count = members = 0
    owners: dict[str, None] = {}
    unsupported: str | None = None
    for pod in pods:
        members += 1
        count += healthy(pod)
        owner = pod.owner
        if owner is None:
            continue  # unmanaged pods do not count towards the expected scale
        if owner.kind in SCALABLE_KINDS:
            owners[owner.uid] = None
        else:
            unsupported = pod.name
    return computed_status(pdb, healthy=count, members=members, unsupported_pod=unsupported,
                           expected_scale=lambda: sum(scales.get(uid, 0) for uid in owners))


def inferred_scale(kind: str, pods: Iterable[Pod]) -> int:
    """A controller's scale as its pods in a snapshot show it: those neither terminating nor finished (a
    StatefulSet's terminating ones count: it has not replaced them yet)."""
    if kind == "StatefulSet":
        return len({p.name for p in pods if not p.is_finished})
    return sum(1 for p in pods if p.deletion_time is None and not p.is_finished)


def controller_scales(pods: Iterable[Pod]) -> dict[str, int]:
    """The inferred scale of every controller the simulator would run for ``pods``, by uid (its kind read from
    the first of its pods)."""
    by_owner: dict[str, list[Pod]] = {}
    for pod in pods:
        if pod.owner is not None and pod.owner.kind in CONTROLLER_API:
            by_owner.setdefault(pod.owner.uid, []).append(pod)
    scales = {}
    for uid, owned in by_owner.items():
        first = owned[0].owner
        assert first is not None
        scales[uid] = inferred_scale(first.kind, owned)
    return scales


def collected_pods(pods: Iterable[Pod], nodes: Collection[str]) -> list[Pod]:
    """A snapshot's pods once pod GC and their controllers have acted, as the simulator loads them: a pod bound to a
    node not among ``nodes`` is gone, and its ReplicaSet, Job or StatefulSet replaces it with a pending pod from its
    template (the first of its pods; a StatefulSet's under the same name), unless it was already terminating (a
    StatefulSet's is replaced then too, being gone)."""
    pods = list(pods)
    templates: dict[str, Pod] = {}
    for pod in pods:
        if pod.owner is not None and pod.owner.kind in CONTROLLER_API:
            templates.setdefault(pod.owner.uid, pod)
    kept = []
    for pod in pods:
        if pod.is_finished or pod.node_name is None or pod.node_name in nodes:
            kept.append(pod)
            continue
        owner = pod.owner
        if owner is None or owner.kind not in ("ReplicaSet", "StatefulSet", "Job"):
            continue
        if pod.deletion_time is None or owner.kind == "StatefulSet":
            kept.append(templates[owner.uid].spawn(pod.name, pod.uid, owner, None, pod.created, pod.resource_version))
    return kept
