"""What the dashboard shows, read from the stores alone: the pipeline's ledger and each stage's state store (the local
region's SQLite file or the stage's DynamoDB table, as every other command finds them). Nothing here acts, and nothing
is created: a SQLite store named that does not exist is a mistake (exit 2), not a new empty store.

Every read is by range: the ledger's last checkpoint and the entries after it, its newest decisions, each stage's
canary results over the chart's window (the days it covers, newest first), and each journal's records after the ones
already folded (a ``Reader`` kept by the server folds each journal once, then only what is new). A store that cannot be
read is reported beside the rest, and the rest is still shown.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from e2e_canary.results import newest_at, results
from e2e_canary.sli import objectives, sli_series
from platformctl.app.approvers import local_ledger
from platformctl.app.platform import Platform
from platformctl.app.release import DEFAULT_LEDGER
from platformctl.app.release_status import CandidateReport, candidate_report
from platformctl.app.stores import store_for
from platformctl.kernel.errors import PlatformError, Unavailable
from platformctl.kernel.jsontypes import JSONMapping, JSONObject, mapping, to_float
from platformctl.kernel.state import Record, StateStore, StoreUnavailable, dynamodb_spec, open_store
from platformctl.kernel.topology import STAGES
from release_pipeline.fold import Entry
from release_pipeline.gates import freezes_in_force
from release_pipeline.ledger import Ledger
from release_pipeline.pipeline import Pipeline, load_pipeline
from upgrade_service.journal import remediation as remediation_journal
from upgrade_service.journal import rotation as rotation_journal
from upgrade_service.journal.remediation import RemediationState
from upgrade_service.journal.rotation import RunState
from upgrade_service.remediation.remediate import HOUR
from upgrade_service.running.report import build_report

UNREADABLE = (PlatformError, StoreUnavailable, OSError)  # a store's own errors leave its seam as StoreUnavailable
DECISIONS = 100  # the newest ledger decisions the page lists (the ledger keeps all; `release history` shows them)
CANDIDATES = 20  # the newest candidates the page lists (`release status` shows them all)
STALE_SECONDS = 1800.0  # a stage whose newest canary result is older than this (on the wall clock) says so

T = TypeVar("T")
D = TypeVar("D")


class Folded(Protocol):
    """A journal's fold: how far into its stream it has read."""

    last_seq: int


F = TypeVar("F", bound=Folded)


@dataclass(frozen=True)
class DashboardRequest:
    pipeline_file: Path | None = None
    ledger: str | None = None
    state: str | None = None  # one store for every stage (``--state``), else each stage's own
    window: float = 6 * 3600.0  # how far back the charts reach from each stage's newest result


