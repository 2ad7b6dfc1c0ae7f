"""PodDisruptionBudgets: which pods each covers, kept as pods come, change and go, and the status the disruption
controller would write now (``platformctl.kernel.cluster.budget_status``, from the counts kept here)."""

from __future__ import annotations

from dataclasses import replace

from platformctl.emulator.controllers.host import PodKey
from platformctl.emulator.simulation.events import PDB_CREATED
from platformctl.emulator.simulation.world import World
from platformctl.kernel.cluster.budget_status import SCALABLE_KINDS, computed_status, healthy
from platformctl.kernel.cluster.model import EvictionResult, PDBStatus, Pod, PodDisruptionBudget
from platformctl.kernel.errors import NotFoundError, PlatformError


class Budget:
    """One budget and the counts of the pods it covers."""

    __slots__ = ("pdb", "members", "healthy", "ctrl_refs", "unsupported", "unsupported_pod", "expected", "refusals")

    def __init__(self, pdb: PodDisruptionBudget) -> None:
        self.pdb = pdb
        self.expected: int | None = None  # sum of the owning controllers' scale, while ctrl_refs holds
        self.refusals: dict[tuple[int, int], EvictionResult] = {}
        self.members: set[PodKey] = set()
        self.healthy = 0
        self.ctrl_refs: dict[str, int] = {}
        self.unsupported = 0
        self.unsupported_pod = ""

    def add(self, pod: Pod) -> None:
        self.members.add(pod.key)
        if healthy(pod):
            self.healthy += 1
        owner = pod.owner
        if owner is None:
            return  # unmanaged pods do not count towards the expected scale
        if owner.kind in SCALABLE_KINDS:
            refs = self.ctrl_refs.get(owner.uid, 0)
            if not refs:
                self.expected = None
            self.ctrl_refs[owner.uid] = refs + 1
        else:
            self.unsupported += 1
            self.unsupported_pod = pod.name

    def remove(self, pod: Pod) -> None:
        self.members.discard(pod.key)
        if healthy(pod):
            self.healthy -= 1
        owner = pod.owner
        if owner is None:
            return
        if owner.kind in SCALABLE_KINDS:
            left = self.ctrl_refs[owner.uid] - 1
            if left:
                self.ctrl_refs[owner.uid] = left
            else:
                del self.ctrl_refs[owner.uid]
                self.expected = None
        else:
            self.unsupported -= 1


class BudgetRoom:
    def __init__(self, world: World) -> None:
        self.w = world
        self.budgets: dict[tuple[str, str], Budget] = {}
        self.by_ns: dict[str, list[Budget]] = {}
        self.of_pod: dict[PodKey, tuple[Budget, ...]] = {}

    # ------------------------------------------------------------------ the pods each budget covers

    def pod_added(self, pod: Pod) -> tuple[Budget, ...]:
        """A pod joined the cluster: the budgets that select it count it. Returns them."""
        budgets = tuple(b for b in self.by_ns.get(pod.namespace, ()) if b.pdb.selects(pod))
        if budgets:
            self.of_pod[pod.key] = budgets
            for b in budgets:
                b.add(pod)
                self.w.note("pdbs", "MODIFIED", b)
        return budgets

    def health_changed(self, key: PodKey, now_healthy: bool) -> None:
        delta = 1 if now_healthy else -1
        for b in self.of_pod.get(key, ()):
            b.healthy += delta
            self.w.note("pdbs", "MODIFIED", b)

    def pod_removed(self, pod: Pod) -> None:
        for b in self.of_pod.pop(pod.key, ()):
            b.remove(pod)
            self.w.note("pdbs", "MODIFIED", b)

    def scale_changed(self, uid: str) -> None:
        """A controller's scale moved: the budgets over its pods expect a new number (the disruption controller reads
        the scale on each sync), before any pod has come or gone."""
        for b in self.budgets.values():
            if uid in b.ctrl_refs:
                b.expected = None
                self.w.note("pdbs", "MODIFIED", b)

    def covering(self, pod: Pod) -> tuple[Budget, ...]:
        return self.of_pod.get(pod.key, ())

    # ------------------------------------------------------------------ the API's budgets

    def create(self, pdb: PodDisruptionBudget, keep_version: bool = False) -> PodDisruptionBudget:
        if pdb.key in self.budgets:
            raise PlatformError(f'poddisruptionbudgets "{pdb.name}" already exists', field="metadata.name")
        if not keep_version:
            pdb = replace(pdb, created=pdb.created or self.w.now(), resource_version=self.w.next_rv())
        budget = Budget(pdb)
        self.budgets[pdb.key] = budget
        self.w.note("pdbs", "ADDED", budget)
        self.by_ns.setdefault(pdb.namespace, []).append(budget)
        members = []
        for key in self.w.pods_by_ns.get(pdb.namespace, ()):
            pod = self.w.pods[key]
            if pdb.selects(pod):
                budget.add(pod)
                self.of_pod[key] = (*self.of_pod.get(key, ()), budget)
                members.append((pod.uid, healthy(pod)))
        self.w.record(PDB_CREATED, pdb.namespace, pdb.name, (pdb.key, tuple(members)))
        return self.with_status(budget)

    def delete(self, namespace: str, name: str) -> PodDisruptionBudget:
        budget = self.budgets.pop((namespace, name), None)
        if budget is None:
            raise NotFoundError(f'poddisruptionbudgets "{name}" not found', field="pdb")
        self.w.note("pdbs", "DELETED", budget)
        self.by_ns[namespace].remove(budget)
        for key, budgets in list(self.of_pod.items()):
            if budget in budgets:
                rest = tuple(b for b in budgets if b is not budget)
                if rest:
                    self.of_pod[key] = rest
                else:
                    del self.of_pod[key]
        self.w.next_rv()
        return self.with_status(budget)

    def list_pdbs(self, namespace: str | None = None) -> list[PodDisruptionBudget]:
        return [self.with_status(b) for b in self.budgets.values() if namespace is None or b.pdb.namespace == namespace]

    def get(self, namespace: str, name: str) -> PodDisruptionBudget:
        budget = self.budgets.get((namespace, name))
        if budget is None:
            raise NotFoundError(f'poddisruptionbudgets "{name}" not found', field="pdb")
        return self.with_status(budget)

    def in_namespace(self, namespace: str) -> list[Budget]:
        return list(self.by_ns.get(namespace, ()))

    def budget_object(self, budget: Budget, change: str) -> PodDisruptionBudget:
        return budget.pdb if change == "DELETED" else self.with_status(budget)

    def budgets_of(self, pod: Pod) -> list[PodDisruptionBudget]:
        return [self.with_status(b) for b in self.of_pod.get(pod.key, ())]

    # ------------------------------------------------------------------ status

    def with_status(self, budget: Budget) -> PodDisruptionBudget:
        return replace(budget.pdb, status=self.status(budget))

    def status(self, budget: Budget) -> PDBStatus:
        """What the disruption controller would write into the budget's status now."""
        return computed_status(budget.pdb, healthy=budget.healthy, members=len(budget.members),
                               unsupported_pod=budget.unsupported_pod if budget.unsupported else None,
                               expected_scale=lambda: self._expected(budget))

    def _expected(self, budget: Budget) -> int:
        if budget.expected is None:
            expected = 0
            for uid in budget.ctrl_refs:
                ctrl = self.w.controllers.get(uid)
                if ctrl is not None:
                    expected += ctrl.replicas
            budget.expected = expected
        return budget.expected
