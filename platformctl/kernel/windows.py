"""Windows of wall time in an IANA zone: recurring (an RFC 5545 RRULE or a cron expression, each start lasting a
duration) or one-off (a start and an end). The release pipeline's freezes and a rotation policy's maintenance windows
and exclusions are all such windows, read by the same rules.

A recurrence is a wall time in its zone: 01:00 every night in Europe/Berlin is 00:00 UTC in winter and 23:00 UTC the
day before in summer, and a window lasts its duration on the zone's wall clock (01:00 + 4 h ends at 05:00 local on the
night clocks change, though that night it lasts 3 or 5 hours). Instants are UTC epoch seconds.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from dateutil import rrule
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from platformctl.kernel.humanize import hms, parse_duration

Seconds = Annotated[int, Field(ge=0)]
HORIZON_SECONDS = 400 * 86400  # how far ahead an opening is looked for (a yearly window is found)
SLACK = timedelta(hours=3)  # more than any zone's daylight-saving shift


def seconds_of(value: object) -> int:
    """A duration as a window file spells it (``4h``, ``90m``, a number of seconds; ``none`` is 0)."""
    if isinstance(value, str) and value.strip().lower() == "none":
        return 0
    return parse_duration(value)


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class Window(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
                              use_attribute_docstrings=True)
    NOUN: ClassVar[str] = "window"  # what an error calls it

    timezone: str
    """The IANA zone whose wall clock the window keeps (``Europe/Berlin``, ``America/New_York``, ``UTC``)."""
    rrule: str | None = None
    """Recurring: an RFC 5545 rule of the window's local starts (``FREQ=WEEKLY;BYDAY=SA;BYHOUR=1;BYMINUTE=0``), from ``start``."""
    cron: str | None = None
    """Recurring: a cron expression of the window's local starts (``0 1 * * *``)."""
    duration: Seconds = 0
    """Recurring: how long each window lasts on the zone's wall clock (``4h``)."""
    start: datetime | None = None
    """One-off: its local start (no offset); recurring with an RRULE: the first instant it counts from."""
    end: datetime | None = None
    """One-off: its local end (no offset)."""

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, value: object) -> int:
        return seconds_of(value)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{value!r} is not an IANA time zone (such as Europe/Berlin or America/New_York)") from None
        return value

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is not None and not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron schedule (minute hour day-of-month month day-of-week)")
        return value

    @field_validator("rrule")
    @classmethod
    def _rrule(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                rrule.rrulestr(value, dtstart=datetime(2000, 1, 1))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{value!r} is not an RRULE (RFC 5545, such as FREQ=WEEKLY;BYDAY=FR;BYHOUR=18): {exc}") from None
        return value

    @model_validator(mode="after")
    def _shape(self) -> Window:
        noun = self.NOUN
        recurring = [k for k in ("rrule", "cron") if getattr(self, k)]
        if len(recurring) > 1:
            raise ValueError("give one of rrule and cron, not both")
        if recurring:
            if self.rrule is not None and self.start is None and "DTSTART" not in self.rrule.upper():
                raise ValueError("an rrule needs a fixed anchor: give start (the first window's local start, such as "
                                 "2026-01-02T16:00:00), else its windows would count from whenever it is read")
            if not self.duration:
                raise ValueError(f"a recurring {noun} ({recurring[0]}) needs a duration")
            if self.end is not None:
                raise ValueError(f"a recurring {noun} ({recurring[0]}) lasts its duration: remove end")
        elif self.start is None or self.end is None:
            raise ValueError(f"a {noun} is recurring (rrule or cron, with a duration) or one-off (start and end)")
        elif self.end <= self.start:
            raise ValueError("end must be after start")
        for instant in (self.start, self.end):
            if instant is not None and instant.tzinfo is not None:
                raise ValueError(f"start and end are wall times in the {noun}'s timezone: leave the offset out")
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def _span(self, begun: datetime) -> tuple[float, float]:
        zone = self.zone
        return (begun.replace(tzinfo=zone).timestamp(),
                (begun + timedelta(seconds=self.duration)).replace(tzinfo=zone).timestamp())

    def _before(self, naive: datetime, inc: bool) -> datetime | None:
        """The latest local start at (``inc``) or before ``naive``."""
        if self.rrule is not None:
            return _rule(self.rrule, self.start).before(naive, inc=inc)
        assert self.cron is not None
        return croniter(self.cron, naive + timedelta(seconds=1 if inc else 0)).get_prev(datetime)

    def _after(self, naive: datetime) -> datetime | None:
        """The first local start after ``naive``."""
        if self.rrule is not None:
            return _rule(self.rrule, self.start).after(naive, inc=False)
        assert self.cron is not None
        return croniter(self.cron, naive).get_next(datetime)

    def at(self, at: float) -> tuple[float, float] | None:
        """The window that holds instant ``at``, as (start, end), else None."""
        if self.rrule is None and self.cron is None:
            assert self.start is not None and self.end is not None
            start, end = self.start.replace(tzinfo=self.zone).timestamp(), self.end.replace(tzinfo=self.zone).timestamp()
            return (start, end) if start <= at < end else None
        # The latest start at or before ``at``, in real time: local starts are looked for from a few hours past ``at``'s
        # wall time back (in the hour a fall-back repeats, a later instant reads earlier on the wall); the window ends
        # ``duration`` later on the zone's wall clock.
        begun = self._before(_utc(at).astimezone(self.zone).replace(tzinfo=None) + SLACK, inc=True)
        while begun is not None:
            start, end = self._span(begun)
            if start <= at:
                return (start, end) if at < end else None
            begun = self._before(begun, inc=False)
        return None

    def following(self, at: float) -> tuple[float, float] | None:
        """The first window that starts after ``at``, else None (a one-off one that has begun, an RRULE that ended)."""
        if self.rrule is None and self.cron is None:
            assert self.start is not None and self.end is not None
            start = self.start.replace(tzinfo=self.zone).timestamp()
            return (start, self.end.replace(tzinfo=self.zone).timestamp()) if start > at else None
        # From a few hours before ``at``'s wall time: a start in a spring-forward gap reads as later than it is.
        begun = self._after(_utc(at).astimezone(self.zone).replace(tzinfo=None) - SLACK)
        while begun is not None:
            span = self._span(begun)
            if span[0] > at:
                return span
            begun = self._after(begun)
        return None


@functools.lru_cache(maxsize=64)
def _rule(text: str, start: datetime | None) -> Any:
    """An RRULE parsed once (dateutil's rrule or rruleset)."""
    return rrule.rrulestr(text, dtstart=start) if start is not None else rrule.rrulestr(text)


def in_force(windows: Sequence[Window], at: float) -> list[tuple[float, float]]:
    """The windows of ``windows`` that hold ``at``, as (start, end)."""
    return [span for w in windows if (span := w.at(at)) is not None]


class Schedule:
    """When work may start: inside one of ``windows`` (none: at any time) and inside none of ``exclusions``."""

    def __init__(self, windows: Sequence[Window] = (), exclusions: Sequence[Window] = ()) -> None:
        self.windows = tuple(windows)
        self.exclusions = tuple(exclusions)

    def __bool__(self) -> bool:
        return bool(self.windows or self.exclusions)

    def open(self, at: float) -> bool:
        return (not self.windows or bool(in_force(self.windows, at))) and not in_force(self.exclusions, at)

    def closed(self, at: float) -> str | None:
        """None while work may start; else why not, and when it may (what a run that stops says)."""
        if self.open(at):
            return None
        opens = self.next_opening(at)
        when = f"the next opens at {_utc(opens):%Y-%m-%dT%H:%M:%SZ} (in {hms(opens - at)})" if opens is not None else \
            "none opens within a year"
        held = [str(getattr(w, "name", "") or "unnamed") for w in self.exclusions if w.at(at) is not None]
        why = f"inside the policy's exclusion {', '.join(held)}" if held else "outside the policy's maintenance windows"
        return f"{why}: {when}; the next run goes on"

    def next_opening(self, at: float) -> float | None:
        """The first instant at or after ``at`` when work may start; None: not within a year and a month."""
        t = at
        while t - at <= HORIZON_SECONDS:
            excluded = in_force(self.exclusions, t)
            if excluded:
                t = max(end for _, end in excluded)
                continue
            if not self.windows or in_force(self.windows, t):
                return t
            upcoming = [span[0] for w in self.windows if (span := w.following(t)) is not None]
            if not upcoming:
                return None
            t = min(upcoming)
        return None

    def closes(self, at: float) -> float | None:
        """When the opening that holds ``at`` ends (its windows' latest end, or an exclusion's start before it); None:
        it never does (no windows, no exclusion ahead within the horizon)."""
        ends = [end for _, end in in_force(self.windows, at)] if self.windows else []
        closes = max(ends) if ends else None
        excluded = [span[0] for w in self.exclusions if (span := w.following(at)) is not None]
        if excluded and (closes is None or min(excluded) < closes):
            closes = min(excluded)
        return closes
