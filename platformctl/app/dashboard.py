"""What the dashboard shows, read from the stores alone: the pipeline's ledger and each stage's state store (the local
region's SQLite file or the stage's DynamoDB table, as every other command finds them). Nothing here acts.

Every read is by range: the ledger's newest decisions, each stage's canary results over the chart's window (the days it
covers, newest first), and the newest record of each journal. A store that cannot be read is reported beside the rest,
and the rest is still shown.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import botocore.exceptions

from e2e_canary.runner import results
from e2e_canary.sli import objectives, sli_series
from platformctl.app.release import LedgerRequest, candidate_report, open_pipeline
from platformctl.app.stores import store_for
from platformctl.errors import PlatformError
from platformctl.state import StateStore
from platformctl.topology import STAGES, load_stage
from release_pipeline.gates import freezes_in_force
from release_pipeline.ledger import LEDGER
from upgrade_service.journal import read_state as read_rotation
from upgrade_service.remediate import HOUR
from upgrade_service.remediate import read_state as read_remediation
from upgrade_service.report import build_report

UNREADABLE = (PlatformError, sqlite3.Error, botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, OSError,
              KeyError, ValueError)
DECISIONS = 100  # the newest ledger decisions the page lists (the ledger keeps all; `release history` shows them)
CANDIDATES = 20  # the newest candidates the page lists (`release status` shows them all)


@dataclass(frozen=True)
class DashboardRequest:
    pipeline_file: Path | None = None
    ledger: str | None = None
    state: str | None = None  # one store for every stage (``--state``), else each stage's own
    infra_dir: Path | None = None
    window: float = 6 * 3600.0  # how far back the charts reach from each stage's newest result


def _unreadable(what: str, exc: BaseException) -> str:
    detail = str(exc) if isinstance(exc, PlatformError) else f"{type(exc).__name__}: {exc}"
    return f"{what} cannot be read: {detail}"


def _guarded(what: str, errors: list[str], read: Callable[[], Any], default: Any) -> Any:
    try:
        return read()
    except UNREADABLE as exc:
        errors.append(_unreadable(what, exc))
        return default


def gather(request: DashboardRequest) -> dict[str, Any]:
    """The page's data as one JSON-able dict."""
    errors: list[str] = []
    pipeline, ledger = open_pipeline(LedgerRequest(request.pipeline_file, request.ledger))  # a bad pipeline file: exit 2
    now = time.time()
    out: dict[str, Any] = {"generated_at": now, "pipeline_file": pipeline.source, "ledger": ledger.store.location,
                           "errors": errors, "window_seconds": request.window, "objectives": objectives()}
    state = _guarded(f"the ledger {ledger.store.location}", errors, ledger.state, None)
    newest = _guarded(f"the ledger {ledger.store.location}", errors,
                      lambda: [dict(r.data) for r in ledger.store.read_back(LEDGER, limit=DECISIONS)], [])
    out["decisions"] = newest
    report = _guarded(f"the ledger {ledger.store.location}", errors,
                      lambda: candidate_report(ledger, state, aws=False), {}) if state is not None else {}

    stages_out = []
    for policy in pipeline.stages:
        name = policy.name
        s = state.stage(name) if state is not None else None
        clock = max([now] + [float(d.get("at", 0)) for d in newest if d.get("stage") == name])  # a region's clock runs ahead
        frozen = freezes_in_force(pipeline.freezes, state.freezes if state else [], name, clock) if state else []
        waiting = [c for c in (s.ready if s else [])]
        approvals_needed = []
        if policy.approvals and state is not None:
            for cid in ([s.current] if s and s.current and s.step == "waiting" else []) + waiting:
                given = state.approvals.get(f"{cid}/{name}", [])
                if len({a.get("by") for a in given}) < policy.approvals:
                    approvals_needed.append({"candidate": cid, "given": len(given), "required": policy.approvals,
                                             "command": f"platformctl release approve {cid} --stage {name} --reason TEXT"})
        soak_ends = (s.rotated_at + policy.soak) if s and s.rotated_at and s.step == "soaking" else None
        stages_out.append({
            "name": name, "current": s.current if s else None, "last_good": s.last_good if s else None,
            "step": s.step if s else "unknown", "since": s.since if s else None,
            "waiting_for": s.waiting_for if s else None, "opens_at": s.opens_at if s else None,
            "soak_started": s.rotated_at if s else None, "soak_seconds": policy.soak, "soak_ends_at": soak_ends,
            "deadline_at": soak_ends + policy.deadline if soak_ends else None, "clock": clock,
            "freezes": frozen, "approvals_needed": approvals_needed, "ready": waiting,
        })
    out["stages"] = stages_out
    out["freezes"] = state.freezes if state else []
    newest_first = sorted(({"id": cid, **c} for cid, c in report.items()), key=lambda c: c["created_at"], reverse=True)
    out["candidates"], out["candidates_total"] = newest_first[:CANDIDATES], len(newest_first)
    out["canaries"], out["rotations"], out["remediation"] = _stages(request, [p.name for p in pipeline.stages], newest, errors)
    return out


def _stage_clusters(infra_dir: Path | None) -> dict[str, str]:
    """Cluster -> stage, from the checkout's stack files (a stage whose file cannot be read is left out)."""
    out: dict[str, str] = {}
    for stage in STAGES:
        try:
            out.update({c.name: stage for c in load_stage(stage, infra_dir).clusters()})
        except PlatformError:
            continue
    return out


