"""A stage's stack lock, left behind by a deploy killed (SIGKILL) while it held it, as `pulumi up` leaves one on a
self-managed backend. The release tick meets it as a busy stage (exit 0, the lock's holder and age said) and deploys
nothing. A lock a person's deploy left is never cleared by a tick, however old: `platformctl stage cancel` clears it.
A lock a tick's deploy left (the ledger recorded that tick's deploy before it began) is cleared by the tick that
holds the stage's lease once it is older than an hour of the stage's time, recorded, and the deploy made once."""

from __future__ import annotations

import json
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ami.manifest import MANIFEST_DIR
from platformctl.app.demo.checkout import new_tree
from platformctl.kernel.deployer import STALE_LOCK_SECONDS
from tests.process import get, region_fixture, run, wait_region

PIPELINE = "stages:\n  - name: dev\n    rotationPolicy: rotation.yaml\n    soak: 30m\n    minResults: 20\n"
TTL = "4"  # the tick's lease, wall seconds: a killed tick's lapses quickly


def _files(info: dict[str, Any]) -> None:
    (info["home"] / "rotation.yaml").write_text("strategy: surge\nmaxInFlight: 4\n")
    (info["home"] / "pipeline.yaml").write_text(PIPELINE)


region = region_fixture("--no-workloads", prepare=_files)


def release(home: Path, *args: str, **kwargs: Any) -> Any:
    return run(home, "release", *args, "--pipeline", str(home / "pipeline.yaml"), "--ledger", str(home / "ledger.db"),
               **kwargs)


def tick(home: Path, env: dict[str, str] | None = None) -> Any:
    """One tick, as the CronJob runs it; a killed tick's lease is waited out (exit 3 until it lapses)."""
    give_up = time.monotonic() + 120
    while True:
        out = release(home, "tick", "--lease-ttl", TTL, "-o", "json", check=False, timeout=600, env=env)
        if out.returncode != 3 or time.monotonic() > give_up:
            return out
        time.sleep(1)


def template_versions(region: dict[str, Any]) -> Counter[str]:
    calls = get(region, "/platformctl/v1/aws-calls?action=CreateLaunchTemplateVersion")["calls"]
    return Counter(c["params"].get("LaunchTemplateId") or c["params"].get("LaunchTemplateName") for c in calls)


def lock_errors(home: Path) -> list[dict[str, Any]]:
    history = json.loads(release(home, "history", "-o", "json").stdout)
    return [e for e in history if e["decision"] == "error" and e["inputs"]["error"]["type"] == "DeployLocked"]


def lock_age(said: str) -> float:
    """The lock's age as the message says it (``5h12m ago``, ``69m ago``, ``40s ago``), in seconds."""
    found = re.search(r", ((?:\d+[dhms])+) ago\)", said)
    assert found, said
    return float(sum(int(n) * {"d": 86400, "h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"(\d+)([dhms])", found.group(1))))


def busy_with_lock(out: Any) -> str:
    """The tick was busy on dev's locked stack: exit 0, nothing written but the fault; its message."""
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert [e["error"]["type"] for e in report["errors"]] == ["DeployLocked"] and report["errors"][0]["transient"]
    assert not any(s["decision"] == "deployed" for s in report["steps"])
    return str(report["errors"][0]["error"]["message"])


def test_a_lock_a_killed_tick_left_is_cleared_after_an_hour_and_a_persons_never(region: dict[str, Any]) -> None:
    home = region["home"]
    run(home, "ami", "build", "--manifests", str(new_tree(MANIFEST_DIR, home / "manifests-9.2.0", "9.2.0")))
    cid = json.loads(release(home, "start", "--note", "9.2", "-o", "json").stdout)["id"]
    entered = tick(home)  # the candidate enters dev: its deploy is the next tick's step
    assert [s["decision"] for s in json.loads(entered.stdout)["steps"]] == ["enter"], entered.stdout
    before = template_versions(region)
    checkpoint = Path(region["checkpoint"])
    stack_lock = checkpoint.with_name(checkpoint.name + ".stack-lock.json")

    # A person's deploy, killed while it holds the stack's lock.
    person = run(home, "stage", "deploy", "--stage", "dev", check=False, env={"PLATFORMCTL_FAILPOINT": "deploy:locked"})
    assert person.returncode == -signal.SIGKILL and stack_lock.exists()
    said = busy_with_lock(tick(home))
    assert f"(pid {json.loads(stack_lock.read_text())['pid']}) at " in said and lock_age(said) < 3600, said
    assert "`platformctl stage cancel --stage dev`" in said
    wait_region(region, STALE_LOCK_SECONDS + 120)
    said = busy_with_lock(tick(home))  # an hour on: a person's lock, never the tick's to clear
    assert lock_age(said) >= STALE_LOCK_SECONDS and stack_lock.exists(), said
    assert template_versions(region) == before
    assert len(lock_errors(home)) == 1  # one lock, recorded once, whatever age each tick's message says
    cancelled = run(home, "stage", "cancel", "--stage", "dev", "--yes")
    assert "dev: its stack lock is cleared" in cancelled.stdout and not stack_lock.exists()

    # A tick killed while its deploy holds the lock: the next ticks are busy until it is an hour old, then one clears it.
    killed = tick(home, env={"PLATFORMCTL_FAILPOINT": "deploy:locked"})
    assert killed.returncode == -signal.SIGKILL and stack_lock.exists()
    left = json.loads(stack_lock.read_text())
    busy_with_lock(tick(home))
    assert template_versions(region) == before
    wait_region(region, STALE_LOCK_SECONDS + 120)
    out = tick(home)
    assert out.returncode == 0 and not json.loads(out.stdout)["errors"], out.stdout[-3000:] + out.stderr[-3000:]
    history = json.loads(release(home, "history", "-o", "json").stdout)
    deployed = [e for e in history if e["candidate"] == cid and e["decision"] == "deployed"]
    assert len(deployed) == 1 and "first cleared the stack lock a killed tick left " in deployed[0]["reason"]
    assert f"(pid {left['pid']})" in deployed[0]["reason"]
    cleared = deployed[0]["inputs"]["result"]["cleared_lock"]
    assert cleared["left_by"] != cleared["cleared_by"] and cleared["age_seconds"] >= STALE_LOCK_SECONDS
    assert not stack_lock.exists()  # the deploy gave its own lock back
    assert len(lock_errors(home)) == 2  # the person's lock, then the killed tick's
    made = template_versions(region) - before
    assert made and max(made.values()) == 1, made  # the deploy made once: one new version a template
