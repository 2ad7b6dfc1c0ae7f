"""Finding, starting and stopping the local region server, and using it from other commands.

The server's state lives in ``$PLATFORMCTL_HOME/local/`` (default ``./.platformctl/local/``):
``server.json`` (written by the server once it is ready, removed when it stops), ``kubeconfig``
and ``server.log``. A region counts as running when ``server.json`` names a live process that
answers on its endpoint; anything else is stale and is cleaned up.

Commands given no live target use the running region (``platformctl.app.platform.Platform`` looks once): AWS calls
go to its moto endpoint (unless ``AWS_ENDPOINT_URL``, ``AWS_PROFILE`` or ``AWS_ACCESS_KEY_ID`` is set) and Kubernetes
calls use its kubeconfig (unless ``--kubeconfig`` or ``$KUBECONFIG`` is given). Every function here is given the
toolkit's home (``$PLATFORMCTL_HOME``) by its caller; none reads the environment. Clients of a local cluster take
their time from the server (``ServerClock``), so their waits pass in the cluster's time.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from platformctl.kernel.clock import Clock
from platformctl.kernel.environment import Environment
from platformctl.kernel.errors import PlatformError, Unavailable

EXTENSION = "platformctl.io/local-region"
CLIENT_HEADER = "X-Platformctl-Client"  # which registered client of the region's clock a request comes from


def state_dir(home: Path) -> Path:
    """The local region's folder in the toolkit's ``home`` (``$PLATFORMCTL_HOME``)."""
    return home / "local"


def _get_json(url: str, timeout: float = 2.0, headers: dict[str, str] | None = None) -> dict[str, Any]:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as response:
        return json.loads(response.read())


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not running.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


LOOK_SECONDS = 5.0  # wall seconds one look at the server's time waits for its answer
GONE_SECONDS = 60.0  # wall seconds of a server's silence after which a client's guess of its time stands
ANSWER_SECONDS = 60.0  # wall seconds a running region's server, busy with every stage and its canaries, may take to answer


def running(home: Path) -> dict[str, Any] | None:
    """The running region's status (as ``local status -o json`` prints it), or None when none runs (no server file,
    its process gone, or not listening yet). A server that runs and is slow to answer is waited for: on two busy cores
    it can take seconds, and a command that took it for gone would fall back to ``~/.kube/config`` or to real AWS.
    One that does not answer within ``ANSWER_SECONDS`` is ``Unavailable``."""
    path = state_dir(home) / "server.json"
    try:
        info = json.loads(path.read_text())
        pid, url = int(info.get("pid", 0)), f"{info['kubernetes_endpoint']}/platformctl/v1/status"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return _answer(url, lambda: process_alive(pid), f"the local region (pid {pid}, {path})")


def _answer(url: str, alive: Callable[[], bool], what: str) -> dict[str, Any] | None:
    """The region's status at ``url`` while ``alive()``: None when it refuses the connection (not listening yet, or
    going away) or answers with something else than its status; a slow one is waited for, and ``Unavailable`` past
    ``ANSWER_SECONDS``."""
    deadline = time.monotonic() + ANSWER_SECONDS
    while alive():
        try:
            return _get_json(url, timeout=max(min(deadline - time.monotonic(), 10.0), 0.1))
        except (OSError, ValueError, http.client.HTTPException) as exc:
            slow = isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)
            if not slow:
                return None
            if time.monotonic() >= deadline:
                raise Unavailable(f"{what} did not answer at {url} within {ANSWER_SECONDS:.0f} s") from None
    return None


def stages_of(info: dict[str, Any]) -> list[str]:
    """The stages a running region holds (one, or several with ``local up --stage all``)."""
    return list(info.get("stages") or [info["stage"]])


def for_stage(info: dict[str, Any] | None, stage: str | None = None, cluster: str | None = None) -> dict[str, Any] | None:
    """The running region as one stage it holds sees it (that stage's AWS region, stack state, store and clusters),
    found by name or by one of its clusters; None when the region holds neither."""
    if info is None:
        return None
    held = stages_of(info)
    if stage not in held:
        found = [c.get("stage", info["stage"]) for c in info.get("clusters", []) if isinstance(c, dict) and c.get("name") == cluster]
        stage = found[0] if found else None
    if stage is None:
        return None
    part = {k: v for k, v in (info.get("by_stage") or {}).get(stage, {}).items() if k != "cluster_names"}
    clusters = [c for c in info.get("clusters", []) if not isinstance(c, dict) or c.get("stage", stage) == stage]
    return {**info, **part, "stage": stage, "clusters": clusters}


class ServerClock:
    """The local region's virtual clock, as a client sees it: ``speed`` virtual seconds per wall second while the
    client works, read again from the server whenever it waits.

    Made with ``register=True`` (``shared_clock``, one per region and process) the client takes part in the region's
    time (``platformctl.emulator.server.timekeeper``): its sleeps and its informers' waits are held by the server, which skips
    to the next instant something is due once every registered client waits and nobody else has a request in
    flight. Every thread that uses the clock counts as working until it waits, unless it is ``parked`` (waiting for
    other threads, not for time). While it works, the region runs at most ``lead`` seconds past its last word for
    ``hold`` wall seconds of silence, and this clock's ``now`` guesses the same way, so that a client starved of the
    CPU does not take the seconds it lost for the region's; a sleep is counted from the server's time when it
    arrives, not from the guess. Without registration (an older region, or a one-off read) sleeps are wall sleeps
    at ``speed``."""

    def __init__(self, time_url: str, register: bool = False) -> None:
        data = _get_json(time_url, timeout=10.0)  # a region busy with every stage may take seconds to answer
        self.url = time_url
        self.speed = float(data["speed"])
        self._read(data)
        self.client_id: str | None = None
        self.lead: float | None = None  # the region's hold of a working client (None: an older region, or not taking part)
        self.hold = 0.0
        self._base = time_url.rsplit("/", 1)[0] + "/clock"
        self._lock = threading.Lock()
        self._threads: dict[int, threading.Thread] = {}
        self._parked: set[int] = set()
        if register:
            self._register()

    def _read(self, data: dict[str, Any]) -> None:
        self.read_virtual = float(data["virtual_time"])  # the server's time when it answered
        self._wall = float(data["wall_time"])
        self._answered = time.monotonic()  # when the server last said its time

    # ---------------------------------------------------------------- taking part in the region's time

    def _register(self) -> None:
        try:
            answer = _post_json(f"{self._base}/clients", {"pid": os.getpid(), "name": " ".join(sys.argv[1:5])[:120]})
        except (OSError, ValueError):
            return  # a region that does not keep clients: wall sleeps at its speed
        self.client_id = str(answer["id"])
        if answer.get("lead_seconds") is not None:
            self.lead, self.hold = float(answer["lead_seconds"]), float(answer.get("hold_seconds") or 0.0)
        self._read(answer)
        self._touch()
        atexit.register(self.close)

    def close(self) -> None:
        """Leave the region's time (at exit): a client that is gone holds nothing."""
        client, self.client_id = self.client_id, None
        if client is not None:
            try:
                _request_json(f"{self._base}/clients/{client}", method="DELETE", timeout=2.0)
            except (OSError, ValueError):
                pass

    def _touch(self) -> None:
        """A thread that uses the clock holds it until it waits: the server hears of a new one at once (a count that
        grows is told at once; one that shrinks rides on the next wait, so the server never thinks fewer work)."""
        thread = threading.current_thread()
        if thread.ident is not None and thread.ident not in self._threads:
            with self._lock:
                self._threads[thread.ident] = thread
            if self.client_id is not None:
                self._tell_participants()

    def _participants(self) -> int:
        with self._lock:
            for ident in [i for i, t in self._threads.items() if not t.is_alive()]:
                del self._threads[ident]
                self._parked.discard(ident)
            return len(self._threads) - len(self._parked)

    @contextlib.contextmanager
    def parked(self) -> Iterator[None]:
        """While the calling thread waits for other threads (not for time), it does not hold the region's clock: the
        server learns so with the next wait of the threads that work, and that it works again at once."""
        ident = threading.get_ident()
        if self.client_id is None:
            yield
            return
        self._touch()
        with self._lock:
            self._parked.add(ident)
        try:
            yield
        finally:
            with self._lock:
                self._parked.discard(ident)
            self._tell_participants()

    def _tell_participants(self) -> None:
        try:
            _post_json(f"{self._base}/clients/{self.client_id}", {"participants": self._participants()})
        except (OSError, ValueError):
            pass

    def _wait(self, until: float | None, **watch: Any) -> dict[str, Any] | None:
        """One wait at the server (held up to a few wall seconds) until ``until``, or ``seconds`` after the server's
        time when it arrives; None when the server cannot be asked."""
        if self.client_id is None:
            return None
        body = {"participants": self._participants(), **watch}
        if until is not None:
            body["until"] = until
        try:
            answer = _post_json(f"{self._base}/clients/{self.client_id}/wait", body, timeout=40.0)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # the region forgot this client (it restarted): take part again
                self._register()
            return None
        except (OSError, ValueError):
            return None
        self._read(answer)
        return answer

    def wait_for_change(self, until: float, cluster: str, kind: str, rv: int) -> int | None:
        """Wait until ``until`` or until ``kind`` in ``cluster`` has a change newer than resource version ``rv``; the
        newest change's version (None when the server cannot say: the caller waits by itself)."""
        self._touch()
        answer = self._wait(until, cluster=cluster, kind=kind, rv=rv)
        return int(answer["rv"]) if answer is not None else None

    # ---------------------------------------------------------------- the clock

    def sync(self) -> float:
        """Ask the server its time again and go on from there: a busy server's clock (its timers, the CronJobs
        they fire) can fall behind wall time for a while, and a deadline is the server's to call."""
        self._look()
        return self.now()

    def reached(self, deadline: float) -> bool:
        """Whether the region's time has reached ``deadline``, on the server's word: a look that the busy server did
        not answer in time leaves the deadline uncalled (the caller looks again later), since this client's guess runs
        on at the region's pace meanwhile and called a canary's 180 s deadline seconds after its pods were made. Only
        a server silent for ``GONE_SECONDS`` of wall time is taken as gone, and the guess then stands."""
        if self._look():
            return self.now() >= deadline
        return time.monotonic() - self._answered > GONE_SECONDS and self.now() >= deadline

    def _look(self) -> bool:
        """One look at the server's time (``LOOK_SECONDS`` at most): whether it answered."""
        client = self.client_id
        try:
            self._read(_get_json(self.url, LOOK_SECONDS, {CLIENT_HEADER: client} if client else None))
        except (OSError, ValueError, KeyError):
            return False  # keep extrapolating from the last answer
        return True

    def now(self) -> float:
        elapsed = max(time.time() - self._wall, 0.0)
        if self.client_id is None:
            return self.read_virtual + elapsed * self.speed
        self._touch()
        if self.lead is None:
            return self.read_virtual + elapsed * self.speed
        # the region waits for this working client: ``lead`` at most while it is silent, its pace once the hold runs out
        return self.read_virtual + min(elapsed * self.speed, self.lead) + max(elapsed - self.hold, 0.0) * self.speed

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        until: float | None = None
        if self.client_id is not None and self.lead is not None:
            answer = self._wait(None, seconds=seconds)  # counted from the server's time, not this client's guess
            if answer is not None:
                if answer["released"]:
                    return
                until = float(answer["until"])
        if until is None:
            until = self.now() + seconds
        while self.client_id is not None:
            answer = self._wait(until)
            if answer is None:
                break
            if answer["released"] or float(answer["virtual_time"]) >= until:
                return
        time.sleep(max(until - self.now(), 0.0) / self.speed)


_SHARED: dict[str, ServerClock] = {}
_SHARED_LOCK = threading.Lock()
_TAKING_PART = False


def take_part() -> None:
    """This process is one of the region's own clients (a job: ``rotate run``, ``remediate``, ``canary run``, ``release
    tick``): its clocks of a local region register with it and hold its time while the process works. Anything else
    that reads a local cluster (a test, a person's script, the dashboard) does not, and cannot stop it skipping."""
    global _TAKING_PART
    _TAKING_PART = True


def shared_clock(time_url: str) -> ServerClock:
    """This process's one clock of the region at ``time_url`` (every context of the region shares it), registered
    with the region once the process takes part (``take_part``)."""
    with _SHARED_LOCK:
        clock = _SHARED.get(time_url)
        if clock is None:
            clock = _SHARED[time_url] = ServerClock(time_url, register=_TAKING_PART)
        return clock


def _request_json(url: str, body: dict[str, Any] | None = None, method: str = "POST", timeout: float = 10.0) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _post_json(url: str, body: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    return _request_json(url, body, "POST", timeout)


def _time_url(kubeconfig: Path, context: str | None) -> str | None:
    """Where a kubeconfig context that names a local region cluster reads its clock (None: it names none)."""
    try:
        config = yaml.safe_load(kubeconfig.read_text()) or {}
        context = context or config.get("current-context")
        cluster = next(c["context"]["cluster"] for c in config.get("contexts", []) if c["name"] == context)
        entry = next(c["cluster"] for c in config.get("clusters", []) if c["name"] == cluster)
        return str(next(e["extension"]["time"] for e in entry.get("extensions") or [] if e.get("name") == EXTENSION))
    except (OSError, yaml.YAMLError, StopIteration, KeyError, TypeError, AttributeError):
        return None


def region_of_context(kubeconfig: Path, context: str | None) -> dict[str, Any] | None:
    """The status of the local region whose cluster a kubeconfig context names (a pod's kubeconfig, which reaches its
    region's clusters with no region running from its home), or None when it names none or the region does not
    answer."""
    url = _time_url(kubeconfig, context)
    if url is None or not url.endswith("/platformctl/v1/time"):
        return None
    # a slow region is waited for, never taken for none (its pod's deploy and store would be another account's)
    return _answer(url.removesuffix("/time") + "/status", lambda: True, f"the local region of {kubeconfig}")


def clock_for_context(kubeconfig: Path, context: str | None) -> Clock | None:
    """The server clock of a kubeconfig context that names a local region cluster, else None."""
    url = _time_url(kubeconfig, context)
    if url is None:
        return None
    try:
        return shared_clock(url)
    except (OSError, ValueError, KeyError):
        return None


def up(environment: Environment, stages: list[str], speed: float, infra_dir: Path | None, workloads: bool = True,
       canaries: bool = False,
       timeout: float | None = None, skip: bool = True, run_jobs: bool = False,
       pods_per_node: float = 30.0, real_clusters: tuple[str, ...] = (),
       owner_pid: int | None = None) -> tuple[dict[str, Any], bool]:
    """Start the region of ``stages`` detached, or return the running one when it holds them. Returns (status, started).
    ``run_jobs``: the pods of the toolkit's own Jobs run as processes (``platformctl.emulator.server.kubelet``);
    ``pods_per_node``: how densely the synthetic workloads fill the member clusters. ``environment``: the command's (its
    home holds the region's folder; the server process gets it); ``owner_pid``: the region stops once that process has
    ended."""
    folder = state_dir(environment.home)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # an unwritable PLATFORMCTL_HOME (or checkout): one line, before anything starts
        raise PlatformError(f"cannot make the local region's folder: {exc.strerror}", file=str(folder),
                            field="PLATFORMCTL_HOME") from None
    timeout = timeout if timeout is not None else 180.0 * len(stages)
    with open(folder / "up.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two `up`s at once start one server
        info = running(environment.home)
        if info is not None:
            if not set(stages) <= set(stages_of(info)):
                held = stages_of(info)
                raise PlatformError(f"the local region of stage{'s' if len(held) > 1 else ''} {', '.join(held)} is running "
                                    f"(pid {info['pid']}): run "
                                    "`platformctl local down` first", file=str(folder / "server.json"), field="--stage")
            missing = [c for c in real_clusters if c not in (info.get("real_control_planes") or {})]
            if missing:
                raise PlatformError(f"the local region running (pid {info['pid']}) serves {', '.join(missing)} on its own "
                                    "control plane: run `platformctl local down` first", file=str(folder / "server.json"),
                                    field="--cluster")
            if owner_pid is not None and info.get("owner_pid") != owner_pid:
                raise PlatformError(f"the local region running (pid {info['pid']}) stops with "
                                    f"{'process ' + str(info['owner_pid']) if info.get('owner_pid') else 'local down only'}"
                                    f", not with process {owner_pid}: run `platformctl local down` first",
                                    file=str(folder / "server.json"), field="--owner-pid")
            if run_jobs and not info.get("run_jobs"):
                raise PlatformError(f"the local region running (pid {info['pid']}) does not run jobs: run `platformctl "
                                    "local down` first", file=str(folder / "server.json"), field="--run-jobs")
            return info, False
        (folder / "server.json").unlink(missing_ok=True)
        command = [sys.executable, "-m", "platformctl.cli.serve", *[a for s in stages for a in ("--stage", s)],
                   "--state-dir", str(folder), "--speed", str(speed)]
        if infra_dir is not None:
            command += ["--infra-dir", str(infra_dir)]
        if not workloads:
            command.append("--no-workloads")
        elif pods_per_node != 30.0:
            command += ["--pods-per-node", str(pods_per_node)]
        if canaries:
            command.append("--canaries")
        if not skip:
            command.append("--no-skip")
        if run_jobs:
            command.append("--run-jobs")
        command += [a for c in real_clusters for a in ("--real-cluster", c)]
        if owner_pid is not None:
            command += ["--owner-pid", str(owner_pid)]
        with open(folder / "server.log", "ab") as out:
            child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=environment.child(),
                                     close_fds=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise PlatformError(f"the local region server exited with code {child.returncode}: {_last_error(folder)}",
                                    file=str(folder / "server.log"), field="local up")
            info = running(environment.home)
            # ready once it answers, and each cluster's canary runner pod (started once it answers) has its process
            runners = (info or {}).get("canary_runners") or []
            if info is not None and info["pid"] == child.pid and (not canaries or (runners and all(r["pid"] for r in runners))):
                return info, True
            time.sleep(0.1)
        _terminate(child.pid)
        raise PlatformError(f"the local region server was not ready within {timeout:.0f} s", file=str(folder / "server.log"),
                            field="local up")


def _last_error(folder: Path) -> str:
    try:
        lines = [line for line in (folder / "server.log").read_text().splitlines() if line.strip()]
    except OSError:
        return "no log"
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or ["no log"])[-1]


def _terminate(pid: int, timeout: float = 20.0) -> bool:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_alive(pid):
            return True
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return False


def down(home: Path) -> dict[str, Any] | None:
    """Stop the region running from ``home``; returns what was stopped (None when nothing ran). Leaves no process
    behind."""
    folder = state_dir(home)
    try:
        info = json.loads((folder / "server.json").read_text())
    except (OSError, ValueError):
        return None
    pid = int(info.get("pid", 0))
    if pid and process_alive(pid):
        _terminate(pid)
    (folder / "server.json").unlink(missing_ok=True)
    return info


def faults(home: Path, method: str = "GET", body: dict[str, Any] | None = None) -> dict[str, Any]:
    """Inject (POST), list (GET) or clear (DELETE) the running region's faults. A fault the region refuses
    (an unknown node or pool) is a ``PlatformError`` with the region's own words."""
    info = running(home)
    if info is None:
        raise PlatformError("no local region is running (start one with `platformctl local up`)", field="local fault")
    data = json.dumps(body or {}).encode() if method == "POST" else None
    request = urllib.request.Request(f"{info['kubernetes_endpoint']}/platformctl/v1/faults", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        answer = json.loads(exc.read() or b"{}")
        raise PlatformError(answer.get("error") or f"the local region answered {exc.code}",
                            field=answer.get("field") or "local fault") from None
