"""The local region's time skips what nobody waits through, and only that: real client processes register with the
region (``region_client.shared_clock``), wait on it, die on it; a stranger's open watch holds the clock."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.process import environment, get, local_region, region_fixture, run

# A registered client: sleeps SECONDS of the region's time, then prints the region's time before and after, as the
# server says it (not the client's own guess).
SLEEPER = """
import json, sys, time
from platformctl.kernel.region_client import ServerClock, shared_clock, take_part
take_part()
url, seconds = sys.argv[1], float(sys.argv[2])
clock = shared_clock(url)
before = ServerClock(url).read_virtual
clock.sleep(seconds)
after = ServerClock(url).read_virtual
print(json.dumps({"before": before, "after": after, "client": clock.client_id}), flush=True)
"""

# A registered client that says a word, then is silent for SILENCE wall seconds (a process starved of the CPU, as the
# region sees it), then says another: the region's time at both words, as the server answered them.
SILENT = """
import json, sys, time
from platformctl.kernel.region_client import shared_clock, take_part
take_part()
url, silence = sys.argv[1], float(sys.argv[2])
clock = shared_clock(url)
before = clock.sync()
time.sleep(silence)
after = clock.sync()
print(json.dumps({"before": before, "after": after, "lead": clock.lead}), flush=True)
"""

# A registered client that works (never waits) until it is killed.
WORKER = """
import sys, time
from platformctl.kernel.region_client import shared_clock, take_part
take_part()
clock = shared_clock(sys.argv[1])
print(clock.client_id, flush=True)
while True:
    clock.now()
    time.sleep(0.05)
