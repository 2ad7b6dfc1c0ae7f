"""First light: before a rotation's first wave, one node of each pool on its new image, judged before any workload moves.

For every pool whose image the run changes (``firstLight.pools``), the step raises the pool's group by one, taints the
new node ``platformctl.io/first-light=<pool>:NoSchedule`` the moment it registers (NotReady: the scheduler places
nothing there yet), so that only the canaries' pods (which tolerate every ``NoSchedule`` taint) ever run on it, and asks
the health gate — the pools' new images as its targets, at least ``minResults`` results of each image of its own — until
it answers:

- ``pass``: the taint comes off, the node joins its pool (the first wave counts it as capacity the run added), and
  wave 1 starts;
- ``fail``, a first-light node not Ready on its image within ``nodeReadyTimeoutSeconds``, or ``inconclusive`` past
  ``firstLight.timeout``: the first-light instances are terminated (their group's capacity given back) and the run
  halts; nothing else was touched.

In a pool whose groups are all at their maximum size, the step first replaces the pool's least disruptive node (of
the plan's, the one with no one-at-a-time or wait-for-completion pod and the fewest pods to move), cordoned and drained
through the eviction API under every budget as a wave's node is, and terminated without lowering the group's capacity:
the group launches the first-light node in its place. A failed first light there leaves the group one node below its
desired size (its node is put out with a decrement rather than replaced by another on the image it failed), and says so.

Every side effect is one of the executor's journalled kinds, its intent naming the pool (``first_light``); a run killed
at any point and run again finds the capacity and the node it made (an instance not among the group's instances before
the step) and makes no second one; a fail it recorded stands (it halts again, after terminating what is left); an abort
terminates a first-light node its judgement has not let in (``upgrade_service.running.abort``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

from platformctl.kernel.clock import past
from platformctl.kernel.cluster.drain import drain_blocks_on
from platformctl.kernel.cluster.informer import Informer
from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import Node, Taint
from platformctl.kernel.errors import NotFoundError
from platformctl.kernel.nodegroups import NodeGroups
from upgrade_service.journal.intents import Writes
from upgrade_service.journal.records import FirstLightJudged, FirstLightStarted, Gate
from upgrade_service.journal.rotation import FIRST_LIGHT_KEY, FirstLightState, Journal
from upgrade_service.planning.plan import RotationPlan
from upgrade_service.planning.policy import RotationPolicy
from upgrade_service.running.gate import Question, ask
from upgrade_service.running.replacement import NodeReplacer
from upgrade_service.running.run_types import ClusterRead, Halt, Options
from upgrade_service.running.wave_drain import WaveDrain


def first_light_taint(pool: str) -> Taint:
    return Taint(FIRST_LIGHT_KEY, pool, "NoSchedule")


@dataclass
class FirstLight:
    cluster_name: str
    cluster: Cluster
    groups: NodeGroups
    journal: Journal
    replacer: NodeReplacer
    policy: RotationPolicy
    options: Options
    nodes: Informer
    pods: Informer
    budgets: Informer
    show: Callable[[str, str], None]

    # ---------------------------------------------------------------- what is due

    def due(self, read: ClusterRead) -> bool:
        """Whether the run must light (or finish lighting) its pools before its first wave."""
        if self.policy.first_light is None:
            return False
        lit = self.journal.state.first_light
        # a step a killed run left, or one that failed: what it left is put out, and it halts again or lights again
        if lit is not None and (lit.judged is None or lit.judged.verdict == "fail"):
            return True
        return bool(self._pools(read))

    def _pools(self, read: ClusterRead) -> dict[str, str]:
        """Pool -> its new image, for the pools the policy names whose image this run changes and that no Ready node
        of theirs boots yet (a run that rotated some of them already has its image proven; a passed first light's node
        is one), but for a pool the last first light passed or left out (its group had no room) on the same image."""
        named = self.policy.first_light
        assert named is not None
        label, image_of = self.policy.pool_label, self.policy.image_of
        pools: dict[str, str] = {}
        for node in read.nodes:
            pool = node.labels.get(label)
            if node.name in read.outdated and pool in read.targets and named.names(pool):
                pools[pool] = read.targets[pool]
        for node in read.nodes:
            pool = node.labels.get(label)
            if pool in pools and image_of(node.labels) == pools[pool] and node.ready \
                    and not any(t.key == FIRST_LIGHT_KEY for t in node.taints):
                del pools[pool]
        lit = self.journal.state.first_light
        if lit is not None:  # what the journal says it did, whatever the nodes' watch has shown of it yet
            done = lit.started.skipped if not lit.passed else [*lit.started.skipped, *lit.started.pools]
            for pool in done:
                if pool in pools and pools[pool] == lit.started.images.get(pool):
                    del pools[pool]
        return dict(sorted(pools.items()))

    # ---------------------------------------------------------------- the step

    def run(self, read: ClusterRead, plan: RotationPlan) -> None:
        """Light the pools, judge them, and let them in; raises ``Halt`` when the images must not go further."""
        lit = self.journal.state.first_light
        if lit is not None and lit.judged is not None and lit.judged.verdict == "fail":
            self._put_out(lit)
            if not lit.halted:  # a killed run had judged it: the judgement stands
                raise Halt("first-light-fail", f"first light: {lit.judged.reason}")
            lit = None  # a run continued after a failed first light lights again
        if lit is None or lit.judged is not None:
            lit = self._begin(read, plan)
        if lit.judged is not None:
            return
        self._raise(lit)
        self._light(lit)
        self._judge(lit)

    def _begin(self, read: ClusterRead, plan: RotationPlan) -> FirstLightState:
        pools = self._pools(read)
        chosen: dict[str, str] = {}
        skipped: dict[str, str] = {}
        replaces: dict[str, str] = {}
        label = self.policy.pool_label
        for pool in pools:
            groups = sorted({read.group_of[n.name] for n in read.nodes if n.labels.get(label) == pool and n.name in read.group_of})
            room = [g for g in groups if read.described[g].room > 0 and g not in chosen.values()]
            if room:
                chosen[pool] = max(room, key=lambda g: (read.described[g].room, g))
                continue
            node = least_disruptive(plan, pool, [g for g in groups if g not in chosen.values()], read.group_of)
            if node is None:
                skipped[pool] = (f"group{'s' if len(groups) > 1 else ''} {', '.join(groups)} at {'their' if len(groups) > 1 else 'its'} "
                                 "maximum size, and none of its nodes can be drained now to make room: the first wave is "
                                 "judged before the next")
                continue
            chosen[pool], replaces[pool] = read.group_of[node], node
        by_name = {n.name: n for n in read.nodes}
        before = {g: sorted(read.described[g].instances) for g in chosen.values()}
        self.journal.append(FirstLightStarted(chosen, pools, before, skipped, replaces,
                                              {p: by_name[n].instance_id or "" for p, n in replaces.items()}))
        for pool, why in skipped.items():
            self.show("first-light", f"first light: pool {pool}: {why}")
        lit = self.journal.state.first_light
        assert lit is not None
        if not chosen:
            why = ("no pool has room for a first-light node: " + "; ".join(f"{p}: {w}" for p, w in skipped.items())
                   if skipped else "no pool's image is new to it")
            self.journal.append(FirstLightJudged("skipped", why))
        return lit

    def _raise(self, lit: FirstLightState) -> None:
        for pool, group in lit.started.pools.items():
            if group in lit.surged:
                continue
            if pool in lit.started.replaces:
                self._replace(pool, group, lit.started.replaces[pool], lit.started.replaces_instance[pool])
                continue
            state = self.groups.describe(group)
            self.show("first-light", f"first light: raising {group} from {state.desired} to {state.desired + 1} for "
                      f"one node of pool {pool} on {lit.started.images[pool]}")
            self.replacer.add_capacity(group, state.desired + 1, state.desired, first_light=pool)

    def _replace(self, pool: str, group: str, node: str, instance: str) -> None:
        """Make room in a full group: its node drained (budgets, protocols) and terminated with no decrement."""
        self.show("first-light", f"first light: {group} is at its maximum size; replacing {node} of pool {pool}")
        if self.replacer.in_service(instance):
            self.replacer.cordon(node, first_light=pool)
            drain = WaveDrain(self.cluster, self.policy, self.journal, self.replacer.pacer, wave="first-light",
                              poll_seconds=self.options.poll_seconds, check=self.replacer.check, pods=self.pods,
                              budgets=self.budgets)
            outcome = drain.run([node], self.policy.drain_timeout_seconds)
            if outcome.failed:
                self.replacer.uncordon(node, first_light=pool)
                raise Halt("first-light-drain", f"first light: {node} of pool {pool} could not be drained to make room "
                           f"for a first-light node in {group}: {outcome.failed[node]}")
        self.replacer.terminate(node, instance, group, False, first_light=pool)

    def _fresh(self, lit: FirstLightState, pool: str) -> Node | None:
        """The pool's first-light node: the oldest node of its group that was not one of its instances before."""
        group, image = lit.started.pools[pool], lit.started.images[pool]
        before = set(lit.started.before.get(group, ()))
        label, image_of = self.policy.pool_label, self.policy.image_of
        candidates = [n for n in self.nodes.nodes() if n.labels.get(label) == pool and image_of(n.labels) == image
                      and n.instance_id and n.instance_id not in before]
        mine = self.replacer.groups_of(candidates)
        found = sorted((n for n in candidates if mine.get(n.name) == group), key=lambda n: (n.created or 0.0, n.name))
        return found[0] if found else None

    def _light(self, lit: FirstLightState) -> None:
        """Taint each first-light node as soon as it registers, then wait until each is Ready on its image."""
        deadline = self.cluster.clock.now() + self.policy.node_ready_timeout_seconds

        def lit_up() -> bool:
            state = self.journal.state.first_light
            assert state is not None
            ready = True
            for pool in state.started.pools:
                node = self._fresh(state, pool)
                if node is None:
                    ready = False
                    continue
                if pool not in state.nodes or not any(t.key == FIRST_LIGHT_KEY for t in node.taints):
                    self.replacer.op("taint", partial(self.cluster.taint, node.name, first_light_taint(pool)),
                                     node=node.name, key=FIRST_LIGHT_KEY, instance=node.instance_id, first_light=pool)
                ready = ready and node.ready
            return ready

        self.show("first-light", "first light: waiting for " + ", ".join(
            f"one node of {p} on {lit.started.images[p]}" for p in lit.started.pools))
        ok, failed = self.replacer.wait_launching(lit_up, list(lit.started.pools.values()),
                                                  lit.started.at or self.cluster.clock.now(), deadline,
                                                  "wait:first-light")
        if ok:
            return
        state = self.journal.state.first_light
        assert state is not None
        if failed:
            self._fail(state, "first-light-launch-failed", "first-light nodes could not launch: " + "; ".join(failed))
        missing = []
        for pool in state.started.pools:
            image, node = state.started.images[pool], self._fresh(state, pool)
            if node is None or not node.ready:
                said = f"{node.name} NotReady" if node is not None else "no node registered"
                missing.append(f"pool {pool}: {said} on {image}")
        self._fail(state, "first-light-not-ready", f"first-light nodes not Ready on their new image within "
                   f"nodeReadyTimeoutSeconds {self.policy.node_ready_timeout_seconds}: {'; '.join(missing)}")

    def _judge(self, lit: FirstLightState) -> None:
        first_light = self.policy.first_light
        gate = self.policy.health_gate
        assert first_light is not None and gate is not None
        clock = self.cluster.clock
        began = lit.asked_at if lit.asked_at is not None else clock.now()
        deadline = began + first_light.timeout
        targets = {pool: lit.started.images[pool] for pool in lit.started.pools}
        context = {"cluster": self.cluster_name, "wave": "first-light", "stage": self.options.stage or ""}
        said: tuple[str, str] | None = None
        while True:
            self.replacer.check()
            present = frozenset(n.image for n in self.nodes.nodes() if n.image)
            # Whether the deadline has passed is asked before the gate is: an answer taken before it, however late
            # this process comes to read it (a pause, a throttled pod), is never the one it halts on; it asks again.
            late = past(clock, deadline)
            question = Question(self.cluster_name, self.options.stage or "", 0, clock.now(), targets, present,
                                min_results=first_light.min_results,
                                proven=self.options.first_light_proven or first_light.proven)
            verdict = ask(gate, context, self.options.canary, question, self.options.environment)
            if (verdict.verdict, verdict.reason) != said:
                said = (verdict.verdict, verdict.reason)
                self.journal.append(Gate(0, verdict.verdict, verdict.reason))
            state = self.journal.state.first_light
            assert state is not None
            if verdict.verdict == "pass":
                return self._pass(state, verdict.reason, clock.now() - began)
            lit_up = ", ".join(f"{pool} ({state.nodes.get(pool, 'no node')}, {image})" for pool, image in targets.items())
            if verdict.verdict == "fail":
                self._fail(state, "first-light-fail", f"pools {lit_up}: {verdict.reason}", clock.now() - began)
            if late:
                self._fail(state, "first-light-inconclusive", f"pools {lit_up}: the health gate stayed inconclusive for "
                           f"firstLight.timeout {first_light.timeout} s: {verdict.reason}", clock.now() - began)
            self.show("first-light", f"first light: the gate is inconclusive ({verdict.reason}); asking every "
                      f"{self.options.gate_poll_seconds:.0f} s for up to {first_light.timeout} s")
            clock.sleep(min(self.options.gate_poll_seconds, max(deadline - clock.now(), 0.0)))

    def _pass(self, lit: FirstLightState, reason: str, seconds: float) -> None:
        instances = dict(lit.instances)
        for pool, name in sorted(lit.nodes.items()):
            self.replacer.op("untaint", partial(self.cluster.untaint, name, FIRST_LIGHT_KEY), node=name, key=FIRST_LIGHT_KEY,
                             first_light=pool)
        self.journal.append(FirstLightJudged("pass", reason, dict(lit.nodes), instances, seconds))
        self.show("first-light", f"first light passed: {reason}")

    def _fail(self, lit: FirstLightState, code: str, reason: str, seconds: float = 0.0) -> None:
        self.journal.append(FirstLightJudged("fail", reason, dict(lit.nodes), dict(lit.instances), seconds))
        state = self.journal.state.first_light
        assert state is not None
        self._put_out(state)
        raise Halt(code, f"first light: {reason}")

    def _put_out(self, lit: FirstLightState) -> None:
        """Terminate every first-light instance still in service, giving its group's capacity back (pods a crash let
        land on it before its taint are evicted first; one whose pods would not leave is kept, and said)."""
        kept = []
        for pool, group, instance in first_light_instances(lit, self.groups):
            node = lit.nodes.get(pool) or node_of(self.cluster, instance)
            left = clear_node(self.cluster, self.journal, node, pool) if node else []
            if left:
                kept.append(f"{node} ({', '.join(left[:3])} would not leave)")
                continue
            short = f" ({group} stays one below the size it had: its node {lit.started.replaces[pool]} made room)" \
                if pool in lit.started.replaces else ""
            self.show("first-light", f"first light: terminating {node or instance} of pool {pool}{short}")
            self.replacer.terminate(node, instance, group, True, first_light=pool)
        if kept:
            self.show("first-light", "first light: kept, cordoned: " + "; ".join(kept))


