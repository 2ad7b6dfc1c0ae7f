"""The release ledger: every step and decision of the pipeline, with who, when, why and the decision's inputs, in the
pipeline's store, never pruned; and the pipeline's state, folded from it.

Streams: ``release/candidates`` (one record per candidate, keyed by its id: the same content is recorded once),
``release/ledger`` (the entries, oldest first) and ``release/state`` (checkpoints of the folded state with the
ledger position they cover, so a tick reads the last checkpoint and what came after it: its cost does not grow
with history). An entry is ``{"id", "candidate", "stage", "decision", "at", "reason", "inputs", "by"}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from platformctl.state import Lease, StateStore
from platformctl.state.lease import LeaseKeeper
from release_pipeline.candidates import Candidate

CANDIDATES, LEDGER, STATE = "release/candidates", "release/ledger", "release/state"
TICK_LEASE = "release/tick"

# The steps of a candidate in a stage, in order; "idle" when none is in flight.
STEPS = ("waiting", "deploying", "rotating", "soaking", "rolling-back")


@dataclass
class StageState:
    current: str | None = None  # the candidate in flight here
    last_good: str | None = None  # the last candidate that passed here
    step: str = "idle"
    since: float = 0.0  # when the step began
    waiting_for: str | None = None  # what the step waits for, in words
    opens_at: float | None = None
    rotated_at: float | None = None  # the soak's start: the stage's last cluster finished rotating
    entered_at: float | None = None  # when the current candidate entered: the last good images' results end there
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # the verdict's changes during the soak
    results: int = 0
    ready: list[str] = field(default_factory=list)  # candidates that may enter, oldest first
    rollback_to: str | None = None
    override: dict[str, Any] | None = None  # a freeze override given for one candidate's entry: {"candidate", "by", ...}
    good: list[str] = field(default_factory=list)  # every candidate that passed here, oldest first
    intent: str | None = None  # a side effect begun and not known finished: "deploy:<id>" or "rotate:<id>"


@dataclass
class PipelineState:
    stages: dict[str, StageState] = field(default_factory=dict)
    candidates: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> {"status", "stage", "at", "reason"}
    freezes: list[dict[str, Any]] = field(default_factory=list)  # set by hand: {"stage" ("*": all), "reason", "until", "at", "by"}
    approvals: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "<candidate>/<stage>" -> approvals
    position: int = 0  # the ledger's sequence number this state covers
    # "<candidate>/<stage>" -> the "<image>/<instance>" each rotation there saw booting: kept in the fold (and so in
    # each checkpoint) so that how far a candidate got is read without reading the whole ledger again
    booted: dict[str, list[str]] = field(default_factory=dict)

    def stage(self, name: str) -> StageState:
        return self.stages.setdefault(name, StageState())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PipelineState:
        return cls({k: StageState(**v) for k, v in data["stages"].items()}, dict(data["candidates"]), list(data["freezes"]),
                   {k: list(v) for k, v in data["approvals"].items()}, int(data["position"]),
                   {k: list(v) for k, v in data.get("booted", {}).items()})


def entry_id(candidate: str | None, stage: str | None, decision: str, at: float, salt: str = "") -> str:
    text = json.dumps([candidate, stage, decision, round(at, 6), salt])
    return "d-" + hashlib.sha256(text.encode()).hexdigest()[:12]


class Ledger:
    """The pipeline's store as the pipeline sees it: candidates, entries (fenced by the tick's lease when one is
    held) and the folded state."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.keeper: LeaseKeeper | None = None  # the tick's lease: every write is fenced by it

    @property
    def fence(self) -> Lease | None:
        if self.keeper is None:
            return None
        self.keeper.check()  # a holder that may have lost its lease stops before its next write
        return self.keeper.fence

    # ------------------------------------------------------------------ candidates

    def candidate(self, candidate_id: str) -> Candidate | None:
        for record in self.store.read(CANDIDATES):
            if record.data.get("id") == candidate_id:
                return Candidate.from_record(record.data)
        return None

    def candidates(self) -> list[Candidate]:
        return [Candidate.from_record(r.data) for r in self.store.read(CANDIDATES)]

    def add_candidate(self, candidate: Candidate) -> bool:
        """Record ``candidate``; False when the same content is recorded already (nothing written)."""
        if self.candidate(candidate.id) is not None:
            return False
        self.store.append(CANDIDATES, candidate.to_record(), key=f"candidate/{candidate.id}")
        return True

    # ------------------------------------------------------------------ entries

    def append(self, candidate: str | None, stage: str | None, decision: str, at: float, reason: str,
               inputs: Mapping[str, Any] | None = None, by: str = "", salt: str = "") -> dict[str, Any]:
        entry: dict[str, Any] = {"id": entry_id(candidate, stage, decision, at, salt), "candidate": candidate, "stage": stage,
                 "decision": decision, "at": at, "reason": reason, "inputs": dict(inputs or {}), "by": by}
        self.store.append(LEDGER, entry, fence=self.fence, key=entry["id"])  # a retry is not written twice
        return entry

    def entries(self, after: int = 0) -> list[tuple[int, dict[str, Any]]]:
        return [(r.seq, dict(r.data)) for r in self.store.read(LEDGER, after=after)]

    def entry(self, entry_id: str) -> dict[str, Any] | None:
        return next((data for _, data in self.entries() if data.get("id") == entry_id), None)

    # ------------------------------------------------------------------ state

    def state(self) -> PipelineState:
        """The last checkpoint and every entry after it, folded."""
        last = self.store.last(STATE)
        state = PipelineState.from_dict(last.data["state"]) if last is not None and _usable(last.data) else PipelineState()
        for seq, entry in self.entries(after=state.position):
            apply(state, entry)
            state.position = seq
        return state

    def checkpoint(self, state: PipelineState) -> None:
        last = self.store.last(STATE)
        if last is None or not _usable(last.data) or int(last.data["state"]["position"]) < state.position:
            self.store.append(STATE, {"state": state.to_dict()}, fence=self.fence,
                              key=f"state/2/{state.position}")  # 2: the fold with ``booted`` (an older one's key has none)


