"""``release replay``: a stored decision taken again from its stored inputs with today's code."""

from __future__ import annotations

from platformctl.kernel.errors import PlatformError
from platformctl.kernel.jsontypes import JSONObject, mapping
from release_pipeline.fold import Entry
from release_pipeline.gate_inputs import inputs_of
from release_pipeline.gates import Decision


def replay(entry: Entry) -> JSONObject:
    """The stored decision and the one today's code takes from the same inputs, and whether they are the same."""
    if entry.inputs.get("manual"):
        raise PlatformError(f"{entry.id} is a rollback by hand ({entry.by}: {entry.reason}): a person's "
                            "decision, not a gate's, so nothing to re-evaluate", field="DECISION")
    gate = inputs_of(entry)
    if gate is None:
        raise PlatformError(f"{entry.id} is a {entry.decision} step, not a gate's decision: nothing to re-evaluate "
                            "(decisions: wait, enter, soak, promote, halt)", field="DECISION")
    at = float(entry.at)
    again = gate.again(str(entry.stage), at)
    said = mapping(entry.inputs["decision"])
    stored = Decision.from_dict(said)
    # The decision and what held it, never its words: rewording a message does not make an old decision different.
    # (A decision stored before decisions named what held them is compared on the decision alone.)
    same = again.decision == stored.decision and ("unmet" not in said or again.outcome == stored.outcome)
    return {"id": entry.id, "candidate": entry.candidate, "stage": entry.stage, "at": at,
            "stored": stored.to_dict(), "replayed": again.to_dict(), "same": same}
