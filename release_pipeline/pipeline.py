"""The release pipeline's file, ``release_pipeline/pipeline.yaml`` in the operator's checkout, parsed once at the edge.

The stages in order, and per stage: the rotation policy its nodes move under, the soak (how long the stage must run
the candidate after its last cluster finished rotating), the canary results the soak must hold, how long the verdict
must have stayed ``pass`` at the end of it, the deadline after which ``inconclusive`` halts, and the approvals
entering it needs. Freeze windows, each in its own IANA time zone: recurring (an RRULE or a cron expression, with a
duration) or one-off. What an older candidate does when a newer one starts (``queue`` or ``supersede``), and where
the ledger lives. Every mistake is one line naming the file and the key, exit 2.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from platformctl.kernel.errors import PlatformError
from platformctl.kernel.topology import STAGES
from platformctl.kernel.windows import Window, seconds_of
from platformctl.kernel.yamlfile import read_yaml, validate

PIPELINE_FILE = "release_pipeline/pipeline.yaml"

Seconds = Annotated[int, Field(ge=0)]


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


def _seconds(value: object) -> int:
    return seconds_of(value)


class StagePolicy(_Value):
    name: Literal["dev", "staging", "prod-canary", "prod"]
    rotation_policy: str | None = None  # relative to the pipeline file; none: the example policy's defaults
    judge: str | None = None  # the soak verdict's judge configuration, relative to the pipeline file; none: its defaults
    soak: Seconds = 3600  # from the end of the stage's last rotation
    min_results: Annotated[int, Field(ge=0)] = 100  # canary results the soak must hold
    pass_for: Seconds = 1800  # the verdict has stayed pass this long at the end of the soak
    deadline: Seconds = 4 * 3600  # after the soak's minimum: inconclusive past it halts
    approvals: Annotated[int, Field(ge=0)] = 0  # distinct approvers entering the stage needs
    approvers_other_than_creator: bool = False  # the candidate's creator's own approval does not count
    verdict_window: Annotated[int, Field(ge=60)] = 1800  # the canary verdict's shortest window

    @field_validator("soak", "pass_for", "deadline", "verdict_window", mode="before")
    @classmethod
    def _duration(cls, value: object) -> int:
        return _seconds(value)

    @model_validator(mode="after")
    def _consistent(self) -> StagePolicy:
        if self.pass_for > self.soak and self.soak:
            raise ValueError(f"passFor {self.pass_for} s is longer than the soak {self.soak} s: it could never be met")
        return self


class Freeze(Window):
    """A window no candidate enters a stage in: recurring (``rrule`` or ``cron``, each start lasting ``duration``) or
    one-off (``start`` to ``end``), in ``timezone`` (wall time there, daylight saving included)."""

    model_config = ConfigDict(use_attribute_docstrings=False)
    NOUN: ClassVar[str] = "freeze"

    name: str
    stages: tuple[str, ...] = ()  # empty: every stage
    reason: str = ""

    @field_validator("stages")
    @classmethod
    def _stages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [s for s in value if s not in STAGES]
        if unknown:
            raise ValueError(f"unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
        return value

    def applies_to(self, stage: str) -> bool:
        return not self.stages or stage in self.stages


class Approvers(_Value):
    """Who may approve: an identity AWS vouches for and that names one person (``platformctl.kernel.who.person_of``)."""

    # Roles your identity provider's federation assumes (SAML, OIDC), which set the session name to the signed-in
    # user: each session name is one person (IAM users, the root user and IAM Identity Center need no listing).
    identity_roles: tuple[str, ...] = ()
    # A ledger on the local disk (a path or sqlite:///): anyone who can write the file can approve as anyone. For trying
    # the pipeline out only: approvals there need this, and the dashboard marks them unauthenticated.
    unauthenticated: bool = False


class Pipeline(_Value):
    stages: tuple[StagePolicy, ...]
    approvers: Approvers = Approvers()
    freezes: tuple[Freeze, ...] = ()
    on_newer: Literal["queue", "supersede"] = "supersede"  # an older candidate not yet past the first stage
    ledger: str | None = None  # a state store (path, sqlite:///, dynamodb://TABLE); default .platformctl/release.db
    # where a tick whose checkout lacks a candidate's commit (the jobs' image has no repository) fetches it: a URL git
    # can fetch (https://, ssh://, file://); credentials, if any, from git's own configuration in the job's HOME
    repository: str | None = None

    source: str = Field(default="pipeline", exclude=True)
    digest: str = Field(default="", exclude=True)  # of the file's bytes: every decision records it

    @field_validator("repository")
    @classmethod
    def _repository(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value.startswith("-") or any(c.isspace() for c in value)):
            raise ValueError("a URL git can fetch (https://, ssh://, file://, or host:path), without spaces or a "
                             "leading '-'")
        return value

    @field_validator("stages")
    @classmethod
    def _order(cls, value: tuple[StagePolicy, ...]) -> tuple[StagePolicy, ...]:
        names = [s.name for s in value]
        if not names:
            raise ValueError("a pipeline has at least one stage")
        if len(set(names)) != len(names):
            raise ValueError(f"stage {next(n for n in names if names.count(n) > 1)!r} is listed twice")
        if names != sorted(names, key=STAGES.index):
            raise ValueError(f"stages go in the platform's order ({' -> '.join(STAGES)}), not {' -> '.join(names)}")
        return value

    @model_validator(mode="after")
    def _names(self) -> Pipeline:
        freezes = [f.name for f in self.freezes]
        if len(set(freezes)) != len(freezes):
            raise ValueError(f"freeze {next(n for n in freezes if freezes.count(n) > 1)!r} is named twice")
        return self

    def stage(self, name: str) -> StagePolicy:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise PlatformError(f"stage {name!r} is not in the pipeline ({', '.join(self.names)})", file=self.source,
                            field="--stage")

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def next_stage(self, name: str) -> str | None:
        names = self.names
        i = names.index(name)
        return names[i + 1] if i + 1 < len(names) else None

    def previous_stage(self, name: str) -> str | None:
        names = self.names
        i = names.index(name)
        return names[i - 1] if i else None

    def policy_path(self, stage: str) -> Path | None:
        return self._beside(self.stage(stage).rotation_policy)

    def judge_path(self, stage: str) -> Path | None:
        return self._beside(self.stage(stage).judge)

    def _beside(self, relative: str | None) -> Path | None:
        """A file the pipeline names, relative to the pipeline file."""
        return None if relative is None else Path(self.source).parent / relative


def parse_pipeline(document: object, source: str, digest: str = "") -> Pipeline:
    pipeline = validate(Pipeline, document, source, "release pipeline")
    pipeline = pipeline.model_copy(update={"source": source, "digest": digest})
    for i, stage in enumerate(pipeline.stages):
        path = pipeline.policy_path(stage.name)
        if path is not None and not path.is_file():
            raise PlatformError(f"no rotation policy at {path}", file=source, field=f"stages[{i}].rotationPolicy")
        judge = pipeline.judge_path(stage.name)
        if judge is not None:
            if not judge.is_file():
                raise PlatformError(f"no judge configuration at {judge}", file=source, field=f"stages[{i}].judge")
            from e2e_canary.judge import load_config  # a mistake in it said now, naming its file, not at the soak

            load_config(judge)
    return pipeline


def default_pipeline_file() -> Path:
    """``release_pipeline/pipeline.yaml`` of the checkout the current directory is in, never the package's."""
    from platformctl.kernel.checkout import find

    return find("release_pipeline", "pipeline.yaml", "--pipeline") / "pipeline.yaml"


def load_pipeline(path: Path | None = None) -> Pipeline:
    path = path or default_pipeline_file()
    document = read_yaml(path, "release pipeline")
    return parse_pipeline(document, str(path), hashlib.sha256(path.read_bytes()).hexdigest())