def _usable(checkpoint: Mapping[str, Any]) -> bool:
    """A checkpoint an older version wrote (without a field the fold now keeps) is folded again from the start."""
    state = checkpoint["state"]
    return "booted" in state and all("good" in v for v in state["stages"].values())


def apply(state: PipelineState, entry: Mapping[str, Any]) -> None:
    """Fold one ledger entry into ``state``: the one place the meaning of each decision lives."""
    decision, name, at = entry["decision"], entry.get("stage"), float(entry["at"])
    cid = str(entry.get("candidate"))
    inputs = entry.get("inputs") or {}
    stage = state.stage(name) if name else None
    booted = (inputs.get("result") or {}).get("booted") or {} if isinstance(inputs.get("result"), dict) else {}
    if booted and name:  # {image id: instance ids} a rotation saw booting
        seen = state.booted.setdefault(f"{cid}/{name}", [])
        seen.extend(f"{image}/{i}" for image, ids in sorted(booted.items()) for i in ids if f"{image}/{i}" not in seen)
    if decision == "start":
        state.candidates[cid] = {"status": "queued", "stage": None, "at": at, "reason": entry["reason"]}
        for first in inputs.get("ready_in", []):
            state.stage(first).ready.append(cid)
    elif decision == "superseded":
        state.candidates[cid].update(status="superseded", at=at, reason=entry["reason"])
        for s in state.stages.values():
            s.ready = [c for c in s.ready if c != cid]
    elif decision == "freeze":
        state.freezes.append({"stage": name or "*", "reason": entry["reason"], "until": inputs.get("until"), "at": at,
                              "by": entry.get("by", "")})
    elif decision == "unfreeze":
        state.freezes = [f for f in state.freezes if f["stage"] != name] if name else []  # one stage's, or all
    elif decision == "override":
        assert stage is not None
        stage.override = {"candidate": entry.get("candidate"), "by": entry.get("by", ""), "reason": entry["reason"], "at": at}
    elif decision == "approve":
        state.approvals.setdefault(f"{cid}/{name}", []).append({"by": entry.get("by", ""), "at": at, "reason": entry["reason"]})
    elif stage is not None:
        _apply_step(state, stage, decision, cid, name, at, entry)


