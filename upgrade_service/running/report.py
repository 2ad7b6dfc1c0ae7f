"""A rotation's report, made from its journal alone: what ``rotate run`` prints at the end and ``rotate status`` shows.

Reading only the journal means a report looks the same from the process that ran the rotation,
from another operator's ``rotate status``, and after a crash and resume.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from platformctl.kernel.cluster.model import format_time
from upgrade_service.journal.records import Finished
from upgrade_service.journal.rotation import RunState


class WaveReport(TypedDict):
    wave: int
    nodes: list[str]
    zone: str | None
    pools: list[str]
    started: str
    finished_at: str | None
    estimated_seconds: float | None
    actual_seconds: float | None
    gate_seconds: float  # how long the health gate kept the wave from starting
    evictions: int
    refused_evictions: int
    failed: dict[str, str]  # node -> why
    finished: bool


class Pause(TypedDict):
    by: str | None
    reason: str | None
    at: str


class RunReport(TypedDict):
    """The report's shape, as JSON gives it (``rotate run -o json``, ``rotate status``): every key but ``cluster``,
    ``status`` and ``paused`` is there once the cluster has had a run."""

    cluster: str
    status: str
    paused: Pause | None
    run: NotRequired[str]
    reason: NotRequired[str | None]
    started: NotRequired[str]
    last_activity: NotRequired[str]
    duration_seconds: NotRequired[float]
    gate_seconds: NotRequired[float]
    estimated_seconds: NotRequired[float | None]
    targets: NotRequired[dict[str, str]]
    waves: NotRequired[list[WaveReport]]
    nodes_rotated: NotRequired[int]
    nodes_failed: NotRequired[list[dict[str, str]]]
    nodes_blocked: NotRequired[list[dict[str, str]]]
    # nodes the open run waits for: the budgets they spend are at their floor while their pods come back
    waiting: NotRequired[dict[str, Any] | None]
    nodes_unmanaged: NotRequired[list[str]]
    evictions: NotRequired[int]
    refused_evictions: NotRequired[int]
    pods_disrupted_more_than_once: NotRequired[int]
    lowest_budget_headroom: NotRequired[dict[str, Any] | None]
    halted: NotRequired[dict[str, Any] | None]
    capacity_kept: NotRequired[dict[str, int]]
    cordoned_by_this_run: NotRequired[list[str]]
    tainted_by_this_run: NotRequired[list[str]]
    holder: NotRequired[str | None]
    lease: NotRequired[dict[str, Any] | None]  # added by ``rotate status``
    first_light: NotRequired[dict[str, Any] | None]
    planned_first_wave: NotRequired[list[str]]


def build_report(state: RunState) -> RunReport:
    if state.run is None or state.started is None:
        return {"cluster": state.cluster, "status": "never-run",
                "paused": _pause(state)}
    started = state.started.at
    waves: list[WaveReport] = []
    lowest: tuple[int, str] | None = None
    end = started
    for number in sorted(state.waves):
        wave = state.waves[number]
        info = wave.started
        finished = wave.finished
        drained = wave.phases.get("drain-done")
        headroom = (finished.lowest_headroom if finished else None) or (drained.lowest_headroom if drained else None)
        if headroom is not None and (lowest is None or headroom[0] < lowest[0]):
            lowest = (int(headroom[0]), str(headroom[1]))
        end = max(end, finished.at if finished else info.at)
        waves.append({
            "wave": number,
            "nodes": list(info.nodes),
            "zone": info.zone,
            "pools": list(info.pools),
            "started": format_time(info.at),
            "finished_at": format_time(finished.at) if finished else None,
            "estimated_seconds": info.estimated_seconds,
            "actual_seconds": round(finished.seconds, 1) if finished else None,
            # how long the health gate kept the wave from starting (not part of the estimate, which cannot know it)
            "gate_seconds": round(info.at - state.gate_asked[number], 1) if number in state.gate_asked else 0.0,
            "evictions": wave.evictions,
            "refused_evictions": wave.refused,
            "failed": dict(wave.failed),
            "finished": wave.finished is not None,
        })
    ended = state.ended
    if ended is not None:
        end = max(end, ended.at)
    elif state.halted is not None:
        end = max(end, state.halted.at)
    plan = state.last_plan or state.first_plan
    first = state.first_plan
    status = state.status
    if isinstance(ended, Finished):
        status = ended.status
    return {
        "cluster": state.cluster,
        "run": state.run,
        "status": status,
        "reason": (ended.reason if ended else None) or (state.halted.detail if state.halted else None),
        "started": format_time(started),
        "last_activity": format_time(end),
        "duration_seconds": round(end - started, 1),
        "gate_seconds": round(sum(state.waves[n].started.at - at for n, at in state.gate_asked.items()
                                  if n in state.waves), 1),
        "estimated_seconds": first.estimated_seconds if first else None,
        "planned_first_wave": list(first.first_wave) if first else [],  # what wave 1 was to be when the run began
        "targets": dict((plan.targets if plan else None) or (first.targets if first else None) or {}),
        "waves": waves,
        "nodes_rotated": len(state.terminated - (state.first_light.terminated if state.first_light else set())),
        "first_light": _first_light(state),
        "nodes_failed": [{"node": n, "reason": r} for n, r in sorted(state.failed.items())],
        "nodes_blocked": [{"node": b["node"], "reason": b["reason"]} for b in (plan.blocked if plan else [])
                          if not (b.get("waiting") and state.open)],
        "waiting": {"nodes": list(state.waiting.nodes), "reason": state.waiting.reason, "since": format_time(state.waiting.at),
                    "gives_up_at": format_time(state.waiting.gives_up_at)} if state.waiting and state.open else None,
        "nodes_unmanaged": list(plan.unmanaged if plan else []),
        "evictions": sum(state.evicted.values()),
        "refused_evictions": state.refused,
        "pods_disrupted_more_than_once": state.evicted_again,
        "lowest_budget_headroom": {"headroom": lowest[0], "budget": lowest[1]} if lowest else None,
        "halted": {"reason": state.halted.reason, "detail": state.halted.detail,
                   "at": format_time(state.halted.at)} if state.halted else None,
        # Instances added (surged) that no termination gave back: standing in for nodes that failed to drain,
        # or left by an abort. The next run spends them first.
        "capacity_kept": {g: n for g, n in sorted(state.capacity.items()) if n > 0},
        "cordoned_by_this_run": sorted(state.cordoned),
        "tainted_by_this_run": sorted(state.tainted),
        "holder": state.holder,
        "paused": _pause(state),
    }


def _first_light(state: RunState) -> dict[str, Any] | None:
    """The run's first-light step: the pools it lit, their nodes and instances, and what the gate said of them."""
    lit = state.first_light
    if lit is None:
        return None
    judged = lit.judged
    return {"started": format_time(lit.started.at), "pools": dict(lit.started.pools), "images": dict(lit.started.images),
            "skipped": dict(lit.started.skipped), "nodes": dict(lit.nodes), "instances": dict(lit.instances),
            "cleared": lit.cleared, "verdict": judged.verdict if judged else None, "reason": judged.reason if judged else None,
            "seconds": round(judged.seconds, 1) if judged else None}


def _pause(state: RunState) -> Pause | None:
    if state.paused is None:
        return None
    return {"by": state.paused.by, "reason": state.paused.reason, "at": format_time(state.paused.at)}
