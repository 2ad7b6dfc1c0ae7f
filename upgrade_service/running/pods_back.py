"""Pods coming back. After a wave: waiting until every evicted pod's workload is as Ready as before it, watching the
pods' informer. Before one: waiting for budgets at their floor whose pods are on their way back (``BudgetsBack``).

A workload deleted meanwhile (its namespace too) is not waited for; one still short at the deadline is named with what
the kubelet says of its pods that do not start, and the image of the node they are on (a bad image, most often).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from platformctl.kernel.clock import Clock, past
from platformctl.kernel.cluster.informer import Informer
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import Pod, format_time
from platformctl.kernel.errors import ApiFault, NotFoundError, PlatformError
from upgrade_service.journal.records import OwnerWait, Waiting
from upgrade_service.journal.rotation import Journal
from upgrade_service.planning.disruption import NO_ROOM
from upgrade_service.planning.plan import RotationPlan
from upgrade_service.running.replacement import NodeReplacer


class WorkloadsBack:
    def __init__(self, cluster: Cluster, nodes: Informer, pods: Informer, replacer: NodeReplacer, poll_seconds: float,
                 show: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.nodes = nodes
        self.pods = pods
        self.replacer = replacer  # its wait: on a watch, asking whether the run may go on
        self.poll = poll_seconds
        self.show = show
        self.clock: Clock = cluster.clock

    def owner_gone(self, owner: str) -> bool:
        """Whether a workload (``"ReplicaSet ns/name"``, as the wave recorded it) no longer exists."""
        kind, _, where = owner.partition(" ")
        namespace, _, name = where.partition("/")
        try:
            self.cluster.get_object(kind, namespace, name)
        except NotFoundError:
            return True
        except (PlatformError, ApiFault):  # a kind the API cannot be asked about here: keep waiting on it, as before
            return False
        return False

    def why(self, pods: list[Pod]) -> str:
        """What the kubelet says of a workload's pods that do not start, with the image of the node they are on:
        the first thing an operator asks when a wave's pods are not Ready again (a bad image, most often)."""
        if not pods:
            return ""
        said = []
        for pod in pods[:2]:
            node = self.nodes.get(pod.node_name) if pod.node_name else None
            image = node.image if node is not None else None
            said.append(f"{pod.name} on {pod.node_name}{f' (image {image})' if image else ''}: {pod.waiting}")
        return f" ({'; '.join(said)})"

    def wait(self, owners: dict[str, OwnerWait], timeout: float) -> str | None:
        """Wait until each workload (uid -> its owner and how many pods were Ready before) is as Ready again, or one
        is deleted meanwhile; what is still short after ``timeout`` seconds of the cluster's clock, else None."""
        if not owners:
            return None
        deadline = self.clock.now() + timeout
        self.show(f"waiting for the pods of {len(owners)} workloads to be Ready again")
        waiting = dict(owners)

        def counts() -> tuple[Counter[str], Counter[str], dict[str, list[Pod]]]:
            ready: Counter[str] = Counter()
            live: Counter[str] = Counter()
            stuck: dict[str, list[Pod]] = {}
            for uid in waiting:
                for p in self.pods.pods_of(uid):
                    if p.terminating:
                        continue
                    live[uid] += 1
                    if p.ready:
                        ready[uid] += 1
                    elif p.waiting:
                        stuck.setdefault(uid, []).append(p)
            return ready, live, stuck

        memo = {"seen": -1, "whole": False}

        def whole() -> bool:
            seen = self.pods.moves_of(waiting) + len(waiting)
            if seen != memo["seen"]:  # nothing of theirs moved since the last look: the answer stands
                ready, _, _ = counts()
                memo.update(seen=seen, whole=all(ready[uid] >= o.ready for uid, o in waiting.items()))
            return bool(memo["whole"])

        while True:
            if self.replacer.wait(whole, min(deadline, self.clock.now() + self.poll), "wait:pods", self.pods):
                return None
            ready, live, stuck = counts()
            for uid in [u for u, o in waiting.items() if ready[u] < o.ready and not live[u]]:
                if self.owner_gone(waiting[uid].owner):  # deleted meanwhile (its namespace too): nothing to wait for
                    self.show(f"{waiting[uid].owner} was deleted meanwhile: not waited for")
                    del waiting[uid]
            if whole():
                return None
            if past(self.clock, deadline):
                short = [f"{o.owner} has {ready[uid]} Ready of {o.ready}{self.why(stuck.get(uid, []))}"
                         for uid, o in waiting.items() if ready[uid] < o.ready]
                return "; ".join(short[:5]) + (f" and {len(short) - 5} more" if len(short) > 5 else "")


