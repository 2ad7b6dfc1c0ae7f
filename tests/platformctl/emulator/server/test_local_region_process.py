"""``platformctl local up|status|down``: the local region as a separate server process used by real clients."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from platformctl.kernel.cluster.model import LABEL_NODE_TYPE
from platformctl.kernel.topology import load_stage
from tests.process import get, region_fixture, run

KUBECTL = shutil.which("kubectl")


DENSITY = 20  # `local up --pods-per-node`: the synthetic workloads' pods on each general node (30 unless asked)
region = region_fixture("--pods-per-node", str(DENSITY))


def test_status_names_the_endpoints_the_clusters_and_the_virtual_time(region: dict[str, Any]) -> None:
    status = json.loads(run(region["home"], "local", "status", "-o", "json").stdout)
    assert status["aws_endpoint"].startswith("http://127.0.0.1:") and Path(status["kubeconfig"]).is_file()
    assert [c["name"] for c in status["clusters"]] == [c.name for c in load_stage("dev").clusters()]
    assert all(c["nodes"] == c["nodes_ready"] > 0 for c in status["clusters"])
    # The cluster's clock started at the wall-clock time of `local up`, so ages read as today's.
    assert 0 <= status["virtual_epoch"] - region["up_wall"] < 3 * 24 * 3600
    # Each cluster has an endpoint of its own, as EKS gives it: its paths are the API server's own.
    servers = [c["server"] for c in status["clusters"]]
    assert len(set(servers)) == len(servers) and all("/clusters/" not in s for s in servers)
    # --pods-per-node: the teams' services fill each general node of a member cluster as densely as asked
    member = status["clusters"][1]["name"]
    general = [n for n in get(region, f"/clusters/{member}/api/v1/nodes")["items"]
               if n["metadata"]["labels"].get(LABEL_NODE_TYPE) == "general"]
    teams = [p for p in get(region, f"/clusters/{member}/api/v1/pods")["items"] if p["metadata"]["namespace"].startswith("team-")]
    assert general and len(teams) == DENSITY * len(general)


def test_a_second_up_reports_the_running_region(region: dict[str, Any]) -> None:
    again = json.loads(run(region["home"], "local", "up", "--stage", "dev", "-o", "json").stdout)
    assert again["started"] is False and again["pid"] == region["pid"]
    other = run(region["home"], "local", "up", "--stage", "staging", check=False)
    assert other.returncode == 2
    assert other.stderr.count("\n") == 1 and "local region of stage dev is running" in other.stderr


def test_the_virtual_clock_runs_at_the_given_speed(region: dict[str, Any]) -> None:
    from platformctl.kernel.region_client import ServerClock

    url = f"{region['kubernetes_endpoint']}/platformctl/v1/time"
    first, wall = ServerClock(url), time.monotonic()
    time.sleep(1.0)
    second, elapsed = ServerClock(url), time.monotonic() - wall
    ratio = (second.read_virtual - first.read_virtual) / elapsed
    assert 0.5 * region["speed"] < ratio < 1.5 * region["speed"]
    # A client reads the same time without asking again.
    assert abs(second.now() - ServerClock(url).now()) < 0.2 * region["speed"]


def _listening_addresses(pid: int) -> set[str]:
    """The local addresses of the listening TCP sockets that process ``pid`` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                address = fields[1].split(":")[0]
                found.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)) if len(address) == 8 else address)
    return found


def test_nothing_listens_beyond_loopback(region: dict[str, Any]) -> None:
    assert _listening_addresses(region["pid"]) == {"127.0.0.1"}


def test_a_live_cluster_of_the_region_takes_its_time_from_the_server(region: dict[str, Any]) -> None:
    from platformctl.kernel.cluster.live import LiveCluster
    from platformctl.kernel.region_client import ServerClock

    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=region["clusters"][1]["name"])
    assert isinstance(live.clock, ServerClock)
    newest = max(n.created for n in live.list_nodes())
    assert newest <= live.clock.now() < newest + 30 * 24 * 3600  # the cluster's time, not the wall's
    assert live.list_nodes() and live.list_pdbs()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it)")
