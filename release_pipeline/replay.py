"""``release replay``: a stored decision taken again from its stored inputs with today's code."""

from __future__ import annotations

from platformctl.kernel.errors import PlatformError
from platformctl.kernel.jsontypes import JSONObject, array, mapping, to_float, to_int
from release_pipeline.fold import Entry
from release_pipeline.gates import (
    Decision,
    entry_decision,
    freezes_in_force,
    override_applies,
    rotation_decision,
    soak_decision,
)
from release_pipeline.held import Approval, ManualFreeze, Override, VerdictChange
from release_pipeline.pipeline import Freeze, StagePolicy
from release_pipeline.rotation_result import StageRotation

GATED = {"wait": "entry", "enter": "entry", "soak": "soak", "promote": "soak", "halt": "soak"}


def replay(entry: Entry) -> JSONObject:
    """The stored decision and the one today's code takes from the same inputs, and whether they are the same."""
    kind = GATED.get(entry.decision)
    inputs = entry.inputs
    if inputs.get("manual"):
        raise PlatformError(f"{entry.id} is a rollback by hand ({entry.by}: {entry.reason}): a person's "
                            "decision, not a gate's, so nothing to re-evaluate", field="DECISION")
    if kind is None or "decision" not in inputs:
        raise PlatformError(f"{entry.id} is a {entry.decision} step, not a gate's decision: nothing to re-evaluate "
                            "(decisions: wait, enter, soak, promote, halt)", field="DECISION")
    at = float(entry.at)
    if kind == "entry":
        definitions = [Freeze.model_validate(f) for f in array(inputs.get("freeze_definitions"))]
        manual = [ManualFreeze.from_dict(mapping(f)) for f in array(inputs.get("manual_freezes"))]
        frozen = freezes_in_force(definitions, manual, str(entry.stage), at)
        thresholds = mapping(inputs["thresholds"])
        policy = StagePolicy.model_validate({"name": entry.stage, "approvals": thresholds["approvals"], "soak": 0,
                                             "approvers_other_than_creator":
                                                 bool(thresholds.get("approvers_other_than_creator", False))})
        given = Override.from_dict(mapping(inputs["override"])) if inputs.get("override") else None
        override = given if override_applies(given, frozen) else None  # what it covered, checked again as the tick does
        again = entry_decision(policy, at, frozen, [Approval.from_dict(mapping(a)) for a in array(inputs.get("approvals"))],
                               override, str(inputs.get("creator", "")))
    elif "result" in inputs and "rotated_at" not in inputs:  # the rotation's gate
        again = rotation_decision(StageRotation.from_dict(mapping(inputs["result"])))
    else:
        policy = StagePolicy.model_validate({**mapping(inputs["thresholds"]), "name": entry.stage})
        verdicts = [VerdictChange.from_dict(mapping(v)) for v in array(inputs.get("verdicts"))]
        again = soak_decision(policy, to_float(inputs["rotated_at"]), at, verdicts, to_int(inputs["results"]))
    said = mapping(inputs["decision"])
    stored = Decision.from_dict(said)
    # The decision and what held it, never its words: rewording a message does not make an old decision different.
    # (A decision stored before decisions named what held them is compared on the decision alone.)
    same = again.decision == stored.decision and ("unmet" not in said or again.outcome == stored.outcome)
    return {"id": entry.id, "candidate": entry.candidate, "stage": entry.stage, "at": at,
            "stored": stored.to_dict(), "replayed": again.to_dict(), "same": same}
