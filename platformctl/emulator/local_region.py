"""The embedded local region of one stage: moto for AWS, a simulator for every cluster.

``LocalRegion`` creates the stage's network, launch templates and auto scaling groups in AWS
through the project's boto3 clients (moto in process unless ``AWS_ENDPOINT_URL`` points elsewhere)
and runs one ``SimulatedCluster`` per cluster on a shared virtual clock. Nodes follow the auto
scaling groups, like EKS nodes follow their instances: every ``sync_seconds`` of virtual time it
reads the groups, registers each new instance as its kubelet would (the labels, taints and cluster of
the nodeadm NodeConfig in its user data, the kubelet's own labels, nothing else; an image without a
kubelet, or user data the kubelet refuses, never registers) as a node that turns Ready after the pool's
boot time, and deletes the node of every instance that left its group. Deleting a node object while its instance runs is undone at the next sync, as a
kubelet re-registers.

What the region contains is not described here: the caller passes a ``provisioner`` that creates
it, which is the stage's Pulumi program run under the mock engine with boto3 behind it
(``infra.materialize.materialize``), so the local VPC, EKS control planes, launch templates and
auto scaling groups are the ones ``pulumi up`` would create. (Passing it in keeps the import
direction of DESIGN: shared modules import no subsystem.)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from platformctl.emulator import moto_extensions
from platformctl.emulator.simulator import SimulatedCluster, build_node
from platformctl.emulator.synthetic import WorkloadSummary, populate
from platformctl.kernel import aws
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.environment import FAKE_CREDENTIALS, AwsTarget, current, using
from platformctl.kernel.errors import NotFoundError, PlatformError
from platformctl.kernel.humanize import parse_duration
from platformctl.kernel.instance_types import INSTANCE_TYPES
from platformctl.kernel.memo import remembered
from platformctl.kernel.nodeadm import NodeConfig, WontJoin, read_user_data
from platformctl.kernel.topology import HostCluster, NodePool, Stage


@dataclass(frozen=True)
class Provisioned:
    """What a provisioner made: the network, each auto scaling group's cluster, pool and launch
    template, the Kubernetes objects each cluster gets, and the stack outputs."""

    vpc_id: str
    subnets: dict[str, str]  # zone -> private subnet id
    pools: dict[str, tuple[str, str, str]]  # auto scaling group -> (cluster, pool, launch template)
    kubernetes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (cluster, manifest)
    outputs: dict[str, Any] = field(default_factory=dict)
    # Every resource as the program declared it and AWS answered (type, name, id, inputs, state): what
    # Pulumi would keep in the stack's state, and what a later `stage deploy` compares against.
    checkpoint: list[dict[str, Any]] = field(default_factory=list)


Provisioner = Callable[[Stage], Provisioned]


@dataclass(frozen=True)
class PoolBinding:
    cluster: str
    pool: NodePool
    asg_name: str
    launch_template: str


class LocalRegion:
    def __init__(self, stage: Stage, *, provisioner: Provisioner, clock: VirtualClock | None = None, seed: int = 7,
                 sync_seconds: float = 10.0, prepare: Callable[[Stage], None] | None = None,
                 changes: Callable[[], int] | None = None) -> None:
        self.stage = stage
        self._provisioner = provisioner
        self.clock = clock or VirtualClock()
        self.sync_seconds = sync_seconds
        self.clusters: dict[str, SimulatedCluster] = {
            c.name: SimulatedCluster(c.name, clock=self.clock, seed=seed + i, region=stage.region)
            for i, c in enumerate(stage.clusters())
        }
        self.pools: dict[str, PoolBinding] = {}
        self.vpc_id = ""
        self.subnets: dict[str, str] = {}
        self.kubernetes: list[tuple[str, dict[str, Any]]] = []
        self.outputs: dict[str, Any] = {}
        self.checkpoint: list[dict[str, Any]] = []
        self._nodes_by_instance: dict[str, tuple[str, str]] = {}
        self._mock: Any = None
        self._aws: AbstractContextManager[Any] | None = None  # this process's AWS while moto runs in it
        self._ticking = False
        self._clients: dict[str, Any] = {}
        # Run once AWS is in place, before anything is provisioned (the image tree is built here, so
        # that the launch templates boot what was built).
        self._prepare = prepare
        # A count of the AWS calls that changed something (the server's call log keeps it): when it has not moved
        # since the last sync, no instance came or went and the groups need not be read again.
        self._changes = changes
        self._synced_at: int | None = None
        # Faults an operator injected (`platformctl local fault`), newest last, as `local fault list` shows them.
        self.faults: list[dict[str, Any]] = []
        self._no_join: dict[str, int] = {}  # auto scaling group -> how many of its next instances never join
        # Each cluster's control plane version, as EKS answers it (read again at every sync: a deploy upgrades it).
        self.kubernetes_versions: dict[str, str] = {}
        # Instances that booted and never registered a node -> why (their user data, their image, a fault).
        self._never_joined: dict[str, str] = {}
        self._configs: dict[str, NodeConfig | Exception] = {}  # user data -> what nodeadm makes of it
        self._kubelets: dict[str, str | None] = {}  # image -> the kubelet version it runs (None: it has none)
        self._reach: dict[tuple[str, str], str | None] = {}  # (node, cluster) -> why it cannot reach it, at:
        self._reach_generation: int | None = None  # the AWS calls that changed something, counted when it was read

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> LocalRegion:
        if not current().aws.endpoint:
            from moto import mock_aws

            moto_extensions.install()
            moto_extensions.use_clock(self.clock.now)
            # The program attaches AWS managed policies to its roles; moto knows them only when asked.
            self._mock = mock_aws(config={"iam": {"load_aws_managed_policies": True}})
            self._mock.start()
            # In this process, every AWS call of the region's life goes to moto, with keys moto takes.
            self._aws = using(current().with_aws(AwsTarget(region=self.stage.region, credentials=FAKE_CREDENTIALS,
                                                            configured=True, local=True)))
            self._aws.__enter__()
        moto_extensions.publish_eks_optimized_images(self.stage.region)  # what every AWS region holds
        if self._prepare is not None:
            self._prepare(self.stage)
        self.provision()
        return self

    def __exit__(self, *exc: object) -> None:
        self._clients.clear()
        if self._aws is not None:
            self._aws.__exit__(None, None, None)
            self._aws = None
        if self._mock is not None:
            self._mock.stop()
            self._mock = None

    def ec2(self) -> Any:
        return self._client("ec2")

    def autoscaling(self) -> Any:
        return self._client("autoscaling")

    def _client(self, service: str) -> Any:
        # Made once per region and only after moto is in place: a client made before the mock
        # starts would talk to the real endpoint.
        if service not in self._clients:
            self._clients[service] = aws.client(service, self.stage.region)
        return self._clients[service]

    # ------------------------------------------------------------------ provisioning

    def provision(self) -> None:
        """Create the stage's resources with the provisioner, then let nodes follow the groups."""
        made = self._provisioner(self.stage)
        self.vpc_id, self.subnets = made.vpc_id, dict(made.subnets)
        self.kubernetes, self.outputs = list(made.kubernetes), dict(made.outputs)
        self.checkpoint = list(made.checkpoint)
        for group, (cluster, pool_name, template) in made.pools.items():
            pool = next(p for p in self.stage.cluster(cluster).node_pools if p.name == pool_name)
            self.pools[group] = PoolBinding(cluster, pool, group, template)
        self.sync()
        if not self._ticking:
            self._ticking = True
            self.clock.call_later(self.sync_seconds, self._tick)

    # ------------------------------------------------------------------ nodes follow instances

    def _tick(self) -> None:
        self.clock.call_later(self.sync_seconds, self._tick)
        if self._changes is not None:
            generation = self._changes()
            if generation == self._synced_at and not self._node_object_lost():
                return
            self._synced_at = generation  # read before the sync: a change made during it brings another
        self.sync()

    def _node_object_lost(self) -> bool:
        """A node object deleted while its instance runs (its kubelet re-registers it at the next sync)."""
        names = {cluster: {n.name for n in sim.list_nodes()} for cluster, sim in self.clusters.items()}
        return any(node not in names[cluster] for cluster, node in self._nodes_by_instance.values())

    def sync(self) -> None:
        """Make every cluster's nodes match the instances of its auto scaling groups (and know each control plane's
        Kubernetes version: what the API server says it runs, and a node that registers runs)."""
        if self._changes is not None or not self.kubernetes_versions:  # in process (no call log): read once
            self._read_versions()
        asg = self.autoscaling()
        in_groups: dict[str, PoolBinding] = {}
        pages = asg.get_paginator("describe_auto_scaling_groups").paginate(AutoScalingGroupNames=list(self.pools))
        for page in pages:
            for group in page["AutoScalingGroups"]:
                binding = self.pools[group["AutoScalingGroupName"]]
                for inst in group["Instances"]:
                    if inst["LifecycleState"] in ("InService", "Pending"):
                        in_groups[inst["InstanceId"]] = binding
        for instance_id, (cluster, node) in list(self._nodes_by_instance.items()):
            if instance_id not in in_groups:
                del self._nodes_by_instance[instance_id]
                sim = self.clusters[cluster]
                if any(n.name == node for n in sim.list_nodes()):
                    sim.delete_node(node)
        registered = {(c, n) for c, n in self._nodes_by_instance.values()}
        missing = []
        for instance_id, binding in in_groups.items():
            if instance_id in self._nodes_by_instance or instance_id in self._never_joined:
                continue
            if self._no_join.get(binding.asg_name, 0) > 0:  # its bootstrap fails: the kubelet never registers
                self._no_join[binding.asg_name] -= 1
                self._never_joined[instance_id] = "instance-no-join fault"
                continue
            missing.append(instance_id)
        self._never_joined = {i: why for i, why in self._never_joined.items() if i in in_groups}
        for instance_id, (cluster, node) in self._nodes_by_instance.items():
            sim = self.clusters[cluster]
            try:
                sim.get_node(node)
            except NotFoundError:
                missing.append(instance_id)  # node object deleted, instance still running: re-register
        if not missing:
            return
        ec2 = self.ec2()
        for reservation in ec2.describe_instances(InstanceIds=missing)["Reservations"]:
            for inst in reservation["Instances"]:
                binding = in_groups[inst["InstanceId"]]
                self._register(binding, inst, registered)

    def _read_versions(self) -> None:
        eks = self._client("eks")
        for cluster in self.clusters:
            try:
                self.kubernetes_versions[cluster] = eks.describe_cluster(name=cluster)["cluster"]["version"]
            except eks.exceptions.ResourceNotFoundException:  # a region made without the program's EKS clusters
                pass

    def _register(self, binding: PoolBinding, inst: dict[str, Any], registered: set[tuple[str, str]]) -> None:
        """The kubelet of a new instance registers its node, with what the instance's user data asks for (nodeadm's
        NodeConfig: the cluster, ``--node-labels``, ``--register-with-taints``) and the kubelet's own labels; an
        instance whose user data or image would not bring up a kubelet that joins never becomes a node."""
        pool = binding.pool
        name = inst.get("PrivateDnsName") or f"{inst['InstanceId']}.{self.stage.region}.compute.internal"
        zone = inst["Placement"]["AvailabilityZone"]
        if inst.get("InstanceType") not in INSTANCE_TYPES:
            raise PlatformError(
                f"instance {inst['InstanceId']} has instance type {inst.get('InstanceType')!r}, which platformctl does not know",
                file=f"auto scaling group {binding.asg_name}", field="LaunchTemplate.InstanceType",
            )
        try:
            if inst["ImageId"] not in self._kubelets:  # an image's lineage never changes
                self._kubelets[inst["ImageId"]] = moto_extensions.kubelet_of(self.stage.region, inst["ImageId"])
            if self._kubelets[inst["ImageId"]] is None:
                raise WontJoin(f"its image {inst['ImageId']} has no kubelet and nodeadm (neither EKS-optimised nor "
                               "built from one, and its manifests install neither)")
            config = self._node_config(inst["InstanceId"])
            if config.cluster not in self.clusters:
                raise WontJoin(f"its NodeConfig names cluster {config.cluster!r}, which is not in this region")
        except WontJoin as exc:
            self._never_joined[inst["InstanceId"]] = str(exc)
            return
        rejoin = (config.cluster, name) in registered
        node = build_node(
            name=name, zone=zone, region=self.stage.region, instance_type=inst["InstanceType"],
            instance_id=inst["InstanceId"], labels=config.labels, taints=config.taints, created=self.clock.now(),
            kubelet_version=self.kubernetes_versions.get(config.cluster, ""),
        )
        self.clusters[config.cluster].add_node(node, ready_after=30.0 if rejoin else float(pool.boot_seconds))
        self._nodes_by_instance[inst["InstanceId"]] = (config.cluster, name)

    def _node_config(self, instance_id: str) -> NodeConfig:
        """What nodeadm reads from the instance's user data (EC2 serves it to the instance as its launch template
        version gave it); parsed once per distinct user data."""
        raw = self.ec2().describe_instance_attribute(InstanceId=instance_id, Attribute="userData").get("UserData", {})
        data = str(raw.get("Value") or "")
        return remembered(self._configs, data, lambda: read_user_data(data), WontJoin)

    # ------------------------------------------------------------------ the network

    def reaches(self, node: str, cluster: str) -> str | None:
        """Why a connection from ``node``'s instance to ``cluster``'s API server on 443 is not admitted, or None when
        it is: an ingress rule of a security group of the cluster's control plane (its endpoint ENIs carry them) that
        admits tcp 443 from a group of the instance, or from a CIDR holding its private address. Read from EC2 and EKS
        as they are (cached while no AWS call changed anything)."""
        generation = self._changes() if self._changes is not None else None
        if generation is None or generation != self._reach_generation:
            self._reach, self._reach_generation = {}, generation  # what AWS says has changed: ask it again
        key = (node, cluster)
        if key not in self._reach:
            self._reach[key] = self._reaches(node, cluster)
        return self._reach[key]

    def _reaches(self, node: str, cluster: str) -> str | None:
        if cluster not in self.clusters:
            return f"{cluster} is not in {self.stage.name}'s VPC: no route"
        instance = next((i for i, (_, n) in self._nodes_by_instance.items() if n == node), None)
        if instance is None:
            return f"no instance of this region is node {node}"
        reservations = self.ec2().describe_instances(InstanceIds=[instance])["Reservations"]
        inst = reservations[0]["Instances"][0]
        sources = {g["GroupId"] for g in inst.get("SecurityGroups", [])}
        address = ipaddress.ip_address(inst.get("PrivateIpAddress") or "0.0.0.0")
        try:
            plane = self._client("eks").describe_cluster(name=cluster)["cluster"]["resourcesVpcConfig"]
        except Exception:  # a region made without the program's EKS clusters: nothing to say no with
            return None
        groups = plane.get("securityGroupIds") or []
        for group in self.ec2().describe_security_groups(GroupIds=groups)["SecurityGroups"] if groups else []:
            for rule in group.get("IpPermissions", []):
                protocol = str(rule.get("IpProtocol"))
                if not (protocol == "-1" or (protocol in ("tcp", "6") and
                                             int(rule.get("FromPort", 0)) <= 443 <= int(rule.get("ToPort", 65535)))):
                    continue
                if any(pair.get("GroupId") in sources for pair in rule.get("UserIdGroupPairs", [])):
                    return None
                if any(address in ipaddress.ip_network(r["CidrIp"], strict=False) for r in rule.get("IpRanges", [])):
                    return None
        return (f"no ingress rule of {cluster}'s security groups ({', '.join(groups) or 'none'}) admits tcp 443 from "
                f"{node}'s ({', '.join(sorted(sources)) or 'none'})")

    # ------------------------------------------------------------------ faults

    def _find_node(self, name: str) -> tuple[str, SimulatedCluster]:
        for cluster, sim in self.clusters.items():
            if any(n.name == name for n in sim.list_nodes()):
                return cluster, sim
        raise NotFoundError(f"no node {name!r} in any cluster of the local {self.stage.name} region", field="NODE")

    def _find_pool(self, name: str) -> PoolBinding:
        """A pool by ``CLUSTER/POOL``, by its auto scaling group's name, or by its name alone when only one cluster has it."""
        found = [b for g, b in self.pools.items() if name in (g, f"{b.cluster}/{b.pool.name}", b.pool.name)]
        if len(found) == 1:
            return found[0]
        names = sorted(f"{b.cluster}/{b.pool.name}" for b in (found or self.pools.values()))
        raise NotFoundError(f"{'more than one' if found else 'no'} pool {name!r} in the local {self.stage.name} region "
                            f"(name one of {', '.join(names)})", field="POOL")

    def _known_image(self, image: str) -> None:
        if not image.startswith("ami-"):
            raise PlatformError(f"{image!r} is not an AMI id (ami-…)", field="AMI")
        if any(n.image == image for sim in self.clusters.values() for n in sim.list_nodes()):
            return
        try:
            self.ec2().describe_images(ImageIds=[image])
        except Exception:
            raise PlatformError(f"no image {image} in the local {self.stage.name} region (its nodes boot "
                                f"{', '.join(sorted({n.image or '' for sim in self.clusters.values() for n in sim.list_nodes()}))})",
                                field="AMI") from None

    def fault(self, kind: str, **args: Any) -> dict[str, Any]:
        """Break something as it breaks in production; the clusters and AWS show it as a real node or account would.

        ``node-notready NODE [status=Unknown|False]``, ``node-condition NODE TYPE [status] [reason]``,
        ``instance-no-join POOL [count]`` (the pool's next ``count`` instances never register a node),
        ``bad-image AMI`` (containers never start on nodes booted from it: ``CreateContainerError``),
        ``slow-start AMI SECONDS`` (they start that much late), ``api-errors CLUSTER RATE [verbs] [for]`` (creates,
        or every request, answered 503; for a duration of the region's time from the first one, or until cleared).
        """
        now = self.clock.now()
        if kind == "node-notready":
            cluster, sim = self._find_node(str(args.get("node")))
            status = str(args.get("status") or "Unknown")
            sim.stop_kubelet(str(args["node"]), status)
            entry = {"kind": kind, "cluster": cluster, "node": args["node"], "status": status}
        elif kind == "node-condition":
            cluster, sim = self._find_node(str(args.get("node")))
            type_ = str(args.get("type") or "")
            if not type_:
                raise PlatformError("needs a condition TYPE", field="TYPE")
            status = str(args.get("status") or "True")
            sim.set_node_condition(str(args["node"]), type_, status, str(args.get("reason") or ""), str(args.get("message") or ""))
            entry = {"kind": kind, "cluster": cluster, "node": args["node"], "type": type_, "status": status}
        elif kind == "instance-no-join":
            binding = self._find_pool(str(args.get("pool")))
            count = int(args.get("count") or 1)
            if count < 1:
                raise PlatformError("count must be at least 1", field="--count")
            self._no_join[binding.asg_name] = self._no_join.get(binding.asg_name, 0) + count
            entry = {"kind": kind, "cluster": binding.cluster, "pool": binding.pool.name, "group": binding.asg_name,
                     "count": count}
        elif kind in ("bad-image", "slow-start"):
            image = str(args.get("image") or "")
            self._known_image(image)
            delay: float | None = None
            if kind == "slow-start":
                try:
                    delay = float(args.get("seconds", ""))
                except ValueError:
                    raise PlatformError(f"{args.get('seconds')!r} is not a number of seconds", field="SECONDS") from None
                if delay < 0:
                    raise PlatformError("cannot be negative", field="SECONDS")
            for sim in self.clusters.values():
                sim.set_image_fault(image, delay)
            entry = {"kind": kind, "image": image, **({"seconds": delay} if delay is not None else {})}
        elif kind == "api-errors":
            cluster = str(args.get("cluster") or "")
            sim = self.cluster(cluster)
            raw = str(args.get("rate", "")).strip()
            try:
                rate = float(raw.rstrip("%")) / (100 if raw.endswith("%") else 1)
            except ValueError:
                raise PlatformError(f"{raw!r} is not a rate (0.2 or 20%)", field="RATE") from None
            if not 0 <= rate <= 1:
                raise PlatformError(f"{raw!r} is not a rate between 0 and 1 (or 0% and 100%)", field="RATE")
            verbs = str(args.get("verbs") or "create")
            if verbs not in ("create", "all"):
                raise PlatformError(f"{verbs!r} is not create or all", field="--verbs")
            lasting = None
            if args.get("for") not in (None, ""):
                try:
                    lasting = float(parse_duration(args["for"]))
                except ValueError as exc:
                    raise PlatformError(str(exc), field="--for") from None
            sim.api_error_rate, sim.api_error_verbs = rate, verbs
            sim.api_error_for, sim.api_error_until = lasting, None  # the outage's clock starts at its first 503
            entry = {"kind": kind, "cluster": cluster, "rate": rate, "verbs": verbs,
                     **({"for": lasting} if lasting is not None else {})}
        else:
            raise PlatformError(f"unknown fault {kind!r} (node-notready, node-condition, instance-no-join, bad-image, "
                                "slow-start, api-errors)", field="KIND")
        entry["since"] = now
        self.faults.append(entry)
        return entry

    def clear_faults(self) -> list[dict[str, Any]]:
        """End every fault: nodes recover, and instances that never joined register now. Returns what was cleared."""
        cleared, self.faults = self.faults, []
        for entry in cleared:
            if entry["kind"] in ("node-notready", "node-condition"):
                sim = self.clusters[entry["cluster"]]
                if any(n.name == entry["node"] for n in sim.list_nodes()):
                    sim.restore_node(entry["node"])
        for sim in self.clusters.values():
            sim.clear_image_faults()
            sim.api_error_rate, sim.api_error_verbs, sim.api_error_for, sim.api_error_until = 0.0, "create", None, None
        self._no_join.clear()
        self._never_joined.clear()
        self.sync()
        return cleared

    # ------------------------------------------------------------------ conveniences

    def cluster(self, name: str) -> SimulatedCluster:
        try:
            return self.clusters[name]
        except KeyError:
            raise NotFoundError(f"no cluster {name!r} in the local {self.stage.name} region", field="cluster") from None

    def advance(self, seconds: float) -> None:
        self.clock.sleep(seconds)

    def wait_until_ready(self, max_seconds: float = 1800.0) -> bool:
        deadline = self.clock.now() + max_seconds
        while self.clock.now() < deadline:
            if all(sim.settled() and sim.list_nodes() for sim in self.clusters.values()):
                return True
            self.clock.sleep(self.sync_seconds)
        return False

    def populate_workloads(self, pods_per_node: float = 30.0, seed: int = 11) -> dict[str, WorkloadSummary]:
        """Synthetic workloads on every member cluster; the host cluster gets only system pods."""
        out = {}
        for i, cluster in enumerate(self.stage.clusters()):
            sim = self.clusters[cluster.name]
            density = 0.0 if isinstance(cluster, HostCluster) else pods_per_node
            out[cluster.name] = populate(sim, pods_per_node=density, seed=seed + i, team_size=8, pdb_every_pods=20)
        return out
