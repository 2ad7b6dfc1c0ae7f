"""The local region's kubelet for the toolkit's own image: a Job's pod whose container runs ``platformctl`` runs it as a
process of this machine, as a node would run the image (``local up --run-jobs``).

What the Pulumi program deploys in a stage's host cluster (the scheduled rotation, the release tick, remediation) is a
Job of the toolkit's image. With ``--run-jobs`` the region runs those pods' containers for real, so what a cluster
does to them is what happens to the process: the pod starts when the simulation says its container starts; a drain's
eviction (or a deletion) sends it SIGTERM at once and SIGKILL at the end of its ``terminationGracePeriodSeconds`` of
the region's time; its exit code is the container's (``containerStatuses[].state.terminated.exitCode``), which its
Job judges by its ``backoffLimit`` and ``podFailurePolicy`` (``platformctl.emulator.controllers.job``); a pod lost
with its node loses its process.

A process is not a container, so the pod's environment is made the way a node would make it, here:

- the command is the container's ``command`` (``platformctl`` when unset, the image's entrypoint) and ``args``;
- each volume is a directory of its own under ``pods/<cluster>/<namespace>_<pod>/`` in the region's state directory: a
  ``configMap``'s or a ``secret``'s keys as files (as the kubelet projects them, a Secret's decoded), an ``emptyDir``
  empty; a path under a ``mountPath`` in an argument or an environment value is that directory's path;
- the container's ``env`` (literal, ``configMapKeyRef``, ``secretKeyRef``, the pod's name, namespace, uid and node) and
  ``envFrom`` (a ConfigMap's or a Secret's keys); the region's AWS endpoint, and the IAM role of the pod's service
  account as IRSA gives it (a projected token the region's STS exchanges for the role's session, whose calls the
  region's IAM judges: ``platformctl.emulator.server.iam``), none for a pod whose account names no role; a ConfigMap's
  kubeconfig (EKS's endpoints and ``aws eks get-token``) is the region's own (its token), each
  cluster reached from the pod's node, so that the stage's security groups decide what the pod can reach
  (``platformctl.emulator.server.network``);
- the stack files are the checkout's the region runs (``--infra-dir``), as the image carries the stack files it was
  built from.

A Secret or a ConfigMap the container needs that does not exist keeps it from being made, as a kubelet says it: the
pod stays ``Pending``, waiting with ``CreateContainerConfigError`` (``ContainerCreating`` for a volume), a ``Failed``
event says what is missing, and it is tried again every 10 s of the region's time until it appears.
Anything else this kubelet does not make (another volume type, another ``valueFrom``, another entrypoint) fails the
container at its start (exit 128, the runtime's ``StartError``) and its log says why. The process writes to ``log``
in the pod's directory, which ``kubectl logs`` reads.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import yaml

from platformctl.emulator.server.network import node_path
from platformctl.emulator.server.objects import ClusterState
from platformctl.emulator.server.rbac import API_AUDIENCE
from platformctl.emulator.workloads import PLURAL_OF_SIM_KIND
from platformctl.kernel.cluster.model import Pod
from platformctl.kernel.environment import current

log = logging.getLogger("platformctl.emulator.server.kubelet")
IMAGE_ROOT = "/opt/platformctl"  # where the image carries the checkout's files (Dockerfile): the region's checkout here
IMAGE = "platformctl"  # the toolkit's image's repository name (ghcr.io/platformctl/platformctl:<version>)
START_ERROR = 128  # a container that could not start, as the runtime says it (StartError)
ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
API_TOKEN_SECONDS = 365 * 86_400  # kube-apiserver's --service-account-extend-token-expiration for projected tokens
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "PLATFORMCTL_LOCAL_SKIP")


JOBS = frozenset({"Job"})
ALL_ADDRESSES = "0.0.0.0"


def pod_address(region: Path, pod: Pod) -> str:
    """Where a pod's own network is on this machine: a loopback address of its own (Linux answers on all of 127/8 with
    no setting up), drawn from the region's folder and the pod's uid, so that two pods' servers on the same port do
    not meet, in one region or in two regions running side by side (whose seeded pods have the same uids)."""
    digest = hashlib.sha256(f"{region.resolve()}/{pod.uid}".encode()).digest()
    return f"127.{1 + digest[0] % 254}.{digest[1]}.{max(digest[2], 1)}"


def toolkit_image(image: str) -> bool:
    """Whether ``image`` is the toolkit's own (any registry, any tag or digest)."""
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0] == IMAGE


