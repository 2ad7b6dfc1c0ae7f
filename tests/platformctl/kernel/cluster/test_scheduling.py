"""The scheduler's filters as the planner and the simulator share them (``platformctl.kernel.cluster.scheduling``).

Pods and nodes are written as the API shows them and parsed by the snapshot parser, so what is
checked is what a plan made from ``kubectl get -o json`` would see.
"""

from __future__ import annotations

from typing import Any

import pytest

from platformctl.emulator.simulator import build_node
from platformctl.kernel.cluster.model import parse_pod
from platformctl.kernel.cluster.scheduling import Placement
from platformctl.kernel.errors import PlatformError


def node(name: str, zone: str = "us-east-1a", pool: str = "general", itype: str = "m6i.large", **kw: Any):
    return build_node(name=name, zone=zone, region=zone[:-1], instance_type=itype, pool=pool, image="ami-1", instance_id=f"i-{name}", **kw)


def pod(name: str, *, ns: str = "app", labels: dict[str, str] | None = None, cpu: str = "100m", spec: dict[str, Any] | None = None,
        node_name: str | None = None):
    raw = {"metadata": {"name": name, "namespace": ns, "labels": labels or {"app": "web"}},
           "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
                    **({"nodeName": node_name} if node_name else {}), **(spec or {})}}
    return parse_pod(raw)


ANTI_HOST = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}}


def test_resources_count_what_already_runs_there_and_say_so_as_the_scheduler_does() -> None:
    # m6i.large: 2 vCPU, about 1.93 allocatable
    place = Placement([node("a"), node("b")], [pod("big-a", cpu="1500m", node_name="a"), pod("big-b", cpu="1500m", node_name="b")])
    assert place.place(pod("small", cpu="200m")) in ("a", "b")
    big = pod("big", cpu="1")
    assert place.place(big) is None
    assert place.why_not(big).startswith("0/2 nodes are available: 2 Insufficient cpu.")


def test_cordon_taints_and_node_selector_filter_nodes() -> None:
    from platformctl.kernel.cluster.model import Taint

    nodes = [node("cordoned"), node("tainted", taints=[Taint("dedicated", "ml", "NoSchedule")]),
             node("ml", pool="ml")]
    place = Placement(nodes)
    place.set_schedulable("cordoned", False)
    pinned = pod("p", spec={"nodeSelector": {"eks.amazonaws.com/nodegroup": "system"}})
    assert place.place(pinned) is None
    message = place.why_not(pinned)
    assert "1 node(s) were unschedulable" in message
    assert "1 node(s) had untolerated taint {dedicated: ml}" in message
    assert "1 node(s) didn't match Pod's node affinity/selector" in message
    tolerant = pod("t", spec={"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
                              "nodeSelector": {"kubernetes.io/hostname": "tainted"}})
    assert place.place(tolerant) == "tainted"


def test_prefer_no_schedule_is_avoided_not_forbidden() -> None:
    from platformctl.kernel.cluster.model import Taint

    outdated = Taint("platformctl.io/rotation", "outdated", "PreferNoSchedule")
    place = Placement([node("old", taints=[outdated]), node("new")])
    assert [place.place(pod(f"p{i}", cpu="700m")) for i in range(3)] == ["new", "new", "old"]


def test_required_anti_affinity_keeps_one_replica_a_host_both_ways() -> None:
    place = Placement([node("a"), node("b"), node("c")], [pod("web-0", node_name="a", spec=ANTI_HOST)])
    assert place.place(pod("web-1", spec=ANTI_HOST)) in ("b", "c")
    assert place.place(pod("web-2", spec=ANTI_HOST)) in ("b", "c")
    fourth = pod("web-3", spec=ANTI_HOST)
    assert place.place(fourth) is None
    assert "3 node(s) didn't match pod anti-affinity rules" in place.why_not(fourth)
    # Symmetry: a pod without terms may not join a node whose pod's anti-affinity selects it.
    plain = pod("other", labels={"app": "web"})
    assert place.place(plain) is None
    assert "node(s) didn't satisfy existing pods anti-affinity rules" in place.why_not(plain)
    assert place.place(pod("unrelated", labels={"app": "db"})) is not None


def test_topology_spread_do_not_schedule_bounds_the_skew_over_eligible_domains() -> None:
    spread = {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                             "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]}
    nodes = [node("a1", "us-east-1a"), node("b1", "us-east-1b"), node("c1", "us-east-1c")]
    place = Placement(nodes, [pod("w0", node_name="a1", spec=spread), pod("w1", node_name="b1", spec=spread)])
    assert place.place(pod("w2", spec=spread)) == "c1"  # a and b already have one each
    place.set_schedulable("c1", False)
    # c keeps counting as a domain while cordoned (the scheduler counts every node the pod's affinity admits):
    w3 = pod("w3", spec=spread)
    assert place.place(w3) in ("a1", "b1")
    w4 = pod("w4", spec=spread)
    # now a or b has 2 and c has 1: the other of a/b (1) is the only place within maxSkew 1
    assert place.place(w4) in ("a1", "b1")
    w5 = pod("w5", spec=spread)
    assert place.place(w5) is None  # 2/2/1: a third in a or b would make skew 2
    assert "didn't match pod topology spread constraints" in place.why_not(w5)
    # ScheduleAnyway only scores: it never forbids.
    soft = {"topologySpreadConstraints": [{**spread["topologySpreadConstraints"][0], "whenUnsatisfiable": "ScheduleAnyway"}]}
    assert place.place(pod("w6", spec=soft)) is not None


def test_required_pod_affinity_follows_its_peers() -> None:
    near = {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}}
    place = Placement([node("a1", "us-east-1a"), node("b1", "us-east-1b")],
                      [pod("cache-0", labels={"app": "cache"}, node_name="b1")])
    assert place.place(pod("web", spec=near)) == "b1"


def test_rollback_undoes_a_trial_exactly() -> None:
    place = Placement([node("a"), node("b")], [pod("x", node_name="a", cpu="1"), pod("y", node_name="b", cpu="1")])
    before = {n: (s.cpu, s.pods_free, set(s.pods)) for n, s in place.slots.items()}
    mark = place.checkpoint()
    moved = place.remove_node("a")
    place.set_schedulable("b", False)
    place.add_node(node("c"))
    place.set_schedulable("b", True)
    for p in moved:
        assert place.place(p) is not None
    place.rollback(mark)
    assert {n: (s.cpu, s.pods_free, set(s.pods)) for n, s in place.slots.items()} == before
    assert place.where == {("app", "x"): "a", ("app", "y"): "b"}


def test_constraints_round_trip_and_a_malformed_one_is_one_clear_error() -> None:
    p = pod("w", spec={**ANTI_HOST, "topologySpreadConstraints": [
        {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}, "minDomains": 3}]})
    again = parse_pod(p.to_kube())
    assert again.inter == p.inter and again.inter.hard_spread[0].min_domains == 3
    with pytest.raises(PlatformError, match=r"items\[0\]\.spec\.topologySpreadConstraints\[0\]\.maxSkew"):
        parse_pod({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}], "topologySpreadConstraints": [
            {"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}]}}, "items[0]")