def test_kubectl_gets_and_cordons(region: dict[str, Any]) -> None:
    config = region["kubeconfig"]
    member = region["clusters"][1]["name"]

    def kubectl(*args: str) -> str:
        result = subprocess.run([KUBECTL, "--kubeconfig", config, "--context", member, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    wide = kubectl("get", "nodes", "-o", "wide").splitlines()
    assert wide[0].split()[:6] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    names = [line.split()[0] for line in wide[1:]]
    assert len(names) == region["clusters"][1]["nodes"]
    pods = kubectl("get", "pods", "-A", "--no-headers").splitlines()
    assert pods and all(line.split()[0] for line in pods)
    assert {line.split()[0] for line in pods} >= {"kube-system"}
    assert f"node/{names[0]} cordoned" in kubectl("cordon", names[0])
    row = next(line for line in kubectl("get", "nodes").splitlines() if line.startswith(names[0]))
    assert "SchedulingDisabled" in row.split()[1]
    node = json.loads(kubectl("get", "node", names[0], "-o", "json"))
    assert node["spec"]["unschedulable"] is True
    kubectl("uncordon", names[0])


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it)")
def test_kubectl_sees_the_objects_the_pulumi_program_declares(region: dict[str, Any]) -> None:
    config = region["kubeconfig"]
    host, member = region["clusters"][0]["name"], region["clusters"][1]["name"]

    def kubectl(context: str, *args: str) -> str:
        result = subprocess.run([KUBECTL, "--kubeconfig", config, "--context", context, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    tiers = kubectl(member, "get", "priorityclasses").splitlines()
    assert tiers[0].split()[:4] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "PREEMPTION"]
    assert {line.split()[0]: line.split()[1] for line in tiers[1:]} == {"ondemand": "100000", "preemptible": "1000",
                                                                       "reserved": "1000000"}
    assert "canary" in kubectl(member, "get", "serviceaccounts", "-n", "platformctl-canary", "-o", "name")
    cron = json.loads(kubectl(host, "get", "cronjob", "platformctl-rotate", "-n", "platformctl-system", "-o", "json"))
    assert cron["spec"]["schedule"] == "0 3 * * 1-5" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert "memberclusters.federation.platformctl.io" in kubectl(host, "get", "crd", "-o", "name")
    account = json.loads(kubectl(host, "get", "sa", "platformctl-rotation", "-n", "platformctl-system", "-o", "json"))
    assert account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].endswith(f":role/{host}-rotation")


CLIENT = r'''
import sys, time, boto3
from platformctl.kernel.cluster.live import LiveCluster
kubeconfig, context, endpoint = sys.argv[1:4]
live = LiveCluster.from_kubeconfig(kubeconfig, context=context)
node = sorted(n.name for n in live.list_nodes())[0]
live.cordon(node)
print("done cordon", node, flush=True)
victim = next(p for p in live.list_pods() if p.owner and p.owner.kind == "ReplicaSet" and p.phase == "Running")
result = live.evict(victim.namespace, victim.name)
print("done evict", victim.namespace, victim.name, result.code, flush=True)
ssm = boto3.client("ssm", endpoint_url=endpoint, region_name="us-west-2")
ssm.put_parameter(Name="/platformctl/probe", Value="written-before-the-kill", Type="String")
print("done ssm", flush=True)
time.sleep(600)
'''

CHECK = r'''
import json, sys, boto3
from platformctl.kernel.cluster.live import LiveCluster
kubeconfig, context, endpoint, node, ns, pod = sys.argv[1:7]
live = LiveCluster.from_kubeconfig(kubeconfig, context=context)
try:
    gone = live.get_pod(ns, pod).terminating
except Exception:
    gone = True
ssm = boto3.client("ssm", endpoint_url=endpoint, region_name="us-west-2")
print(json.dumps({"cordoned": live.get_node(node).unschedulable, "evicted": gone,
                  "ssm": ssm.get_parameter(Name="/platformctl/probe")["Parameter"]["Value"]}))
'''


def test_changes_made_by_a_killed_client_are_all_there_for_the_next(region: dict[str, Any]) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    context = region["clusters"][1]["name"]
    client = subprocess.Popen([sys.executable, "-c", CLIENT, region["kubeconfig"], context, region["aws_endpoint"]],
                              stdout=subprocess.PIPE, text=True, env=env)
    assert client.stdout is not None
    done = [client.stdout.readline().split() for _ in range(3)]
    client.send_signal(signal.SIGKILL)
    client.wait(timeout=10)
    assert [d[1] for d in done] == ["cordon", "evict", "ssm"]
    node, (ns, pod, code) = done[0][2], done[1][2:5]
    assert code == "201"
    check = subprocess.run([sys.executable, "-c", CHECK, region["kubeconfig"], context, region["aws_endpoint"], node, ns, pod],
                           capture_output=True, text=True, env=env, timeout=60)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout) == {"cordoned": True, "evicted": True, "ssm": "written-before-the-kill"}


