"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and kube-scheduler of
one Kubernetes release, built from the Go module proxy by ``scripts/real-k8s/build.sh``, and kwok playing the kubelets.

What the local region's own API servers answer is the project's reading of Kubernetes; this one is Kubernetes. It runs
as kube-apiserver runs on EKS's control plane, as far as one host allows: a PKI of its own (a CA; serving, client and
service-account keys), client certificates for the operator (``system:masters``) and the components, RBAC and the Node
authorizer on, the admission plugins of the release's defaults, service-account tokens from the TokenRequest API, the
eviction API and the disruption controller live. Its nodes are Node objects registered as the kubelet of an EC2
instance registers it (``platformctl.emulator.simulation.pools.build_node``: labels and taints from the launch
template's user data, ``spec.providerID``), annotated for kwok, which keeps their leases and status and runs their
pods' lifecycle (a pod bound to one turns Running, a Job's pod ends, Failed with the code its
``sim.platformctl.io/exit-code`` annotation names as the local region's does, a deleted one goes: ``kwok_stages.yaml``).

Start one with ``ControlPlane(folder, bin).start()`` (under a minute once built); ``stop()`` sends SIGTERM to each
process and waits; a process still there after ``grace`` seconds gets SIGKILL.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platformctl.kernel import aws
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.nodeadm import WontJoin, read_user_data

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real-k8s" / "build.sh"
KWOK_STAGES = Path(__file__).with_name("kwok_stages.yaml")  # kwok's fast pod stages, and a Job pod's exit code
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_RANGE = "10.96.0.0/16"
ISSUER = "https://kubernetes.default.svc.cluster.local"


def binaries() -> Path:
    """The folder of the pinned binaries, built by ``scripts/real-k8s/build.sh`` when missing (a warm call is a hash
    and a look); PlatformError when they cannot be built."""
    try:
        done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise PlatformError(f"cannot run {BUILD_SCRIPT}: {exc}", file=str(BUILD_SCRIPT)) from None
    if done.returncode != 0:
        raise PlatformError(f"the real control plane's binaries did not build: {done.stderr.strip()[-400:]}",
                            file=str(BUILD_SCRIPT))
    return Path(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------------------------------- PKI


@dataclass
class Pki:
    """A cluster's keys and certificates, in ``folder``: the CA, the API server's serving certificate (for loopback
    and the in-cluster names), the service-account signing key, and client certificates made on demand."""

    folder: Path
    _ca: tuple[Any, Any] | None = field(default=None, repr=False)

    def make(self) -> Pki:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        self.folder.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        ca = self._certificate("platformctl-real-ca", [], key, key.public_key(), None, ca=True)
        self._ca = (ca, key)
        self._write("ca", ca, key)
        names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local"]
        ips = ["127.0.0.1", str(next(ipaddress.ip_network(SERVICE_RANGE).hosts()))]
        self.leaf("apiserver", "kube-apiserver", [], dns=names, ips=ips, server=True)
        sa = ec.generate_private_key(ec.SECP256R1())
        (self.folder / "sa.key").write_bytes(sa.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (self.folder / "sa.pub").write_bytes(sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        return self

    def path(self, name: str) -> Path:
        return self.folder / name

    def leaf(self, name: str, common_name: str, groups: Sequence[str], dns: Sequence[str] = (), ips: Sequence[str] = (),
             server: bool = False) -> tuple[Path, Path]:
        """A certificate signed by the CA (a client's: its user ``common_name`` in ``groups``, as kube-apiserver reads
        a client certificate), and its key: their paths."""
        from cryptography.hazmat.primitives.asymmetric import ec

        assert self._ca is not None, "make() first"
        key = ec.generate_private_key(ec.SECP256R1())
        cert = self._certificate(common_name, groups, key, key.public_key(), self._ca, dns=dns, ips=ips, server=server)
        return self._write(name, cert, key)

    def _write(self, name: str, cert: Any, key: Any) -> tuple[Path, Path]:
        from cryptography.hazmat.primitives import serialization

        crt, pem = self.folder / f"{name}.crt", self.folder / f"{name}.key"
        crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
        pem.chmod(0o600)
        return crt, pem

    @staticmethod
    def _certificate(common_name: str, groups: Sequence[str], key: Any, public: Any, issuer: tuple[Any, Any] | None,
                     ca: bool = False, dns: Sequence[str] = (), ips: Sequence[str] = (), server: bool = False) -> Any:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        subject = x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups),
                             x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(subject)
                   .issuer_name(issuer[0].subject if issuer else subject).public_key(public)
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=365))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), True)
        else:
            usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if dns or ips:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [*(x509.DNSName(d) for d in dns), *(x509.IPAddress(ipaddress.ip_address(i)) for i in ips)]), False)
        return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


