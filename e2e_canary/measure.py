"""Pod startup latency as SIG-scalability defines it, and its phases, from the pod as the API shows it.

The SLI (kubernetes/community sig-scalability/slos/pod_startup_latency.md): the time from the pod's
creation until all its containers are reported running, as observed via watch, excluding image pulling.
Its phases are measured too, as ClusterLoader2's pod startup measurement splits them: creation to
scheduled (``PodScheduled``), scheduled to running (the containers' ``startedAt``), running to Ready.

What ClusterLoader2 gets wrong for a canary, this does not: a pod that never starts is not dropped from
the sample (``startup`` says why it has no latency, and the attempt is a failure or a timeout), and a pod
the platform evicted or preempted (its ``DisruptionTarget`` condition) is reported as disrupted, never
as a latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from platformctl.kernel.cluster.model import Pod


@dataclass(frozen=True)
class Startup:
    seconds: float  # the SLI: creation to all containers running, minus image pulls
    scheduled: float  # creation to PodScheduled
    started: float  # scheduled to running
    ready: float | None  # running to Ready (None: not Ready yet)

    def to_dict(self) -> dict[str, float | None]:
        return {"pod_startup_seconds": self.seconds, "scheduled_seconds": self.scheduled,
                "started_seconds": self.started, "ready_seconds": self.ready}


@dataclass(frozen=True)
class NotStarted:
    reason: str  # disrupted | waiting: <reason> | pending | unscheduled
    disruption: str = ""  # the pod's DisruptionTarget reason, when disrupted


def startup(pod: Pod, observed_running: float | None = None, pull_seconds: float = 0.0) -> Startup | NotStarted:
    """``observed_running``: when a watch first saw it running (the SLI's own clock), else the kubelet's
    ``startedAt``; ``pull_seconds``: its image pulls (the kubelet's ``Pulled`` events), excluded."""
    if pod.disruption_reason:
        return NotStarted("disrupted", pod.disruption_reason)
    if pod.node_name is None or pod.scheduled is None:
        return NotStarted("unscheduled")
    running = pod.running_at
    if running is None:
        return NotStarted(f"waiting: {pod.waiting}" if pod.waiting else "pending")
    seen = max(observed_running if observed_running is not None else running, running)
    ready_at = pod.ready_at
    return Startup(max(seen - pod.created - pull_seconds, 0.0), pod.scheduled - pod.created, running - pod.scheduled,
                   max(ready_at - running, 0.0) if ready_at is not None else None)