def node_of(cluster: Cluster, instance: str) -> str | None:
    """The node of ``instance``, if it registered."""
    return next((n.name for n in cluster.list_nodes() if n.instance_id == instance), None)


def clear_node(cluster: Cluster, log: Writes, node: str, pool: str, patience: float = 300.0) -> list[str]:
    """Before a first-light node is put out: the pods on it that a drain would move (those a crash let land there
    between its boot and its taint; the canaries' own) are evicted through the eviction API, a refusal retried every
    5 s, until they are gone or ``patience`` seconds of the cluster's clock pass (journalled as ``cordon``, first, so
    that nothing lands there meanwhile, and ``evict``). Returns the pods still there: such a node is not terminated."""
    clock = cluster.clock
    # Cordoned before its pods are read, whether it has any or not: a node a crash left untainted takes pods until then
    # (a CronJob's next pod, bound between an empty list and the termination, would go down with it).
    key = log.intent("cordon", node=node, first_light=pool)
    try:
        cluster.cordon(node)
        pods = [p for p in cluster.list_pods(node_name=node) if drain_blocks_on(p)]
    except NotFoundError:
        log.done(key, ok=False, result="node gone")
        return []
    log.done(key)
    if not pods:
        return []
    deadline = clock.now() + patience
    while True:
        moving = [p for p in pods if not p.terminating]
        if moving:
            key = log.intent("evict", node=node, pods=[f"{p.namespace}/{p.name}" for p in moving],
                             uids={f"{p.namespace}/{p.name}": p.uid for p in moving}, first_light=pool)
            evicted = [{"pod": f"{p.namespace}/{p.name}", "uid": p.uid, "created": p.created or 0.0} for p in moving
                       if (answer := cluster.evict(p.namespace, p.name)).allowed or answer.code == 404]
            log.done(key, evicted=evicted, refused={})
        pods = [p for p in cluster.list_pods(node_name=node) if drain_blocks_on(p)]
        if not pods or past(clock, deadline):
            return [f"{p.namespace}/{p.name}" for p in pods]
        clock.sleep(5.0)