def _unreadable(what: str, exc: BaseException) -> str:
    detail = str(exc) if isinstance(exc, (PlatformError, Unavailable)) else f"{type(exc).__name__}: {exc}"
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

    def __init__(self, platform: Platform, request: DashboardRequest) -> None:
        self.platform = platform
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
        # (store, cluster) -> its journal's fold so far
        self.rotations: dict[tuple[str, str], RunState] = {}
        self.remediations: dict[tuple[str, str], RemediationState] = {}
        self.owner = _stage_clusters(platform)

    def store(self, stage: str) -> StateStore:
        if stage not in self.stores:
            if self.request.state:
                store = next((s for s in self.stores.values() if s.location == self.request.state), None)
                self.stores[stage] = store or open_store(self.request.state, target=self.platform.environment.aws)
            else:
                try:
                    opened = store_for(self.platform, None, stage=stage)
                except Exception:
                    # the page runs for long: the next read looks for the local region again (it may have started)
                    self.platform = self.platform.with_region_looked_again()
                    raise
                self.stores[stage] = next((s for s in self.stores.values() if s.location == opened.location), opened)
        return self.stores[stage]

    def read(self) -> JSONObject:
        """The page's data as one JSON object."""
        errors: list[str] = []
        pipeline = self.pipeline
        now = time.time()
        where = f"the ledger {self.ledger_spec}"
        out: JSONObject = {"generated_at": now, "pipeline_file": pipeline.source, "ledger": self.ledger_spec,
                           "errors": errors, "window_seconds": self.request.window, "objectives": objectives()}
        if self.ledger is None:
            self.ledger = _guarded(where, errors, lambda: Ledger(open_store(self.ledger_spec, target=self.platform.environment.aws),
                                                                   pipeline.names), None)
        ledger = self.ledger
        state = _guarded(where, errors, ledger.state, None) if ledger else None
        newest = _guarded(where, errors, lambda: ledger.newest(DECISIONS), []) if ledger else []
        out["decisions"] = [e.as_stored() for e in newest]
        report: dict[str, CandidateReport] = _guarded(where, errors, lambda: candidate_report(ledger, state, None), {}) \
            if ledger is not None and state is not None else {}
        canaries, rotations, remediation = self._stages(newest, errors)
        out["canaries"], out["rotations"], out["remediation"] = canaries, rotations, remediation
        stages_out: list[JSONObject] = []
        for policy in pipeline.stages:
            name = policy.name
            s = state.stage(name) if state is not None else None
            # the stage's clock: the wall on a real account; a local region's virtual clock runs ahead of it
            clock = max([now, to_float(canaries.get(name, {}).get("end") or 0)]
                        + [float(e.at) for e in newest if e.stage == name])
            frozen = freezes_in_force(pipeline.freezes, state.freezes, name, clock) if state else []
            waiting = list(s.ready) if s else []
            approvals_needed: list[JSONObject] = []
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
                "drift": [d.to_dict() for d in s.drift] if s else [],
            })
        out["stages"] = stages_out
        # a ledger on the local disk: whoever can write the file approves as anyone (allowed by the pipeline file, for
        # trying the pipeline out): every approval on it says so
        out["approvals_unauthenticated"] = bool(ledger is not None and local_ledger(ledger) and pipeline.approvers.unauthenticated)
        out["freezes"] = [f.to_dict() for f in state.freezes] if state else []
        rotating = {st.current for st in (state.stages.values() if state else []) if st.step == "rotating"}
        # its count grows when the rotation ends (the ledger records it then)
        newest_first: list[JSONObject] = [{"id": cid, **c.to_dict(), "rotating": cid in rotating} for cid, c in
                                          sorted(report.items(), key=lambda item: item[1].created_at, reverse=True)]
        out["candidates"], out["candidates_total"] = newest_first[:CANDIDATES], len(newest_first)
        return out

    def _approve_command(self, cid: str, stage: str) -> str:
        extra = "".join(f" {flag} {value}" for flag, value in (("--pipeline", self.request.pipeline_file),
                                                               ("--ledger", self.request.ledger)) if value)
        return f"platformctl release approve {cid} --stage {stage} --reason TEXT{extra}"

    def _stages(self, decisions: list[Entry], errors: list[str]) -> tuple[dict[str, JSONObject], dict[str, list[JSONObject]],
                                                                          dict[str, list[JSONObject]]]:
        names: list[str] = [p.name for p in self.pipeline.stages]
        canaries: dict[str, JSONObject] = {}
        rotations: dict[str, list[JSONObject]] = {n: [] for n in names}
        remediation: dict[str, list[JSONObject]] = {n: [] for n in names}
        opened: dict[str, StateStore] = {}
        for stage in names:
            try:
                opened[stage] = self.store(stage)
            except UNREADABLE as exc:
                errors.append(_unreadable(f"stage {stage}'s store", exc))
                canaries[stage] = {"store": None, "error": errors[-1]}
                continue
            store = opened[stage]
            try:
                canaries[stage] = _canaries(store, stage, self.request.window, decisions)
            except UNREADABLE as exc:
                errors.append(_unreadable(f"stage {stage}'s store {store.location}", exc))
                canaries[stage] = {"store": store.location, "error": errors[-1]}
        sharing: dict[str, list[str]] = {}
        for stage, store in opened.items():
            sharing.setdefault(store.location, []).append(stage)
        for location, stages in sharing.items():
            store = opened[stages[0]]
            journals: tuple[tuple[str, dict[str, list[JSONObject]], Callable[[StateStore, str], JSONObject]], ...] = (
                ("rotation/", rotations, self._rotation), ("remediation/", remediation, self._remediation))
            for kind, target, read in journals:
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

    @staticmethod
    def _fold(folded: dict[tuple[str, str], F], store: StateStore, cluster: str, stream: str,
              fold: Callable[[str, Iterable[Record]], F], apply: Callable[[F, Record], None]) -> F:
        """A journal's fold (``folded`` keeps them), with only the records after the last one folded read."""
        key = (store.location, cluster)
        state = folded.get(key) or fold(cluster, [])
        for record in store.read(stream, after=state.last_seq):
            apply(state, record)
        folded[key] = state
        return state

    def _rotation(self, store: StateStore, cluster: str) -> JSONObject:
        state = self._fold(self.rotations, store, cluster, rotation_journal.stream_of(cluster), rotation_journal.fold,
                           rotation_journal.apply)
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

    def _remediation(self, store: StateStore, cluster: str) -> JSONObject:
        current = self._fold(self.remediations, store, cluster, remediation_journal.stream_of(cluster),
                             remediation_journal.fold, remediation_journal.apply)
        newest = max([float(r.get("at", 0)) for r in current.recent] + [0.0])
        now = max(time.time(), newest)
        return {"cluster": cluster, "breaker": "open" if current.incident else "closed",
                "incident": current.incident.to_dict() if current.incident else None,
                "replaced": len(current.terminated), "remediations": len(current.started_at),
                "last_hour": sum(1 for t in current.started_at if t > now - HOUR), "max_per_hour": current.max_per_hour,
                "in_progress": len(current.open), "recent": current.recent[-5:]}