def _newest_result(store: StateStore, stage: str) -> float | None:
    """The stage's newest canary result's time: the last record of each cluster's newest day."""
    newest: dict[str, str] = {}
    for stream in store.streams(f"canary/{stage}/"):
        parts = stream.split("/")
        if len(parts) == 4 and parts[3] > newest.get(parts[2], "/").rsplit("/", 1)[1]:
            newest[parts[2]] = stream
    times = [float(last.data.get("at", 0)) for s in newest.values() if (last := store.last(s)) is not None]
    return max(times) if times else None


def _latest_verdict(decisions: list[dict[str, Any]], stage: str) -> dict[str, Any] | None:
    """The newest canary verdict the ledger holds for ``stage``, with the judge's numbers of its worst canary."""
    for d in decisions:  # newest first
        verdict = (d.get("inputs") or {}).get("verdict")
        if d.get("stage") == stage and isinstance(verdict, dict) and "verdict" in verdict:
            return {"decision": d.get("id"), "candidate": d.get("candidate"), "at": d.get("at"), **judge_numbers(verdict)}
    return None


def judge_numbers(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict's headline and, per canary and metric, the judge's numbers: the shift and its interval, the p-value,
    the material threshold, the arms' sizes."""
    rows = []
    for canary, c in (verdict.get("canaries") or {}).items():
        for metric, m in (c.get("metrics") or {}).items():
            threshold = m.get("threshold") or {}
            rows.append({"canary": canary, "metric": metric, "verdict": m.get("verdict"), "shift": m.get("shift"),
                         "shift_ci": m.get("shift_ci"), "p_value": m.get("p_value"),
                         "material": threshold.get("material") or threshold.get("material_absolute")
                         or threshold.get("material_increase"),
                         "baseline_n": (m.get("baseline") or {}).get("n"), "experiment_n": (m.get("experiment") or {}).get("n"),
                         "reason": m.get("reason")})
    return {"verdict": verdict.get("verdict"), "reason": verdict.get("reason"), "metrics": rows}


def _stages(request: DashboardRequest, names: list[str], decisions: list[dict[str, Any]],
            errors: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    canaries: dict[str, Any] = {}
    rotations: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    remediation: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    owner = _stage_clusters(request.infra_dir)
    stores: dict[str, StateStore] = {}
    seen_clusters: set[tuple[str, str]] = set()
    for stage in names:
        try:
            store = store_for(request.state, stage=stage, infra_dir=request.infra_dir)
        except UNREADABLE as exc:
            canaries[stage] = {"store": None, "error": _unreadable(f"stage {stage}'s store", exc)}
            errors.append(canaries[stage]["error"])
            continue
        stores.setdefault(store.location, store)
        store = stores[store.location]
        try:
            canaries[stage] = _canaries(store, stage, request.window, decisions)
        except UNREADABLE as exc:
            canaries[stage] = {"store": store.location, "error": _unreadable(f"stage {stage}'s store {store.location}", exc)}
            errors.append(canaries[stage]["error"])
            continue
        try:
            for kind, target in (("rotation/", rotations), ("remediation/", remediation)):
                for stream in store.streams(kind):
                    cluster = stream.removeprefix(kind)
                    mine = owner.get(cluster) == stage or (cluster not in owner and stage == names[0])
                    if not mine or (kind, cluster) in seen_clusters:
                        continue
                    seen_clusters.add((kind, cluster))
                    target[stage].append(_rotation(store, cluster) if kind == "rotation/" else _remediation(store, cluster))
        except UNREADABLE as exc:
            errors.append(_unreadable(f"stage {stage}'s store {store.location}", exc))
    return canaries, rotations, remediation


def _canaries(store: StateStore, stage: str, window: float, decisions: list[dict[str, Any]]) -> dict[str, Any]:
    end = _newest_result(store, stage)
    out: dict[str, Any] = {"store": store.location, "error": None, "latest_verdict": _latest_verdict(decisions, stage)}
    if end is None:
        return {**out, "start": None, "end": None, "lines": [], "results": 0}
    start = end - window
    rows = results(store, stage, since=start, until=end)
    return {**out, "start": start, "end": end, "lines": sli_series(rows, start, end), "results": len(rows)}


def _rotation(store: StateStore, cluster: str) -> dict[str, Any]:
    state = read_rotation(store, cluster)
    report = build_report(state)
    waves = report.get("waves", [])
    halted = report.get("halted")
    return {"cluster": cluster, "status": report["status"], "run": report.get("run"),
            "waves_done": sum(1 for w in waves if w["finished"]),
            "waves_total": max(len(waves), state.first_plan.waves if state.first_plan else 0),
            "estimated_seconds": report.get("estimated_seconds"), "actual_seconds": report.get("duration_seconds"),
            "gate_seconds": report.get("gate_seconds"), "nodes_rotated": report.get("nodes_rotated"),
            "halted": (halted or {}).get("detail") or (halted or {}).get("reason") if halted else None,
            "reason": report.get("reason"), "last_activity": report.get("last_activity"),
            "waves": [{"wave": w["wave"], "estimated_seconds": w["estimated_seconds"], "actual_seconds": w["actual_seconds"],
                       "gate_seconds": w["gate_seconds"], "nodes": len(w["nodes"]), "finished": w["finished"]} for w in waves]}


def _remediation(store: StateStore, cluster: str) -> dict[str, Any]:
    current = read_remediation(store, cluster)
    newest = max([float(r.get("at", 0)) for r in current.recent] + [0.0])
    now = max(time.time(), newest)
    return {"cluster": cluster, "breaker": "open" if current.incident else "closed",
            "incident": current.incident.to_dict() if current.incident else None,
            "replaced": len(current.terminated), "remediations": len(current.started_at),
            "last_hour": sum(1 for t in current.started_at if t > now - HOUR), "max_per_hour": current.max_per_hour,
            "in_progress": len(current.open), "recent": current.recent[-5:]}
