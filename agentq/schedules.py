"""Periodic schedules: their rules and when their runs are due.

A schedule runs one tool with fixed arguments at the *slots* of its rule:

* ``every`` — a fixed interval; the slots are the multiples of it counted from the
  Unix epoch (``every = "1h"`` runs at the top of each hour, UTC), so every worker
  computes the same slots without agreeing on a start time;
* ``cron`` — a five-field cron expression (``"0 9 * * MON"``) read by
  `croniter <https://pypi.org/project/croniter/>`_, in a time zone (default UTC;
  across daylight-saving changes each nominal local slot runs once: a local
  time that does not exist that night, 02:30 when clocks spring forward, runs
  at 03:00, and once even where 03:00 is a slot too; a local time the night
  repeats, 01:30 when clocks fall back, runs at its first occurrence only).

**No drift.** The next run's time is the slot after the current run's *nominal*
time (its slot), never after its completion time: a run that starts late or
takes long does not push the later ones back.

**Missed runs** (``catch_up``). When a run finishes after one or more later slots
have passed (the workers were down, or the run retried past them), those slots
are *overdue*. With ``catch_up = 0`` (the default) they are skipped: the run that
was pending when the workers came back has stood in for them, and the schedule
goes on at the next future slot. With ``catch_up = N`` the latest N overdue
slots are run, one after another, oldest first, and only older ones are
skipped. Skipped slots are counted in the schedule's ``missed`` count.

How runs are sent and committed is :mod:`agentq.lifecycle.schedules`; this
module is only the arithmetic, with no database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agentq.clock import from_micros, to_micros
from agentq.errors import ConfigError

__all__ = [
    "MAX_CATCH_UP",
    "MIN_EVERY",
    "Periodic",
    "Rule",
    "check_cron",
    "check_name",
    "check_timezone",
    "plan_next",
]

#: The shortest interval of an ``every`` schedule.
MIN_EVERY = timedelta(seconds=1)
#: The most overdue runs a schedule may catch up on.
MAX_CATCH_UP = 1000
#: Overdue cron slots counted one by one before the count is given as "at least".
_COUNT_LIMIT = 100_000
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def check_name(name: str) -> str:
    """A schedule name: a letter, then letters, digits or ``_`` (at most 64)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"invalid schedule name {name!r}: a letter, then letters, digits or '_' "
            "(at most 64 characters)"
        )
    return name


def check_cron(expression: str) -> str:
    """A cron expression croniter reads, of five fields (or an alias such as
    ``@hourly``); anything else raises :class:`ValueError` naming it."""
    if not isinstance(expression, str):
        raise ValueError(f"cron must be a string like '0 9 * * MON', got {expression!r}")
    text = " ".join(expression.split())
    fields = text.split(" ")
    if not (len(fields) == 5 or (len(fields) == 1 and text.startswith("@"))):
        raise ValueError(
            f"invalid cron expression {expression!r}: five fields (minute hour day-of-month "
            "month day-of-week), e.g. '0 9 * * MON'"
        )
    from croniter import CroniterError, croniter  # here, not at every CLI start

    if not croniter.is_valid(text):
        raise ValueError(f"invalid cron expression {expression!r}")
    try:
        croniter(text, _EPOCH).get_next(datetime)
    except CroniterError:
        raise ValueError(f"cron expression {expression!r} never matches a date") from None
    return text


