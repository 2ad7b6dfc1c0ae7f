"""Canary definitions: the shipped ones load, a new one needs only a file, and every mistake is one line
naming the file and the key (through `platformctl canary list`, exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_canary.definitions import CANARY_DIR, KINDS, load_canaries, parse_canary, seconds
from platformctl.kernel.errors import PlatformError


def test_the_shipped_canaries_cover_every_kind() -> None:
    canaries = load_canaries(CANARY_DIR)
    assert sorted(c.kind for c in canaries) == sorted(KINDS)
    service = next(c for c in canaries if c.kind == "service")
    assert (service.namespace, service.budget, service.interval) == ("canary-service", 2, 300)


def test_a_new_canary_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "nightly.yaml").write_text("name: nightly\nkind: cron\nschedule: '0 2 * * *'\ninterval: 1h\n")
    [nightly] = load_canaries(tmp_path)
    assert (nightly.kind, nightly.schedule, nightly.interval, nightly.namespace) == ("cron", "0 2 * * *", 3600, "canary-nightly")
    assert "replicas" not in nightly.to_dict() and nightly.to_dict()["schedule"] == "0 2 * * *"


@pytest.mark.parametrize(("text", "field", "says"), [
    ("name: x\nkind: webapp\n", "kind", "Input should be 'service', 'batch', 'cron', 'daemon' or 'node-pool'"),
    ("name: x\nkind: cron\nschedule: '61 * * * *'\n", "schedule", "'61 * * * *' is not a cron schedule"),
    ("name: x\nkind: batch\nreplicas: 3\n", "replicas", "applies to service canaries, not batch"),
    ("name: x\nkind: service\ninterval: soon\n", "interval", "'soon' is not a duration"),
    ("name: x\nkind: service\nreplicas: 2\nminAvailable: 3\n", None, "minAvailable 3 must be between 0 and replicas 2"),
    ("name: x\nkind: service\nreplica: 2\n", "replica", "did you mean replicas"),
    ("name: x\nkind: node-pool\nresources: {cpu: lots}\n", "resources.cpu", "'lots' is not a Kubernetes quantity"),
])
def test_mistakes_name_the_file_and_the_key(text: str, field: str | None, says: str) -> None:
    import yaml

    with pytest.raises(PlatformError) as caught:
        parse_canary(yaml.safe_load(text), "x.yaml")
    assert caught.value.file == "x.yaml" and caught.value.field == field and says in str(caught.value), str(caught.value)


def test_durations() -> None:
    assert [seconds(v) for v in (90, "90", "90s", "5m", "1h30m", "2h")] == [90, 90, 90, 300, 5400, 7200]


def test_the_command_lists_them_and_a_bad_one_is_one_line_exit_2(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "platformctl", "canary", "list", *args], capture_output=True,
                              text=True, timeout=60)

    listed = json.loads(run("--canaries", str(CANARY_DIR), "-o", "json").stdout)["canaries"]
    assert {c["name"] for c in listed} == {"service", "batch", "cron", "daemon", "node-pool"}
    (tmp_path / "bad.yaml").write_text("name: bad\nkind: cron\nschedule: 'every minute'\n")
    result = run("--canaries", str(tmp_path))
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert f"{tmp_path / 'bad.yaml'}: schedule: 'every minute' is not a cron schedule" in result.stderr


def test_every_kind_that_runs_a_workload_has_its_check_registered() -> None:
    """A kind is a class in definitions.py and its check in checks.py: one without the other fails here, not in a
    cluster at 3 a.m."""
    from e2e_canary.checks import observe
    from e2e_canary.definitions import KIND_MODELS, Canary

    unchecked = observe.dispatch(Canary)
    for kind, model in KIND_MODELS.items():
        assert (observe.dispatch(model) is unchecked) == model.image_arms, kind  # the runner places image arms' pods