def least_disruptive(plan: RotationPlan, pool: str, groups: list[str], group_of: Mapping[str, str]) -> str | None:
    """The plan's node of ``pool`` in one of ``groups`` whose drain costs least: no one-at-a-time or wait-for-completion
    pod first, then the fewest pods to move and the least budget spent (None: the plan drains none of them now)."""
    planned = {n for w in plan.waves for n in w.nodes if group_of.get(n) in groups}
    views = [v for v in plan.view.nodes if v.name in planned and v.pool == pool and not v.blocked]
    if not views:
        return None
    best = min(views, key=lambda v: (bool(v.one_at_a_time) or v.wait_until is not None, len(v.moving),
                                     sum(v.spends.values()), v.name))
    return best.name


def first_light_instances(lit: FirstLightState, groups: NodeGroups) -> list[tuple[str, str, str]]:
    """(pool, group, instance) of each first-light instance still in its group: what a failed or aborted first light
    terminates. At most one a pool (the step raised each group by one): the newest instance not there before."""
    out = []
    for pool, group in sorted(lit.started.pools.items()):
        if group not in lit.surged:
            continue
        before = set(lit.started.before.get(group, ()))
        fresh = [i for i in groups.describe(group).instances if i not in before and i not in lit.terminated]
        known = lit.instances.get(pool)
        if known in fresh:  # the node it tainted
            out.append((pool, group, known))
        elif known is None and fresh:  # killed before the node registered: the one instance the group added
            out.append((pool, group, sorted(fresh)[-1]))
    return out
