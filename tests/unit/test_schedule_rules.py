"""The slot arithmetic of periodic schedules (agentq.schedules): no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentq import ConfigError
from agentq.schedules import Rule, plan_next

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday
HOUR = Rule(every=timedelta(hours=1))
MONDAYS = Rule(cron="0 9 * * MON")


def test_every_slots_are_multiples_of_the_interval_since_the_epoch() -> None:
    assert HOUR.next_after(T0) == T0 + timedelta(hours=1)  # strictly after
    assert HOUR.next_after(T0 + timedelta(minutes=59)) == T0 + timedelta(hours=1)
    seven = Rule(every=timedelta(minutes=7))
    slot = seven.next_after(T0)
    assert (slot - datetime(1970, 1, 1, tzinfo=UTC)) % timedelta(minutes=7) == timedelta(0)


def test_cron_slots() -> None:
    assert MONDAYS.next_after(T0) == T0 + timedelta(days=7)
    assert MONDAYS.latest(T0, 1) == T0 and MONDAYS.latest(T0, 3) == T0 - timedelta(days=14)
    assert MONDAYS.overdue(T0 - timedelta(days=21), T0) == 3


def test_the_next_run_comes_from_the_nominal_time_not_the_finish() -> None:
    assert plan_next(HOUR, T0, T0 + timedelta(minutes=59), 0) == (T0 + timedelta(hours=1), 0)


def test_overdue_slots_are_skipped_or_caught_up() -> None:
    late = T0 + timedelta(hours=5, minutes=30)  # slots 10:00 .. 14:00 passed
    assert plan_next(HOUR, T0, late, 0) == (T0 + timedelta(hours=6), 5)
    assert plan_next(HOUR, T0, late, 2) == (T0 + timedelta(hours=4), 3)  # 13:00, then 14:00
    assert plan_next(HOUR, T0, late, 10) == (T0 + timedelta(hours=1), 0)
    weeks = T0 + timedelta(days=30)
    assert plan_next(MONDAYS, T0, weeks, 0) == (T0 + timedelta(days=35), 4)
    assert plan_next(MONDAYS, T0, weeks, 1) == (T0 + timedelta(days=28), 3)


@given(
    nominal_h=st.integers(0, 10_000),
    late_s=st.integers(0, 400_000),
    catch_up=st.integers(0, 5),
)
def test_every_next_run_is_on_the_grid_after_the_nominal_time(
    nominal_h: int, late_s: int, catch_up: int
) -> None:
    nominal = T0 + timedelta(hours=nominal_h)
    now = nominal + timedelta(seconds=late_s)
    nxt, skipped = plan_next(HOUR, nominal, now, catch_up)
    assert nxt > nominal and (nxt - T0) % timedelta(hours=1) == timedelta(0)
    overdue = HOUR.overdue(nominal, now)
    if overdue == 0:
        assert (nxt, skipped) == (nominal + timedelta(hours=1), 0)
    else:  # the slots from nxt to now are the ones run: at most catch_up of them
        assert HOUR.overdue(nxt - timedelta(microseconds=1), now) == min(catch_up, overdue)
        assert skipped == overdue - min(catch_up, overdue)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({}, "exactly one of every= and cron="),
        ({"every": timedelta(seconds=0.5)}, "at least 1s"),
        ({"cron": "0 9 * * MON", "timezone": "Nowhere/Else"}, "unknown time zone"),
    ],
)
def test_bad_rules(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        Rule(**kwargs)  # type: ignore[arg-type]


# Across daylight-saving changes a cron schedule in a named zone runs once per
# nominal local slot: a wall time the night repeats runs at its first occurrence
# only; a wall time the night skips runs once, at the first instant after the gap
# (one run there even when that instant is a slot of its own). Fixed 2027 dates:
# the rule's arithmetic, not the calendar of the day the suite runs.
NEW_YORK, BERLIN = "America/New_York", "Europe/Berlin"


def _slots(rule: Rule, start: datetime, hours: int) -> list[datetime]:
    out, t, end = [], start, start + timedelta(hours=hours)
    while (t := rule.next_after(t)) <= end:
        out.append(t)
    return out


def _local(slots: list[datetime], zone: str) -> list[str]:
    return [s.astimezone(ZoneInfo(zone)).strftime("%d %H:%M%z") for s in slots]


@pytest.mark.parametrize(
    ("cron", "zone", "start", "hours", "expected"),
    [
        # US fall back, 2027-11-07: 01:00-01:59 happens twice.
        ("30 1 * * *", NEW_YORK, datetime(2027, 11, 6, 12, tzinfo=UTC), 48,
         ["07 01:30-0400", "08 01:30-0500"]),
        ("0 * * * *", NEW_YORK, datetime(2027, 11, 7, 4, 30, tzinfo=UTC), 4,
         ["07 01:00-0400", "07 02:00-0500", "07 03:00-0500"]),
        # EU fall back, 2027-10-31: 02:00-02:59 happens twice.
        ("30 2 * * *", BERLIN, datetime(2027, 10, 30, 12, tzinfo=UTC), 48,
         ["31 02:30+0200", "01 02:30+0100"]),
        # US spring forward, 2027-03-14: 02:00-02:59 does not exist.
        ("30 2 * * *", NEW_YORK, datetime(2027, 3, 13, 12, tzinfo=UTC), 48,
         ["14 03:00-0400", "15 02:30-0400"]),
        ("*/30 * * * *", NEW_YORK, datetime(2027, 3, 14, 6, 15, tzinfo=UTC), 1,
         ["14 01:30-0500", "14 03:00-0400"]),
        # EU spring forward, 2027-03-28.
        ("0 * * * *", BERLIN, datetime(2027, 3, 27, 23, 30, tzinfo=UTC), 3,
         ["28 01:00+0100", "28 03:00+0200", "28 04:00+0200"]),
    ],
)  # fmt: skip
def test_cron_in_a_zone_runs_once_per_local_slot_across_daylight_saving(
    cron: str, zone: str, start: datetime, hours: int, expected: list[str]
) -> None:
    rule = Rule(cron=cron, timezone=zone)
    slots = _slots(rule, start, hours)
    assert _local(slots, zone) == expected
    # The slots counted and looked back on are the same ones.
    assert rule.overdue(start, start + timedelta(hours=hours)) == len(expected)
    end = start + timedelta(hours=hours)
    assert [rule.latest(end, n) for n in range(len(expected), 0, -1)] == slots
