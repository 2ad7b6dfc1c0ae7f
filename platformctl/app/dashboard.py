"""What the dashboard shows, read from the stores alone: the pipeline's ledger and each stage's state store (the local
region's SQLite file or the stage's DynamoDB table, as every other command finds them). Nothing here acts, and nothing
is created: a SQLite store named that does not exist is a mistake (exit 2), not a new empty store.

Every read is by range: the ledger's last checkpoint and the entries after it, its newest decisions, each stage's
canary results over the chart's window (the days it covers, newest first), and each journal's records after the ones
already folded (a ``Reader`` kept by the server folds each journal once, then only what is new). A store that cannot be
read is reported beside the rest, and the rest is still shown.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_canary.results import newest_at, results
from e2e_canary.sli import objectives, sli_series
from platformctl.app.release import DEFAULT_LEDGER, candidate_report
from platformctl.app.stores import store_for
from platformctl.kernel.errors import PlatformError
from platformctl.kernel.state import StateStore, StoreUnavailable, dynamodb_spec, open_store
from platformctl.kernel.topology import STAGES, load_stage
from release_pipeline.gates import freezes_in_force
from release_pipeline.ledger import LEDGER, Ledger
from release_pipeline.pipeline import Pipeline, load_pipeline
from upgrade_service.journal import remediation as remediation_journal
from upgrade_service.journal import rotation as rotation_journal
from upgrade_service.remediation.remediate import HOUR
from upgrade_service.running.report import build_report

UNREADABLE = (PlatformError, StoreUnavailable, sqlite3.Error, OSError)
DECISIONS = 100  # the newest ledger decisions the page lists (the ledger keeps all; `release history` shows them)
CANDIDATES = 20  # the newest candidates the page lists (`release status` shows them all)
STALE_SECONDS = 1800.0  # a stage whose newest canary result is older than this (on the wall clock) says so


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


def must_exist(spec: str, field: str, file: str | None = None, hint: str = "nothing has written there yet") -> None:
    """A store named must be one: a malformed name is a mistake, and a SQLite file must exist already, since a read-only
    page never makes one (a store that exists but cannot be read, or a table that does not answer, is shown on the
    page instead)."""
    if spec.startswith("dynamodb://"):
        dynamodb_spec(spec, field)  # its shape only: a table that does not answer is shown on the page
    elif not Path(spec.removeprefix("sqlite:///")).is_file():
        raise PlatformError(f"no store at {spec} (a SQLite file that does not exist: {hint})",
                            **({"file": file} if file else {}), field=field)


class Reader:
    """The stores the page reads, opened once, and the journals folded so far (see the module docstring)."""

    def __init__(self, request: DashboardRequest) -> None:
        self.request = request
        self.pipeline: Pipeline = load_pipeline(request.pipeline_file)  # a bad pipeline file: exit 2
        if request.ledger:
            spec, field, file = request.ledger, "--ledger", None
        elif self.pipeline.ledger:
            spec, field, file = self.pipeline.ledger, "ledger", self.pipeline.source
        else:
            spec, field, file = str(Path(self.pipeline.source).resolve().parent.parent / DEFAULT_LEDGER), "--ledger", None
        if request.state:
            must_exist(request.state, "--state")
        must_exist(spec, field, file, "no candidate recorded yet; `platformctl release start` records the first")
        self.ledger_spec = spec
        self.ledger: Ledger | None = None  # opened at the first read that can
        self.stores: dict[str, StateStore] = {}  # stage -> its store, opened once
        self.folded: dict[tuple[str, str, str], Any] = {}  # (store, journal, cluster) -> its fold so far
        self.owner = _stage_clusters(request.infra_dir)

    def store(self, stage: str) -> StateStore:
        if stage not in self.stores:
            if self.request.state:
                store = next((s for s in self.stores.values() if s.location == self.request.state), None)
                self.stores[stage] = store or open_store(self.request.state)
            else:
                opened = store_for(None, stage=stage, infra_dir=self.request.infra_dir)
                self.stores[stage] = next((s for s in self.stores.values() if s.location == opened.location), opened)
        return self.stores[stage]

    def read(self) -> dict[str, Any]:
        """The page's data as one JSON-able dict."""
        errors: list[str] = []
        pipeline = self.pipeline
        now = time.time()
        where = f"the ledger {self.ledger_spec}"
        out: dict[str, Any] = {"generated_at": now, "pipeline_file": pipeline.source, "ledger": self.ledger_spec,
                               "errors": errors, "window_seconds": self.request.window, "objectives": objectives()}
        if self.ledger is None:
            self.ledger = _guarded(where, errors, lambda: Ledger(open_store(self.ledger_spec)), None)
        ledger = self.ledger
        state = _guarded(where, errors, ledger.state, None) if ledger else None
        newest = _guarded(where, errors, lambda: [dict(r.data) for r in ledger.store.read_back(LEDGER, limit=DECISIONS)],
                          []) if ledger else []
        out["decisions"] = newest
        report = _guarded(where, errors, lambda: candidate_report(ledger, state, aws=False), {}) \
            if ledger is not None and state is not None else {}
        out["canaries"], out["rotations"], out["remediation"] = self._stages(newest, errors)
        stages_out = []
        for policy in pipeline.stages:
            name = policy.name
            s = state.stage(name) if state is not None else None
            # the stage's clock: the wall on a real account; a local region's virtual clock runs ahead of it
            clock = max([now, float(out["canaries"].get(name, {}).get("end") or 0)]
                        + [float(d.get("at", 0)) for d in newest if d.get("stage") == name])
            frozen = freezes_in_force(pipeline.freezes, state.freezes, name, clock) if state else []
            waiting = list(s.ready) if s else []
            approvals_needed = []
            if policy.approvals and state is not None and s is not None:
                for cid in ([s.current] if s.current and s.step == "waiting" else []) + waiting:
                    approvers = {a.by for a in state.approvals.get(f"{cid}/{name}", [])}  # the gate counts people
                    if len(approvers) < policy.approvals:
                        approvals_needed.append({"candidate": cid, "given": len(approvers), "required": policy.approvals,
                                                 "command": self._approve_command(cid, name)})
            soak_ends = (s.rotated_at + policy.soak) if s and s.rotated_at and s.step == "soaking" else None
            stages_out.append({
                "name": name, "current": s.current if s else None, "last_good": s.last_good if s else None,
                "step": s.step if s else "unknown", "since": s.since if s else None,
                "waiting_for": s.waiting_for if s else None, "opens_at": s.opens_at if s else None,
                "soak_started": s.rotated_at if s else None, "soak_seconds": policy.soak, "soak_ends_at": soak_ends,
                "deadline_at": soak_ends + policy.deadline if soak_ends else None, "clock": clock,
                "freezes": [f.to_dict() for f in frozen], "approvals_needed": approvals_needed, "ready": waiting,
            })
        out["stages"] = stages_out
        out["freezes"] = [f.to_dict() for f in state.freezes] if state else []
        newest_first = sorted(({"id": cid, **c} for cid, c in report.items()), key=lambda c: c["created_at"], reverse=True)
        rotating = {st.current for st in (state.stages.values() if state else []) if st.step == "rotating"}
        for c in newest_first:
            c["rotating"] = c["id"] in rotating  # its count grows when the rotation ends (the ledger records it then)
        out["candidates"], out["candidates_total"] = newest_first[:CANDIDATES], len(newest_first)
        return out

    def _approve_command(self, cid: str, stage: str) -> str:
        extra = "".join(f" {flag} {value}" for flag, value in (("--pipeline", self.request.pipeline_file),
                                                               ("--ledger", self.request.ledger)) if value)
        return f"platformctl release approve {cid} --stage {stage} --reason TEXT{extra}"

    def _stages(self, decisions: list[dict[str, Any]],
                errors: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        names: list[str] = [p.name for p in self.pipeline.stages]
        canaries: dict[str, Any] = {}
        rotations: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        remediation: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        opened: dict[str, StateStore] = {}
        for stage in names:
            try:
                opened[stage] = self.store(stage)
            except UNREADABLE as exc:
                canaries[stage] = {"store": None, "error": _unreadable(f"stage {stage}'s store", exc)}
                errors.append(canaries[stage]["error"])
                continue
            store = opened[stage]
            try:
                canaries[stage] = _canaries(store, stage, self.request.window, decisions)
            except UNREADABLE as exc:
                canaries[stage] = {"store": store.location, "error": _unreadable(f"stage {stage}'s store {store.location}", exc)}
                errors.append(canaries[stage]["error"])
        sharing: dict[str, list[str]] = {}
        for stage, store in opened.items():
            sharing.setdefault(store.location, []).append(stage)
        for location, stages in sharing.items():
            store = opened[stages[0]]
            for kind, target, read in (("rotation/", rotations, self._rotation), ("remediation/", remediation, self._remediation)):
                try:
                    clusters = [s.removeprefix(kind) for s in store.streams(kind)]
                except UNREADABLE as exc:
                    errors.append(_unreadable(f"the store {location}", exc))
                    continue
                for cluster in clusters:
                    # a store of one stage holds that stage's clusters; a shared one is split by the stack files
                    stage = stages[0] if len(stages) == 1 else self.owner.get(cluster, stages[0])
                    if stage not in stages:
                        stage = stages[0]
                    try:
                        target[stage].append(read(store, cluster))
                    except UNREADABLE as exc:
                        errors.append(_unreadable(f"{kind.rstrip('/')} journal of {cluster} in {location}", exc))
        return canaries, rotations, remediation

    def _fold(self, store: StateStore, journal: Any, cluster: str) -> Any:
        """The journal's fold, with only the records after the last one folded read."""
        key = (store.location, journal.__name__, cluster)
        state = self.folded.get(key) or journal.fold(cluster, [])
        for record in store.read(journal.stream_of(cluster), after=state.last_seq):
            journal.apply(state, record)
        self.folded[key] = state
        return state

    def _rotation(self, store: StateStore, cluster: str) -> dict[str, Any]:
        state = self._fold(store, rotation_journal, cluster)
        report = build_report(state)
        waves = report.get("waves", [])
        halted = report.get("halted")
        planned = state.last_plan.waves + sum(1 for w in waves if w["finished"]) if state.last_plan else 0
        return {"cluster": cluster, "status": report["status"], "run": report.get("run"),
                "waves_done": sum(1 for w in waves if w["finished"]),
                "waves_total": max(len(waves), planned if report["status"] not in ("done", "finished") else len(waves)),
                "estimated_seconds": report.get("estimated_seconds"), "actual_seconds": report.get("duration_seconds"),
                "gate_seconds": report.get("gate_seconds"), "nodes_rotated": report.get("nodes_rotated"),
                "halted": ((halted or {}).get("detail") or (halted or {}).get("reason")) if halted else None,
                "reason": report.get("reason"), "last_activity": report.get("last_activity"),
                "waves": [{"wave": w["wave"], "estimated_seconds": w["estimated_seconds"], "actual_seconds": w["actual_seconds"],
                           "gate_seconds": w["gate_seconds"], "nodes": len(w["nodes"]), "finished": w["finished"]}
                          for w in waves]}

    def _remediation(self, store: StateStore, cluster: str) -> dict[str, Any]:
        current = self._fold(store, remediation_journal, cluster)
        newest = max([float(r.get("at", 0)) for r in current.recent] + [0.0])
        now = max(time.time(), newest)
        return {"cluster": cluster, "breaker": "open" if current.incident else "closed",
                "incident": current.incident.to_dict() if current.incident else None,
                "replaced": len(current.terminated), "remediations": len(current.started_at),
                "last_hour": sum(1 for t in current.started_at if t > now - HOUR), "max_per_hour": current.max_per_hour,
                "in_progress": len(current.open), "recent": current.recent[-5:]}


def gather(request: DashboardRequest) -> dict[str, Any]:
    """One read of every store (the export's)."""
    return Reader(request).read()


def _guarded(what: str, errors: list[str], read: Callable[[], Any], default: Any) -> Any:
    try:
        return read()
    except UNREADABLE as exc:
        errors.append(_unreadable(what, exc))
        return default


def _stage_clusters(infra_dir: Path | None) -> dict[str, str]:
    """Cluster -> stage, from the checkout's stack files (a stage whose file cannot be read is left out)."""
    out: dict[str, str] = {}
    for stage in STAGES:
        try:
            out.update({c.name: stage for c in load_stage(stage, infra_dir).clusters()})
        except PlatformError:
            continue
    return out


def _latest_verdict(decisions: list[dict[str, Any]], stage: str) -> dict[str, Any] | None:
    """The newest canary verdict the ledger holds for ``stage``, with the judge's numbers."""
    for d in decisions:  # newest first
        verdict = (d.get("inputs") or {}).get("verdict")
        if d.get("stage") == stage and isinstance(verdict, dict) and "verdict" in verdict:
            return {"decision": d.get("id"), "candidate": d.get("candidate"), "at": d.get("at"), **judge_numbers(verdict)}
    return None


def _metric_rows(canaries: dict[str, Any], against: str) -> list[dict[str, Any]]:
    rows = []
    for canary, c in canaries.items():
        for metric, m in (c.get("metrics") or {}).items():
            threshold = m.get("threshold") or {}
            rows.append({"against": against, "canary": canary, "metric": metric, "verdict": m.get("verdict"),
                         "shift": m.get("shift"), "shift_ci": m.get("shift_ci"), "p_value": m.get("p_value"),
                         "material": threshold.get("material") or threshold.get("material_absolute")
                         or threshold.get("material_increase"),
                         "baseline_n": (m.get("baseline") or {}).get("n"), "experiment_n": (m.get("experiment") or {}).get("n"),
                         "reason": m.get("reason")})
    return rows


def judge_numbers(verdict: dict[str, Any]) -> dict[str, Any]:
    """A verdict's headline and, per canary and metric, the judge's numbers: the shift and its interval, the p-value,
    the material threshold, the arms' sizes; for the stage's window and for each new image against the image it
    replaces (the soak's comparison with the last good candidate)."""
    rows = _metric_rows(verdict.get("canaries") or {}, "the stage's window")
    images = verdict.get("images") or {}
    for image, arm in (images.get("arms") or {}).items():
        old = (images.get("replaced") or {}).get(image, "the image it replaces")
        rows += _metric_rows(arm.get("canaries") or {}, f"{image} against {old}")
    return {"verdict": verdict.get("verdict"), "reason": verdict.get("reason"), "metrics": rows}


def _canaries(store: StateStore, stage: str, window: float, decisions: list[dict[str, Any]]) -> dict[str, Any]:
    end = newest_at(store, stage)
    out: dict[str, Any] = {"store": store.location, "error": None, "latest_verdict": _latest_verdict(decisions, stage),
                           "stale": None}
    if end is None:
        return {**out, "start": None, "end": None, "lines": [], "results": 0}
    if time.time() - end > STALE_SECONDS:
        out["stale"] = time.time() - end  # the canaries stopped, or their runner did: not a healthy silence
    start = end - window
    rows = results(store, stage, since=start, until=end)
    return {**out, "start": start, "end": end, "lines": sli_series(rows, start, end), "results": len(rows)}