def test_the_region_boots_the_images_it_built_and_ami_build_finds_them(region: dict[str, Any], tmp_path: Path) -> None:
    from platformctl.kernel.cluster.live import LiveCluster

    # `local up` built the image tree into its own AWS and lock file (dev pins no images): the nodes boot it.
    lock = json.loads(Path(region["image_lock"]).read_text())
    newest = {name: next(iter(versions.values()))["us-west-2"] for name, versions in lock["images"].items()}
    member = LiveCluster.from_kubeconfig(region["kubeconfig"], context=region["clusters"][1]["name"])
    assert {n.image for n in member.list_nodes()} == {newest["general"], newest["ml"]}
    # Another process building the same manifests finds every image already built, in the region's moto server.
    out = tmp_path / "images.lock.json"
    again = json.loads(run(region["home"], "ami", "build", "--lock-file", str(out), "-o", "json").stdout)
    assert again["built"] == []
    plan = json.loads(run(region["home"], "ami", "plan", "-o", "json").stdout)
    assert plan["build"] == [] and {u["name"]: u["image_id"] for u in plan["unchanged"]} == newest


def test_ami_prune_deprecates_through_the_regions_aws_and_a_later_run_waits(region: dict[str, Any], tmp_path: Path) -> None:
    from ami.manifest import MANIFEST_DIR

    manifests = tmp_path / "manifests"
    shutil.copytree(MANIFEST_DIR, manifests)
    run(region["home"], "ami", "build", "--manifests", str(manifests), "--lock-file", str(tmp_path / "a.json"))
    base = manifests / "base.yaml"  # no node boots base itself: its old version is in nobody's use
    base.write_text(base.read_text().replace("version: 1.5.0", "version: 1.5.1", 1))
    run(region["home"], "ami", "build", "--manifests", str(manifests), "--lock-file", str(tmp_path / "b.json"))
    prune = ("ami", "prune", "base", "--keep", "1", "--lock-file", str(tmp_path / "b.json"), "-o", "json")

    first = json.loads(run(region["home"], *prune).stdout)
    second = json.loads(run(region["home"], *prune).stdout)

    # b.json records only base 1.5.1; 1.5.0 is retired, in the server's moto, and the next process sees it deprecated.
    assert [(d["name"], d["version"]) for d in first["deprecate"]] == [("base", "1.5.0")]
    assert [d["image_id"] for d in second["wait"]] == [d["image_id"] for d in first["deprecate"]]
    assert second["wait"][0]["deprecation_time"] == first["deprecate"][0]["deprecation_time"]
    assert second["deprecate"] == [] and second["deregister"] == []


