"""Windows of wall time (``platformctl.kernel.windows``): what the pipeline's freezes and a rotation policy's maintenance
windows and exclusions are read by. A recurrence keeps its zone's wall time across both daylight-saving changes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from platformctl.kernel.windows import Schedule, Window


def utc(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


NIGHTLY_BERLIN = Window(cron="0 1 * * *", duration=4 * 3600, timezone="Europe/Berlin")


@pytest.mark.parametrize(("day", "opens", "closes"), [
    ("2026-01-15", "2026-01-15T00:00:00", "2026-01-15T04:00:00"),  # CET: 01:00 local is 00:00 UTC
    ("2026-07-15", "2026-07-14T23:00:00", "2026-07-15T03:00:00"),  # CEST: 01:00 local is 23:00 UTC the day before
    # The night clocks go forward (29 March 2026, 02:00 -> 03:00): 01:00-05:00 local lasts three hours.
    ("2026-03-29", "2026-03-29T00:00:00", "2026-03-29T03:00:00"),
    # The night they go back (25 October 2026, 03:00 -> 02:00): it lasts five.
    ("2026-10-25", "2026-10-24T23:00:00", "2026-10-25T04:00:00"),
])
def test_a_nightly_window_keeps_local_wall_time_across_both_daylight_saving_changes(day: str, opens: str, closes: str) -> None:
    span = NIGHTLY_BERLIN.at(utc(opens) + 60)
    assert span == (utc(opens), utc(closes)), day
    assert NIGHTLY_BERLIN.at(utc(opens) - 1) is None and NIGHTLY_BERLIN.at(utc(closes)) is None
    assert NIGHTLY_BERLIN.following(utc(opens) - 3600) == (utc(opens), utc(closes))


def test_a_window_that_starts_in_the_hour_a_change_skips_or_repeats_is_found_in_real_time() -> None:
    """02:30 Berlin: the night clocks go back it happens twice (the window starts at the first, 00:30 UTC, and an
    instant of the repeated hour's second pass, earlier on the wall, is inside it); the night they go forward it does
    not happen at all (the window starts at 03:30 CEST, 01:30 UTC, and is the next one from a moment before)."""
    window = Window(cron="30 2 * * *", duration=4 * 3600, timezone="Europe/Berlin")
    assert window.at(utc("2026-10-25T01:15:00")) == (utc("2026-10-25T00:30:00"), utc("2026-10-25T05:30:00"))
    assert window.following(utc("2026-03-29T01:15:00")) == (utc("2026-03-29T01:30:00"), utc("2026-03-29T04:30:00"))
    assert Schedule([window]).next_opening(utc("2026-03-29T01:15:00")) == utc("2026-03-29T01:30:00")


def test_a_schedule_opens_in_a_window_and_never_in_an_exclusion() -> None:
    year_end = Window(start=datetime(2026, 12, 20, 3), end=datetime(2027, 1, 4), timezone="Europe/Berlin")
    schedule = Schedule([NIGHTLY_BERLIN], [year_end])
    assert schedule.open(utc("2026-12-10T01:00:00")) and not schedule.open(utc("2026-12-10T12:00:00"))
    assert not schedule.open(utc("2026-12-24T01:00:00"))  # a window, but inside the exclusion
    # From inside the exclusion, the next opening is the first night after it ends (4 January, 01:00 CET).
    assert schedule.next_opening(utc("2026-12-24T01:00:00")) == utc("2027-01-04T00:00:00")
    assert schedule.closes(utc("2026-12-10T01:00:00")) == utc("2026-12-10T04:00:00")  # 05:00 CET
    # The night the exclusion begins (20 December, 03:00 CET), the window closes where it starts.
    assert schedule.closes(utc("2026-12-20T00:30:00")) == utc("2026-12-20T02:00:00")
    said = schedule.closed(utc("2026-12-10T12:00:00"))
    assert said is not None and "2026-12-11T00:00:00Z" in said and schedule.closed(utc("2026-12-10T01:00:00")) is None
    assert not Schedule() and Schedule().open(0) and Schedule().closes(0) is None


@pytest.mark.parametrize(("window", "said"), [
    ({"cron": "0 1 * * *", "timezone": "UTC"}, "a recurring window (cron) needs a duration"),
    ({"cron": "0 1 * * *", "duration": 60, "timezone": "Mars/Olympus"}, "is not an IANA time zone"),
    ({"rrule": "FREQ=DAILY", "duration": 60, "timezone": "UTC"}, "an rrule needs a fixed anchor"),
    ({"start": "2026-01-02T00:00:00", "timezone": "UTC"}, "a window is recurring (rrule or cron, with a duration) or one-off"),
])
def test_a_window_that_cannot_be_read_says_why(window: dict[str, object], said: str) -> None:
    with pytest.raises(ValueError, match=said.replace("(", r"\(").replace(")", r"\)")):
        Window.model_validate(window)