def check_timezone(name: str) -> str:
    """An IANA time zone name (``"Europe/Paris"``); :class:`ValueError` otherwise."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValueError(f"unknown time zone {name!r} (use an IANA name: 'Europe/Paris')") from exc
    return name


@dataclass(frozen=True)
class Rule:
    """When a schedule's slots are: ``every`` an interval or at a ``cron`` expression
    (in ``timezone``). Exactly one of ``every`` and ``cron`` is set."""

    every: timedelta | None = None
    cron: str | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise ConfigError("a schedule needs exactly one of every= and cron=")
        if self.every is not None and self.every < MIN_EVERY:
            raise ConfigError(f"every must be at least {MIN_EVERY.total_seconds():g}s")
        try:
            if self.cron is not None:
                object.__setattr__(self, "cron", check_cron(self.cron))
            check_timezone(self.timezone)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        if self.every is not None and self.timezone != "UTC":
            raise ConfigError("timezone applies to cron schedules only (every is counted in UTC)")

    def next_after(self, when: datetime) -> datetime:
        """The first slot strictly after ``when`` (UTC)."""
        if self.every is not None:
            step = self.every // _MICROSECOND
            return from_micros((to_micros(when) // step + 1) * step)
        from croniter import croniter

        itr = croniter(str(self.cron), when.astimezone(ZoneInfo(self.timezone)))
        while True:
            nxt: datetime = itr.get_next(datetime)
            if not _repeated(nxt):
                return nxt.astimezone(UTC)

    def overdue(self, after: datetime, now: datetime) -> int:
        """How many slots lie in ``(after, now]`` (cron: at most a large bound)."""
        if now <= after:
            return 0
        if self.every is not None:
            step = self.every // _MICROSECOND
            return max(0, to_micros(now) // step - to_micros(after) // step)
        count, slot = 0, self.next_after(after)
        while slot <= now and count < _COUNT_LIMIT:
            count += 1
            slot = self.next_after(slot)
        return count

    def latest(self, now: datetime, n: int) -> datetime:
        """The ``n``-th latest slot at or before ``now`` (``n`` >= 1)."""
        if self.every is not None:
            step = self.every // _MICROSECOND
            return from_micros((to_micros(now) // step - (n - 1)) * step)
        from croniter import croniter

        itr = croniter(str(self.cron), self.next_after(now).astimezone(ZoneInfo(self.timezone)))
        slot: datetime = now
        for _ in range(n):
            slot = itr.get_prev(datetime)
            while _repeated(slot):
                slot = itr.get_prev(datetime)
        return slot.astimezone(UTC)

    def as_record(self) -> dict[str, Any]:
        """The rule as a schedule record stores it."""
        if self.every is not None:
            return {"every": self.every.total_seconds()}
        return {"cron": self.cron, "timezone": self.timezone}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Rule:
        """The rule :meth:`as_record` stored."""
        if data.get("every") is not None:
            return cls(every=timedelta(seconds=float(data["every"])))
        return cls(cron=str(data["cron"]), timezone=str(data.get("timezone", "UTC")))


@dataclass(frozen=True)
class Periodic:
    """A schedule declared in code on its tool (``@tool(every="1h")``): named after
    the tool, its runs get the tool's default arguments."""

    rule: Rule
    catch_up: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.catch_up <= MAX_CATCH_UP:
            raise ConfigError(f"catch_up must be from 0 to {MAX_CATCH_UP}, got {self.catch_up}")


def plan_next(rule: Rule, nominal: datetime, now: datetime, catch_up: int) -> tuple[datetime, int]:
    """The next run after the run for ``nominal`` finishes at ``now``: its nominal
    time and how many slots are skipped (see the module docstring). The next time
    is computed from ``nominal``, never from ``now`` (no drift)."""
    nxt = rule.next_after(nominal)
    if nxt > now:
        return nxt, 0
    overdue = rule.overdue(nominal, now)
    if catch_up <= 0:
        return rule.next_after(now), overdue
    run = min(catch_up, overdue)
    return rule.latest(now, run), overdue - run


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _repeated(slot: datetime) -> bool:
    """Whether ``slot`` is the second occurrence of a local wall time that the
    night repeats (clocks set back): that nominal slot ran at its first."""
    local = slot.astimezone(UTC).astimezone(slot.tzinfo)  # fold as the instant has it
    return local.fold == 1 and local.utcoffset() != local.replace(fold=0).utcoffset()
_MICROSECOND = timedelta(microseconds=1)