def test_down_stops_the_server_and_leaves_no_process(tmp_path: Path) -> None:
    info = json.loads(run(tmp_path, "local", "up", "--no-workloads", "-o", "json").stdout)
    pid = info["pid"]
    assert run(tmp_path, "local", "status", check=False).returncode == 0
    stopped = json.loads(run(tmp_path, "local", "down", "-o", "json").stdout)
    assert stopped == {"stopped": True, "pid": pid, "stage": "dev", "stages": ["dev"]}
    # each cluster's canary runner pod had its process, which went with it (no process of its session is left)
    assert sorted(r["cluster"] for r in info["canary_runners"]) == sorted(c["name"] for c in info["clusters"])
    assert all(r["pid"] for r in info["canary_runners"])
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    session = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _session(p) == pid]
    assert session == []
    status = run(tmp_path, "local", "status", "-o", "json", check=False)
    assert status.returncode == 1 and json.loads(status.stdout) == {"running": False}
    assert json.loads(run(tmp_path, "local", "down", "-o", "json").stdout) == {"stopped": False}


def test_a_region_whose_owner_ended_stops_with_everything_it_ran(tmp_path: Path) -> None:
    """`local up --owner-pid`: a CI job (or a test session) killed before its `local down` leaves no region behind."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    refused = run(tmp_path, "local", "up", "--no-workloads", "--owner-pid", str(gone.pid), check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--owner-pid" in refused.stderr, refused.stderr
    assert not (tmp_path / "local" / "server.json").exists()  # nothing started for an owner already gone
    owner = subprocess.Popen(["sleep", "600"])
    info = json.loads(run(tmp_path, "local", "up", "--no-workloads", "--owner-pid", str(owner.pid), "-o", "json").stdout)
    pid = info["pid"]
    time.sleep(3)  # past the server's first look at its owner: it keeps running while the owner does
    assert run(tmp_path, "local", "status", check=False).returncode == 0
    other = run(tmp_path, "local", "up", "--no-workloads", "--owner-pid", str(os.getpid()), check=False)
    assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr
    assert f"stops with process {owner.pid}, not with process {os.getpid()}" in other.stderr and "--owner-pid" in other.stderr
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 60
    while run(tmp_path, "local", "status", check=False).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    status = run(tmp_path, "local", "status", "-o", "json", check=False)
    assert status.returncode == 1 and json.loads(status.stdout) == {"running": False}
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:  # the server's last moments, then its runners'
        time.sleep(0.2)
    assert [p for p in Path("/proc").iterdir() if p.name.isdigit() and _session(p) == pid] == []
    assert f"process {owner.pid}, the region's owner, has ended: stopping" in (tmp_path / "local" / "server.log").read_text()


def _session(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().split(")")[-1].split()[4])
    except (OSError, IndexError, ValueError):
        return None


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it)")
def test_kubectl_drain_evicts_through_the_budgets(region: dict[str, Any]) -> None:
    """kubectl's own drain: discovery of the eviction subresource, DaemonSet lookups, evictions, waiting for deletion."""
    from platformctl.kernel.cluster.live import LiveCluster

    host = region["clusters"][0]["name"]
    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=host)
    node = sorted(n.name for n in live.list_nodes())[-1]
    result = subprocess.run([KUBECTL, "--kubeconfig", region["kubeconfig"], "--context", host, "drain", node,
                             "--ignore-daemonsets", "--timeout=120s"], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert f"node/{node} drained" in result.stdout
    left = [p for p in live.list_pods(node_name=node) if not p.is_daemonset and not p.terminating]
    assert left == [] and live.get_node(node).unschedulable


def test_a_stage_rotation_plan_reads_the_running_region(region: dict[str, Any], tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("targets:\n  general: ami-0feedface0000001\n")
    plan = json.loads(run(region["home"], "rotate", "plan", "--policy", str(policy), "--stage", "dev", "-o", "json").stdout)
    assert sorted(c for step in plan["steps"] for c in step["clusters"]) == sorted(c["name"] for c in region["clusters"])
    member = region["clusters"][1]
    planned = plan["clusters"][member["name"]]
    assert planned["waves"] and planned["source"] == f"context {member['name']}"


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it)")
def test_kubectl_can_diagnose_the_region(region: dict[str, Any], tmp_path: Path) -> None:
    """What an operator reaches for when something is stuck: the API's own paths, events, describe, delete."""
    config = region["kubeconfig"]
    member = region["clusters"][1]["name"]

    def kubectl(*args: str, timeout: float = 60) -> str:
        result = subprocess.run([KUBECTL, "--kubeconfig", config, "--context", member, *args], capture_output=True,
                                text=True, timeout=timeout)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert json.loads(kubectl("get", "--raw", "/version"))["gitVersion"].startswith("v1.32")
    huge = tmp_path / "huge.yaml"
    huge.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: too-big, namespace: default}\nspec:\n"
                    "  containers: [{name: main, image: busybox, resources: {requests: {cpu: '500'}}}]\n")
    kubectl("create", "-f", str(huge))
    deadline = time.monotonic() + 30
    while "FailedScheduling" not in (events := kubectl("get", "events", "-n", "default", "--field-selector",
                                                       "involvedObject.name=too-big")):
        assert time.monotonic() < deadline, events
        time.sleep(0.2)
    assert "Insufficient cpu" in events and "pod/too-big" in events
    described = kubectl("describe", "pod", "too-big", "-n", "default")
    assert "FailedScheduling" in described and "default-scheduler" in described
    started = time.monotonic()
    assert 'pod "too-big" deleted' in kubectl("delete", "pod", "too-big", "-n", "default", timeout=30)
    assert time.monotonic() - started < 20  # the watch it waits on sees the pod go
    node = kubectl("get", "nodes", "-o", "name").split()[0]
    kubectl("cordon", node)
    deadline = time.monotonic() + 30
    while "NodeNotSchedulable" not in (on_node := kubectl("get", "events", "-n", "default", "--field-selector",
                                                          f"involvedObject.name={node.split('/')[1]}")):
        assert time.monotonic() < deadline, on_node
        time.sleep(0.2)
    kubectl("uncordon", node)


