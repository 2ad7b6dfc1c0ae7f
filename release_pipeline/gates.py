"""The pipeline's decisions as pure functions of their inputs, so that ``release replay`` can take them again.

- ``freezes_in_force``: the freeze windows (the file's, recurring or one-off, each in its own time zone, and the
  ones an operator set by hand) that hold ``stage`` at an instant, and when the last of them ends;
- ``entry_decision``: may a candidate enter a stage now (no freeze, or an override; its approvals);
- ``soak_decision``: has the stage soaked the candidate long enough, with enough evidence, the verdict ``pass``
  for long enough at its end; or is it time to halt (``fail``, or ``inconclusive`` past the deadline).

Every input is plain data (what the ledger stores); nothing here reads a store or a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from platformctl.kernel.humanize import human_duration
from platformctl.kernel.jsontypes import JSONMapping, JSONObject, optional_number, strings
from release_pipeline.held import Approval, FreezeInForce, ManualFreeze, Override, VerdictChange
from release_pipeline.pipeline import Freeze, StagePolicy
from release_pipeline.rotation_result import StageRotation
from upgrade_service.journal.rotation import FIRST_LIGHT_HALTS


@dataclass(frozen=True)
class Decision:
    decision: str  # enter | wait | pass | halt
    reason: str  # for people: nothing branches on it, replay does not compare it
    opens_at: float | None = None  # when a closed gate can open (a freeze's end, the soak's end)
    # What holds a closed gate, as codes (``frozen``, ``approvals``, ``soak-time``, ``results``, ``verdict``,
    # ``pass-for``, ``verdict-failed``, ``deadline``, ``rotation``, ``first-light`` and its halt): what the soak records
    # a change of, and what replay compares with the decision itself.
    unmet: tuple[str, ...] = ()

    def to_dict(self) -> JSONObject:
        return {"decision": self.decision, "reason": self.reason, "opens_at": self.opens_at, "unmet": list(self.unmet)}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> Decision:
        return cls(str(data["decision"]), str(data.get("reason", "")), optional_number(data.get("opens_at")),
                   tuple(strings(data.get("unmet"))))

    @property
    def outcome(self) -> tuple[str, tuple[str, ...]]:
        """What the decision is, whatever its words."""
        return self.decision, tuple(sorted(self.unmet))


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _iso(ts: float) -> str:
    return _utc(ts).strftime("%Y-%m-%dT%H:%M:%SZ")


def freeze_window_at(freeze: Freeze, at: float) -> tuple[float, float] | None:
    """The window of ``freeze`` that holds instant ``at`` (UTC seconds), as (start, end) UTC seconds, else None.
    Recurrences are wall times in the freeze's zone (``platformctl.kernel.windows``): 18:00 Friday in Europe/Berlin is
    17:00 UTC in winter and 16:00 in summer."""
    return freeze.at(at)


def freezes_in_force(freezes: Sequence[Freeze], manual: Sequence[ManualFreeze], stage: str,
                     at: float) -> list[FreezeInForce]:
    """Each freeze holding ``stage`` at ``at``: its name, reason and end (None: until unfrozen by hand)."""
    held: list[FreezeInForce] = []
    for freeze in freezes:
        if not freeze.applies_to(stage):
            continue
        window = freeze_window_at(freeze, at)
        if window is not None:
            held.append(FreezeInForce(freeze.name, freeze.reason or f"freeze {freeze.name}", window[0], window[1],
                                      timezone=freeze.timezone))
    for m in manual:
        if m.stage in ("*", stage) and m.at <= at and (m.until is None or at < m.until):
            held.append(FreezeInForce("manual", m.reason, m.at, m.until, by=m.by))
    return held


def override_applies(override: Override | None, frozen: Sequence[FreezeInForce]) -> bool:
    """An override covers the freeze windows in force when it was given: it holds while only those are in force."""
    if override is None:
        return False
    if override.freezes is None:  # written before overrides named their windows
        return True
    return all(f.key in override.freezes for f in frozen)


def entry_decision(stage: StagePolicy, at: float, frozen: Sequence[FreezeInForce], approvals: Sequence[Approval],
                   override: Override | None, creator: str = "") -> Decision:
    """May a candidate enter ``stage`` at ``at``: outside every freeze (or with an override, recorded), and with the
    approvals the stage needs from distinct people."""
    if frozen and override is None:
        ends = [f.end for f in frozen]
        opens = None if any(e is None for e in ends) else max(float(e) for e in ends if e is not None)
        said = "; ".join(f"{f.reason} (until {_iso(f.end) if f.end is not None else 'unfrozen by hand'})" for f in frozen)
        return Decision("wait", f"frozen: {said}", opens, ("frozen",))
    approvers = sorted({a.by for a in approvals if not creator or a.by != creator or not stage.approvers_other_than_creator})
    if len(approvers) < stage.approvals:
        mine = " (the candidate's creator's own approval does not count here)" if stage.approvers_other_than_creator and \
            any(a.by == creator for a in approvals) else ""
        return Decision("wait", f"waits for approval: {len(approvers)} of {stage.approvals} "
                        f"({', '.join(approvers) or 'none yet'}){mine}", None, ("approvals",))
    said = f"{len(approvers)} approval(s) of {stage.approvals} required" if stage.approvals else "no approval required"
    if frozen and override is not None:
        return Decision("enter", f"entered during a freeze, overridden by {override.by}: {override.reason}; {said}")
    return Decision("enter", f"no freeze in force; {said}")


def soak_decision(stage: StagePolicy, rotated_at: float, at: float, verdicts: Sequence[VerdictChange],
                  results: int) -> Decision:
    """The gate at the end of a stage's soak. ``verdicts``: the verdict's changes since the soak began, oldest first;
    ``results``: the canary results the soak holds.

    A pass needs all three: the soak has lasted its minimum, it holds ``minResults``, and the verdict has been
    ``pass`` for ``passFor`` (since its last change). ``fail`` halts at once; ``inconclusive`` (or too little
    evidence) extends the soak up to the deadline, then halts: never a pass."""
    soaked = at - rotated_at
    current = verdicts[-1] if verdicts else None
    if current is not None and current.verdict == "fail":
        return Decision("halt", f"the canary verdict failed: {current.reason}", None, ("verdict-failed",))
    deadline = rotated_at + stage.soak + stage.deadline
    short: list[str] = []
    unmet: list[str] = []
    opens = rotated_at + stage.soak
    if soaked < stage.soak:
        short.append(f"soaked {human_duration(soaked)} of {human_duration(stage.soak)}")
        unmet.append("soak-time")
    if results < stage.min_results:
        short.append(f"{results} canary results of the {stage.min_results} required")
        unmet.append("results")
    if current is None or current.verdict != "pass":
        said = current.reason if current is not None else "no verdict yet"
        short.append(f"the verdict is {current.verdict if current else 'unknown'} ({said})")
        unmet.append("verdict")
    else:
        held = at - current.at
        if held < stage.pass_for:
            short.append(f"the verdict has been pass for {human_duration(held)} of {human_duration(stage.pass_for)}")
            unmet.append("pass-for")
            opens = max(opens, current.at + stage.pass_for)
    if not short:
        return Decision("pass", f"soaked {human_duration(soaked)} (minimum {human_duration(stage.soak)}), {results} canary "
                        f"results (minimum {stage.min_results}), verdict pass for {human_duration(at - current.at)} "  # type: ignore[union-attr]
                        f"(minimum {human_duration(stage.pass_for)})")
    if at >= deadline:
        return Decision("halt", f"the deadline ({_iso(deadline)}, {human_duration(stage.deadline)} after the soak's "
                        f"{human_duration(stage.soak)}) reached without a pass: " + "; ".join(short), None,
                        ("deadline", *unmet))
    return Decision("wait", "; ".join(short), opens if opens > at else None, tuple(unmet))


def rotation_decision(result: StageRotation) -> Decision:
    """The gate after a stage's rotation: no failed rotation."""
    if result.status == "finished":
        return Decision("pass", "every cluster of the stage finished rotating")
    lit = [c for c in result.clusters if c.halted in FIRST_LIGHT_HALTS]
    if lit:  # judged on one node a pool, before any workload moved onto the images
        return Decision("halt", "first light stopped the images: " + "; ".join(
            f"{c.cluster}: {(c.first_light.reason if c.first_light else None) or c.reason}" for c in lit), None,
            ("rotation", "first-light", *sorted({str(c.halted) for c in lit})))
    return Decision("halt", f"the rotation did not finish: {result.reason or result.status}", None,
                    ("rotation", result.status))
