from __future__ import annotations

import pytest

from platformctl.kernel.clock import VirtualClock
from platformctl.kernel.cluster.selectors import IntOrPercent, LabelSelector, Requirement, parse_selector_string
from platformctl.kernel.errors import PlatformError


def test_virtual_clock_runs_callbacks_in_time_then_schedule_order() -> None:
    clock = VirtualClock(start=100.0)
    seen: list[tuple[str, float]] = []
    clock.call_later(5, lambda: seen.append(("b", clock.now())))
    clock.call_later(1, lambda: seen.append(("a", clock.now())))
    clock.call_later(5, lambda: seen.append(("c", clock.now())))
    dropped = clock.call_later(2, lambda: seen.append(("x", clock.now())))
    dropped.cancel()

    def chain() -> None:
        seen.append(("d", clock.now()))
        clock.call_later(0, lambda: seen.append(("e", clock.now())))

    clock.call_later(7, chain)
    clock.sleep(6)
    assert seen == [("a", 101.0), ("b", 105.0), ("c", 105.0)] and clock.now() == 106.0
    clock.sleep(10)
    assert seen[3:] == [("d", 107.0), ("e", 107.0)] and clock.now() == 116.0
    assert clock.next_due() is None


def test_selector_strings_parse_like_the_api() -> None:
    sel = parse_selector_string("app=web, tier in (front,back),!canary,env!=dev,owner")
    labels = {"app": "web", "tier": "front", "owner": "x"}
    assert sel.matches(labels)
    assert not sel.matches({**labels, "canary": "yes"})
    assert not sel.matches({**labels, "env": "dev"})
    assert not sel.matches({"app": "web", "tier": "side", "owner": "x"})
    assert parse_selector_string("").matches({})
    with pytest.raises(PlatformError, match="cannot parse label selector"):
        parse_selector_string("app=(")


def test_label_selector_semantics() -> None:
    assert LabelSelector().empty and LabelSelector().matches({"any": "thing"})
    notin = LabelSelector((), (Requirement("env", "NotIn", ("dev",)),))
    assert notin.matches({}) and not notin.matches({"env": "dev"})
    with pytest.raises(PlatformError, match="In needs at least one value"):
        LabelSelector.parse({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, "spec.selector")


@pytest.mark.parametrize(("value", "total", "up", "down"), [("50%", 3, 2, 1), ("10%", 5, 1, 0), ("100%", 7, 7, 7), (3, 10, 3, 3)])
def test_int_or_percent_scaling(value: object, total: int, up: int, down: int) -> None:
    v = IntOrPercent.parse(value, "f")
    assert (v.scaled(total, round_up=True), v.scaled(total, round_up=False)) == (up, down)