def test_ami_build_says_where_it_builds_and_keeps_the_regions_ids_out_of_the_checkout(region: dict[str, Any]) -> None:
    checkout_lock = Path(__file__).resolve().parents[4] / "ami" / "images.lock.json"
    existed = checkout_lock.exists()
    built = run(region["home"], "ami", "build")
    assert f"into the local region of stage dev (AWS endpoint {region['aws_endpoint']}), region us-west-2" in built.stdout
    assert f"wrote {region['image_lock']}" in built.stdout
    assert checkout_lock.exists() == existed  # the region's moto ids went to the region's own lock file


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it; the API is tested without it)")
def test_kubectl_rolls_scales_and_waits_on_a_deployment(region: dict[str, Any], tmp_path: Path) -> None:
    """What a user does with a Deployment: apply, set image and wait on the rollout (a watch of deployments), scale,
    roll back; the ReplicaSets and revisions are the deployment controller's."""
    config = region["kubeconfig"]
    member = region["clusters"][1]["name"]

    def kubectl(*args: str, timeout: float = 60) -> str:
        result = subprocess.run([KUBECTL, "--kubeconfig", config, "--context", member, "-n", "shop", *args],
                                capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, result.stderr
        return result.stdout

    def images() -> list[str]:  # of the pods not terminating (the rolled-out ones' grace periods may still run)
        pods = json.loads(kubectl("get", "pods", "-l", "app=web", "-o", "json"))["items"]
        return sorted(p["spec"]["containers"][0]["image"] for p in pods if not p["metadata"].get("deletionTimestamp"))

    manifest = tmp_path / "shop.yaml"
    manifest.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\napiVersion: apps/v1\n"
                        "kind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  replicas: 3\n"
                        "  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n"
                        "    spec: {containers: [{name: web, image: 'nginx:1.27'}]}\n")
    kubectl("apply", "-f", str(manifest))
    kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    kubectl("set", "image", "deployment/web", "web=nginx:1.28")
    assert "successfully rolled out" in kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    assert images() == ["nginx:1.28"] * 3
    kubectl("scale", "deployment/web", "--replicas=5")
    kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    assert kubectl("get", "deployment", "web", "-o", "jsonpath={.status.readyReplicas}") == "5"
    kubectl("rollout", "undo", "deployment/web")
    kubectl("rollout", "status", "deployment/web", "--timeout=60s")
    assert images() == ["nginx:1.27"] * 5
    history = kubectl("rollout", "history", "deployment/web")
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["2", "3"]
    replica_sets = kubectl("get", "rs", "-o", "jsonpath={range .items[*]}{.spec.replicas} {end}").split()
    assert sorted(replica_sets) == ["0", "5"]
    described = kubectl("describe", "deployment", "web")  # the deployment controller's events, as on a real cluster
    assert "ScalingReplicaSet" in described and "Scaled up replica set web-" in described
    assert "StrategyType:           RollingUpdate" in described and "25% max unavailable, 25% max surge" in described
    owners = {ref["uid"] for p in json.loads(kubectl("get", "pods", "-o", "json"))["items"]
              for ref in p["metadata"]["ownerReferences"]}
    uids = {rs["metadata"]["uid"] for rs in json.loads(kubectl("get", "rs", "-o", "json"))["items"]}
    assert owners and owners <= uids  # a pod's owner is a ReplicaSet the API serves
    kubectl("delete", "namespace", "shop")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (.ci/run installs it)")
