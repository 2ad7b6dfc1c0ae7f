"""The local region server process: ``python -m platformctl.cli.serve --stage dev [--stage staging …] --state-dir DIR``.

``platformctl local up`` starts it detached. It

1. starts moto's server on 127.0.0.1 (a free port) and points its own boto3 clients at it;
2. provisions each stage's local region through that endpoint, each in the stage's own AWS region of the one
   moto, with the ``provisioner`` it is given (the stage's Pulumi program: VPC, subnets, EKS control planes,
   launch templates, auto scaling groups; one simulated cluster per cluster, whose nodes follow the groups'
   instances), boots the nodes, applies the Kubernetes objects the program declares, and fills the member
   clusters with workloads;
3. serves every cluster's Kubernetes API on 127.0.0.1 (``KubeAPI``) and writes a kubeconfig with
   one context per cluster;
4. runs one virtual clock for every stage at ``--speed`` times wall time: a thread advances it every 50 ms,
   the CronJob controller runs, and watches are woken with what changed;
5. writes ``server.json`` (pid, endpoints, stages, clusters) last, which is how ``up`` knows it is ready;
6. runs what the Pulumi program runs in each cluster and nobody starts by hand, the canary runner Deployment: its
   pod, bound and started by the simulation, runs as a process of this machine, started by the cluster's kubelet
   (``platformctl.emulator.server.kubelet``) as the program's spec says (one ``canary run --cluster C`` per
   cluster, writing to its stage's store), unless ``--no-canaries``; with ``--run-jobs`` the toolkit's Jobs' pods
   too. They stop with the server, and die with it if it is killed.

Each stage keeps its own stack state (``stack-<stage>.json``) and its own state store (``state.db`` when the
server holds one stage, ``state-<stage>.db`` when several): a stage's rotation, remediation and canaries share
it, as a stage's in-cluster jobs share the stage's DynamoDB table.

SIGTERM or SIGINT stops it cleanly and removes ``server.json``.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from platformctl.emulator.local_region import LocalRegion
from platformctl.emulator.server.iam import TOKEN_SECONDS, Issuers, TokenIssuer
from platformctl.emulator.server.kubeapi import KubeAPI
from platformctl.emulator.server.kubelet import Kubelet
from platformctl.emulator.server.network import NodeNetwork
from platformctl.emulator.server.objects import ApiError, ClusterState
from platformctl.emulator.server.timekeeper import TimedApp, TimeKeeper
from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.model import format_time
from platformctl.kernel.environment import FAKE_CREDENTIALS, AwsTarget, current, install
from platformctl.kernel.errors import NotFoundError, PlatformError
from platformctl.kernel.region_client import EXTENSION, process_alive
from platformctl.kernel.topology import HostCluster, Stage, load_stage, stage_table

TICK_SECONDS = 0.05
OWNER_POLL_SECONDS = 2.0  # how soon a region whose owner has ended (``--owner-pid``) stops
LEDGER_TABLE = "platformctl-release"  # the stacks' default ledger table (infra.settings.Release.ledger)
TOKEN_REFRESH_SECONDS = TOKEN_SECONDS * 0.2  # the kubelet makes a projected token again well before it expires
log = logging.getLogger("platformctl.emulator.server")


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def kubeconfig(stage: str | Mapping[str, str], base_url: str, clusters: Mapping[str, str] | Sequence[str],
               current: str) -> dict[str, Any]:
    """One context per cluster, each with its own server URL (given, or under the one port), its stage (one, or
    per cluster) and where to read the time."""
    servers = dict(clusters) if isinstance(clusters, Mapping) else {c: f"{base_url}/clusters/{c}" for c in clusters}
    stage_of = stage if isinstance(stage, Mapping) else dict.fromkeys(servers, stage)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {
            "server": server,
            "extensions": [{"name": EXTENSION, "extension": {"stage": stage_of[name], "time": f"{base_url}/platformctl/v1/time"}}],
        }} for name, server in servers.items()],
        "users": [{"name": "platformctl-local", "user": {"token": "local-region"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "platformctl-local"}} for name in servers],
        "current-context": current,
    }


def _version_of(region: LocalRegion, cluster: str) -> str:
    return region.kubernetes_versions.get(cluster, "1.32")


class ClusterEndpoint:
    """One cluster's own endpoint: the shared API with this cluster's path prefix put in front."""

    def __init__(self, app: Callable[..., Any], cluster: str) -> None:
        self.app = app
        self.prefix = f"/clusters/{cluster}"

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if not path.startswith((self.prefix + "/", "/platformctl/")) and path != self.prefix:
            environ["PATH_INFO"] = self.prefix + path
            environ["platformctl.own_endpoint"] = True  # links the API gives out carry no prefix here
        return self.app(environ, start_response)


class Server:
    def __init__(self, stage_names: Sequence[str], state_dir: Path, speed: float, infra_dir: Path | None, workloads: bool,
                 seed: int, provisioner: Callable[..., Any], prepare: Callable[..., Any] | None = None,
                 canaries: bool = False, skip: bool = True, run_jobs: bool = False, pods_per_node: float = 30.0,
                 real_clusters: Sequence[str] = (), owner: int | None = None) -> None:
        """``real_clusters``: clusters whose context is a real control plane (``platformctl.emulator.realk8s``) whose
        nodes are the cluster's instances, beside the simulated one the region's own jobs and workloads use;
        ``owner``: the process whose end stops the region (``serve``)."""
        self.owner = owner
        self.stages = [load_stage(name, infra_dir) for name in dict.fromkeys(stage_names)]
        self.real_clusters = list(real_clusters)
        self.real: dict[str, Any] = {}  # cluster -> (ControlPlane, Kubelets)
        self.stage = self.stages[0]
        self.infra_dir = infra_dir
        self.provisioner = provisioner
        self.prepare = prepare
        self.state_dir = state_dir
        self.speed = speed
        self.skip = skip
        self.keeper: TimeKeeper | None = None
        self.workloads = workloads
        self.pods_per_node = pods_per_node
        self.canaries = canaries
        self.run_jobs = run_jobs
        self.kubelets: list[Kubelet] = []
        self.seed = seed
        self.stopping = threading.Event()
        self.cond = threading.Condition(threading.RLock())
        self.regions: dict[str, LocalRegion] = {}
        self.stage_of: dict[str, str] = {}  # cluster -> its stage
        self.clusters: dict[str, ClusterState] = {}
        self.endpoints: dict[str, Any] = {}
        self.servers: dict[str, str] = {}
        self.started_wall = time.time()
        self.info: dict[str, Any] = {}
        self.tokens_made = 0.0  # when the running pods' service-account tokens were last made again (region's time)
        self.issuers = Issuers()  # each cluster's service-account token issuer (its OIDC provider's keys)
        self.gate: Any = None

    @property
    def region(self) -> LocalRegion | None:
        """The first stage's region (its clock is every stage's)."""
        return self.regions.get(self.stage.name)

    @property
    def ledger(self) -> str:
        """The release ledger every stage's tick shares, in the region's own account: a table in the first stage's
        AWS region, which that stage's stack creates (``ownsLedger``)."""
        return f"dynamodb://{LEDGER_TABLE}?region={self.stage.region}"

    def _release(self, stage: Stage) -> dict[str, Any]:
        """What the region sets of a stack's ``release`` block: the region's ledger, owned by the first stage, and the
        tick declared suspended (it runs when asked: ``kubectl create job --from=cronjob/platformctl-release-tick``)."""
        return {"ledger": self.ledger, "ownsLedger": stage.name == self.stage.name, "suspend": True}

    @staticmethod
    def _apply_objects(region: LocalRegion, states: Mapping[str, ClusterState]) -> None:
        """The Kubernetes objects the stage's Pulumi program declares for each cluster, and what the operator makes at
        a stage's bootstrap (docs/running-for-real.md): the tick's backend Secret."""
        host = region.stage.host_cluster.name
        for cluster, manifest in [*region.kubernetes, *((host, secret) for secret in pulumi_secrets(region.kubernetes, host))]:
            try:
                states[cluster].apply(manifest)
            except ApiError as exc:
                log.info("not applied: %s %s/%s: %s", cluster, manifest.get("kind"), manifest["metadata"]["name"],
                         exc.message)

    def _write_stack(self, stage: Stage, checkpoint: list[dict[str, Any]], release: dict[str, Any]) -> None:
        """The stack's state, as Pulumi would keep it: what `platformctl stage deploy` compares the program against,
        with the region's settings of its ``release`` block, which every deploy of it declares the same."""
        write_atomically(self.state_dir / f"stack-{stage.name}.json",
                         json.dumps({"stage": stage.name, "resources": checkpoint, "release": release}) + "\n")

    def _store_path(self, stage: str) -> Path:
        return self.state_dir / ("state.db" if len(self.stages) == 1 else f"state-{stage}.db")

    # ---------------------------------------------------------------- start

    def start(self) -> None:
        from werkzeug.serving import make_server

        from platformctl.emulator import moto_extensions
        from platformctl.emulator.server.awslog import RecordingMotoServer

        moto_extensions.install()  # AMI deprecation, which `ami prune` uses
        from moto.core.config import default_user_config

        # The program attaches AWS managed policies to its roles; moto knows them only when asked (its configuration).
        default_user_config["iam"]["load_aws_managed_policies"] = True
        self.moto = RecordingMotoServer(self._gated, ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        aws_endpoint = "http://{}:{}".format(*self.moto.get_host_and_port())
        # From here on, every AWS call of this process goes to the region's own AWS.
        install(current().with_aws(AwsTarget(endpoint=aws_endpoint, region=current().aws.region or self.stage.region,
                                             credentials=FAKE_CREDENTIALS, configured=True, local=True)))

        # The virtual clock starts at the wall-clock time of `local up`, so ages and timestamps read as today's. Every
        # stage runs on it: a candidate's soak in one stage and its rotation in the next are on one time line.
        clock = VirtualClock(time.time())
        moto_extensions.use_clock(clock.now)  # instances' LaunchTime in the region's time, as their nodes' ages are
        # The region's own lock file of the images built into its AWS: launch templates boot what it names. The first
        # stage's build copies its images to every other stage's AWS region, as `ami build --copy-to` would.
        lock = self.state_dir / "images.lock.json"
        lock.unlink(missing_ok=True)  # a region that ran here before had an AWS of its own: none of its images is here
        regions = tuple(dict.fromkeys(s.region for s in self.stages))
        prepare = functools.partial(self.prepare, lock=lock, copy_to=regions) if self.prepare is not None else None
        for i, stage in enumerate(self.stages):
            release = self._release(stage)
            # Nodes follow their instances every minute of virtual time, or every 0.2 s of wall time at high speed.
            region = LocalRegion(stage, provisioner=functools.partial(self.provisioner, image_lock=lock, release=release),
                                 seed=self.seed + 100 * i, sync_seconds=max(10.0, self.speed * 0.2), prepare=prepare,
                                 clock=clock, changes=self._aws_changes)
            region.__enter__()
            self.regions[stage.name] = region
            self._write_stack(stage, region.checkpoint, release)
        for i, (name, region) in enumerate(self.regions.items()):
            region.wait_until_ready()
            if self.workloads:
                region.populate_workloads(self.pods_per_node, seed=self.seed + 4 + 100 * i)
                for sim in region.clusters.values():
                    sim.run_until_settled(max_seconds=600)
            # the control plane's version as the region's EKS answers it (a deploy that bumps it is seen at the next sync)
            states = {cluster: ClusterState(sim, functools.partial(_version_of, region, cluster))
                      for cluster, sim in region.clusters.items()}
            self._apply_objects(region, states)
            self.clusters.update(states)
            self.stage_of.update(dict.fromkeys(states, name))

        assert self.region is not None
        # From here on the clock is the keeper's: at --speed while anyone works, skipping what nobody waits through.
        self.keeper = TimeKeeper(self.region.clock, self.cond, self.speed, self.skip, self._tick_clusters, self._latest)
        self.api = KubeAPI(self.clusters, self.cond, self.control, self.stopping, self._authenticator())
        app = TimedApp(self.api, self.keeper)
        # A pod's node reaches the clusters under /from/<cluster>/<node>/…, as the stage's security groups admit it.
        self.http = make_server("127.0.0.1", 0, NodeNetwork(app, self._reaches), threaded=True)
        base = f"http://127.0.0.1:{self.http.server_port}"
        # Each cluster also gets an endpoint of its own, as EKS gives each cluster its own: paths there are the
        # API server's own (`kubectl get --raw /version`), with no /clusters/<name> prefix.
        self.endpoints = {name: make_server("127.0.0.1", 0, ClusterEndpoint(app, name), threaded=True) for name in self.clusters}
        for name, server in self.endpoints.items():
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name=f"api {name}", daemon=True).start()
        self.servers = {name: f"http://127.0.0.1:{server.server_port}" for name, server in self.endpoints.items()}
        host = next(c.name for c in self.stage.clusters() if isinstance(c, HostCluster))
        config_path = self.state_dir / "kubeconfig"
        config = kubeconfig(self.stage_of, base, self.servers, host)
        for name in self.real_clusters:
            self._start_real(name, config)
        write_atomically(config_path, yaml.safe_dump(config, sort_keys=False))
        if self.run_jobs or self.canaries:  # the toolkit's own pods run as processes
            self._start_kubelets(config_path, aws_endpoint, base)
        by_stage = {s.name: {
            "region": s.region, "checkpoint": str((self.state_dir / f"stack-{s.name}.json").resolve()),
            # The stage's own state store: what rotation, remediation and the canaries of the stage share by default.
            "state": str(self._store_path(s.name).resolve()),
            "cluster_names": [c for c, owner in self.stage_of.items() if owner == s.name],
        } for s in self.stages}
        self.info = {
            "pid": os.getpid(), "stage": self.stage.name, "stages": [s.name for s in self.stages], "speed": self.speed,
            "skip": self.skip,
            "aws_endpoint": aws_endpoint, "kubernetes_endpoint": base, "kubeconfig": str(config_path.resolve()),
            "clusters": list(self.clusters), "started": format_time(self.started_wall), "log": str((self.state_dir / "server.log").resolve()),
            "image_lock": str(lock.resolve()), "canaries": self.canaries, "run_jobs": self.run_jobs, "by_stage": by_stage,
            "ledger": self.ledger,
            "owner_pid": self.owner,
            "real_control_planes": {name: plane.server for name, (plane, _) in self.real.items()},
            # The first stage's, as a region of one stage has always said.
            **{k: v for k, v in by_stage[self.stage.name].items() if k != "cluster_names"},
        }
        self.ticker = threading.Thread(target=self._tick_forever, name="virtual-clock", daemon=True)
        self.ticker.start()
        write_atomically(self.state_dir / "server.json", json.dumps(self.info, indent=2) + "\n")
        log.info("local region of %s ready: AWS %s, Kubernetes %s", ", ".join(self.info["stages"]), aws_endpoint, base)

    def _start_real(self, name: str, config: dict[str, Any]) -> None:
        """A real control plane for cluster ``name``: its nodes the cluster's instances (``Kubelets``, from this
        region's AWS), the program's Kubernetes objects for the cluster applied to it, and the kubeconfig's context
        ``name`` pointing at it as the operator (a client certificate in ``system:masters``; no region clock: its time
        is the wall's)."""
        from platformctl.emulator import moto_extensions
        from platformctl.emulator.realk8s import ControlPlane, Kubelets, binaries

        region = self.regions[self.stage_of[name]]
        plane = ControlPlane(self.state_dir / "real" / name, binaries(), name=name).start()
        where = region.stage.region
        self.real[name] = (plane, Kubelets(plane, name, where,
                                           kubelet_of=lambda image: moto_extensions.kubelet_of(where, image)).start())
        applied = plane.apply([manifest for cluster, manifest in region.kubernetes if cluster == name]
                              + pulumi_secrets(region.kubernetes, name))
        log.info("real control plane of %s at %s: %d of the program's objects applied", name, plane.server, applied)
        pki = plane.pki
        assert pki is not None
        for entry in config["clusters"]:
            if entry["name"] == name:
                entry["cluster"] = {"server": plane.server, "certificate-authority": str(pki.path("ca.crt"))}
        config["users"].append({"name": f"{name}-admin", "user": {"client-certificate": str(pki.path("admin.crt")),
                                                                  "client-key": str(pki.path("admin.key"))}})
        for entry in config["contexts"]:
            if entry["name"] == name:
                entry["context"]["user"] = f"{name}-admin"

    def _issuer(self, cluster: str) -> str | None:
        region = self.regions.get(self.stage_of.get(cluster, ""))
        found = ((region.outputs.get("clusters") or {}).get(cluster) or {}).get("oidcIssuer") if region else None
        return str(found) if found else None

    def _authenticator(self) -> Any:
        """Who each token is in each cluster (``platformctl.emulator.server.rbac``): the region's own token the stack's
        creator; a service account's token of the cluster's issuer; an IAM role's ``aws eks get-token`` through the
        cluster's access entries, as the stage's checkpoint holds them."""
        from platformctl.emulator.server.rbac import Authenticator

        entries: dict[str, list[dict[str, Any]]] = {}
        for region in self.regions.values():
            for resource in region.checkpoint:
                if resource.get("type") == "aws:eks/accessEntry:AccessEntry":
                    inputs = resource.get("inputs") or {}
                    entries.setdefault(str(inputs.get("clusterName")), []).append(inputs)
        assert self.region is not None
        return Authenticator(self.issuers, self._issuer, lambda cluster: entries.get(cluster, []),
                             lambda cluster: self.clusters[cluster].stored["serviceaccounts"], self.region.clock.now)

    def _gated(self, app: Any) -> Any:
        """moto's application behind the region's IAM (``platformctl.emulator.server.iam``: pods' roles through their
        tokens, every call of a role's session judged by its policies), recorded as CloudTrail would (refusals too)."""
        from platformctl.emulator.server.awslog import AwsCallLog
        from platformctl.emulator.server.iam import IamGate

        self.gate = IamGate(app, self.issuers, self._virtual_now)
        return AwsCallLog(self.gate, self._virtual_now)

    # ---------------------------------------------------------------- time

    def _aws_changes(self) -> int:
        return self.moto.log.generation if self.moto.log is not None else -1

    def _virtual_now(self) -> float:
        if self.region is None:
            raise RuntimeError("no clock yet")
        return self.region.clock.now()

    def _start_kubelets(self, kubeconfig: Path, aws_endpoint: str, base: str) -> None:
        """Every cluster's kubelet for the toolkit's own image, each pod reaching the clusters from its node through
        ``base``: its Jobs' pods run as processes (``--run-jobs``), and the canary runner the program deploys in every
        cluster, its Deployment's pod (unless ``--no-canaries``), writing to its stage's store."""
        infra = self.infra_dir if self.infra_dir is not None else Path.cwd() / "infra"
        kinds = frozenset({*(["Job"] if self.run_jobs else []), *(["ReplicaSet"] if self.canaries else [])})
        stores = {stage_table(s.name, self.infra_dir): self._store_path(s.name).resolve() for s in self.stages}
        with self.cond:
            for name, state in self.clusters.items():
                region = self.regions[self.stage_of[name]]
                issuer = self._issuer(name)
                identity = TokenIssuer(self.issuers, issuer, region.stage.region, region.clock.now) if issuer else None
                kubelet = Kubelet(state, self.state_dir, kubeconfig, aws_endpoint, infra if infra.is_dir() else None,
                                  self.cond, self._after_exit, self.keeper, base, kinds, stores, identity)
                state.sim.use_runtime(kubelet)
                self.kubelets.append(kubelet)

    def canary_runners(self) -> list[dict[str, Any]]:
        """Each cluster's canary runner pod as its kubelet runs it (under the lock): where, its process, its restarts."""
        out = []
        for kubelet in self.kubelets:
            for pod in kubelet.replicated():
                process = kubelet.processes.get(pod.uid)
                out.append({"cluster": kubelet.cluster.name, "pod": pod.name, "pid": process.pid if process else None,
                            "running": process is not None and process.poll() is None, "restarts": pod.restarts,
                            "address": kubelet.address(pod), "log": str(kubelet.log_path(pod).resolve())})
        return out

    def _reaches(self, cluster: str, node: str, target: str) -> str | None:
        """Why ``node`` of ``cluster`` cannot reach ``target``'s API server (None: it can): each stage is a VPC of its
        own, with no route to another's; inside one, its security groups decide (``LocalRegion.reaches``)."""
        stage = self.stage_of.get(cluster)
        if stage is None or target not in self.stage_of:
            return f"no cluster {cluster if stage is None else target} here"
        if self.stage_of[target] != stage:
            return f"{target} is in {self.stage_of[target]}'s VPC, which {stage}'s has no route to"
        return self.regions[stage].reaches(node, target)

    def _after_exit(self) -> None:
        """A pod's process ended (under the lock): the clusters' bookkeeping, and the clock looks again."""
        self._tick_clusters()
        if self.keeper is not None:
            self.keeper.kick.set()

    def _tick_clusters(self) -> bool:
        """After the clock moved (under the lock): the clusters' bookkeeping; whether any node or pod changed."""
        changed = False
        for state in self.clusters.values():
            changed = state.tick() or changed
        if self.region is not None and self.region.clock.now() - self.tokens_made >= TOKEN_REFRESH_SECONDS:
            self.tokens_made = self.region.clock.now()
            for kubelet in self.kubelets:
                kubelet.refresh_tokens()
        return changed

    def _latest(self, cluster: str, kind: str) -> int:
        state = self.clusters.get(cluster)
        return state.changes.latest(kind) if state is not None else 0

    def _tick_forever(self) -> None:
        keeper = self.keeper
        assert keeper is not None
        while not self.stopping.is_set():
            keeper.kick.wait(TICK_SECONDS)
            keeper.kick.clear()
            try:
                keeper.advance()
            except Exception:  # keep time moving; the log has the fault
                log.exception("virtual clock tick failed")

    def _fault(self, args: dict[str, Any]) -> dict[str, Any]:
        """Inject a fault into the stage that has what it names (a node, a pool, a cluster); an image's fault goes to
        every stage whose AWS region has the image."""
        kind = str(args.pop("kind", ""))
        done: list[dict[str, Any]] = []
        refused: list[PlatformError] = []
        for region in self.regions.values():
            try:
                done.append(region.fault(kind, **args))
            except NotFoundError as exc:
                refused.append(exc)
                continue
            except PlatformError as exc:
                if kind not in ("bad-image", "slow-start") or len(self.regions) == 1:
                    raise
                refused.append(exc)
                continue
            if kind not in ("bad-image", "slow-start"):
                break
        if not done:
            raise refused[0]
        return done[0]

    def control(self, what: str, args: dict[str, str] | None = None) -> dict[str, Any]:
        assert self.region is not None
        now = self.region.clock.now()
        args = args or {}
        if what == "aws_calls":
            record = self.moto.log
            calls = record.query(args.get("action")) if record is not None else []
            return {"kind": "AwsCallList", "calls": calls}
        if what == "iam_decisions":
            gate = self.gate
            found = gate.query(args.get("role"), args.get("refused") in ("1", "true")) if gate is not None else []
            return {"kind": "IamDecisionList", "decisions": found}
        if what == "rbac_decisions":
            found = self.api.rbac.decisions.query(args.get("user"), args.get("refused") in ("1", "true"))
            return {"kind": "RbacDecisionList", "decisions": found}
        if what == "invariants":
            state = self.clusters.get(args.get("cluster", ""))
            if state is None:
                return {"error": f"no cluster {args.get('cluster')!r}"}
            return state.invariants()
        if what == "faults":
            try:
                if args.get("method") == "POST":
                    fault = self._fault({k: v for k, v in args.items() if k != "method"})
                    log.info("fault injected: %s", fault)
                    return {"kind": "FaultList", "faults": self._faults(), "added": fault}
                if args.get("method") == "DELETE":
                    cleared = [f for region in self.regions.values() for f in region.clear_faults()]
                    log.info("faults cleared: %d", len(cleared))
                    return {"kind": "FaultList", "faults": [], "cleared": cleared}
            except PlatformError as exc:
                return {"code": 422, "error": exc.detail, "field": exc.field}
            return {"kind": "FaultList", "faults": self._faults()}
        if what == "time":
            return {"virtual_time": now, "virtual_time_iso": format_time(now), "speed": self.speed, "wall_time": time.time(),
                    "skip": self.skip}
        clusters = []
        for name, state in self.clusters.items():
            nodes = state.sim.list_nodes()
            clusters.append({"name": name, "stage": self.stage_of[name], "server": self.servers[name],
                             "nodes": len(nodes), "nodes_ready": sum(n.ready for n in nodes),
                             "pods": len(state.sim.list_pods())})
        runners = self.canary_runners()
        return {**self.info, "running": True, "clusters": clusters, "canary_runners": runners,
                "virtual_time": format_time(now), "virtual_epoch": now,
                "clock": self.keeper.status() if self.keeper is not None else {}}

    def _faults(self) -> list[dict[str, Any]]:
        seen, out = set(), []
        for region in self.regions.values():
            for fault in region.faults:
                key = json.dumps(fault, sort_keys=True)
                if key not in seen:  # an image's fault, in every stage that has the image, is one fault
                    seen.add(key)
                    out.append(fault)
        return out

    # ---------------------------------------------------------------- run and stop

    def serve(self) -> None:
        """Serve until SIGTERM or SIGINT, or until the process ``owner`` has ended (``local up --owner-pid``)."""
        owner = self.owner
        def stop(signum: int, frame: Any) -> None:
            log.info("signal %d: stopping", signum)
            self.stopping.set()
            for server in [self.http, *self.endpoints.values()]:
                threading.Thread(target=server.shutdown, daemon=True).start()

        def watch(pid: int) -> None:
            while not self.stopping.wait(OWNER_POLL_SECONDS):
                if not process_alive(pid):
                    log.info("process %d, the region's owner, has ended: stopping", pid)
                    stop(signal.SIGTERM, None)
                    return

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        if owner is not None:
            threading.Thread(target=watch, args=(owner,), name="owner", daemon=True).start()
        try:
            self.http.serve_forever(poll_interval=0.2)
        finally:
            self.stopping.set()
            self.stop_pods()
            for plane, kubelets in self.real.values():
                kubelets.stop()
                plane.stop()
            with self.cond:
                self.cond.notify_all()
            self.moto.stop()
            (self.state_dir / "server.json").unlink(missing_ok=True)
            log.info("stopped")

    def stop_pods(self) -> None:
        for kubelet in self.kubelets:  # the pods' processes go with their nodes
            kubelet.stop_all()


