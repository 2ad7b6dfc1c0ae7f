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
  ``configMap``'s keys as files (as the kubelet projects them), an ``emptyDir`` empty; a path under a ``mountPath`` in
  an argument or an environment value is that directory's path;
- the container's literal ``env`` values; the region's AWS (its endpoint and keys) in place of IRSA's web identity; a
  ConfigMap's kubeconfig (EKS's endpoints and ``aws eks get-token``) is the region's own (its endpoints, its token);
- the stack files are the checkout's the region runs (``--infra-dir``), as the image carries the stack files it was
  built from.

A variable from a Secret or a field (``valueFrom``, ``envFrom``), or a ConfigMap the pod mounts that does not exist,
is not something this kubelet makes: the container fails to start (exit 128, the runtime's ``StartError``) and its
log says why. The process writes to ``log`` in the pod's directory.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import yaml

from platformctl.emulator.server.objects import ClusterState
from platformctl.kernel.cluster.model import Pod
from platformctl.kernel.environment import FAKE_CREDENTIALS, current

log = logging.getLogger("platformctl.emulator.server.kubelet")
IMAGE = "platformctl"  # the toolkit's image's repository name (ghcr.io/platformctl/platformctl:<version>)
START_ERROR = 128  # a container that could not start, as the runtime says it (StartError)
KEPT_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV", "PLATFORMCTL_LOCAL_SKIP")


def toolkit_image(image: str) -> bool:
    """Whether ``image`` is the toolkit's own (any registry, any tag or digest)."""
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0] == IMAGE


class StartError(Exception):
    pass


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
                 time: Timekeeper | None = None) -> None:
        self.cluster = cluster
        self.root = state_dir / "pods" / cluster.name
        self.kubeconfig = kubeconfig
        self.aws_endpoint = aws_endpoint
        self.infra_dir = infra_dir
        self.cond = cond
        self.changed = changed  # after a process ended (under the lock): the clusters' bookkeeping, watchers woken
        self.processes: dict[str, subprocess.Popen[bytes]] = {}  # pod uid -> its process
        self.time = time  # told of each process started (it holds the clock until it registers) and signalled

    def runs(self, pod: Pod) -> bool:
        return pod.owner is not None and pod.owner.kind == "Job" and any(toolkit_image(c.image) for c in pod.containers)

    def start(self, pod: Pod) -> None:
        folder = self.root / f"{pod.namespace}_{pod.name}"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            command, env = self._container(pod, folder)
        except StartError as exc:
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

    def log(self, pod: Pod) -> str | None:
        try:
            return (self.root / f"{pod.namespace}_{pod.name}" / "log").read_text(errors="replace")
        except OSError:
            return None

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()

    # ---------------------------------------------------------------- the container's environment

    def _container(self, pod: Pod, folder: Path) -> tuple[list[str], dict[str, str]]:
        assert pod.owner is not None
        job = self.cluster.objects.objects["jobs"].get((pod.namespace, pod.owner.name))
        if job is None:
            raise StartError(f"its Job {pod.namespace}/{pod.owner.name} is gone")
        spec = (job.obj["spec"].get("template") or {}).get("spec") or {}
        container = next(c for c in spec.get("containers") or [] if toolkit_image(str(c.get("image", ""))))
        mounts = self._volumes(pod, spec, container, folder)

        def host(value: str) -> str:
            for path, where in mounts:
                if value == path or value.startswith(path.rstrip("/") + "/"):
                    return str(where) + value[len(path.rstrip("/")):]
            return value

        if container.get("envFrom"):
            raise StartError("envFrom (a Secret's or a ConfigMap's variables) is not made by the local region's kubelet")
        base = current().variables
        env = {k: base[k] for k in KEPT_ENV if k in base}
        for item in container.get("env") or []:
            if "value" not in item:
                raise StartError(f"env {item.get('name')}: valueFrom is not made by the local region's kubelet")
            env[str(item["name"])] = host(str(item["value"]))
        env.update(AWS_ENDPOINT_URL=self.aws_endpoint, **FAKE_CREDENTIALS)  # the region's AWS, in place of IRSA
        entry = [str(a) for a in container.get("command") or [IMAGE]]
        if Path(entry[0]).name != IMAGE:
            raise StartError(f"command {entry[0]!r}: the image's entrypoint is {IMAGE}")
        infra = ["--infra-dir", str(self.infra_dir.resolve())] if self.infra_dir is not None else []
        args = [host(str(a)) for a in [*entry[1:], *(container.get("args") or [])]]
        return [sys.executable, "-m", "platformctl", *infra, *args], env

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
            if "configMap" in volume:
                name = str(volume["configMap"].get("name"))
                stored = self.cluster.stored["configmaps"].get((pod.namespace, name))
                if stored is None:
                    raise StartError(f'MountVolume.SetUp failed for volume "{mount["name"]}": configmap "{name}" not found')
                for key, text in (stored.get("data") or {}).items():
                    (where / key).write_text(self._kubeconfig_of(str(text)))
            elif "emptyDir" not in volume:
                raise StartError(f"volume {mount['name']}: only configMap and emptyDir volumes are made here")
            mounts.append((str(mount["mountPath"]), where))
        return sorted(mounts, key=lambda m: -len(m[0]))

    def _kubeconfig_of(self, text: str) -> str:
        """A ConfigMap's file as the pod reads it: a kubeconfig is the region's own (the same contexts, reachable)."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if not (isinstance(data, dict) and data.get("kind") == "Config" and "contexts" in data):
            return text
        region = yaml.safe_load(self.kubeconfig.read_text())
        if data.get("current-context"):
            region["current-context"] = data["current-context"]
        return str(yaml.safe_dump(region, sort_keys=False))

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