def gather(platform: Platform, request: DashboardRequest) -> JSONObject:
    """One read of every store (the export's)."""
    return Reader(platform, request).read()


def _guarded(what: str, errors: list[str], read: Callable[[], T], default: D) -> T | D:
    try:
        return read()
    except UNREADABLE as exc:
        errors.append(_unreadable(what, exc))
        return default


def _stage_clusters(platform: Platform) -> dict[str, str]:
    """Cluster -> stage, from the checkout's stack files (a stage whose file cannot be read is left out)."""
    out: dict[str, str] = {}
    for stage in STAGES:
        try:
            out.update({c.name: stage for c in platform.stage(stage).clusters()})
        except PlatformError:
            continue
    return out


def _latest_verdict(decisions: list[Entry], stage: str) -> JSONObject | None:
    """The newest canary verdict the ledger holds for ``stage``, with the judge's numbers."""
    for d in decisions:  # newest first
        verdict = mapping(d.inputs.get("verdict"))
        if d.stage == stage and "verdict" in verdict:
            return {"decision": d.id, "candidate": d.candidate, "at": d.at, **judge_numbers(verdict)}
    return None


def _metric_rows(canaries: JSONMapping, against: str) -> list[JSONObject]:
    rows: list[JSONObject] = []
    for canary, c in canaries.items():
        for metric, said in mapping(mapping(c).get("metrics")).items():
            m = mapping(said)
            threshold = mapping(m.get("threshold"))
            rows.append({"against": against, "canary": canary, "metric": metric, "verdict": m.get("verdict"),
                         "shift": m.get("shift"), "shift_ci": m.get("shift_ci"), "p_value": m.get("p_value"),
                         "material": threshold.get("material") or threshold.get("material_absolute")
                         or threshold.get("material_increase"),
                         "baseline_n": mapping(m.get("baseline")).get("n"), "experiment_n": mapping(m.get("experiment")).get("n"),
                         "reason": m.get("reason")})
    return rows


def judge_numbers(verdict: JSONMapping) -> JSONObject:
    """A verdict's headline and, per canary and metric, the judge's numbers: the shift and its interval, the p-value,
    the material threshold, the arms' sizes; for the stage's window and for each new image against the image it
    replaces (the soak's comparison with the last good candidate)."""
    rows = _metric_rows(mapping(verdict.get("canaries")), "the stage's window")
    images = mapping(verdict.get("images"))
    for image, arm in mapping(images.get("arms")).items():
        old = mapping(images.get("replaced")).get(image, "the image it replaces")
        rows += _metric_rows(mapping(mapping(arm).get("canaries")), f"{image} against {old}")
    return {"verdict": verdict.get("verdict"), "reason": verdict.get("reason"), "metrics": rows}


def _canaries(store: StateStore, stage: str, window: float, decisions: list[Entry]) -> JSONObject:
    end = newest_at(store, stage)
    out: JSONObject = {"store": store.location, "error": None, "latest_verdict": _latest_verdict(decisions, stage),
                       "stale": None}
    if end is None:
        return {**out, "start": None, "end": None, "lines": [], "results": 0}
    if time.time() - end > STALE_SECONDS:
        out["stale"] = time.time() - end  # the canaries stopped, or their runner did: not a healthy silence
    start = end - window
    rows = results(store, stage, since=start, until=end)
    return {**out, "start": start, "end": end, "lines": [line.to_dict() for line in sli_series(rows, start, end)], "results": len(rows)}
