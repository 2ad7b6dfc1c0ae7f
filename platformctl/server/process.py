"""The local region server process: ``python -m platformctl.cli.serve --stage dev --state-dir DIR``.

``platformctl local up`` starts it detached. It

1. starts moto's server on 127.0.0.1 (a free port) and points its own boto3 clients at it;
2. provisions the stage's local region through that endpoint with the ``provisioner`` it is given
   (the stage's Pulumi program: VPC, subnets, EKS control planes, launch templates, auto scaling
   groups; one simulated cluster per cluster, whose nodes follow the groups' instances), boots the
   nodes, applies the Kubernetes objects the program declares, and fills the member clusters with
   workloads;
3. serves every cluster's Kubernetes API on 127.0.0.1 (``KubeAPI``) and writes a kubeconfig with
   one context per cluster;
4. runs the virtual clock at ``--speed`` times wall time: a thread advances it every 50 ms, the
   CronJob controller runs, and watches are woken with what changed;
5. writes ``server.json`` (pid, endpoints, clusters) last, which is how ``up`` knows it is ready.

SIGTERM or SIGINT stops it cleanly and removes ``server.json``.
"""

from __future__ import annotations

import argparse
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

from platformctl.clock import VirtualClock
from platformctl.cluster.model import format_time
from platformctl.errors import PlatformError
from platformctl.local_region import FAKE_CREDENTIALS, LocalRegion
from platformctl.region_client import EXTENSION
from platformctl.server.kubeapi import KubeAPI
from platformctl.server.objects import ApiError, ClusterState
from platformctl.topology import HostCluster, load_stage

TICK_SECONDS = 0.05
log = logging.getLogger("platformctl.server")


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def kubeconfig(stage: str, base_url: str, clusters: Mapping[str, str] | Sequence[str], current: str) -> dict[str, Any]:
    """One context per cluster, each with its own server URL (given, or under the one port), and where to read the time."""
    servers = dict(clusters) if isinstance(clusters, Mapping) else {c: f"{base_url}/clusters/{c}" for c in clusters}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {
            "server": server,
            "extensions": [{"name": EXTENSION, "extension": {"stage": stage, "time": f"{base_url}/platformctl/v1/time"}}],
        }} for name, server in servers.items()],
        "users": [{"name": "platformctl-local", "user": {"token": "local-region"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "platformctl-local"}} for name in servers],
        "current-context": current,
    }


class ClusterEndpoint:
    """One cluster's own endpoint: the shared API with this cluster's path prefix put in front."""

    def __init__(self, app: KubeAPI, cluster: str) -> None:
        self.app = app
        self.prefix = f"/clusters/{cluster}"

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if not path.startswith((self.prefix + "/", "/platformctl/")) and path != self.prefix:
            environ["PATH_INFO"] = self.prefix + path
            environ["platformctl.own_endpoint"] = True  # links the API gives out carry no prefix here
        return self.app(environ, start_response)


