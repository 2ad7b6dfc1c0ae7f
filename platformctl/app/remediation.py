"""Replacing broken nodes, as an operator or the scheduled job asks for it: one pass or a watch, and the status.

The command parses its options into a ``RemediationRequest``, calls ``prepare`` (every input checked, every API
reached, nothing changed) and ``remediate_pass`` once or on the policy's interval, and renders the ``Pass`` it gets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from platformctl.app.clusters import connect
from platformctl.app.platform import Platform
from platformctl.app.rotation import ActRequest, Scope, scope_of, store_of
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.jsontypes import JSONObject
from platformctl.kernel.state import StateStore
from platformctl.kernel.state.lease import holder_id
from upgrade_service.journal.remediation import read_state, stream_of
from upgrade_service.remediation.policy import RemediationPolicy, load_remediation_policy
from upgrade_service.remediation.remediate import EXIT_FAILED, EXIT_LEASE_HELD, EXIT_OK, HOUR, Outcome, run
from upgrade_service.running.run_types import Target


@dataclass(frozen=True)
class RemediationRequest(ActRequest):
    """Replace the broken nodes of one cluster or a stage; ``dry_run`` says what would be done and does nothing."""

    dry_run: bool = False


@dataclass
class Remediation:
    """A remediation made ready: its policy, clusters and store, every input checked."""

    policy: RemediationPolicy
    scope: Scope
    store: StateStore
    targets: dict[str, Target]
    lease_ttl: float
    dry_run: bool
    holder: str

    def sleep(self) -> None:
        """Until the next pass, on the clusters' clock."""
        next(iter(self.targets.values())).cluster.clock.sleep(self.policy.interval_seconds)


@dataclass
class Pass:
    """One pass over every cluster: what each did, and the exit code that sums it up."""

    outcomes: list[Outcome]
    dry_run: bool = False

    @property
    def exit_code(self) -> int:
        codes = [o.exit_code for o in self.outcomes]
        return EXIT_LEASE_HELD if EXIT_LEASE_HELD in codes else EXIT_FAILED if EXIT_FAILED in codes else EXIT_OK

    def to_dict(self) -> JSONObject:
        return {"exit_code": self.exit_code, "dry_run": self.dry_run, "clusters": [o.to_dict() for o in self.outcomes]}


def prepare(platform: Platform, request: RemediationRequest) -> Remediation:
    policy = load_remediation_policy(request.policy_file)
    scope = scope_of(platform, request.context, request.stage, "remediate run")
    if scope.stage is not None and policy.cluster is not None:
        raise PlatformError(f"names cluster {policy.cluster!r}, but --stage applies the policy to every cluster: remove "
                            "`cluster`", file=policy.source, field="cluster")
    if policy.cluster is not None and request.context is not None and policy.cluster != request.context:
        raise PlatformError(f"is for cluster {policy.cluster!r}, not {request.context!r}", file=policy.source, field="cluster")
    store = store_of(platform, request.state, scope)
    targets = connect(platform, scope.names, request.kubeconfig,
                      request.region or (scope.stage.region if scope.stage else None))
    return Remediation(policy, scope, store, targets, request.lease_ttl, request.dry_run, holder_id())


def remediate_pass(remediation: Remediation, say: Callable[[str], None] | None = None) -> Pass:
    """One pass over each cluster under its remediation lease."""
    r = remediation
    return Pass([run(name, t.cluster, t.groups, r.policy, r.store, r.holder, r.lease_ttl, r.dry_run, say)
                 for name, t in r.targets.items()], r.dry_run)


def remediation_status(platform: Platform, context: str | None, stage_name: str | None, state: str | None,
                       last: int = 10) -> tuple[StateStore, list[dict[str, Any]]]:
    """What remediation did and why, from the store alone: the breaker, the hourly limit, the newest decisions."""
    scope = scope_of(platform, context, stage_name, "remediate status")
    store = store_of(platform, state, scope, existing=True)
    clusters: list[dict[str, Any]] = []
    for name in scope.names:
        current = read_state(store, name)
        newest = max([float(r.get("at", 0)) for r in current.recent] + [0.0])
        now = max(time.time(), newest)  # the cluster's time runs ahead of the wall in a local region
        lease = store.lease(stream_of(name))
        clusters.append({
            "cluster": name,
            "breaker": "open" if current.incident else "closed",
            "incident": current.incident.to_dict() if current.incident else None,
            "remediations_last_hour": sum(1 for t in current.started_at if t > now - HOUR),
            "in_progress": [o.started for o in current.open.values()],
            "recent": current.recent[-last:],
            "lease": {"holder": lease.holder, "live": not lease.expired(time.time())} if lease else None,
        })
    return store, clusters