def test_the_simulators_node_for_a_launch_template_is_the_regions_over_kubectl(region: dict[str, Any]) -> None:
    """The pure simulation's pools (benchmarks, planner tests) register a node with what the Pulumi program's user data
    asks for; the region registers one from the instance's user data as the kubelet does. For each pool of each
    cluster, kubectl's node and the simulator's node for the same pool and image carry the same labels, taints and
    provider id (the instance's own: its name, zone, id, instance type)."""
    import boto3

    from platformctl.emulator.simulator import NodePoolSpec, SimulatedCluster
    from platformctl.kernel.cluster.model import Taint

    stage = load_stage("dev")
    ec2 = boto3.client("ec2", region_name=stage.region, endpoint_url=region["aws_endpoint"],
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    compared = 0
    for cluster in stage.clusters():
        out = subprocess.run([KUBECTL, "--kubeconfig", region["kubeconfig"], "--context", cluster.name, "get", "nodes",
                              "-o", "json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        nodes = json.loads(out.stdout)["items"]
        for pool in cluster.node_pools:
            kube = next(n for n in nodes if n["metadata"]["labels"].get("eks.amazonaws.com/nodegroup") == pool.name)
            instance = kube["spec"]["providerID"].rsplit("/", 1)[-1]
            (inst,) = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"]
            sim = SimulatedCluster(cluster.name, region=stage.region)
            sim.add_pool(NodePoolSpec(pool.name, inst["Placement"]["AvailabilityZone"], inst["InstanceType"],
                                      inst["ImageId"], 1, node_type=pool.node_type, labels=pool.labels,
                                      taints=tuple(Taint(t.key, t.value, t.effect) for t in pool.taints),
                                      region=stage.region))
            simulated = sim.list_nodes()[0].to_kube()
            own = {"kubernetes.io/hostname"}  # the instance's name: another instance, another name
            assert {k: v for k, v in kube["metadata"]["labels"].items() if k not in own} == \
                {k: v for k, v in simulated["metadata"]["labels"].items() if k not in own}, (cluster.name, pool.name)
            assert kube["spec"].get("taints", []) == simulated["spec"].get("taints", []), (cluster.name, pool.name)
            assert kube["spec"]["providerID"] == f"aws:///{inst['Placement']['AvailabilityZone']}/{instance}"
            assert simulated["spec"]["providerID"].startswith(f"aws:///{inst['Placement']['AvailabilityZone']}/i-")
            compared += 1
    assert compared == sum(len(c.node_pools) for c in stage.clusters())
