"""The Deployment controller: a rolling update across ReplicaSets, as kube-controller-manager's does it.

Each pod template gets a ReplicaSet named ``<deployment>-<pod-template-hash>``; the current template's
is the new one, every other is old. A rolling update (the default) scales the new one up while the
total stays within ``replicas + maxSurge`` (rounded up from a percentage), and the old ones down while
the available pods stay at least ``replicas - maxUnavailable`` (rounded down); unhealthy old pods go
first. ``Recreate`` scales every old ReplicaSet to zero and waits for their pods to be gone before the
new one starts. Each ReplicaSet carries its revision (``deployment.kubernetes.io/revision``); old
ones past ``revisionHistoryLimit`` are deleted. The controller looks again every second of the
cluster's time while a rollout is in progress, and writes the status the real one does (replicas,
updated, ready, available and unavailable counts, ``Available`` and ``Progressing`` conditions).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from typing import Any

from platformctl.emulator.controllers.objects import Workload, WorkloadStore
from platformctl.emulator.podspec import int_field, selector_of, template_pod
from platformctl.kernel.cluster.apiobjects import invalid
from platformctl.kernel.cluster.model import format_time

REVISION = "deployment.kubernetes.io/revision"
HASH_LABEL = "pod-template-hash"
LOOK_SECONDS = 1.0


def _normal(value: Any) -> Any:
    """A template as the controller compares two (``EqualIgnoreHash``): empty and null fields are as good as absent,
    and the ``pod-template-hash`` label is not part of it."""
    if isinstance(value, dict):
        out = {k: _normal(v) for k, v in value.items() if k != HASH_LABEL}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def template_hash(template: Any) -> str:
    return hashlib.sha256(json.dumps(_normal(template), sort_keys=True).encode()).hexdigest()[:10]


def same_template(a: Any, b: Any) -> bool:
    return _normal(a) == _normal(b)


def _int_or_percent(value: Any, total: int, round_up: bool, field: str, name: str) -> int:
    if isinstance(value, bool):
        raise invalid("Deployment", name, field, f"Invalid value: {value!r}: must be an integer or a percentage", group="apps")
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        share = total * int(value[:-1]) / 100
        return math.ceil(share) if round_up else math.floor(share)
    raise invalid("Deployment", name, field, f"Invalid value: {value!r}: must be a non-negative integer or a percentage "
                  "such as 25%", group="apps")


class DeploymentController:
    def __init__(self, workloads: WorkloadStore) -> None:
        self.w = workloads

    # ---------------------------------------------------------------- the spec

    @staticmethod
    def default(obj: dict[str, Any]) -> None:
        """The API server's defaults for a Deployment's spec, written into the stored object as it writes them."""
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        spec.setdefault("replicas", 1)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxSurge", "25%")
                    rolling.setdefault("maxUnavailable", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)

    def check(self, obj: dict[str, Any]) -> None:
        self.default(obj)
        spec, name = obj["spec"], obj["metadata"]["name"]
        pod = template_pod(obj, spec.get("template"), "spec.template", "Deployment")
        selector_of(spec, "Deployment", name, dict(pod.labels), "apps")
        replicas = int_field(spec, "replicas", 1, "Deployment", name)
        strategy = spec.get("strategy") or {}
        kind = strategy.get("type", "RollingUpdate")
        if kind not in ("RollingUpdate", "Recreate"):
            raise invalid("Deployment", name, "spec.strategy.type", f'Unsupported value: {kind!r}: supported values: '
                          '"Recreate", "RollingUpdate"', "FieldValueNotSupported", "apps")
        self.limits(spec, replicas, name)
        if kind == "RollingUpdate" and self._given_zero_both(spec):
            raise invalid("Deployment", name, "spec.strategy.rollingUpdate.maxUnavailable",
                          "Invalid value: 0: may not be 0 when `maxSurge` is 0", group="apps")

    @staticmethod
    def _given_zero_both(spec: dict[str, Any]) -> bool:
        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        return rolling.get("maxSurge", "25%") in (0, "0%") and rolling.get("maxUnavailable", "25%") in (0, "0%")

    def limits(self, spec: dict[str, Any], replicas: int, name: str) -> tuple[int, int]:
        """``maxSurge`` (rounded up) and ``maxUnavailable`` (rounded down), both 25% by default; never both 0."""
        rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        surge = _int_or_percent(rolling.get("maxSurge", "25%"), replicas, True, "spec.strategy.rollingUpdate.maxSurge", name)
        unavailable = _int_or_percent(rolling.get("maxUnavailable", "25%"), replicas, False,
                                      "spec.strategy.rollingUpdate.maxUnavailable", name)
        if surge == 0 and unavailable == 0:
            unavailable = 1  # as the controller does when rounding leaves both at 0
        return surge, unavailable

    # ---------------------------------------------------------------- the loop

    def sync(self, deployment: Workload) -> None:
        """Bring the ReplicaSets one step towards the spec; look again in a second while not done."""
        if deployment.timer is not None:
            deployment.timer.cancel()
            deployment.timer = None
        if self.w.objects["deployments"].get((deployment.namespace, deployment.name)) is not deployment:
            return  # deleted
        spec = deployment.obj["spec"]
        replicas = int(spec.get("replicas", 1))
        new, old = self._replica_sets(deployment)
        if spec.get("paused"):
            return
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            self._recreate(new, old, replicas)
        else:
            self._roll(deployment, new, old, replicas)
        self._prune(deployment, old)
        if not self._complete(deployment):
            deployment.timer = self.w.sim.clock.call_later(LOOK_SECONDS, self.sync, deployment)

    def _replica_sets(self, deployment: Workload) -> tuple[Workload, list[Workload]]:
        spec = deployment.obj["spec"]
        template = spec["template"]
        digest = template_hash(template)
        owned = self.w.owned_by("replicasets", deployment)
        new = next((rs for rs in owned if same_template(rs.obj["spec"]["template"], template)), None)
        revisions = [int(rs.obj["metadata"].get("annotations", {}).get(REVISION, "0")) for rs in owned]
        if new is None:
            revision = max(revisions, default=0) + 1
            labels = {**(template.get("metadata") or {}).get("labels", {}), HASH_LABEL: digest}
            rs_template = copy.deepcopy(template)
            rs_template.setdefault("metadata", {})["labels"] = labels
            selector = copy.deepcopy(spec["selector"])
            selector.setdefault("matchLabels", {})[HASH_LABEL] = digest
            obj = {"metadata": {"name": f"{deployment.name}-{digest}", "labels": labels,
                                "annotations": {REVISION: str(revision)}},
                   "spec": {"replicas": 0, "selector": selector, "template": rs_template}}
            new = self.w.create("replicasets", deployment.namespace, obj, owner=deployment)
            deployment.obj["metadata"].setdefault("annotations", {})[REVISION] = str(revision)
            owned.append(new)
        elif new.obj["metadata"].get("annotations", {}).get(REVISION) != str(max(revisions, default=0)):
            rollback = str(max(revisions, default=0) + 1)  # a rollback: the old template is the newest revision again
            new.obj["metadata"].setdefault("annotations", {})[REVISION] = rollback
            deployment.obj["metadata"].setdefault("annotations", {})[REVISION] = rollback
        old = sorted((rs for rs in owned if rs is not new),
                     key=lambda rs: int(rs.obj["metadata"].get("annotations", {}).get(REVISION, "0")))
        return new, old

    def _counts(self, rs: Workload) -> dict[str, Any]:
        return self.w.sim.workload_status(rs.sim_uid or "")

    def _set(self, rs: Workload, replicas: int) -> None:
        was = int(rs.obj["spec"].get("replicas", 0))
        replicas = max(replicas, 0)
        if was != replicas:
            self.w.scale("replicasets", rs.namespace, rs.name, replicas)
            owner = next((d for d in self.w.objects["deployments"].values()
                          if any(ref.get("uid") == d.uid for ref in rs.obj["metadata"].get("ownerReferences") or ())), None)
            if owner is not None:
                self.w.event(owner, "ScalingReplicaSet", f"Scaled {'up' if replicas > was else 'down'} replica set "
                             f"{rs.name} from {was} to {replicas}", "deployment-controller")

    def _roll(self, deployment: Workload, new: Workload, old: list[Workload], replicas: int) -> None:
        surge, unavailable = self.limits(deployment.obj["spec"], replicas, deployment.name)
        everything = [new, *old]

        def total() -> int:
            return sum(int(rs.obj["spec"].get("replicas", 0)) for rs in everything)

        # The new ReplicaSet up, within replicas + maxSurge pods in all.
        current = int(new.obj["spec"].get("replicas", 0))
        if current > replicas:
            self._set(new, replicas)
        elif current < replicas:
            room = replicas + surge - total()
            if room > 0:
                self._set(new, min(replicas, current + room))
        # The old ones down, keeping replicas - maxUnavailable available; their unhealthy pods first.
        min_available = replicas - unavailable
        new_counts = self._counts(new)
        new_unavailable = int(new.obj["spec"].get("replicas", 0)) - new_counts["ready"]
        budget = total() - min_available - new_unavailable
        for rs in old:
            if budget <= 0:
                break
            want = int(rs.obj["spec"].get("replicas", 0))
            unhealthy = want - self._counts(rs)["ready"]
            cut = min(budget, max(unhealthy, 0), want)
            if cut > 0:
                self._set(rs, want - cut)
                budget -= cut
        available = sum(self._counts(rs)["ready"] for rs in everything)
        can_remove = available - min_available
        for rs in old:
            if can_remove <= 0:
                break
            want = int(rs.obj["spec"].get("replicas", 0))
            cut = min(can_remove, want)
            if cut > 0:
                self._set(rs, want - cut)
                can_remove -= cut

    def _recreate(self, new: Workload, old: list[Workload], replicas: int) -> None:
        for rs in old:
            self._set(rs, 0)
        if any(self._counts(rs)["replicas"] for rs in old) or any(self._pods_left(rs) for rs in old):
            return  # the old pods must be gone before a new one starts
        self._set(new, replicas)

    def _pods_left(self, rs: Workload) -> int:
        labels = (rs.obj["spec"].get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return len(self.w.sim.list_pods(rs.namespace, selector))

    def _prune(self, deployment: Workload, old: list[Workload]) -> None:
        limit = int(deployment.obj["spec"].get("revisionHistoryLimit", 10))
        idle = [rs for rs in old if int(rs.obj["spec"].get("replicas", 0)) == 0 and not self._counts(rs)["replicas"]]
        for rs in idle[: max(len(idle) - limit, 0)]:
            self.w.delete("replicasets", rs.namespace, rs.name)

    def _complete(self, deployment: Workload) -> bool:
        status = self.object(deployment)["status"]
        replicas = int(deployment.obj["spec"].get("replicas", 1))
        return (status.get("updatedReplicas", 0) == replicas and status.get("replicas", 0) == replicas
                and status.get("availableReplicas", 0) == replicas)

    # ---------------------------------------------------------------- status

    def _since(self, deployment: Workload, states: dict[str, bool]) -> dict[str, str]:
        """When each condition last changed: kept with the object, moved only by a transition."""
        kept = deployment.conditions
        for kind, state in states.items():
            if kind not in kept or kept[kind][0] != state:
                kept[kind] = (state, format_time(self.w.now()))
        return {kind: kept[kind][1] for kind in states}

    def object(self, deployment: Workload) -> dict[str, Any]:
        obj = copy.deepcopy(deployment.obj)
        spec = obj["spec"]
        replicas = int(spec.get("replicas", 1))
        owned = self.w.owned_by("replicasets", deployment)
        counts = {rs.name: self._counts(rs) for rs in owned}
        new = [rs for rs in owned if same_template(rs.obj["spec"]["template"], spec["template"])]
        total = sum(c["replicas"] for c in counts.values())
        ready = sum(c["ready"] for c in counts.values())
        updated = sum(counts[rs.name]["replicas"] for rs in new)
        _, unavailable = self.limits(spec, replicas, deployment.name)
        available = ready >= replicas - unavailable
        done = updated == replicas and total == replicas and ready == replicas
        since = self._since(deployment, {"Available": available, "Progressing": done})
        status: dict[str, Any] = {
            "observedGeneration": obj["metadata"].get("generation", 1), "replicas": total, "updatedReplicas": updated,
            "readyReplicas": ready, "availableReplicas": ready, "unavailableReplicas": max(replicas - ready, 0),
            "conditions": [
                {"type": "Available", "status": "True" if available else "False",
                 "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                 "message": "Deployment has minimum availability." if available else
                 "Deployment does not have minimum availability.", "lastUpdateTime": since["Available"],
                 "lastTransitionTime": since["Available"]},
                {"type": "Progressing", "status": "True",
                 "reason": "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                 "message": f'ReplicaSet "{new[0].name if new else deployment.name}" '
                            f'{"has successfully progressed." if done else "is progressing."}',
                 "lastUpdateTime": since["Progressing"], "lastTransitionTime": since["Progressing"]},
            ],
        }
        if not total:
            status.pop("readyReplicas")
            status.pop("availableReplicas")
        obj["status"] = status
        return obj
