"""Replacing nodes: the steps rotation and remediation share, each journalled through one intent/done record.

cordon → (surge: raise the group's capacity so a new node boots first) → drain through the eviction API
(``upgrade_service.running.wave_drain``) → terminate the instance → wait for the replacement to be Ready. The executor
replaces a wave of nodes at a time and remediation one broken node; both call the same ``NodeReplacer``, so they
cordon, surge, terminate and wait the same way, and their crash tests kill at the same named points
(``intent:<op>``, ``call:<op>``, the wait's failpoint):

- every call that changes the world is an ``intent`` before and a ``done`` after (``upgrade_service.journal.intents``), with
  the lease asked once more between the two;
- an instance is terminated at most once: one already leaving or gone is recorded as such, never called again;
- each instance's group is asked of the node groups once and remembered (an instance never changes group);
- the waits watch the cluster (the nodes' informer) and end when what they wait for happened, asking ``check``
  (the lease, a stop, an abort) at least every ``poll_seconds`` and the cluster's clock for the deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from platformctl.kernel import failpoints
from platformctl.kernel.clock import Clock, past
from platformctl.kernel.cluster.informer import Informer
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import Node, image_of
from platformctl.kernel.errors import NotFoundError
from platformctl.kernel.nodegroups import GroupState, LaunchSpec, NodeGroups
from upgrade_service.journal.intents import Writes, journalled
from upgrade_service.running.launches import as_deployed, launch_drift
from upgrade_service.running.pacing import MutationPacer


@dataclass(frozen=True)
class Missing:
    """New nodes that did not come: why (``launch-failed``: their group's launches failed; ``new-node-not-ready``:
    none Ready on the image in time), and what is missing, said for a person."""

    code: str
    reason: str

    def __str__(self) -> str:
        return self.reason


# How often a wait for new nodes reads their groups' scaling activities (a failed launch halts within about this).
LAUNCH_LOOK_SECONDS = 30.0


class NodeReplacer:
    def __init__(self, cluster: Cluster, groups: NodeGroups, log: Writes, pacer: MutationPacer, *,
                 check: Callable[[], None], fence: Callable[[], None] | None, poll_seconds: float,
                 nodes: Informer | None = None) -> None:
        self.cluster = cluster
        self.groups = groups
        self.log = log
        self.pacer = pacer
        self.check = check  # before every side effect and during every wait: may this still act?
        self.fence = fence  # between an intent and its call: is the lease still ours?
        self.poll = poll_seconds
        self.clock: Clock = cluster.clock
        self._nodes = nodes
        self._own_nodes = nodes is None
        self._group_of_instance: dict[str, str] = {}
        self._group_of_node: dict[str, str] = {}  # a node's instance never changes
        self._instance_of_node: dict[str, str | None] = {}
        self._no_group: set[str] = set()
        self._launched: dict[str, LaunchSpec | None] = {}  # instance -> what it was launched with (None: unknown)

    @property
    def nodes(self) -> Informer:
        """The cluster's nodes as their watch tells them (started on first use)."""
        if self._nodes is None:
            self._nodes = self.cluster.informer("nodes")
        return self._nodes

    def close(self) -> None:
        """Stop the nodes' watch if this started it (one it was given is its giver's to close)."""
        if self._nodes is not None and self._own_nodes:
            self._nodes.close()
            self._nodes = None

    # ---------------------------------------------------------------- which group

    def launch_drift(self, nodes: Sequence[Node], group_of: Mapping[str, str], described: Mapping[str, GroupState],
                     deployed: Mapping[str, LaunchSpec] | None = None) -> dict[str, str]:
        """``launches.launch_drift``, each instance's launch asked about once a run (it never changes); in a stage the
        release pipeline drives, only the groups that launch what its last deploy there left them launching
        (``launches.as_deployed``; ``deployed`` empty: none, and nothing is asked)."""
        if deployed is not None and not deployed:
            return {}
        return as_deployed(launch_drift(self._launched_with, nodes, group_of, described), group_of, described, deployed)

    def _launched_with(self, instance_ids: Sequence[str]) -> dict[str, LaunchSpec]:
        ids = [i for i in instance_ids if i not in self._launched]
        if ids:
            found = self.groups.launched_with(ids)
            self._launched.update({i: found.get(i) for i in ids})
        return {i: spec for i in instance_ids if (spec := self._launched.get(i)) is not None}

    def groups_of(self, nodes: Sequence[Node]) -> dict[str, str]:
        """Node name -> its auto scaling group, for the nodes some group owns (each instance asked about once)."""
        known = self._group_of_node
        unknown = [n for n in nodes if n.name not in known]
        ids = [n.instance_id for n in unknown if n.instance_id and n.instance_id not in self._group_of_instance
               and n.instance_id not in self._no_group]
        if ids:
            found = self.groups.instances(ids)
            for instance_id, inst in found.items():
                self._group_of_instance[instance_id] = inst.group
            # An instance no group has is in none for good (a group knows its instances from their launch, before
            # they register as nodes): it is not asked about again at every look.
            self._no_group.update(i for i in ids if i not in found)
        for n in unknown:
            group = self._group_of_instance.get(n.instance_id or "")
            if group is not None:
                known[n.name] = group
        return {n.name: known[n.name] for n in nodes if n.name in known}

    def in_service(self, instance: str) -> bool:
        """Whether the instance is still one of its group's, and not on its way out."""
        found = self.groups.instances([instance]).get(instance)
        return found is not None and not found.leaving

    # ---------------------------------------------------------------- side effects, journalled

    def op(self, op: str, action: Callable[[], Any], **args: Any) -> Any:
        """One side effect: asked whether it may act, then journalled before and after."""
        self.check()
        return journalled(self.log, op, action, self.fence, **args)

    def cordon(self, node: str, **context: Any) -> bool:
        """Cordon ``node``; False when it went away by itself (its instance is gone too)."""
        self.pacer.take()
        try:
            self.op("cordon", lambda: self.cluster.cordon(node), node=node, **context)
        except NotFoundError:
            return False
        return True

    def uncordon(self, node: str, **context: Any) -> bool:
        self.pacer.take()
        try:
            self.op("uncordon", lambda: self.cluster.cordon(node, False), node=node, **context)
        except NotFoundError:
            return False
        return True

    def add_capacity(self, group: str, want: int, before: int, **context: Any) -> None:
        """Raise the group's capacity to ``want`` (from ``before``), journalled as a ``set-desired`` intent."""
        self.op("set-desired", lambda: self.groups.add_capacity(group, want), group=group, desired=want, before=before,
                **context)

    def surge(self, group: str, **context: Any) -> bool:
        """Raise the group's capacity by one so that a replacement boots before the drain; False when it has no room."""
        state = self.groups.describe(group)
        if state.room <= 0:
            return False
        self.add_capacity(group, state.desired + 1, state.desired, **context)
        return True

    def terminate(self, node: str | None, instance: str, group: str | None, decrement: bool,
                  announce: Callable[[], None] | None = None, **context: Any) -> bool:
        """Terminate the instance (lowering its group's capacity with ``decrement``, after a surge), once: one already
        leaving or gone is recorded as such and not called again. True when this called it (``announce`` first)."""
        if not self.in_service(instance):
            key = self.log.intent("terminate", node=node, instance=instance, group=group, decrement=decrement, **context)
            self.log.done(key, ok=True, not_called=True, result="already gone; not called again")
            return False
        self.pacer.take()
        if announce is not None:
            announce()
        self.op("terminate", lambda: self.groups.retire(instance, replace=not decrement), node=node, instance=instance, group=group,
                decrement=decrement, **context)
        return True

    # ---------------------------------------------------------------- waiting for what the group launches

    def wait(self, until: Callable[[], bool], deadline: float, failpoint: str, informer: Informer | None = None) -> bool:
        """Wait on a watch (the nodes', unless ``informer`` says) until ``until()`` holds (True) or ``deadline`` on the
        cluster's clock (False), asking ``check`` at least every ``poll_seconds``."""
        watch = informer if informer is not None else self.nodes
        while True:
            self.check()
            if until():
                return True
            failpoints.hit(failpoint)
            if past(self.clock, deadline):
                return until()
            # A client's clock a moment ahead of the cluster's (which called the deadline not yet) waits a little.
            remaining = deadline - self.clock.now()
            if watch.wait(until, min(remaining if remaining > 0 else 1.0, self.poll)):
                return True

    def new_nodes(self, group: str, before: Collection[str], *, image: str | None = None,
                  image_of: Callable[[Mapping[str, str]], str | None] = image_of, schedulable: bool = False) -> tuple[list[Node], list[Node]]:
        """The group's nodes whose instances were not among ``before``: (those Ready — on ``image`` when given, and
        not cordoned when ``schedulable`` — , the others)."""
        known = before if isinstance(before, set | frozenset) else frozenset(before)
        fresh = []
        instance_of = self._instance_of_node
        for n in self.nodes.nodes():
            if self._group_of_node.get(n.name, group) != group:
                continue  # a node known to be another group's (a node's group never changes): not asked again
            instance = instance_of.get(n.name, "")
            if instance == "":
                instance = instance_of[n.name] = n.instance_id  # parsed from its providerID once
            if instance and instance not in known:
                fresh.append(n)
        def fit(n: Node) -> bool:
            return n.ready and (image is None or image_of(n.labels) == image) and not (schedulable and n.unschedulable)

        # Only a node that would do is worth asking its group about; the others are named from what is known.
        group_of = {**self.groups_of([n for n in fresh if fit(n)]),
                    **{n.name: self._group_of_node[n.name] for n in fresh if n.name in self._group_of_node}}
        good: list[Node] = []
        others: list[Node] = []
        for n in fresh:
            if group_of.get(n.name) == group:
                (good if fit(n) else others).append(n)
        return good, others

    def wait_replacement(self, group: str, before: Collection[str], deadline: float,
                         failpoint: str = "wait:replacement") -> str | None:
        """The first Ready, schedulable node of ``group`` that was not among ``before``, once it is (None at the
        deadline)."""
        found: list[str] = []

        def ready() -> bool:
            good, _ = self.new_nodes(group, before, schedulable=True)
            found[:] = sorted(n.name for n in good)
            return bool(found)

        if self.wait(ready, deadline, failpoint) or found:
            return found[0]
        return None

    def wait_launching(self, until: Callable[[], bool], groups: Collection[str], since: float, deadline: float,
                       failpoint: str) -> tuple[bool, list[str]]:
        """``wait`` for nodes the groups launch, reading their scaling activities every ``LAUNCH_LOOK_SECONDS``: a
        launch that failed since ``since`` (an image EC2 does not hold, a template it cannot use) ends the wait at once,
        since every retry of the same template fails the same way. (True, []) when ``until()`` held; else (False, why
        each launch failed, one line a group) — empty when the deadline passed with no failed launch."""
        failed: list[str] = []
        look = self.clock.now()

        def done() -> bool:
            nonlocal look
            if until():
                return True
            if self.clock.now() >= look:
                look = self.clock.now() + LAUNCH_LOOK_SECONDS
                failed[:] = [f"launch failed in group {g}: {why[0]}" for g in sorted(groups)
                             if (why := self.groups.failed_launches(g, since))]
            return bool(failed)

        if self.wait(done, deadline, failpoint, self.nodes) and not failed:
            return True, []
        return until(), list(failed)

    def wait_new_nodes(self, expected: dict[str, tuple[frozenset[str], str | None, int]],
                       image_of: Callable[[Mapping[str, str]], str | None], timeout: float,
                       since: float | None = None) -> Missing | None:
        """Wait until each group (-> the instances it had before, the image, how many) has that many Ready nodes on
        the image that were not among those instances. Returns what is missing after ``timeout``, or at once what made
        a launch since ``since`` fail, or None."""
        deadline = self.clock.now() + timeout

        def short() -> list[str]:
            out = []
            for g, (before, image, want) in expected.items():
                good, others = self.new_nodes(g, before, image=image, image_of=image_of)
                if len(good) < want:
                    seen = [f"{n.name} ({'Ready' if n.ready else 'NotReady'}, image {image_of(n.labels)})" for n in others]
                    out.append(f"group {g}: {len(good)} of {want} new nodes Ready on {image}"
                               + (f"; also {', '.join(seen[:3])}" if seen else ""))
            return out

        ok, failed = self.wait_launching(lambda: not short(), list(expected),
                                         self.clock.now() if since is None else since, deadline, "wait:new-nodes")
        if ok:
            return None
        if failed:
            return Missing("launch-failed", "; ".join(failed))
        return Missing("new-node-not-ready", f"new nodes not Ready on the target image within nodeReadyTimeoutSeconds "
                       f"{timeout:.0f}: " + "; ".join(short()))

    def wait_gone(self, names: list[str], timeout: float, show: Callable[[int], None]) -> list[str]:
        """Wait until the nodes of terminated instances are deregistered (the cloud's node controller deletes them), so
        that what is left behind is what the cluster shows. Returns any still there after ``timeout``: reported, not a
        failure, since the instances are gone."""
        deadline = self.clock.now() + timeout

        def left() -> list[str]:
            return [n for n in names if self.nodes.get(n) is not None]

        if left():
            show(len(left()))
            self.wait(lambda: not left(), deadline, "wait:gone", self.nodes)
        return left()
