"""The production adapter (``LiveCluster``, the official client) against simulated clusters over HTTP.

The same code a production run uses talks to a real socket here; the simulator behind it says what
the truth is.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from kubernetes import client as k8s
from kubernetes import config, watch

from platformctl.cli import cli
from platformctl.emulator.server.objects import ChangeLog
from platformctl.kernel.cluster.live import LiveCluster
from platformctl.kernel.cluster.model import LABEL_NODEGROUP
from platformctl.kernel.errors import NotFoundError
from tests.platformctl.emulator.server.conftest import Served


def _live(served: Served, context: str) -> LiveCluster:
    return LiveCluster.from_kubeconfig(str(served.kubeconfig), context=context)


def test_reads_match_the_simulator(served: Served) -> None:
    live = _live(served, "synth")
    sim = served.synth
    assert sorted(n.name for n in live.list_nodes()) == sorted(n.name for n in sim.list_nodes())
    pool = sim.list_nodes()[0].labels[LABEL_NODEGROUP]
    selected = live.list_nodes(label_selector=f"{LABEL_NODEGROUP}={pool}")
    assert selected and all(n.pool == pool for n in selected)
    node = sim.list_nodes()[0]
    assert live.get_node(node.name).to_kube() == node.to_kube()  # what the API shows, conditions and all
    on_node = sorted(p.key for p in live.list_pods(node_name=node.name))
    assert on_node == sorted(p.key for p in sim.list_pods(node_name=node.name))
    ns = sim.list_pods()[0].namespace
    assert sorted(p.key for p in live.list_pods(namespace=ns)) == sorted(p.key for p in sim.list_pods(ns))
    assert sorted(live.list_pdbs(), key=lambda b: b.key) == sorted(sim.list_pdbs(), key=lambda b: b.key)
    with pytest.raises(NotFoundError):
        live.get_node("ip-10-99-99-99.ec2.internal")
    assert json.loads(json.dumps(live.snapshot())) == sim.snapshot()


def test_a_paged_list_whose_continue_expired_is_read_again_from_the_start(served: Served) -> None:
    """The server forgets a list between two of its pages (as kube-apiserver does once etcd has compacted the
    revision): the continue is 410 Expired, and the adapter lists again from the first page, every pod once; a server
    that never honours a continue is one error naming the list, not a loop."""
    from platformctl.emulator.server.paging import Pages
    from platformctl.kernel.errors import ApiRefused

    class ForgetsOnce(Pages):
        forgotten = 0

        def page(self, scope, listing, args, rv):  # type: ignore[no-untyped-def]
            if args.get("continue") and not self.forgotten:
                self.forgotten += 1
                self._lists.clear()
            return super().page(scope, listing, args, rv)

    served.app.pages = ForgetsOnce()
    live = LiveCluster.from_kubeconfig(str(served.kubeconfig), context="synth")
    live.page = 7
    pods = live.list_pods()
    assert served.app.pages.forgotten == 1
    assert sorted(p.key for p in pods) == sorted(p.key for p in served.synth.list_pods()) and len(pods) > 14
    served.app.pages = Pages(keep=0)  # keeps no list: every continue is 410
    with pytest.raises(ApiRefused, match="kept answering 410 Gone to the pages of pods") as refused:
        live.list_pods()
    assert refused.value.status == 410


def test_cordon_and_evictions_reach_the_cluster(served: Served) -> None:
    live = _live(served, "rules")
    sim = served.rules
    node = sim.list_nodes()[0].name
    assert live.cordon(node).unschedulable and sim.get_node(node).unschedulable
    assert not live.cordon(node, unschedulable=False).unschedulable and not sim.get_node(node).unschedulable

    assert live.evict("web", "web-7d9c-a1").code == 201
    assert sim.get_pod("web", "web-7d9c-a1").terminating
    refused = live.evict("web", "web-7d9c-b2")
    assert refused == sim.evict("web", "web-7d9c-b2")
    assert refused.code == 429 and refused.causes[0][0] == "DisruptionBudget"
    two = live.evict("double", "queue-0")
    assert two.code == 500 and "more than one PodDisruptionBudget" in two.message
    assert live.evict("web", "ghost").code == 404


def test_watch_streams_pod_changes_to_the_official_client(served: Served) -> None:
    api = k8s.CoreV1Api(config.new_client_from_config(config_file=str(served.kubeconfig), context="synth"))
    listed = api.list_namespaced_pod("default")
    sim, cond = served.synth, served.cond
    events: list[tuple[str, str]] = []

    def change() -> None:
        body = k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="probe", labels={"app": "probe"}),
                         spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c", image="busybox")]))
        api.create_namespaced_pod("default", body)
        with cond:
            sim.advance(30)  # scheduled, then Ready
            cond.notify_all()
        api.delete_namespaced_pod("probe", "default", grace_period_seconds=0)

    # Changes made after the list are delivered from its resource version on, whenever the stream connects.
    thread = threading.Thread(target=change)
    thread.start()
    stream = watch.Watch()
    for event in stream.stream(api.list_namespaced_pod, "default", resource_version=listed.metadata.resource_version,
                               timeout_seconds=20):
        events.append((event["type"], event["object"].status.phase))
        if event["type"] == "DELETED":
            stream.stop()
    thread.join()
    assert events[0] == ("ADDED", "Pending") and events[-1][0] == "DELETED"
    assert ("MODIFIED", "Running") in events


def test_watch_from_a_resource_version_older_than_the_log_is_410(served: Served) -> None:
    state = served.states["synth"]
    state.changes = ChangeLog(state.sim, capacity=4)
    for pod in state.sim.list_pods()[:10]:
        state.sim.delete_pod(pod.namespace, pod.name, grace_seconds=0)
    state.changes.observe()
    api = k8s.CoreV1Api(config.new_client_from_config(config_file=str(served.kubeconfig), context="synth"))
    response = api.list_pod_for_all_namespaces(watch=True, resource_version="1", timeout_seconds=5, _preload_content=False)
    first = json.loads(response.readline())
    assert first["type"] == "ERROR" and first["object"]["code"] == 410 and first["object"]["reason"] == "Expired"


def test_rotate_plan_runs_against_a_live_context(served: Served, tmp_path: Path) -> None:
    pool = served.synth.list_nodes()[0].labels[LABEL_NODEGROUP]
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"targets:\n  {pool}: ami-0new\n")
    result = CliRunner().invoke(cli, ["rotate", "plan", "--policy", str(policy), "--context", "synth",
                                      "--kubeconfig", str(served.kubeconfig), "-o", "json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    planned = {n for w in plan["waves"] for n in w["nodes"]} | {b["node"] for b in plan["blocked"]}
    assert planned == {n.name for n in served.synth.list_nodes() if n.pool == pool}


def test_taints_are_added_and_removed_without_touching_the_nodes_others(served: Served) -> None:
    from platformctl.kernel.cluster.model import Taint

    live = _live(served, "synth")
    sim = served.synth
    node = sim.list_nodes()[0].name
    theirs = Taint("team.example.com/dedicated", "batch", "NoSchedule")
    sim.update_node(node, taints=(theirs,))
    ours = Taint("platformctl.io/rotation", "outdated", "PreferNoSchedule")
    assert live.taint(node, ours).taints == (theirs, ours) and sim.get_node(node).taints == (theirs, ours)
    assert live.taint(node, ours).taints == (theirs, ours)  # again: the same, not twice
    assert live.untaint(node, ours.key).taints == (theirs,) and sim.get_node(node).taints == (theirs,)


def test_a_node_patch_that_names_a_stale_resource_version_is_refused_with_409(served: Served) -> None:
    from platformctl.kernel.errors import ApiRefused

    live = _live(served, "synth")
    node = served.synth.list_nodes()[0]
    live.cordon(node.name)  # the node moves on: its resourceVersion changes
    body = {"metadata": {"resourceVersion": str(node.resource_version)}, "spec": {"taints": []}}
    with pytest.raises(ApiRefused) as refused:
        live._call(live._core.patch_node, node.name, body, what=f"node {node.name}")
    assert refused.value.status == 409 and "the object has been modified" in str(refused.value)
    assert "\n" not in str(refused.value)