"""


def _time_url(info: dict[str, Any]) -> None:
    info["time_url"] = f"{info['kubernetes_endpoint']}/platformctl/v1/time"


region = region_fixture("--no-workloads", "--skip", prepare=_time_url)


def _clock(region: dict[str, Any]) -> dict[str, Any]:
    return get(region, "/platformctl/v1/clock")


def _sleep(region: dict[str, Any], seconds: float) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", SLEEPER, region["time_url"], str(seconds)], capture_output=True, text=True,
                          env=environment(region["home"]), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_client_waiting_alone_skips_to_its_deadline_and_never_before_it(region: dict[str, Any]) -> None:
    assert _clock(region)["skip"] is True
    skipped = _clock(region)["skipped_seconds"]
    slept = _sleep(region, 3600)
    # No client sees a deadline pass before the cluster reaches it.
    assert slept["after"] >= slept["before"] + 3600
    # Most of the hour was jumped over, not waited through at the region's speed.
    after = _clock(region)
    assert after["skipped_seconds"] - skipped >= 1800, after
    # The client left when it exited: nobody is registered, so nothing skips now.
    assert after["clients"] == []


def test_an_idle_region_moves_at_its_speed_and_skips_nothing(region: dict[str, Any]) -> None:
    first = _clock(region)
    a = json.loads(urllib.request.urlopen(region["time_url"], timeout=10).read())
    time.sleep(1.0)
    b = json.loads(urllib.request.urlopen(region["time_url"], timeout=10).read())
    ratio = (b["virtual_time"] - a["virtual_time"]) / (b["wall_time"] - a["wall_time"])
    assert 0.5 * region["speed"] < ratio < 1.5 * region["speed"]
    assert _clock(region)["skipped_seconds"] == first["skipped_seconds"]


def test_a_strangers_open_watch_holds_the_clock_to_its_pace(region: dict[str, Any]) -> None:
    """`kubectl get pods -w` by hand: while it is open, a registered client's wait is not skipped."""
    server = region["clusters"][1]["server"]
    response = urllib.request.urlopen(f"{server}/api/v1/pods?watch=1&timeoutSeconds=60", timeout=90)

    def drain() -> None:  # keeps the stream read while it is open
        try:
            while response.read(1024):
                pass
        except (OSError, ValueError, AttributeError):
            pass  # closed under it

    threading.Thread(target=drain, daemon=True).start()
    try:
        skipped = _clock(region)["skipped_seconds"]
        slept = _sleep(region, 600)  # two wall seconds at 300x
        assert slept["after"] >= slept["before"] + 600
        assert _clock(region)["skipped_seconds"] == skipped
    finally:
        response.close()
    # Closed, the same wait is skipped again.
    deadline = time.monotonic() + 10
    while _clock(region)["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.1)
    skipped = _clock(region)["skipped_seconds"]
    _sleep(region, 600)
    assert _clock(region)["skipped_seconds"] > skipped


def test_a_client_that_dies_registered_is_forgotten_and_never_freezes_the_region(region: dict[str, Any]) -> None:
    worker = subprocess.Popen([sys.executable, "-c", WORKER, region["time_url"]], stdout=subprocess.PIPE, text=True,
                              env=environment(region["home"]))
    assert worker.stdout is not None
    client = worker.stdout.readline().strip()
    try:
        assert client in {c["id"] for c in _clock(region)["clients"]}
        # A client that works holds skipping, never time: another client's wait passes at the region's speed.
        skipped = _clock(region)["skipped_seconds"]
        slept = _sleep(region, 300)
        assert slept["after"] >= slept["before"] + 300
        assert _clock(region)["skipped_seconds"] == skipped
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    deadline = time.monotonic() + 15
    while _clock(region)["clients"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _clock(region)["clients"] == []
    skipped = _clock(region)["skipped_seconds"]
    _sleep(region, 3600)
    assert _clock(region)["skipped_seconds"] - skipped >= 1800


def test_a_client_starved_for_a_second_comes_back_to_a_region_its_lead_on_not_its_pace(region: dict[str, Any]) -> None:
    """A busy machine does not make the region's time run away from its clients: 1 wall second at 300x would be five
    minutes, enough for a CronJob's run to be pruned or a canary's deadline to pass while the canary was descheduled."""
    held = _clock(region)["held_seconds"]
    done = subprocess.run([sys.executable, "-c", SILENT, region["time_url"], "1.0"], capture_output=True, text=True,
                          env=environment(region["home"]), timeout=120)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["lead"] is not None
    # The second word's own round trip runs at the region's pace (a few milliseconds of a loaded machine are a second or
    # two at 300x): allowed a tenth of a wall second, far from the 300 s a second of silence would be at that pace.
    assert 0 <= said["after"] - said["before"] <= said["lead"] + 0.1 * region["speed"], said
    assert _clock(region)["held_seconds"] - held >= 0.5 * region["speed"]


def test_a_process_that_only_reads_the_region_never_holds_its_time(region: dict[str, Any]) -> None:
    """A test or a person's script with a LiveCluster of the region (not one of its jobs) does not register."""
    from platformctl.kernel.cluster.live import LiveCluster

    live = LiveCluster.from_kubeconfig(region["kubeconfig"], context=region["clusters"][1]["name"])
    assert live.list_nodes()
    assert _clock(region)["clients"] == []
    skipped = _clock(region)["skipped_seconds"]
    _sleep(region, 3600)
    assert _clock(region)["skipped_seconds"] - skipped >= 1800


def test_status_says_how_the_region_keeps_time(region: dict[str, Any]) -> None:
    status = json.loads(run(region["home"], "local", "status", "-o", "json").stdout)
    assert status["skip"] is True and status["clock"]["speed"] == region["speed"]
    assert Path(status["kubeconfig"]).is_file()


def test_no_skip_keeps_the_old_pace(tmp_path: Path) -> None:
    info = local_region(tmp_path, "--no-workloads", "--no-skip")
    info["time_url"] = f"{info['kubernetes_endpoint']}/platformctl/v1/time"
    try:
        assert _clock(info)["skip"] is False
        slept = _sleep(info, 300)
        assert slept["after"] >= slept["before"] + 300
        assert _clock(info)["skipped_seconds"] == 0
    finally:
        run(tmp_path, "local", "down", check=False)