class BudgetsBack:
    """Nodes the plan leaves only because the budgets they spend are at their floor while their pods come back
    (``upgrade_service.planning.recovery``): the run waits for the pods or the budgets to change and plans again. Once nothing
    about what they wait for has changed for ``stuckSeconds`` past the time those pods take to start, it gives up on
    them: they are reported blocked, with their reason."""

    def __init__(self, pods: Informer, budgets: Informer, replacer: NodeReplacer, journal: Journal, poll_seconds: float,
                 stuck_seconds: float, default_start: float, show: Callable[[str], None]) -> None:
        self.pods = pods
        self.budgets = budgets
        self.replacer = replacer
        self.journal = journal
        self.poll = poll_seconds
        self.stuck = stuck_seconds
        self.default_start = default_start
        self.show = show
        self.clock: Clock = replacer.clock
        self._since: tuple[tuple[str, ...], float] | None = None  # what the nodes wait for, and since when unchanged
        self.patience = 0.0

    def wait(self, plan: RotationPlan) -> bool:
        """True after waiting a while (plan again); False when nothing waits, or once the run gives up on them."""
        waiting = [b for b in plan.blocked if b.waiting]
        if not waiting:
            self._since = None
            return False
        what = tuple(sorted(c.message for b in waiting for c in b.causes))  # its counts move as the pods come back
        now = self.clock.now()
        starts = [s for b in waiting if (facts := plan.view.by_name.get(b.node)) is not None for s in facts.start.values()]
        patience = self.stuck + max(starts, default=self.default_start)
        if self._since is None or self._since[0] != what:
            self._since = (what, now)
            self.journal.append(Waiting(tuple(b.node for b in waiting), waiting[0].reason, now + patience))
        since = self._since[1]
        if now - since >= patience:
            self.patience = patience
            return False
        self.show(f"{len(waiting)} node(s) wait for budgets whose pods are on their way back: {waiting[0].reason}")
        namespaces = {c.pod.split("/", 1)[0] for b in waiting for c in b.causes if c.pod}
        before = (self.pods.moves_in(namespaces), self.budgets.changes)

        def changed() -> bool:
            self.budgets.sync()
            return (self.pods.moves_in(namespaces), self.budgets.changes) != before

        self.replacer.wait(changed, min(since + patience, now + self.poll), "wait:budgets", self.pods)
        return True

    def given_up(self, plan: RotationPlan) -> RotationPlan:
        """The plan as the run ends: nodes it waited for in vain are blocked, saying for how long nothing changed."""
        if not any(b.waiting for b in plan.blocked):
            return plan
        note = f"; nothing about its pods changed for {self.patience:.0f} s (stuckSeconds past their start): given up"
        blocked = [replace(b, causes=tuple(replace(c, kind=NO_ROOM, message=c.message + note) for c in b.causes))
                   if b.waiting else b for b in plan.blocked]
        return replace(plan, blocked=blocked)


API_PROBE_SECONDS = 30.0


class ApiBack:
    """An API (the cluster's, AWS's) that still fails after each call's own retries: an outage, as while EKS scales or
    upgrades a control plane. The run waits for it, journalled as a wait (``rotate status`` shows it), asking again
    every ``API_PROBE_SECONDS``, within ``patience`` of the outage's first failure; then it stops as ``api-error``."""

    def __init__(self, journal: Journal, clock: Clock, patience: float, show: Callable[[str, str], None]) -> None:
        self.journal, self.clock, self.patience, self.show = journal, clock, patience, show
        self.since: float | None = None  # the outage's first failure
        self.last = 0.0

    def wait(self, reason: str) -> bool:
        """Wait a probe's time and say True (the caller asks again), or False once the patience is spent."""
        now = self.clock.now()
        if self.since is None or now - self.last > API_PROBE_SECONDS * 4:
            self.since = now  # a new outage: the last one's run went on a while since
        self.last = now
        gives_up = self.since + self.patience
        if now >= gives_up:
            return False
        self.journal.append(Waiting((), f"an API did not answer ({reason}): asked again every {API_PROBE_SECONDS:.0f} s",
                                    gives_up))
        self.show("waiting", f"for the API until {format_time(gives_up)}: {reason}")
        self.clock.sleep(min(API_PROBE_SECONDS, gives_up - now))
        return True