class StartError(Exception):
    pass


class Blocked(Exception):
    """The container cannot be made yet (a Secret or a ConfigMap it names does not exist): the kubelet tries again."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Identity(Protocol):
    """The cluster's service-account token issuer, as the kubelet asks it for a pod's projected token."""

    region: str

    def token(self, namespace: str, service_account: str, audience: str = ..., seconds: int = ...) -> str: ...


def write_token(path: Path, token: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(token)
    partial.replace(path)  # a reader sees the old token or the new one, never half of one


class Timekeeper(Protocol):
    """The region's time as the kubelet tells it about its processes (``timekeeper.TimeKeeper``)."""

    def expect(self, pid: int, name: str) -> None: ...

    def signalled(self, pid: int) -> None: ...


# Every process is started from this one thread, which lives as long as the server: the kernel sends a child its
# parent-death signal when the *thread* that forked it ends, and a request's thread ends with its request.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kubelet-spawn")


class Kubelet:
    """The runtime of one cluster's pods of the toolkit's image (``platformctl.emulator.simulation.pods.Runtime``).
    Every method but the waiting threads runs under the server's lock (``cond``)."""

    def __init__(self, cluster: ClusterState, state_dir: Path, kubeconfig: Path, aws_endpoint: str,
                 infra_dir: Path | None, cond: threading.Condition, changed: Callable[[], Any],
                 time: Timekeeper | None = None, network: str | None = None, kinds: frozenset[str] = JOBS,
                 stores: Mapping[str, Path] | None = None, identity: Identity | None = None) -> None:
        """``network``: the region's base URL, under which a pod reaches the clusters from its node
        (``platformctl.emulator.server.network``); None: through the clusters' own endpoints, unchecked. ``kinds``: the
        controllers whose pods it runs (a Job's; a ReplicaSet's, the canary runner Deployment's). ``stores``: each
        stage's state table (``dynamodb://TABLE``) -> the region's store of that stage. ``identity``: the cluster's token
        issuer, for pods whose service account names an IAM role (None: no pod gets AWS credentials)."""
        self.cluster = cluster
        self.kinds = kinds
        self.stores = dict(stores or {})
        self.network = network
        self.root = state_dir / "pods" / cluster.name
        self.kubeconfig = kubeconfig
        self.aws_endpoint = aws_endpoint
        self.infra_dir = infra_dir
        self.cond = cond
        self.changed = changed  # after a process ended (under the lock): the clusters' bookkeeping, watchers woken
        self.processes: dict[str, subprocess.Popen[bytes]] = {}  # pod uid -> its process
        self._prepared: dict[str, tuple[list[str], dict[str, str]]] = {}  # pod uid -> its command and environment
        self.time = time  # told of each process started (it holds the clock until it registers) and signalled
        self.identity = identity
        self.tokens: dict[str, tuple[Path, str, str]] = {}  # pod uid -> its token file, namespace, service account

    def runs(self, pod: Pod) -> bool:
        return pod.owner is not None and pod.owner.kind in self.kinds and any(toolkit_image(c.image) for c in pod.containers)

    def blocked(self, pod: Pod) -> tuple[str, str] | None:
        """Why the pod's container cannot be made yet, as its waiting reason and its event's message (a Secret or a
        ConfigMap it names that does not exist: ``CreateContainerConfigError``, ``ContainerCreating`` for a volume);
        None when it can start (what it would run is kept for ``start``)."""
        try:
            self._prepared[pod.uid] = self._container(pod, self._folder(pod))
        except Blocked as exc:
            return exc.reason, str(exc)
        except StartError:
            self._prepared.pop(pod.uid, None)  # ``start`` says why, in the container's log
        return None

    def _folder(self, pod: Pod) -> Path:
        folder = self.root / f"{pod.namespace}_{pod.name}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def start(self, pod: Pod) -> None:
        folder = self._folder(pod)
        prepared = self._prepared.pop(pod.uid) if pod.uid in self._prepared else None
        try:
            command, env = prepared if prepared is not None else self._container(pod, folder)
        except (StartError, Blocked) as exc:
            (folder / "log").write_text(f"the container did not start: {exc}\n")
            log.info("pod %s/%s of %s did not start: %s", pod.namespace, pod.name, self.cluster.name, exc)
            threading.Thread(target=self._exited, args=(pod, START_ERROR), daemon=True).start()
            return
        with open(folder / "log", "ab") as out:
            process = _SPAWNER.submit(subprocess.Popen, command, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, env=env, preexec_fn=die_with_parent).result()
        self.processes[pod.uid] = process
        if self.time is not None:
            self.time.expect(process.pid, f"pod {pod.namespace}/{pod.name} of {self.cluster.name}")
        log.info("pod %s/%s of %s runs as pid %d: %s", pod.namespace, pod.name, self.cluster.name, process.pid,
                 " ".join(command[3:]))
        threading.Thread(target=self._wait, args=(pod, process), name=f"pod {pod.name}", daemon=True).start()

    def stop(self, pod: Pod) -> None:
        process = self.processes.get(pod.uid)
        if process is not None and process.poll() is None:
            log.info("pod %s/%s of %s terminating: SIGTERM to pid %d", pod.namespace, pod.name, self.cluster.name,
                     process.pid)
            process.send_signal(signal.SIGTERM)
            if self.time is not None:
                self.time.signalled(process.pid)

    def kill(self, pod: Pod) -> bool:
        process = self.processes.pop(pod.uid, None)
        if process is None or process.poll() is not None:
            return False
        log.info("pod %s/%s of %s: SIGKILL to pid %d", pod.namespace, pod.name, self.cluster.name, process.pid)
        process.kill()
        return True

    def replicated(self) -> list[Pod]:
        """The pods of this cluster's ReplicaSets that it runs (the canary runner Deployment's), read from those
        ReplicaSets' namespaces only: ``local status`` asks often, and a cluster of --workloads holds 100,000 pods."""
        if "ReplicaSet" not in self.kinds:
            return []
        spaces = {namespace for (namespace, _), rs in self.cluster.objects.objects["replicasets"].items()
                  if any(toolkit_image(str(c.get("image", "")))
                         for c in ((rs.obj["spec"].get("template") or {}).get("spec") or {}).get("containers") or [])}
        return [p for ns in sorted(spaces) for p in self.cluster.sim.list_pods(ns)
                if p.owner is not None and p.owner.kind == "ReplicaSet" and self.runs(p)]

    def address(self, pod: Pod) -> str:
        return pod_address(self.root, pod)

    def log_path(self, pod: Pod) -> Path:
        return self.root / f"{pod.namespace}_{pod.name}" / "log"

    def log(self, pod: Pod) -> str | None:
        try:
            return self.log_path(pod).read_text(errors="replace")
        except OSError:
            return None

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()

    # ---------------------------------------------------------------- the container's environment

    def _container(self, pod: Pod, folder: Path) -> tuple[list[str], dict[str, str]]:
        assert pod.owner is not None
        owner = self.cluster.objects.objects[PLURAL_OF_SIM_KIND[pod.owner.kind]].get((pod.namespace, pod.owner.name))
        if owner is None:
            raise StartError(f"its {pod.owner.kind} {pod.namespace}/{pod.owner.name} is gone")
        spec = (owner.obj["spec"].get("template") or {}).get("spec") or {}
        container = next(c for c in spec.get("containers") or [] if toolkit_image(str(c.get("image", ""))))
        mounts = self._volumes(pod, spec, container, folder)

        address = self.address(pod)

        def host(value: str) -> str:
            for path, where in mounts:
                if value == path or value.startswith(path.rstrip("/") + "/"):
                    return str(where) + value[len(path.rstrip("/")):]
            if value == ALL_ADDRESSES:  # every address of the pod's own network is its own here
                return address
            if self.infra_dir is not None:  # the image's checkout files: the region's stack files and their checkout
                for image, here in ((IMAGE_ROOT + "/infra", self.infra_dir), (IMAGE_ROOT, self.infra_dir.parent)):
                    if value == image or value.startswith(image + "/"):
                        return str(here.resolve()) + value[len(image):]
            return self._store_of(value)

        base = current().variables
        env = {k: base[k] for k in KEPT_ENV if k in base}
        # the image's tools on its PATH: `aws` (AWS CLI), as the jobs' kubeconfigs run `aws eks get-token`
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), *([env["PATH"]] if env.get("PATH") else [])])
        for source in container.get("envFrom") or []:
            prefix = str(source.get("prefix") or "")
            for kind, ref in (("configmaps", source.get("configMapRef")), ("secrets", source.get("secretRef"))):
                if isinstance(ref, dict):
                    data = self._config(pod, kind, str(ref.get("name")), bool(ref.get("optional")))
                    env.update({prefix + k: v for k, v in (data or {}).items()})
        for item in container.get("env") or []:
            value = self._env_value(pod, item)
            if value is not None:
                env[str(item["name"])] = host(value)
        env.update(AWS_ENDPOINT_URL=self.aws_endpoint, **self._aws_identity(pod, spec, folder))
        entry = [str(a) for a in container.get("command") or [IMAGE]]
        if Path(entry[0]).name != IMAGE:
            raise StartError(f"command {entry[0]!r}: the image's entrypoint is {IMAGE}")
        infra = ["--infra-dir", str(self.infra_dir.resolve())] if self.infra_dir is not None else []
        args = [host(str(a)) for a in [*entry[1:], *(container.get("args") or [])]]
        return [sys.executable, "-m", "platformctl", *infra, *args], env

    def _aws_identity(self, pod: Pod, spec: dict[str, Any], folder: Path) -> dict[str, str]:
        """What the EKS pod identity webhook gives a pod whose service account names an IAM role
        (``eks.amazonaws.com/role-arn``): the role, its region, and a projected token of the cluster's issuer that boto3
        exchanges through the region's STS (``AssumeRoleWithWebIdentity``). Any other pod gets no AWS credentials (the
        launch template's IMDS hop limit of 1 keeps the node's role from it)."""
        name = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")
        account = self.cluster.stored["serviceaccounts"].get((pod.namespace, name)) or {}
        role = ((account.get("metadata") or {}).get("annotations") or {}).get(ROLE_ANNOTATION)
        if not role or self.identity is None:
            return {}
        if not role.startswith("arn:aws:iam::"):
            raise StartError(f"serviceaccount {name}: {ROLE_ANNOTATION} {role!r} is not a role's ARN")
        token = folder / "eks.amazonaws.com" / "serviceaccount" / "token"
        token.parent.mkdir(parents=True, exist_ok=True)
        write_token(token, self.identity.token(pod.namespace, name))
        self.tokens[pod.uid] = (token, pod.namespace, name)
        region = self.identity.region
        return {"AWS_ROLE_ARN": str(role), "AWS_WEB_IDENTITY_TOKEN_FILE": str(token), "AWS_STS_REGIONAL_ENDPOINTS": "regional",
                "AWS_REGION": region, "AWS_DEFAULT_REGION": region}

    def refresh_tokens(self) -> None:
        """Each running pod's token made again, as the kubelet rotates a projected token well before it expires."""
        if self.identity is None:
            return
        for uid, (path, namespace, name) in list(self.tokens.items()):
            if uid not in self.processes:
                self.tokens.pop(uid, None)
                continue
            write_token(path, self.identity.token(namespace, name))

    def _store_of(self, value: str) -> str:
        """A stage's state table the pod names is the region's store of that stage, which every command and job of the
        stage shares (as each stage's jobs and operators share its one table in AWS)."""
        if value.startswith("dynamodb://"):
            table = value.removeprefix("dynamodb://").partition("?")[0]
            if table in self.stores:
                return str(self.stores[table])
        return value

    def _config(self, pod: Pod, kind: str, name: str, optional: bool) -> dict[str, str] | None:
        """A ConfigMap's or a Secret's data as the kubelet reads it (a Secret's decoded); None when an optional one
        is missing; ``Blocked`` when a required one is."""
        stored = self.cluster.stored[kind].get((pod.namespace, name))
        if stored is None:
            if optional:
                return None
            raise Blocked("CreateContainerConfigError", f'{"secret" if kind == "secrets" else "configmap"} "{name}" not found')
        data = {str(k): str(v) for k, v in (stored.get("data") or {}).items()}
        if kind == "secrets":
            data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
        return data

    def _env_value(self, pod: Pod, item: dict[str, Any]) -> str | None:
        """One ``env`` entry's value: literal, a key of a ConfigMap or a Secret, or a field of the pod."""
        if "valueFrom" not in item:
            return str(item.get("value", ""))
        source = item["valueFrom"] or {}
        for kind, key in (("configmaps", "configMapKeyRef"), ("secrets", "secretKeyRef")):
            ref = source.get(key)
            if isinstance(ref, dict):
                optional = bool(ref.get("optional"))
                data = self._config(pod, kind, str(ref.get("name")), optional)
                if data is not None and str(ref.get("key")) in data:
                    return data[str(ref.get("key"))]
                if optional:
                    return None
                what = "secret" if kind == "secrets" else "configmap"
                raise Blocked("CreateContainerConfigError", f'couldn\'t find key {ref.get("key")} in {what.title()} '
                              f'{pod.namespace}/{ref.get("name")}')
        field = (source.get("fieldRef") or {}).get("fieldPath")
        fields = {"metadata.name": pod.name, "metadata.namespace": pod.namespace, "metadata.uid": pod.uid,
                  "spec.nodeName": pod.node_name or ""}
        if field in fields:
            return fields[field]
        raise StartError(f"env {item.get('name')}: this valueFrom is not made by the local region's kubelet")

    def _volumes(self, pod: Pod, spec: dict[str, Any], container: dict[str, Any], folder: Path) -> list[tuple[str, Path]]:
        """Each volume the container mounts made as a directory; (mountPath, its directory), longest path first."""
        volumes = {str(v.get("name")): v for v in spec.get("volumes") or []}
        mounts = []
        for mount in container.get("volumeMounts") or []:
            volume = volumes.get(str(mount.get("name")))
            if volume is None:
                raise StartError(f"volumeMount {mount.get('name')}: no such volume")
            where = folder / "volumes" / str(mount["name"])
            if where.exists():
                shutil.rmtree(where)
            where.mkdir(parents=True)
            source = next(((kind, volume[key]) for kind, key in (("configmaps", "configMap"), ("secrets", "secret"))
                           if isinstance(volume.get(key), dict)), None)
            if source is not None:
                kind, ref = source
                name = str(ref.get("name") if kind == "configmaps" else ref.get("secretName"))
                try:
                    data = self._config(pod, kind, name, bool(ref.get("optional")))
                except Blocked as exc:
                    raise Blocked("ContainerCreating", f'MountVolume.SetUp failed for volume "{mount["name"]}" : {exc}') from None
                for key, path in self._projected(ref, data or {}, kind, str(mount["name"])):
                    (where / path).parent.mkdir(parents=True, exist_ok=True)
                    (where / path).write_text(self._kubeconfig_of((data or {})[key], pod))
            elif "emptyDir" not in volume:
                raise StartError(f"volume {mount['name']}: only configMap, secret and emptyDir volumes are made here")
            mounts.append((str(mount["mountPath"]), where))
        return sorted(mounts, key=lambda m: -len(m[0]))

    @staticmethod
    def _projected(ref: dict[str, Any], data: dict[str, str], kind: str, name: str) -> list[tuple[str, str]]:
        """The (key, relative path) of each file a ConfigMap or Secret volume projects: every key as its own name, or
        with ``items`` only the keys listed, each at its ``path``; a key listed that is not there keeps the volume from
        being made (``optional`` volumes leave it out), as the kubelet says it."""
        items = ref.get("items")
        if not items:
            return [(key, key) for key in data]
        out = []
        for item in items:
            key, path = str(item.get("key")), str(item.get("path") or "")
            if ".." in Path(path).parts or Path(path).is_absolute() or not path:
                raise StartError(f"volume of {name}: item path {path!r} must be relative, without '..'")
            if key not in data:
                if ref.get("optional"):
                    continue
                what = "secret references non-existent secret key" if kind == "secrets" else \
                    "configmap references non-existent config key"
                raise Blocked("ContainerCreating", f'MountVolume.SetUp failed for volume "{name}" : {what}: {key}')
            out.append((key, path))
        return out

    def _kubeconfig_of(self, text: str, pod: Pod) -> str:
        """A ConfigMap's file as the pod reads it: a kubeconfig is the region's own (the same contexts), each cluster
        reached from the pod's node, so that the stage's security groups decide what it reaches."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if not (isinstance(data, dict) and data.get("kind") == "Config" and "contexts" in data):
            return text
        region = yaml.safe_load(self.kubeconfig.read_text())
        if self.identity is not None:  # signed in as the pod would be: its service account's token, or its IAM role's
            region["users"] = [self._user(entry, pod) for entry in data.get("users") or []]
            region["contexts"] = data.get("contexts") or []
        if self.network is not None and pod.node_name:
            for entry in region.get("clusters") or []:
                entry["cluster"]["server"] = (f"{self.network}{node_path(self.cluster.name, pod.node_name)}"
                                              f"/clusters/{entry['name']}")
        if data.get("current-context"):
            region["current-context"] = data["current-context"]
        return str(yaml.safe_dump(region, sort_keys=False))

    def _user(self, entry: dict[str, Any], pod: Pod) -> dict[str, Any]:
        """A kubeconfig user as the pod signs in: a ``tokenFile`` under the service account's mount is the pod's own
        token (the kubelet's projected one, for the API server's audience: kube-apiserver extends such tokens to a
        year); ``exec`` (``aws eks get-token``) runs as written, with the pod's IAM role."""
        user = dict(entry.get("user") or {})
        if str(user.get("tokenFile", "")).startswith(SERVICE_ACCOUNT_DIR) and self.identity is not None:
            assert pod.owner is not None
            owner = self.cluster.objects.objects[PLURAL_OF_SIM_KIND[pod.owner.kind]].get((pod.namespace, pod.owner.name))
            spec = ((owner.obj["spec"].get("template") or {}).get("spec") or {}) if owner is not None else {}
            account = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")
            path = self._folder(pod) / "serviceaccount" / "token"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_token(path, self.identity.token(pod.namespace, account, API_AUDIENCE, API_TOKEN_SECONDS))
            user["tokenFile"] = str(path)
        return {"name": entry.get("name"), "user": user}

    # ---------------------------------------------------------------- its end

    def _wait(self, pod: Pod, process: subprocess.Popen[bytes]) -> None:
        code = process.wait()
        self._exited(pod, code if code >= 0 else 128 - code)  # killed by signal N: 128 + N, as a container says it

    def _exited(self, pod: Pod, code: int) -> None:
        log.info("pod %s/%s of %s: its container exited %d", pod.namespace, pod.name, self.cluster.name, code)
        with self.cond:
            self.processes.pop(pod.uid, None)
            self.cluster.sim.container_exited(pod.namespace, pod.name, pod.uid, code)
            self.changed()
            self.cond.notify_all()


def die_with_parent() -> None:
    """In the child, before exec: the kernel sends it SIGTERM when the server that started it dies, SIGKILLed too."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: `local down` still stops it
