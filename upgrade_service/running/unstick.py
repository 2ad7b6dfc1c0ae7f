"""A drain waiting on a pod the scheduler cannot place: room on its way is waited for, room a group can add is added.

The executor's drain calls this when it looks stuck (``WaveDrain``'s ``on_stuck``): a new node of a group whose nodes
would take the pod is booting (a replacement, a surge), which is waited for within ``nodeReadyTimeoutSeconds``; or
the group has room and the wave has a node whose termination gives the capacity back, and one more node is added,
journalled as a capacity change that stands in for that node. Otherwise nothing can help and the drain fails the node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

from platformctl.kernel.clock import Clock
from platformctl.kernel.cluster.informer import Informer
from platformctl.kernel.cluster.scheduling import static_reason
from platformctl.kernel.nodegroups import NodeGroups
from upgrade_service.journal.rotation import WaveState
from upgrade_service.planning.fit import TRANSIENT_TAINT_PREFIXES
from upgrade_service.running.replacement import NodeReplacer
from upgrade_service.running.wave_drain import Stuck


class Unstick:
    def __init__(self, replacer: NodeReplacer, groups: NodeGroups, nodes: Informer, patience: float,
                 show: Callable[[str], None]) -> None:
        self.replacer = replacer
        self.groups = groups
        self.nodes = nodes
        self.patience = patience  # how long a booting node is waited for: nodeReadyTimeoutSeconds
        self.show = show
        self.clock: Clock = replacer.clock
        self._since: dict[str, float] = {}  # group -> since when a stuck drain waits for its new node

    def __call__(self, wave: WaveState, stuck: Stuck) -> bool:
        """The drain waits on a pod the scheduler cannot place. True when room is on its way: a new node of a group
        whose nodes would take the pod is booting (a replacement, a surge), or this adds one where the group has room
        (the capacity comes back when one of the wave's nodes of that group is terminated). False: nothing can."""
        pod = stuck.pod
        info = wave.started
        self.nodes.sync()
        nodes = self.nodes.nodes()
        group_of = self.replacer.groups_of(nodes)
        for g, gi in sorted(info.groups.items()):
            sample = next((n for n in nodes if group_of.get(n.name) == g and n.ready), None) or \
                next((n for n in nodes if n.name in gi.nodes), None)
            if sample is None:
                continue
            template = replace(sample, unschedulable=False, ready=True,
                               taints=tuple(t for t in sample.taints if not t.key.startswith(TRANSIENT_TAINT_PREFIXES)))
            if static_reason(pod, template) is not None:
                continue  # a new node of this group would not take the pod either
            gs = self.groups.describe(g)
            ready = {n.instance_id for n in nodes if n.ready and group_of.get(n.name) == g}
            booting = [i for i in gs.instances if i not in ready]
            if booting or gs.desired > len(gs.instances):
                since = self._since.setdefault(g, self.clock.now())
                if self.clock.now() - since <= self.patience:
                    self.show(f"wave {wave.number}: {stuck.message}; waiting for {max(len(booting), 1)} new "
                               f"node(s) of {g} to boot")
                    return True
                continue
            self._since.pop(g, None)
            spare = [n for n in gi.nodes if info.instances[n] not in wave.terminated and not wave.decrements(n)
                     and n not in wave.failed]
            if gs.room > 0 and spare:
                want = gs.desired + 1
                self.show(f"wave {wave.number}: {stuck.message}; adding a surge node to {g}")
                self.replacer.op("set-desired", partial(self.groups.add_capacity, g, want), group=g, desired=want,
                         before=gs.desired, wave=wave.number, stands_in_for=spare[0],
                         reason=f"stuck drain: {pod.namespace}/{pod.name} Unschedulable")
                self._since[g] = self.clock.now()
                return True
        return False

