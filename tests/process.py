"""Running ``platformctl`` as a separate process, the way an operator or a scheduled job does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def environment(home: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    """A clean environment: no AWS target and no kubeconfig of the developer's, this test's PLATFORMCTL_HOME."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PLATFORMCTL_")) and k != "KUBECONFIG"}
    out.update({"PLATFORMCTL_HOME": str(home), **(env or {})})
    return out


def run(home: Path, *args: str, check: bool = True, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "platformctl", *args], capture_output=True, text=True,
                            env=environment(home, env), timeout=timeout)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def start(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "platformctl", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environment(home, env))


def local_region(home: Path, *args: str) -> dict[str, Any]:
    """`platformctl local up --stage dev ARGS…` in ``home``: the region's status, with ``home`` added (stop it
    with ``run(home, "local", "down")``)."""
    info = json.loads(run(home, "local", "up", "--stage", "dev", *args, "-o", "json").stdout)
    info["home"] = home
    return info
