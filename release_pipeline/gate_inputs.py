"""What each of the pipeline's gates decided from: one frozen value per gate (``EntryInputs``, ``RotationInputs``,
``SoakInputs``), which the tick builds, writes into its entry's inputs (``to_dict``: the keys the ledger always held,
and ``gate``, which names the gate) and ``release replay`` reads back (``inputs_of``) to take the decision again
(``again``). Nothing tells the gates apart by which keys an entry happens to hold but an entry an older version wrote
without ``gate``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from platformctl.kernel.jsontypes import JSONMapping, JSONObject, array, mapping, optional_number, to_float, to_int
from release_pipeline.fold import Entry
from release_pipeline.gates import Decision, entry_decision, freezes_in_force, override_applies, rotation_decision, soak_decision
from release_pipeline.held import Approval, FreezeInForce, ManualFreeze, Override, VerdictChange
from release_pipeline.pipeline import Freeze, StagePolicy
from release_pipeline.rotation_result import StageRotation


class Gate(StrEnum):
    ENTRY = "entry"  # may the candidate enter the stage (``wait``, ``enter``)
    ROTATION = "rotation"  # did the stage's rotation finish (its ``halt``)
    SOAK = "soak"  # has the stage soaked it (``soak``, ``promote``, its ``halt``)


@dataclass(frozen=True)
class EntryInputs:
    """The entry gate's inputs: the freezes in force and what they were made of, the approvals, an override, the
    candidate's creator, and the stage's thresholds."""

    decision: Decision
    frozen: tuple[FreezeInForce, ...]
    approvals: tuple[Approval, ...]
    override: Override | None
    creator: str
    forced: bool
    approvals_needed: int
    approvers_other_than_creator: bool
    pipeline: str
    freeze_definitions: tuple[Freeze, ...]  # the file's freezes that apply to the stage
    manual_freezes: tuple[ManualFreeze, ...]  # the freezes by hand not yet ended

    def to_dict(self) -> JSONObject:
        return {"gate": str(Gate.ENTRY), "decision": self.decision.to_dict(), "freezes": [f.to_dict() for f in self.frozen],
                "approvals": [a.to_dict() for a in self.approvals],
                "override": self.override.to_dict() if self.override else None, "creator": self.creator,
                "forced": self.forced, "thresholds": {"approvals": self.approvals_needed,
                                                      "approvers_other_than_creator": self.approvers_other_than_creator},
                "pipeline": self.pipeline,
                "freeze_definitions": [f.model_dump(mode="json", by_alias=True) for f in self.freeze_definitions],
                "manual_freezes": [f.to_dict() for f in self.manual_freezes]}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> EntryInputs:
        thresholds = mapping(data.get("thresholds"))
        override = data.get("override")
        return cls(Decision.from_dict(mapping(data["decision"])),
                   tuple(FreezeInForce.from_dict(mapping(f)) for f in array(data.get("freezes"))),
                   tuple(Approval.from_dict(mapping(a)) for a in array(data.get("approvals"))),
                   Override.from_dict(mapping(override)) if override else None, str(data.get("creator", "")),
                   bool(data.get("forced", False)), to_int(thresholds.get("approvals", 0)),
                   bool(thresholds.get("approvers_other_than_creator", False)), str(data.get("pipeline", "")),
                   tuple(Freeze.model_validate(f) for f in array(data.get("freeze_definitions"))),
                   tuple(ManualFreeze.from_dict(mapping(f)) for f in array(data.get("manual_freezes"))))

    def again(self, stage: str, at: float) -> Decision:
        """The decision today's code takes from these inputs: the freezes worked out again from what they were made
        of, the override checked against them again, as the tick does."""
        frozen = freezes_in_force(self.freeze_definitions, self.manual_freezes, stage, at)
        policy = StagePolicy.model_validate({"name": stage, "approvals": self.approvals_needed, "soak": 0,
                                             "approvers_other_than_creator": self.approvers_other_than_creator})
        override = self.override if override_applies(self.override, frozen) else None
        return entry_decision(policy, at, frozen, self.approvals, override, self.creator)


@dataclass(frozen=True)
class RotationInputs:
    """The rotation gate's inputs: the stage's rotation as the entry keeps it (its boots counted, not listed)."""

    decision: Decision
    result: JSONObject  # StageRotation's JSON, less the instances (``booted_count``, ``first_light_count``)
    blocked_since: float | None

    def to_dict(self) -> JSONObject:
        return {"gate": str(Gate.ROTATION), "decision": self.decision.to_dict(), "result": self.result,
                "blocked_since": self.blocked_since}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> RotationInputs:
        return cls(Decision.from_dict(mapping(data["decision"])), dict(mapping(data["result"])),
                   optional_number(data.get("blocked_since")))

    def again(self, stage: str, at: float) -> Decision:
        return rotation_decision(StageRotation.from_dict(self.result))


@dataclass(frozen=True)
class SoakInputs:
    """The soak gate's inputs: when the soak began, the verdict's changes and the results counted since, and the
    stage's thresholds as the pipeline file gave them."""

    decision: Decision
    rotated_at: float
    verdicts: tuple[VerdictChange, ...]
    results: int
    verdict: JSONObject  # the canary verdict as the tick read it
    thresholds: JSONObject  # the stage's policy, as the pipeline file had it
    pipeline: str

    def to_dict(self) -> JSONObject:
        return {"gate": str(Gate.SOAK), "decision": self.decision.to_dict(), "rotated_at": self.rotated_at,
                "verdicts": [v.to_dict() for v in self.verdicts], "results": self.results, "verdict": self.verdict,
                "thresholds": self.thresholds, "pipeline": self.pipeline}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> SoakInputs:
        return cls(Decision.from_dict(mapping(data["decision"])), to_float(data["rotated_at"]),
                   tuple(VerdictChange.from_dict(mapping(v)) for v in array(data.get("verdicts"))),
                   to_int(data.get("results", 0)), dict(mapping(data.get("verdict"))), dict(mapping(data["thresholds"])),
                   str(data.get("pipeline", "")))

    def again(self, stage: str, at: float) -> Decision:
        policy = StagePolicy.model_validate({**self.thresholds, "name": stage})
        return soak_decision(policy, self.rotated_at, at, self.verdicts, self.results)


GateInputs = EntryInputs | RotationInputs | SoakInputs
READERS: dict[Gate, type[EntryInputs] | type[RotationInputs] | type[SoakInputs]] = {
    Gate.ENTRY: EntryInputs, Gate.ROTATION: RotationInputs, Gate.SOAK: SoakInputs}
# The gate an older version's entry (written without ``gate``) was decided by, by its decision: a halt is the soak's
# unless it holds the rotation's result and no soak.
BY_DECISION = {"wait": Gate.ENTRY, "enter": Gate.ENTRY, "soak": Gate.SOAK, "promote": Gate.SOAK, "halt": Gate.SOAK}


def inputs_of(entry: Entry) -> GateInputs | None:
    """The gate's inputs an entry holds, or None for an entry no gate decided (a step, or a person's decision)."""
    data = entry.inputs
    if "decision" not in data or data.get("manual"):
        return None
    gate = Gate(str(data["gate"])) if data.get("gate") in set(Gate) else BY_DECISION.get(str(entry.decision))
    if gate is Gate.SOAK and "rotated_at" not in data and "result" in data:  # an older version's rotation halt
        gate = Gate.ROTATION
    return READERS[gate].from_dict(data) if gate is not None else None
