"""The region's time as its keeper moves it, on a wall clock the test turns: at its pace while nobody is registered,
held for a client at work that has not spoken, jumped for clients that all wait, and never held for good."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from platformctl.emulator.server.timekeeper import TimeKeeper
from platformctl.kernel.clock import VirtualClock


class Wall:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall() -> Wall:
    return Wall()


def keeper(wall: Wall, *, skip: bool = True, lead: float = 5.0, hold: float = 2.0) -> TimeKeeper:
    return TimeKeeper(VirtualClock(), threading.Condition(), 300.0, skip, lambda: False, lambda cluster, kind: 0,
                      lead=lead, hold=hold, monotonic=wall)


def beats(k: TimeKeeper, wall: Wall, seconds: float, step: float = 0.05) -> None:
    """The server's beat every ``step`` wall seconds for ``seconds``."""
    for _ in range(round(seconds / step)):
        wall.now += step
        k.advance()


def test_nobody_registered_the_region_runs_at_its_pace(wall: Wall) -> None:
    k = keeper(wall)
    start = k.clock.now()
    beats(k, wall, 1.0)
    assert k.clock.now() - start == pytest.approx(300.0)
    assert k.status()["held_seconds"] == 0


def test_a_silent_client_at_work_holds_the_clock_its_lead_past_its_last_word(wall: Wall) -> None:
    k = keeper(wall)
    client = k.register(pid=1, name="rotate run")
    start = k.clock.now()
    beats(k, wall, 1.0)  # starved of the CPU for a second: 300 s of the region's time, were it not held
    assert k.clock.now() - start == pytest.approx(5.0)
    # It speaks (a request): the pace goes on from where the clock stood, nothing is caught up.
    k.heard(client.id)
    beats(k, wall, 0.01, step=0.01)
    assert k.clock.now() - start == pytest.approx(8.0)
    status = k.status()
    assert status["held_seconds"] == pytest.approx(295.0, abs=1.0) and status["silent_holds"] == 0


def test_a_hold_runs_out_after_its_wall_seconds_of_silence_and_time_goes_on_at_its_pace(wall: Wall) -> None:
    k = keeper(wall)
    k.register(pid=1, name="tick")
    start = k.clock.now()
    beats(k, wall, 2.0)
    assert k.clock.now() - start == pytest.approx(5.0)
    beats(k, wall, 1.0)  # silent past the hold: it holds nothing until it speaks again
    assert k.clock.now() - start == pytest.approx(5.0 + 300.0 * 1.0, abs=300 * 0.05 + 1)
    assert k.status()["silent_holds"] == 1


def test_a_request_is_stamped_no_further_than_the_lead_past_its_clients_last_word(wall: Wall) -> None:
    k = keeper(wall)
    client = k.register(pid=1, name="canary run")
    start = k.clock.now()
    wall.now += 1.5  # no beat in between: the request's own catch-up is held the same way
    k.catch_up()
    assert k.clock.now() - start == pytest.approx(5.0)
    k.heard(client.id)
    wall.now += 0.01
    k.catch_up()
    assert k.clock.now() - start == pytest.approx(8.0)


def _wait(k: TimeKeeper, client: str, answers: list[dict[str, Any]], **how: Any) -> threading.Thread:
    thread = threading.Thread(target=lambda: answers.append(k.wait(client, participants=1, cap=10.0, **how)))
    thread.start()
    deadline = time.monotonic() + 5
    while not k.clients[client].waiting and time.monotonic() < deadline:
        time.sleep(0.001)
    assert k.clients[client].waiting
    return thread


def test_a_client_that_waits_holds_nothing_and_is_held_for_again_once_released(wall: Wall) -> None:
    k = keeper(wall)
    client = k.register(pid=1, name="remediate")
    start = k.clock.now()
    answers: list[dict[str, Any]] = []
    thread = _wait(k, client.id, answers, until=start + 600)
    beats(k, wall, 0.05)  # everyone registered waits, nobody else works: straight to its deadline
    thread.join(timeout=5)
    assert answers and answers[0]["released"] and answers[0]["virtual_time"] == pytest.approx(start + 600)
    assert k.clock.now() == pytest.approx(start + 600)
    # Released, it works again: the region waits for its next word.
    beats(k, wall, 1.0)
    assert k.clock.now() == pytest.approx(start + 605)


def test_a_sleep_counts_from_the_regions_time_when_it_arrives(wall: Wall) -> None:
    k = keeper(wall)
    client = k.register(pid=1, name="rotate run")
    beats(k, wall, 0.05)
    arrived = k.clock.now()
    answers: list[dict[str, Any]] = []
    thread = _wait(k, client.id, answers, until=None, seconds=60)
    beats(k, wall, 0.05)
    thread.join(timeout=5)
    assert answers[0]["until"] == pytest.approx(arrived + 60) and answers[0]["released"]


def test_without_skipping_a_waiting_client_is_not_jumped_for_but_a_working_one_is_still_waited_for(wall: Wall) -> None:
    k = keeper(wall, skip=False)
    client = k.register(pid=1, name="rotate run")
    start = k.clock.now()
    beats(k, wall, 1.0)
    assert k.clock.now() - start == pytest.approx(5.0)
    answers: list[dict[str, Any]] = []
    thread = _wait(k, client.id, answers, until=start + 3600)
    beats(k, wall, 0.5)
    assert k.clock.now() - start == pytest.approx(5.0 + 150.0, abs=1.0)  # its pace, no jump
    assert not answers
    k.unregister(client.id)
    thread.join(timeout=5)


def test_a_process_the_region_started_holds_the_clock_until_it_registers_and_not_for_ever(wall: Wall) -> None:
    k = keeper(wall)
    k.expect(pid=1, name="pod platformctl-system/rotate-x")  # an interpreter starting: seconds of CPU, no word yet
    start = k.clock.now()
    beats(k, wall, 1.0)
    assert k.clock.now() - start == pytest.approx(5.0)
    client = k.register(pid=1, name="rotate run")  # it speaks for itself now: one client, not two
    assert list(k.clients) == [client.id]
    k.unregister(client.id)
    k.expect(pid=1, name="pod platformctl-system/never-registers")
    beats(k, wall, 16.0)  # past START_HOLD_SECONDS: it holds nothing, and the region skips again
    assert k.status()["silent_holds"] == 1 and k._skippable()


def test_a_signal_wakes_a_waiting_client_and_the_clock_waits_for_it_rather_than_skip_its_grace_period(wall: Wall) -> None:
    k = keeper(wall)
    client = k.register(pid=1, name="rotate run")
    start = k.clock.now()
    k.clock.call_later(120, lambda: None)  # the pod's grace period ends (its SIGKILL)
    answers: list[dict[str, Any]] = []
    thread = _wait(k, client.id, answers, until=start + 600)
    k.signalled(1)  # the kubelet's SIGTERM: its wait ends as the process wakes
    thread.join(timeout=5)
    assert answers and answers[0]["released"] and answers[0]["virtual_time"] == pytest.approx(start)
    thread = _wait(k, client.id, answers, until=start + 600)  # it waits again before the handler's flag is seen
    beats(k, wall, 1.0)
    assert k.clock.now() - start == pytest.approx(5.0)  # held, not jumped to the SIGKILL at 120 s
    k.unregister(client.id)
    thread.join(timeout=5)
