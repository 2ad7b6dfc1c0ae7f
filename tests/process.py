"""Running ``platformctl`` as a separate process, the way an operator or a scheduled job does."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from platformctl.kernel.region_client import ServerClock
from tests.zygote import zygote


def environment(home: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment: no AWS target and no kubeconfig of the developer's, this test's PLATFORMCTL_HOME."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PLATFORMCTL_")) and k != "KUBECONFIG"}
    if "PLATFORMCTL_LOCAL_SKIP" in os.environ:  # `local up --no-skip` for every region of the run: both ways compared
        out["PLATFORMCTL_LOCAL_SKIP"] = os.environ["PLATFORMCTL_LOCAL_SKIP"]
    # a region this test starts (`local up`) ends with the test's process, even when a killed run skips its teardown
    out.update({"PLATFORMCTL_HOME": str(home), "PLATFORMCTL_LOCAL_OWNER": str(os.getpid()), **(env or {})})
    return out


def run(home: Path, *args: str, check: bool = True, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    forks = zygote()
    if forks is not None:
        result = forks.run(list(args), environment(home, env), timeout)
    else:
        result = subprocess.run([sys.executable, "-m", "platformctl", *args], capture_output=True, text=True,
                                env=environment(home, env), timeout=timeout)
    if check:
        assert result.returncode == 0, result.stderr
    return result


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: a child between fork and exec only calls it


def with_parent() -> Callable[[], None] | None:
    """For a child: SIGTERM once the process that started it ends (Linux's ``PR_SET_PDEATHSIG``), so that a test's
    long-running commands do not outlive a run killed before its teardown (one that ended before the child asked is
    caught by its parent's pid). The signal follows the thread that forked it, so a child started from any thread but
    the main one (which lives as long as the process) gets none."""
    parent = os.getpid()

    def die_with_parent() -> None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return die_with_parent if threading.current_thread() is threading.main_thread() else None


def start(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "platformctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environment(home, env), preexec_fn=with_parent())


def local_region(home: Path, *args: str, stage: str = "dev", canaries: bool = False, infra: Path | None = None,
                 timeout: float = 300) -> dict[str, Any]:
    """`platformctl local up --stage STAGE --no-canaries ARGS…` in ``home``: the region's status, with ``home`` (and
    ``infra``, the checkout's stack files it runs, and ``up_wall``, the wall time it was asked for) added (stop it with
    ``run(home, "local", "down")``). Without ``canaries`` a test that wants canary results starts its runners itself."""
    up_wall = time.time()
    where = ["--infra-dir", str(infra)] if infra is not None else []
    info = json.loads(run(home, *where, "local", "up", "--stage", stage, *([] if canaries else ["--no-canaries"]), *args,
                          "-o", "json", timeout=timeout).stdout)
    info.update(home=home, up_wall=up_wall, infra=infra)
    return info


def region_fixture(*args: str, stage: str = "dev", canaries: bool = False, runners: bool = False,
                   checkout: bool = False, prepare: Callable[[dict[str, Any]], None] | None = None,
                   timeout: float = 300) -> Any:
    """The one local region fixture: a module's region (``local_region(…)`` in a home of its own; ``checkout``: on the
    checkout's stacks shrunk to one node a pool, as ``demo-pipeline`` runs them), ``prepare(info)`` on it (the files its
    tests need, the facts they read), each cluster's canary runner as the Pulumi program runs it when ``runners``;
    stopped after the module's last test, or when setting it up failed, whatever happened."""

    @pytest.fixture(scope="module")
    def region(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
        home = tmp_path_factory.mktemp("home")
        started: list[subprocess.Popen[str]] = []
        try:
            info = local_region(home, *args, stage=stage, canaries=canaries, infra=small_checkout(home) if checkout else None,
                                timeout=timeout)
            if runners:
                started = canary_runners(home, info)
            if prepare is not None:
                prepare(info)
            yield info
        finally:
            stop_all(started)
            run(home, "local", "down", check=False)

    return region


def new_images(region: dict[str, Any], version: str) -> dict[str, str]:
    """An operator's change: a new base image version (everything inherits it), built and deployed to dev; returns
    ``cluster/pool`` -> its new image. The region's manifests are a copy of the checkout's, in its home."""
    from ami.manifest import MANIFEST_DIR

    region["manifests"] = region["home"] / "manifests"
    if not region["manifests"].is_dir():
        region["manifests"].mkdir()
        for path in MANIFEST_DIR.glob("*.yaml"):
            (region["manifests"] / path.name).write_text(path.read_text())
    base = region["manifests"] / "base.yaml"
    text = base.read_text()
    current = next(line for line in text.splitlines() if line.startswith("version:"))
    base.write_text(text.replace(current, f"version: {version}", 1))
    for name in ("general", "ml", "custom"):  # each child gets a new version of its own as well
        path = region["manifests"] / f"{name}.yaml"
        lines = path.read_text().splitlines()
        i = next(i for i, line in enumerate(lines) if line.startswith("version:"))
        major, minor, patch = lines[i].split(":", 1)[1].strip().split(".")
        lines[i] = f"version: {major}.{minor}.{int(patch) + 1}"
        path.write_text("\n".join(lines) + "\n")
    run(region["home"], "ami", "build", "--manifests", str(region["manifests"]))
    deployed = json.loads(run(region["home"], "stage", "deploy", "--stage", "dev", "-o", "json").stdout)
    assert deployed["summary"].get("update") == 7  # one new launch template version per pool
    return deployed["images"]


def get(region: dict[str, Any], path: str) -> Any:
    """A GET of the local region server's API (Kubernetes or its own ``/platformctl/v1/…``), as JSON."""
    with urllib.request.urlopen(f"{region['kubernetes_endpoint']}{path}", timeout=30) as response:
        return json.loads(response.read())


def region_now(region: dict[str, Any]) -> float:
    """The local region's clock (what its cluster and its AWS say the time is)."""
    return float(get(region, "/platformctl/v1/time")["virtual_time"])


def wait_region(region: dict[str, Any], seconds: float) -> None:
    """Wait until ``seconds`` of the region's time have passed (however slowly the machine lets them pass).

    The test waits as the scheduler of the jobs it stands in for does (a CronJob's next slot, an operator's hour): as
    one of the region's own clients, so that while no job works the region's time skips to the end of the wait, as it
    does for the jobs' own sleeps (at the region's pace under ``local up --no-skip``)."""
    clock = ServerClock(f"{region['kubernetes_endpoint']}/platformctl/v1/time", register=True)
    try:
        until = clock.sync() + seconds
        clock.sleep(seconds)
    finally:
        clock.close()
    while region_now(region) < until:  # the server's word, whatever the clock's sleep ended on
        time.sleep(0.05)


def canary_runners(home: Path, region: dict[str, Any]) -> list[subprocess.Popen[str]]:
    """One ``canary run`` process per cluster of the region, as the Pulumi program runs them (stop with
    ``stop_all``). Each writes to a log file in ``home`` (``canary-<cluster>.log``), never to a pipe nobody reads
    while the test runs: a runner that filled one would block on its next line and write no result again."""
    runners = []
    for c in region["clusters"]:
        log = open(home / f"canary-{c['name']}.log", "w")  # the process holds it until it ends
        runners.append(subprocess.Popen([sys.executable, "-m", "platformctl", "canary", "run", "--stage", region["stage"],
                                         "--cluster", c["name"], "--metrics-port", "0"], stdout=log,
                                        stderr=subprocess.STDOUT, text=True, env=environment(home, None),
                                        preexec_fn=with_parent()))
        log.close()
    return runners


def stop_all(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        process.communicate(timeout=120)



def small_checkout(home: Path, pool_size: int = 1) -> Path:
    """An operator's checkout shrunk to run every stage at once (``demo-pipeline``'s): the stack files of ``infra/``
    with every node pool at ``pool_size`` nodes. Returns the infra folder to pass as ``--infra-dir``."""
    from platformctl.app.demo.checkout import shrink_stacks
    from platformctl.kernel.topology import default_infra_dir

    return shrink_stacks(default_infra_dir(), home / "infra", pool_size)
