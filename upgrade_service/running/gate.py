"""The health gate: may the next wave start?

A policy names the stage's canaries (``healthGate: {canary: {window: 30m}}``: the canary verdict over the
state store, the rotation's target images judged against the images they replace), or a command or a URL
(``healthGate: {command: [...]}`` or ``{url: ...}``) that answers JSON
``{"verdict": "pass" | "fail" | "inconclusive", "reason": "..."}``. The executor asks before
every wave. An answer it cannot read (a command that crashed, a URL that is down, JSON without a
verdict) is ``inconclusive``, never ``pass``: a gate that cannot tell must not let a wave through.
The command gets ``PLATFORMCTL_CLUSTER``, ``PLATFORMCTL_STAGE`` and ``PLATFORMCTL_WAVE`` in its
environment; the URL gets them as query parameters.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from platformctl.kernel.environment import Environment
from platformctl.kernel.errors import PlatformError
from upgrade_service.planning.policy import HealthGate

VERDICTS = ("pass", "fail", "inconclusive")
CHECK_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"verdict": self.verdict, "reason": self.reason}


@dataclass(frozen=True)
class Question:
    """What the canary gate is asked before a wave: which cluster, and which images it is moving onto."""

    cluster: str
    stage: str
    wave: int
    now: float
    targets: Mapping[str, str] = field(default_factory=dict)  # pool -> the image it rotates onto
    present: frozenset[str] = frozenset()  # the images the cluster's nodes boot now
    # First light: each target image must hold this many canary results of its own before a pass counts.
    min_results: int = 0
    proven: bool = False  # first light of images that passed it in an earlier stage: one clean canary period will do


class Answer(Protocol):
    """What the canary verdict answers (``e2e_canary.verdict.Verdict``): its word and why."""

    @property
    def verdict(self) -> str: ...
    @property
    def reason(self) -> str: ...


# Answers a Question with the canary verdict; the command gives it.
CanaryVerdict = Callable[[Question], Answer]


def check_gate_exists(gate: HealthGate, source: str) -> None:
    """A gate command that is not there is the policy's mistake: said before anything is touched."""
    if gate.command is not None and shutil.which(gate.command[0]) is None:
        raise PlatformError(f"health gate command {gate.command[0]!r} is not found on PATH", file=source,
                            field="healthGate.command[0]")


def _read(text: str, what: str) -> Verdict:
    try:
        body: Any = json.loads(text)
    except ValueError:
        return Verdict("inconclusive", f"{what} answered something that is not JSON: {text.strip()[:200]!r}")
    if not isinstance(body, dict) or body.get("verdict") not in VERDICTS:
        return Verdict("inconclusive", f"{what} answered JSON without a verdict of pass, fail or inconclusive: {text.strip()[:200]!r}")
    return Verdict(body["verdict"], str(body.get("reason") or "no reason given"))


def ask(gate: HealthGate | None, context: dict[str, str], canary: CanaryVerdict | None = None,
        question: Question | None = None, environment: Environment | None = None) -> Verdict:
    """The gate's verdict. A command gate runs in ``environment`` (the command's; None: this process's as it is now),
    with the ``context`` as ``PLATFORMCTL_*`` variables."""
    if gate is None:
        return Verdict("pass", "no health gate in the policy")
    if gate.canary is not None:
        if canary is None or question is None:
            return Verdict("inconclusive", "the policy's gate is the canary verdict, and this run was given no state "
                           "store of canary results to judge")
        answer = canary(question)
        return Verdict(answer.verdict, answer.reason)
    if gate.command is not None:
        env = (environment or Environment.from_os()).child(**{f"PLATFORMCTL_{k.upper()}": v for k, v in context.items()})
        what = f"health gate command {gate.command[0]}"
        try:
            done = subprocess.run(list(gate.command), capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECONDS,
                                  env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Verdict("inconclusive", f"{what} did not answer within {CHECK_TIMEOUT_SECONDS:.0f} s")
        except OSError as exc:
            return Verdict("inconclusive", f"{what} could not run: {exc.strerror}")
        verdict = _read(done.stdout, what)
        if done.returncode != 0 and verdict.verdict != "fail":
            # A gate that failed is at best inconclusive, whatever it printed before it did.
            last = (done.stderr.strip().splitlines() or [""])[-1]
            said = f" after printing {verdict.verdict!r}" if verdict.verdict == "pass" else " without a verdict"
            return Verdict("inconclusive", f"{what} exited {done.returncode}{said}: {last[:200]}")
        return verdict
    assert gate.url is not None
    url = gate.url + ("&" if "?" in gate.url else "?") + urllib.parse.urlencode(context)
    try:
        with urllib.request.urlopen(url, timeout=CHECK_TIMEOUT_SECONDS) as response:
            return _read(response.read().decode(errors="replace"), f"health gate {gate.url}")
    except urllib.error.HTTPError as exc:
        body = exc.read().decode(errors="replace")
        verdict = _read(body, f"health gate {gate.url}")
        if verdict.verdict == "fail":
            return verdict
        # An error status is at best inconclusive, whatever its body says.
        said = " with a body that says pass" if verdict.verdict == "pass" else ""
        return Verdict("inconclusive", f"health gate {gate.url} answered HTTP {exc.code}{said}")
    except (urllib.error.URLError, OSError) as exc:
        return Verdict("inconclusive", f"health gate {gate.url} is unreachable ({getattr(exc, 'reason', exc)})")
