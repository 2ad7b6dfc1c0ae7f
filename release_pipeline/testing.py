"""The one configurable fake of the stage operations (``StageOperations``), for the reconciler's tests, its model
and the release benchmarks: every stage's launch templates and nodes as image families, one virtual clock, each
rotation finished (or what a hook answers instead), the canaries' verdict as configured.

Like ``kopf.testing`` or client-go's fake clientsets it is shipped beside what it stands in for, so a change to the
Protocol changes the fake in the same commit; ``tests/release_pipeline/contract.py`` holds the ledgers it and the
application layer's ``StageOperator`` leave to the same contract."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from release_pipeline.candidates import Candidate
from release_pipeline.held import ManualFreeze
from release_pipeline.operations import Launching, StageDeploy
from release_pipeline.rotation_result import StageRotation, Status

if TYPE_CHECKING:
    from e2e_canary.judge import Word
    from e2e_canary.verdict import Verdict

Hold = Callable[[], "str | None"]
# Asked before a rotation acts: an answer ends it there (the hook records what it wants), None lets it run.
BeforeRotate = Callable[["FakeStages", str, Candidate, bool, "Hold | None"], "StageRotation | None"]
# Asked with what a rotation answered: what the pipeline is told instead.
AfterRotate = Callable[["FakeStages", str, Candidate, StageRotation], StageRotation]
# Asked before a deploy acts (it may raise: the stage's API went away).
BeforeDeploy = Callable[["FakeStages", str, Candidate, bool], None]
# Judges a stage: (stages, stage, candidate, baseline, since, window, entered) -> the verdict.
Judge = Callable[["FakeStages", str, Candidate, "Candidate | None", float, int, "float | None"], "Verdict"]
# The instances a finished rotation saw booting, image -> ids (none by default).
Boots = Callable[[str, Candidate], dict[str, list[str]]]


def initial_images(stage: str) -> dict[str, str]:
    """What a stage's launch templates boot before any candidate: one family, ``general``."""
    return {"general": f"ami-{stage[:3]}-initial"}


@dataclass
class FakeStages:
    """Every stage's operations on one virtual clock. Configured by its fields; what it did is in ``deploys``,
    ``rotations`` (each rotation that acted, halted ones too), ``resumed`` and ``paused``."""

    clock: float = 0.0
    stages: Sequence[str] = ()  # each starts on its ``initial`` images, its nodes on them, running no candidate
    rotation_seconds: float = 1200.0  # how long a rotation takes on the clock
    initial: Callable[[str], dict[str, str]] = initial_images
    verdicts: dict[str, Word] = field(default_factory=dict)  # candidate -> what its stages' canaries say (default pass)
    results_per_hour: int = 200  # the canary results a stage gives an hour
    halts: list[str] = field(default_factory=list)  # stages whose next rotations halt (one entry each)
    freeze_at: float | None = None  # a freeze begins then: a rotation running across it asks ``hold`` and pauses
    before_rotate: BeforeRotate | None = None
    after_rotate: AfterRotate | None = None
    before_deploy: BeforeDeploy | None = None
    judge: Judge | None = None
    boots: Boots | None = None
    templates: dict[str, dict[str, str]] = field(default_factory=dict)  # stage -> family -> the image it boots
    # stage -> family -> the settings beyond the image its template launches otherwise than the last deploy left it
    settings: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)  # stage -> family -> the image its nodes run
    running: dict[str, str | None] = field(default_factory=dict)  # stage -> the candidate its nodes run
    deploys: list[tuple[str, str]] = field(default_factory=list)
    rotations: list[tuple[str, str]] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    held_by_hand: dict[str, list[ManualFreeze]] = field(default_factory=dict)  # stage -> the freezes by hand told it
    paused: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for stage in self.stages:
            self.nodes.setdefault(stage, dict(self.template(stage)))
            self.running.setdefault(stage, None)

    def template(self, stage: str) -> dict[str, str]:
        return self.templates.setdefault(stage, dict(self.initial(stage)))

    def now(self, stage: str) -> float:
        return self.clock

    def deploy(self, stage: str, candidate: Candidate, rollback: bool = False) -> StageDeploy:
        if self.before_deploy is not None:
            self.before_deploy(self, stage, candidate, rollback)
        self.deploys.append((stage, candidate.id))
        self.templates[stage] = {f: i["id"] for f, i in candidate.stages[stage].images.items()}
        self.settings.pop(stage, None)  # what a deploy makes is what its record says
        return StageDeploy({f"{stage}/{f}": image for f, image in sorted(self.templates[stage].items())})

    def deployed(self, stage: str) -> dict[str, str]:
        return dict(self.template(stage))

    def launching(self, stage: str) -> list[Launching]:
        """One pool a family, in one cluster of the stage, launching what its template boots."""
        other = self.settings.get(stage, {})
        return [Launching(f"{stage}-1", family, family, image, other.get(family, ()))
                for family, image in sorted(self.template(stage).items())]

    def hold_by_hand(self, stage: str, freezes: Sequence[ManualFreeze]) -> None:
        self.held_by_hand[stage] = list(freezes)

    def resume(self, stage: str, reason: str) -> None:
        self.resumed.append(stage)

    def rotate(self, stage: str, candidate: Candidate, rollback: bool = False, hold: Hold | None = None) -> StageRotation:
        if self.before_rotate is not None and (said := self.before_rotate(self, stage, candidate, rollback, hold)) is not None:
            return said
        if hold is not None and self.freeze_at is not None and self.clock <= self.freeze_at <= self.clock + self.rotation_seconds:
            self.clock = self.freeze_at  # a freeze begins during the rotation: asked, it pauses at its next step
            why = hold()
            if why is not None:
                self.paused.append((stage, candidate.id))
                return StageRotation(Status.FROZEN, why)
        self.rotations.append((stage, candidate.id))
        self.clock += self.rotation_seconds
        if stage in self.halts:
            self.halts.remove(stage)
            said = StageRotation(Status.HALTED, "a node would not drain")
        else:
            self.running[stage] = candidate.id
            self.nodes[stage] = dict(self.template(stage))
            said = StageRotation(Status.FINISHED, booted=self.boots(stage, candidate) if self.boots else {})
        return self.after_rotate(self, stage, candidate, said) if self.after_rotate is not None else said

    def verdict(self, stage: str, candidate: Candidate, baseline: Candidate | None, since: float, window: int,
                entered: float | None = None) -> Verdict:
        if self.judge is not None:
            return self.judge(self, stage, candidate, baseline, since, window, entered)
        from e2e_canary.verdict import Verdict

        said: Word = self.verdicts.get(candidate.id, "pass")
        return Verdict(said, f"canaries say {said}", results_since=int((self.clock - since) / 3600 * self.results_per_hour))