class Server:
    def __init__(self, stage_name: str, state_dir: Path, speed: float, infra_dir: Path | None, workloads: bool, seed: int,
                 provisioner: Callable[..., Any], prepare: Callable[..., Any] | None = None) -> None:
        self.stage = load_stage(stage_name, infra_dir)
        self.provisioner = provisioner
        self.prepare = prepare
        self.state_dir = state_dir
        self.speed = speed
        self.workloads = workloads
        self.seed = seed
        self.stopping = threading.Event()
        self.cond = threading.Condition(threading.RLock())
        self.region: LocalRegion | None = None
        self.clusters: dict[str, ClusterState] = {}
        self.endpoints: dict[str, Any] = {}
        self.servers: dict[str, str] = {}
        self.started_wall = time.time()
        self.info: dict[str, Any] = {}

    # ---------------------------------------------------------------- start

    def start(self) -> None:
        from werkzeug.serving import make_server

        from platformctl import moto_extensions
        from platformctl.server.awslog import AwsCallLog, RecordingMotoServer

        moto_extensions.install()  # AMI deprecation, which `ami prune` uses
        os.environ["MOTO_IAM_LOAD_MANAGED_POLICIES"] = "true"  # the program attaches AWS managed policies
        self.moto = RecordingMotoServer(lambda app: AwsCallLog(app, self._virtual_now), ip_address="127.0.0.1", port=0,
                                        verbose=False)
        self.moto.start()
        aws_endpoint = "http://{}:{}".format(*self.moto.get_host_and_port())
        os.environ.update(FAKE_CREDENTIALS)
        os.environ["AWS_ENDPOINT_URL"] = aws_endpoint
        os.environ.setdefault("AWS_REGION", self.stage.region)

        # The virtual clock starts at the wall-clock time of `local up`, so ages and timestamps read as today's.
        clock = VirtualClock(time.time())
        # The region's own lock file of the images built into its AWS: launch templates boot what it names.
        lock = self.state_dir / "images.lock.json"
        prepare = functools.partial(self.prepare, lock=lock) if self.prepare is not None else None
        # Nodes follow their instances every minute of virtual time, or every 0.2 s of wall time at high speed.
        region = LocalRegion(self.stage, provisioner=functools.partial(self.provisioner, image_lock=lock), seed=self.seed,
                             sync_seconds=max(10.0, self.speed * 0.2), prepare=prepare, clock=clock)
        moto_extensions.use_clock(clock.now)  # instances' LaunchTime in the region's time, as their nodes' ages are
        region.__enter__()
        self.region = region
        # The stack's state, as Pulumi would keep it: what `platformctl stage deploy` compares the program against.
        write_atomically(self.state_dir / f"stack-{self.stage.name}.json",
                         json.dumps({"stage": self.stage.name, "resources": region.checkpoint}) + "\n")
        region.wait_until_ready()
        if self.workloads:
            region.populate_workloads(seed=self.seed + 4)
            for sim in region.clusters.values():
                sim.run_until_settled(max_seconds=600)
        version = "1.32"
        self.clusters = {name: ClusterState(sim, version) for name, sim in region.clusters.items()}
        # The Kubernetes objects the stage's Pulumi program declares for each cluster.
        skipped = []
        for cluster, manifest in region.kubernetes:
            try:
                self.clusters[cluster].apply(manifest)
            except ApiError as exc:
                skipped.append(f"{cluster} {manifest.get('kind')}/{manifest['metadata']['name']}: {exc.message}")
        for line in skipped:
            log.info("not applied: %s", line)

        app = KubeAPI(self.clusters, self.cond, self.control, self.stopping)
        self.http = make_server("127.0.0.1", 0, app, threaded=True)
        base = f"http://127.0.0.1:{self.http.server_port}"
        # Each cluster also gets an endpoint of its own, as EKS gives each cluster its own: paths there are the
        # API server's own (`kubectl get --raw /version`), with no /clusters/<name> prefix.
        self.endpoints = {name: make_server("127.0.0.1", 0, ClusterEndpoint(app, name), threaded=True) for name in self.clusters}
        for name, server in self.endpoints.items():
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name=f"api {name}", daemon=True).start()
        self.servers = {name: f"http://127.0.0.1:{server.server_port}" for name, server in self.endpoints.items()}
        host = next(c.name for c in self.stage.clusters() if isinstance(c, HostCluster))
        config_path = self.state_dir / "kubeconfig"
        write_atomically(config_path, yaml.safe_dump(kubeconfig(self.stage.name, base, self.servers, host), sort_keys=False))
        self.info = {
            "pid": os.getpid(), "stage": self.stage.name, "region": self.stage.region, "speed": self.speed,
            "aws_endpoint": aws_endpoint, "kubernetes_endpoint": base, "kubeconfig": str(config_path.resolve()),
            "clusters": list(self.clusters), "started": format_time(self.started_wall), "log": str((self.state_dir / "server.log").resolve()),
            "image_lock": str(lock.resolve()), "checkpoint": str((self.state_dir / f"stack-{self.stage.name}.json").resolve()),
            # The region's own state store: what rotation, remediation and the canaries of this region share by default.
            "state": str((self.state_dir / "state.db").resolve()),
        }
        self.ticker = threading.Thread(target=self._tick_forever, name="virtual-clock", daemon=True)
        self.ticker.start()
        write_atomically(self.state_dir / "server.json", json.dumps(self.info, indent=2) + "\n")
        log.info("local region %s ready: AWS %s, Kubernetes %s", self.stage.name, aws_endpoint, base)

    # ---------------------------------------------------------------- time

    def _virtual_now(self) -> float:
        if self.region is None:
            raise RuntimeError("no clock yet")
        return self.region.clock.now()

    def _tick_forever(self) -> None:
        assert self.region is not None
        clock = self.region.clock
        v0, w0 = clock.now(), time.monotonic()
        while not self.stopping.wait(TICK_SECONDS):
            target = v0 + (time.monotonic() - w0) * self.speed
            try:
                with self.cond:
                    clock.run_until(target)
                    changed = False
                    for state in self.clusters.values():
                        changed = state.tick() or changed
                    if changed:
                        self.cond.notify_all()
            except Exception:  # keep time moving; the log has the fault
                log.exception("virtual clock tick failed")

    def control(self, what: str, args: dict[str, str] | None = None) -> dict[str, Any]:
        assert self.region is not None
        now = self.region.clock.now()
        args = args or {}
        if what == "aws_calls":
            record = self.moto.log
            calls = record.query(args.get("action")) if record is not None else []
            return {"kind": "AwsCallList", "calls": calls}
        if what == "invariants":
            state = self.clusters.get(args.get("cluster", ""))
            if state is None:
                return {"error": f"no cluster {args.get('cluster')!r}"}
            return state.invariants()
        if what == "faults":
            try:
                if args.get("method") == "POST":
                    kind = str(args.pop("kind", ""))
                    fault = self.region.fault(kind, **{k: v for k, v in args.items() if k != "method"})
                    log.info("fault injected: %s", fault)
                    return {"kind": "FaultList", "faults": self.region.faults, "added": fault}
                if args.get("method") == "DELETE":
                    cleared = self.region.clear_faults()
                    log.info("faults cleared: %d", len(cleared))
                    return {"kind": "FaultList", "faults": [], "cleared": cleared}
            except PlatformError as exc:
                return {"code": 422, "error": exc.detail, "field": exc.field}
            return {"kind": "FaultList", "faults": self.region.faults}
        if what == "time":
            return {"virtual_time": now, "virtual_time_iso": format_time(now), "speed": self.speed, "wall_time": time.time()}
        clusters = []
        for name, state in self.clusters.items():
            nodes = state.sim.list_nodes()
            clusters.append({"name": name, "server": self.servers[name],
                             "nodes": len(nodes), "nodes_ready": sum(n.ready for n in nodes),
                             "pods": len(state.sim.list_pods())})
        return {**self.info, "running": True, "clusters": clusters, "virtual_time": format_time(now), "virtual_epoch": now}

    # ---------------------------------------------------------------- run and stop

    def serve(self) -> None:
        def stop(signum: int, frame: Any) -> None:
            log.info("signal %d: stopping", signum)
            self.stopping.set()
            for server in [self.http, *self.endpoints.values()]:
                threading.Thread(target=server.shutdown, daemon=True).start()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            self.http.serve_forever(poll_interval=0.2)
        finally:
            self.stopping.set()
            with self.cond:
                self.cond.notify_all()
            self.moto.stop()
            (self.state_dir / "server.json").unlink(missing_ok=True)
            log.info("stopped")


def main(argv: list[str] | None, provisioner: Callable[..., Any], prepare: Callable[..., Any] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="platformctl-local-region")
    parser.add_argument("--stage", required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--speed", type=float, default=300.0)
    parser.add_argument("--infra-dir", type=Path, default=None)
    parser.add_argument("--no-workloads", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    args.state_dir.mkdir(parents=True, exist_ok=True)
    server = Server(args.stage, args.state_dir, args.speed, args.infra_dir, not args.no_workloads, args.seed, provisioner, prepare)
    try:
        server.start()
    except Exception as exc:
        log.exception("the local region did not start")
        print(f"error: the local region did not start: {exc}", file=sys.stderr)
        return 1
    server.serve()
    return 0

