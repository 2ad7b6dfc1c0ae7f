"""How a story speaks without knowing where it is shown: prose whose parts may be marked (a heading, good news, bad
news, an aside), tables as rows of text, and progress through a stretch of virtual time. The command renders them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class Tone(StrEnum):
    HEADING = "heading"
    GOOD = "good"
    BAD = "bad"
    ASIDE = "aside"


@dataclass(frozen=True)
class Marked:
    text: str
    tone: Tone


def heading(text: str) -> Marked:
    return Marked(text, Tone.HEADING)


def good(text: str) -> Marked:
    return Marked(text, Tone.GOOD)


def bad(text: str) -> Marked:
    return Marked(text, Tone.BAD)


def aside(text: str) -> Marked:
    return Marked(text, Tone.ASIDE)


def judged(ok: bool, text: str) -> Marked:
    return good(text) if ok else bad(text)


Part = str | Marked


@dataclass
class Tabular:
    """A table: its columns and rows of text, and a title."""

    columns: tuple[str, ...]
    title: str | None = None
    rows: list[tuple[str, ...]] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append(tuple(str(c) for c in cells))


class Narrator(Protocol):
    def say(self, *parts: Part) -> None:
        """One paragraph (a line break between its parts only where a part holds one)."""

    def show(self, table: Tabular) -> None: ...

    def progress(self, label: str, done: float, total: float) -> None:
        """How far through ``total`` (the same ``label`` again moves the same bar)."""


class Silent:
    """A narrator that shows nothing (``-o json``)."""

    def say(self, *parts: Part) -> None:
        pass

    def show(self, table: Tabular) -> None:
        pass

    def progress(self, label: str, done: float, total: float) -> None:
        pass