def pulumi_secrets(objects: Sequence[tuple[str, dict[str, Any]]], cluster: str) -> list[dict[str, Any]]:
    """What an operator makes at a stage's bootstrap (docs/running-for-real.md) in ``cluster``: the Secret each release
    tick CronJob there reads its backend's passphrase from (``envFrom``), as ``kubectl create secret generic`` makes it."""
    out = []
    for where, manifest in objects:
        if where != cluster or manifest.get("kind") != "CronJob":
            continue
        pod = manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        for container in pod.get("containers") or []:
            for source in container.get("envFrom") or []:
                name = (source.get("secretRef") or {}).get("name")
                if name:
                    out.append({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                                "metadata": {"name": name, "namespace": manifest["metadata"]["namespace"]},
                                "data": {"PULUMI_CONFIG_PASSPHRASE": base64.b64encode(b"local-region").decode()}})
    return out


def main(argv: list[str] | None, provisioner: Callable[..., Any], prepare: Callable[..., Any] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="platformctl-local-region")
    parser.add_argument("--stage", required=True, action="append", help="a stage the region holds (repeatable)")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--speed", type=float, default=300.0)
    parser.add_argument("--no-skip", action="store_true", help="never skip time nobody waits through")
    parser.add_argument("--infra-dir", type=Path, default=None)
    parser.add_argument("--no-workloads", action="store_true")
    parser.add_argument("--pods-per-node", type=float, default=30.0, help="how densely the workloads fill members")
    parser.add_argument("--canaries", action="store_true", help="run each cluster's canary runner pod as a process")
    parser.add_argument("--run-jobs", action="store_true", help="run the pods of the toolkit's own Jobs as processes")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--real-cluster", action="append", default=[], help="a cluster served by a real control plane")
    parser.add_argument("--owner-pid", type=int, default=None, help="stop once this process has ended")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    server = Server(args.stage, args.state_dir, args.speed, args.infra_dir, not args.no_workloads, args.seed, provisioner,
                    prepare, canaries=args.canaries, skip=not args.no_skip, run_jobs=args.run_jobs,
                    pods_per_node=args.pods_per_node, real_clusters=args.real_cluster, owner=args.owner_pid)
    try:
        server.start()
    except Exception as exc:
        log.exception("the local region did not start")
        print(f"error: the local region did not start: {exc}", file=sys.stderr)
        server.stop_pods()
        for plane, kubelets in server.real.values():
            kubelets.stop()
            plane.stop()
        return 1
    server.serve()
    # Nothing is left to write (the state files are written as they change, server.json is gone): leave without the
    # interpreter's teardown, which takes seconds to free moto's and the simulation's objects one by one.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