def _apply_halt(state: PipelineState, stage: StageState, cid: str, name: str, at: float, entry: Mapping[str, Any]) -> None:
    """A halt: the candidate in flight here (the gate's, or by hand), or by hand the stage's last good one. The stage
    rolls back to ``rollback_to``; the candidate leaves every queue, and every later stage it is in flight in rolls
    back too: no later stage ever keeps it."""
    inputs = entry.get("inputs") or {}
    target = inputs.get("rollback_to")
    state.candidates.setdefault(cid, {}).update(status="halted", stage=name, at=at, reason=entry["reason"])
    for s in state.stages.values():
        s.ready = [c for c in s.ready if c != cid]
    if cid != stage.current:  # by hand: the last good one (nothing of it in flight here)
        stage.good = [c for c in stage.good if c != cid]
        if stage.last_good == cid:
            stage.last_good = target
        if stage.step in ("deploying", "rotating", "soaking"):  # another entered after the rollback read the stage:
            return  # it carries on (it replaces the halted one's images anyway), and rolls back to ``target`` if it fails
        if stage.step == "waiting" and stage.current is not None and stage.current not in stage.ready:
            stage.ready.insert(0, stage.current)  # the one waiting to enter waits again, after the rollback
        stage.current = cid
    stage.step, stage.since, stage.rollback_to, stage.waiting_for, stage.intent = "rolling-back", at, target, None, None
    for other in state.stages.values():
        if other is stage or other.current != cid:
            continue
        if other.step == "waiting":
            other.current, other.step, other.waiting_for = None, "idle", None
        elif other.step in ("deploying", "rotating", "soaking"):  # a later stage it already entered: back too
            other.step, other.since, other.rollback_to, other.waiting_for = "rolling-back", at, other.last_good, None
            other.intent = None


# The step a stage must be in, with the entry's candidate in flight, for a step's entry to count. A tick that read the
# state before an operator's rollback may write a step the rollback has made moot (a rotation finished, a promotion):
# the fold keeps the ledger's order and passes over it, so the rollback stands.
_STEP_OF = {"deploy": "deploying", "deployed": "deploying", "rotate": "rotating", "rotated": "rotating",
            "verdict": "soaking", "soak": "soaking", "promote": "soaking", "rollback-deploy": "rolling-back",
            "rollback-deployed": "rolling-back", "rollback-rotate": "rolling-back", "rolled-back": "rolling-back"}


def _apply_step(state: PipelineState, stage: StageState, decision: str, cid: str | None, name: str | None, at: float,
                entry: Mapping[str, Any]) -> None:
    inputs = entry.get("inputs") or {}
    if decision in _STEP_OF and (stage.current != cid or stage.step != _STEP_OF[decision]):
        return
    if decision == "enter" and stage.step not in ("idle", "waiting"):
        return
    if decision == "halt" and stage.step == "rolling-back":
        return
    if decision == "wait" and stage.step not in ("idle", "waiting"):  # read before a rollback by hand: moot
        return
    if decision == "wait":
        stage.current, stage.step, stage.waiting_for = cid, "waiting", entry["reason"]
        stage.opens_at = (entry.get("inputs") or {}).get("decision", {}).get("opens_at")
    elif decision == "enter":
        stage.current, stage.step, stage.since, stage.waiting_for = cid, "deploying", at, None
        stage.ready = [c for c in stage.ready if c != cid]
        stage.override, stage.verdicts, stage.results, stage.rotated_at, stage.entered_at = None, [], 0, None, at
        state.candidates[str(cid)].update(status="in flight", stage=name, at=at)
    elif decision in ("deploy", "rotate", "rollback-deploy", "rollback-rotate"):
        stage.intent = f"{decision}:{cid}"
    elif decision == "deployed":
        stage.intent, stage.step, stage.since = None, "rotating", at
    elif decision == "rotated":
        stage.intent, stage.step, stage.since, stage.rotated_at = None, "soaking", at, at
        stage.waiting_for = "the soak"
    elif decision == "verdict":
        stage.verdicts.append({"at": at, "verdict": inputs["verdict"]["verdict"], "reason": inputs["verdict"]["reason"]})
        stage.results = int(inputs.get("results", stage.results))
    elif decision == "soak":
        stage.waiting_for, stage.opens_at = entry["reason"], inputs.get("decision", {}).get("opens_at")
        stage.results = int(inputs.get("results", stage.results))
    elif decision == "promote":
        stage.good.append(str(cid))
        stage.last_good, stage.current, stage.step, stage.since, stage.waiting_for = cid, None, "idle", at, None
        state.candidates[str(cid)].update(status="passed", stage=name, at=at, reason=entry["reason"])
        for nxt in inputs.get("ready_in", []):
            state.stage(nxt).ready.append(str(cid))
        if not inputs.get("ready_in"):
            state.candidates[str(cid)].update(status="released")
    elif decision == "halt":
        _apply_halt(state, stage, str(cid), str(name), at, entry)
    elif decision == "rollback-deployed":
        stage.intent = None
        stage.waiting_for = "the rollback's rotation"
    elif decision == "rolled-back":
        stage.intent, stage.current, stage.step, stage.since, stage.rollback_to = None, None, "idle", at, None
        stage.waiting_for = None
