"""What a rotation run takes and gives: the cluster it acts on (``Target``), its ``Options``, the ``Progress`` it
shows, the ``Outcome`` it ends with and ``rotate run``'s exit codes; and the taint it marks outdated nodes with."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from platformctl.kernel.cluster.interface import Cluster
from platformctl.kernel.cluster.model import Node, Pod, Snapshot, Taint
from platformctl.kernel.environment import Environment
from platformctl.kernel.nodegroups import GroupState, LaunchSpec, NodeGroups
from platformctl.kernel.windows import Schedule, Window
from upgrade_service.running.report import RunReport
from upgrade_service.running.wave_drain import DrainStatus

if TYPE_CHECKING:
    from upgrade_service.planning.policy import RotationPolicy
    from upgrade_service.running.gate import CanaryVerdict

TAINT = Taint("platformctl.io/rotation", "outdated", "PreferNoSchedule")

# Exit codes of `rotate run`, documented in docs/commands.md and docs/rotate.md.
EXIT_DONE, EXIT_HALTED, EXIT_BAD_INPUT, EXIT_LEASE_HELD, EXIT_PAUSED = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # as a shell reports a command that Ctrl-C stopped


@dataclass
class Target:
    """One cluster to rotate and the owner of its instances."""

    name: str
    cluster: Cluster
    groups: NodeGroups


@dataclass(frozen=True)
class Options:
    poll_seconds: float = 5.0
    lease_ttl: float = 60.0
    gate_poll_seconds: float = 30.0
    stage: str | None = None
    max_waves: int | None = None  # start at most this many waves in this run; the next run goes on
    canary: CanaryVerdict | None = None  # the canary verdict a `canary` health gate asks
    # The images passed first light in an earlier stage of the release pipeline: here, one canary period of results
    # on each first-light node that all succeed lets it in (a region's own hardware is still tried, not soaked again).
    first_light_proven: bool = False
    # The images the release pipeline promoted to the stage (its ``promoted/<stage>`` record; None: it never deployed
    # there): a pool whose launch template boots another image has drifted, and is not rotated.
    promoted: frozenset[str] | None = None
    # With ``promoted``: what each auto scaling group launched when the pipeline last deployed the stage (the same
    # record): only those settings are rolled out as the cause ``launch-template`` (None or empty: none are).
    deployed: Mapping[str, LaunchSpec] | None = None
    # Set (by a first Ctrl-C or SIGTERM) to stop every cluster at its next safe point: no new side effect starts.
    stop: threading.Event | None = None
    # The environment a health gate's command runs in: the command's own (None: this process's).
    environment: Environment | None = None
    # More exclusions, read again each time a wave may start (a stage's freezes set by hand, ``frozen/<stage>``: a
    # tick may write one while the run goes on).
    exclusions: Callable[[], Sequence[Window]] | None = None

    @property
    def as_deployed(self) -> Mapping[str, LaunchSpec] | None:
        """The launches a ``launch-template`` cause may roll out in a stage the pipeline drives (None: any, not such a
        stage; empty: none, the record does not say)."""
        return None if self.promoted is None else dict(self.deployed or {})

    def closed(self, policy: RotationPolicy, now: float) -> str | None:
        """Why no wave may start at ``now`` (the policy's windows and exclusions, and ``exclusions``); None: one may."""
        more = tuple(self.exclusions()) if self.exclusions is not None else ()
        schedule = policy.schedule
        return (Schedule(schedule.windows, (*schedule.exclusions, *more)) if more else schedule).closed(now)


@dataclass
class Progress:
    """What the live display shows for one cluster."""

    cluster: str
    phase: str = "starting"
    wave: int = 0
    waves: int = 0
    in_flight: list[str] = field(default_factory=list)
    drain: DrainStatus | None = None
    message: str = ""


class RunStatus(StrEnum):
    """How one cluster's run ended."""

    DONE = "done"  # every outdated node rotated
    PARTIAL = "partial"  # stopped after --max-waves; the next run goes on
    OUTSIDE_WINDOW = "outside-window"  # no maintenance window open (or an exclusion): the next run, in one, goes on
    INCOMPLETE = "incomplete"  # ended with nodes not rotated (blocked by a budget, failed, in no group)
    HALTED = "halted"  # a gate, first light or a drain stopped it
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM: stopped before its next step
    PAUSED = "paused"  # a pause by hand (or a freeze's) holds it
    ABORTED = "aborted"
    LEASE_HELD = "lease-held"  # another run holds the cluster
    LOST_LEASE = "lost-lease"  # its lease was taken over: it stopped before its next side effect
    API_ERROR = "api-error"  # an API would not answer or refused (no verdict on the rotation)


@dataclass
class Outcome:
    cluster: str
    status: RunStatus
    exit_code: int
    reason: str
    report: RunReport | None = None  # the journal's report once the run has read it

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "status": self.status.value, "exit_code": self.exit_code, "reason": self.reason,
                "report": self.report or {}}


class Halt(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class Aborted(Exception):
    pass


class Interrupted(Exception):
    """Asked to stop (Ctrl-C, SIGTERM): the run stops before its next side effect, journals it, and can be resumed."""


@dataclass
class ClusterRead:
    """The cluster as read for one turn, with each node's instance and group."""

    nodes: list[Node]
    pods: list[Pod]
    snapshot: Snapshot
    targets: dict[str, str]
    group_of: dict[str, str]  # node -> auto scaling group
    unmanaged: list[str]  # outdated nodes no group owns: cannot be replaced
    warnings: list[str]
    outdated: set[str]  # nodes not on their pool's target that a group owns: what the plan must cover
    described: dict[str, GroupState] = field(default_factory=dict)  # the groups, as read this turn
    drifted: dict[str, str] = field(default_factory=dict)  # pool -> the unpromoted image its groups launch: not rotated
    launch_drift: dict[str, str] = field(default_factory=dict)  # node -> how its group launches otherwise now

    @property
    def drift_said(self) -> str:
        """What a finished run adds to its reason when pools were held back as drifted ("" when none was)."""
        if not self.drifted:
            return ""
        pools = ", ".join(f"{pool} ({image})" for pool, image in sorted(self.drifted.items()))
        return (f"; not rotated, their launch templates boot images the release pipeline did not promote to the stage "
                f"(drift: `platformctl release status`): {pools}")