# ---------------------------------------------------------------------------------------------------- control plane


@dataclass
class ControlPlane:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, on loopback ports of their own, their
    data and logs in ``folder``."""

    folder: Path
    bin: Path
    name: str = "real"
    grace: float = 15.0
    # kube-apiserver's flags beyond the defaults here (the differential suite compacts etcd every 10 s, where EKS does
    # every 5 minutes, so that a continue token or a watch from an old revision expires while it waits)
    apiserver_args: tuple[str, ...] = ()
    port: int = 0
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    pki: Pki | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        """The operator's kubeconfig: ``kubernetes-admin`` in ``system:masters``, as EKS's cluster creator."""
        return self.folder / "admin.kubeconfig"

    def start(self, timeout: float = 90.0) -> ControlPlane:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.pki = Pki(self.folder / "pki").make()
        etcd_port, peer_port, self.port = free_port(), free_port(), free_port()
        for user, cn, groups in (("admin", "kubernetes-admin", ["system:masters"]),
                                 ("controller-manager", "system:kube-controller-manager", []),
                                 ("scheduler", "system:kube-scheduler", []),
                                 ("kwok", "kwok-controller", ["system:masters"])):
            self.user_kubeconfig(user, cn, groups)
        try:
            self._run("etcd", "--name", self.name, "--data-dir", str(self.folder / "etcd"), "--unsafe-no-fsync",
                      "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
                      "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
                      "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                      "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                      "--initial-cluster", f"{self.name}=http://127.0.0.1:{peer_port}",
                      "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}")
            self._run("kube-apiserver", *self._apiserver_flags(etcd_port))
            self._wait_ready(timeout)
            self._run("kube-controller-manager", "--kubeconfig", str(self.folder / "controller-manager.kubeconfig"),
                      "--authentication-kubeconfig", str(self.folder / "controller-manager.kubeconfig"),
                      "--authorization-kubeconfig", str(self.folder / "controller-manager.kubeconfig"),
                      "--service-account-private-key-file", str(self.pki.path("sa.key")),
                      "--root-ca-file", str(self.pki.path("ca.crt")), "--use-service-account-credentials",
                      "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
                      "--controllers", "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
                      "--cluster-name", self.name)
            self._run("kube-scheduler", "--kubeconfig", str(self.folder / "scheduler.kubeconfig"),
                      "--authentication-kubeconfig", str(self.folder / "scheduler.kubeconfig"),
                      "--authorization-kubeconfig", str(self.folder / "scheduler.kubeconfig"),
                      "--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", str(free_port()))
            self._run("kwok", "--kubeconfig", str(self.folder / "kwok.kubeconfig"), "--config", str(KWOK_STAGES),
                      "--manage-all-nodes=false",
                      "--manage-nodes-with-annotation-selector", f"{KWOK_ANNOTATION}=fake",
                      "--node-lease-duration-seconds", "40", "--server-address", f"127.0.0.1:{free_port()}")
            self._wait_default_account(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _apiserver_flags(self, etcd_port: int) -> list[str]:
        assert self.pki is not None
        p = self.pki.path
        return ["--etcd-servers", f"http://127.0.0.1:{etcd_port}", "--bind-address", "127.0.0.1",
                "--advertise-address", "127.0.0.1", "--secure-port", str(self.port),
                "--tls-cert-file", str(p("apiserver.crt")), "--tls-private-key-file", str(p("apiserver.key")),
                "--client-ca-file", str(p("ca.crt")), "--service-cluster-ip-range", SERVICE_RANGE,
                "--service-account-issuer", ISSUER, "--api-audiences", ISSUER,
                "--service-account-key-file", str(p("sa.pub")), "--service-account-signing-key-file", str(p("sa.key")),
                "--authorization-mode", "Node,RBAC", "--allow-privileged=true", "--profiling=false",
                "--storage-media-type", "application/json", *self.apiserver_args]

    def _run(self, component: str, *args: str) -> None:
        log = (self.folder / f"{component}.log").open("ab")
        self.processes[component] = subprocess.Popen([str(self.bin / component), *args], stdout=log, stderr=log,
                                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def _dead(self) -> str | None:
        for component, process in self.processes.items():
            if process.poll() is not None:
                tail = (self.folder / f"{component}.log").read_text(errors="replace").strip().splitlines()[-5:]
                return f"{component} exited {process.returncode}: " + " / ".join(tail)
        return None

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = self._dead()
            if dead:
                raise PlatformError(f"the real control plane did not start: {dead}", file=str(self.folder))
            try:
                if self.get("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise PlatformError(f"kube-apiserver was not ready in {timeout:.0f} s (its log: {self.folder}/kube-apiserver.log)",
                            file=str(self.folder))

    def _wait_default_account(self, timeout: float) -> None:
        """The controller manager is up when its service-account controller has made ``default/default``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = self._dead()
            if dead:
                raise PlatformError(f"the real control plane did not start: {dead}", file=str(self.folder))
            if self.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200:
                return
            time.sleep(0.3)
        raise PlatformError(f"the controller manager made no default service account in {timeout:.0f} s",
                            file=str(self.folder))

    def stop(self) -> list[str]:
        """SIGTERM to each process, newest first, each waited for before the next (the API server's clients gone before
        it drains, etcd last): each exits on its own, etcd and the controller manager by the signal, the scheduler and
        kwok with 1, as they do; one still there after ``grace`` seconds gets SIGKILL. The ones killed."""
        killed = []
        for component, process in reversed(list(self.processes.items())):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(self.grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                killed.append(component)
        self.processes.clear()
        return killed

    # ------------------------------------------------------------------------------------------------ clients

    def user_kubeconfig(self, user: str, common_name: str, groups: Sequence[str]) -> Path:
        """A kubeconfig (``<user>.kubeconfig`` in the folder) that authenticates as ``common_name`` in ``groups`` with
        a client certificate the cluster's CA signed."""
        assert self.pki is not None
        crt, key = self.pki.leaf(user, common_name, groups)
        return self._kubeconfig(user, {"client-certificate": str(crt), "client-key": str(key)})

    def token_kubeconfig(self, user: str, token: str) -> Path:
        return self._kubeconfig(user, {"token": token})

    def _kubeconfig(self, user: str, credentials: Mapping[str, str]) -> Path:
        assert self.pki is not None
        path = self.folder / f"{user}.kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": self.name,
            "clusters": [{"name": self.name, "cluster": {"server": self.server,
                                                         "certificate-authority": str(self.pki.path("ca.crt"))}}],
            "users": [{"name": user, "user": dict(credentials)}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user}}]}, indent=2))
        return path

    def _context(self) -> ssl.SSLContext:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.path("ca.crt")))
        context.load_cert_chain(str(self.pki.path("admin.crt")), str(self.pki.path("admin.key")))
        return context

    def request(self, method: str, path: str, body: Any = None, token: str | None = None,
                content_type: str = "application/json", accept: str = "application/json") -> tuple[int, Any]:
        """One call as the operator (or as the bearer of ``token``): the status and the decoded JSON body."""
        headers = {"Accept": accept}
        data = None
        if body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), content_type
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        assert self.pki is not None
        context = self._context() if token is None else ssl.create_default_context(cafile=str(self.pki.path("ca.crt")))
        call = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(call, context=context, timeout=30) as answer:
                return answer.status, _decoded(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, _decoded(refused.read())

    def get(self, path: str) -> tuple[int, Any]:
        return self.request("GET", path)

    def register(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Register nodes (``Node.to_kube()`` of ``build_node``'s nodes) as their kubelets would, kwok keeping them."""
        for node in nodes:
            body = json.loads(json.dumps(node))
            meta = body["metadata"]
            for key in ("uid", "resourceVersion", "creationTimestamp"):
                meta.pop(key, None)
            meta.setdefault("annotations", {})[KWOK_ANNOTATION] = "fake"
            body.pop("status", None)
            status, answer = self.request("POST", "/api/v1/nodes", body)
            if status != 201:
                raise PlatformError(f"node {meta['name']} not registered: {status} {answer}", file=str(self.folder))

    def apply(self, manifests: Sequence[Mapping[str, Any]]) -> int:
        """Create ``manifests`` (the Pulumi program's objects for a cluster), namespaces and cluster-wide kinds first;
        how many the API server took (one it refuses is logged in the folder's ``apply.log``, as ``pulumi up`` would
        report it)."""
        from platformctl.kernel.cluster.apiobjects import PLURAL_OF_KIND, RESOURCES

        order = {"Namespace": 0, "CustomResourceDefinition": 1, "ClusterRole": 2}
        made = 0
        with (self.folder / "apply.log").open("a") as log:
            for manifest in sorted(manifests, key=lambda m: order.get(str(m.get("kind")), 3)):
                kind, meta = str(manifest.get("kind")), manifest.get("metadata") or {}
                plural = PLURAL_OF_KIND.get(kind)
                if plural is None:
                    log.write(f"{kind} {meta.get('name')}: a kind the region does not know\n")
                    continue
                res = RESOURCES[plural]
                base = f"/apis/{res.group}/{res.version}" if res.group else "/api/v1"
                where = f"/namespaces/{meta.get('namespace') or 'default'}" if res.namespaced else ""
                status, answer = self.request("POST", f"{base}{where}/{plural}", dict(manifest))
                made += status == 201
                if status != 201:
                    log.write(f"{kind} {meta.get('name')}: {status} {answer}\n")
        return made

    def token(self, namespace: str, account: str, audience: str = ISSUER, seconds: int = 3600) -> str:
        """A service-account token from the TokenRequest API, as the kubelet gets a pod's projected token."""
        status, answer = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                       "spec": {"audiences": [audience], "expirationSeconds": seconds}})
        if status != 201:
            raise PlatformError(f"no token for {namespace}/{account}: {status} {answer}", file=str(self.folder))
        return str(answer["status"]["token"])


def _decoded(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw.decode(errors="replace")


# ------------------------------------------------------------------------------------------------------------ kubelets


class Kubelets:
    """The kubelets of a cluster's EC2 instances, and the AWS cloud controller's node lifecycle: every ``period``
    seconds, each running instance of an Auto Scaling group whose user data's NodeConfig names ``cluster`` is
    registered as its kubelet registers it (``build_node``: its private DNS name, zone, instance type, the labels and
    taints the user data asks for; an instance whose user data would not bring a kubelet up never registers, nor, with
    ``kubelet_of`` (an image's kubelet version, or None: the local region's ``moto_extensions.kubelet_of``), one whose
    image has no kubelet), and the node of an instance that is no longer running is deleted. The AWS is the command's
    environment's (``AWS_ENDPOINT_URL``: moto)."""

    def __init__(self, plane: ControlPlane, cluster: str, region: str, period: float = 1.0,
                 kubelet_of: Callable[[str], str | None] | None = None) -> None:
        self.plane, self.cluster, self.region, self.period = plane, cluster, region, period
        self.kubelet_of = kubelet_of
        self.never_joined: dict[str, str] = {}  # instance id -> why its kubelet never registered
        self._kubelets: dict[str, str | None] = {}  # image -> its kubelet's version (an image's lineage never changes)
        self._configs: dict[str, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def sync(self) -> None:
        from platformctl.emulator.simulation.pools import build_node

        asg, ec2 = aws.client("autoscaling", self.region), aws.client("ec2", self.region)
        ids = [i["InstanceId"] for g in asg.describe_auto_scaling_groups()["AutoScalingGroups"] for i in g["Instances"]]
        running = {}
        if ids:
            for r in ec2.describe_instances(InstanceIds=ids)["Reservations"]:
                running.update({i["InstanceId"]: i for i in r["Instances"] if i["State"]["Name"] in ("pending", "running")})
        nodes = {str(n["spec"].get("providerID", "")).rsplit("/", 1)[-1]: n["metadata"]["name"]
                 for n in self.plane.get("/api/v1/nodes")[1]["items"]}
        for iid, name in nodes.items():
            if iid not in running:  # the cloud controller's node lifecycle: the instance is gone, so is its node
                self.plane.request("DELETE", f"/api/v1/nodes/{name}")
        for iid, instance in running.items():
            if iid in nodes or iid in self.never_joined:
                continue
            raw = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData").get("UserData", {}).get("Value")
            try:
                config = read_user_data(raw)
                version = self._kubelet(instance["ImageId"])
            except WontJoin as exc:
                self.never_joined[iid] = str(exc)
                continue
            if config.cluster != self.cluster:
                continue
            node = build_node(name=instance["PrivateDnsName"], zone=instance["Placement"]["AvailabilityZone"],
                              region=self.region, instance_type=instance["InstanceType"], instance_id=iid,
                              labels=config.labels, taints=config.taints, kubelet_version=version)
            self.plane.register([node.to_kube()])

    def _kubelet(self, image: str) -> str:
        """The version of the kubelet ``image`` runs ("" when nothing says), or WontJoin as the local region says it."""
        if self.kubelet_of is None:
            return ""
        if image not in self._kubelets:
            self._kubelets[image] = self.kubelet_of(image)
        version = self._kubelets[image]
        if version is None:
            raise WontJoin(f"its image {image} has no kubelet and nodeadm (neither EKS-optimised nor built from one, "
                           "and its manifests install neither)")
        return version

    def start(self) -> Kubelets:
        def loop() -> None:
            while not self._stop.wait(self.period):
                try:
                    self.sync()
                except Exception as exc:  # kept for the test to read; the next sync tries again
                    self.errors.append(repr(exc))

        self.sync()
        self._thread = threading.Thread(target=loop, name=f"kubelets-{self.cluster}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
