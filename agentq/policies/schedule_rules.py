"""Periodic schedules declared in policy files (``[schedules.NAME]``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import Field, field_validator

from agentq.policies.base import Strict as _Strict
from agentq.policies.base import parse_duration
from agentq.schedules import MAX_CATCH_UP, Rule, check_cron, check_timezone


class ScheduleRule(_Strict):
    """A periodic run of a tool (see :mod:`agentq.schedules`); it replaces a
    schedule of the same name declared in code (``@tool(every=...)``)."""

    tool: str | None = None
    """The tool each run calls; default: the schedule's name."""
    every: timedelta | None = None
    """Run at every multiple of this interval since the Unix epoch (``"1h"``: at the
    top of each hour, UTC); at least 1s. Give ``every`` or ``cron``."""
    cron: str | None = None
    """Run at the times of this five-field cron expression (``"0 9 * * MON"``)."""
    timezone: str = "UTC"
    """The time zone ``cron`` is read in (an IANA name: ``"Europe/Paris"``)."""
    args: dict[str, Any] = {}
    """The arguments of every run, validated by the tool's argument model."""
    catch_up: int = Field(default=0, ge=0, le=MAX_CATCH_UP)
    """After downtime, how many overdue runs are run (the latest ones, oldest
    first); 0: skip them and go on at the next future time."""
    enabled: bool = True
    """``false`` stops the schedule (its pending run is cancelled) and needs no
    ``every`` or ``cron``: it turns off a schedule declared in code."""

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, v: object) -> timedelta | None:
        return None if v is None else parse_duration(v)

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return None if v is None else check_cron(v)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        return check_timezone(v)

    def rule(self) -> Rule:
        """The slots of this schedule (:class:`ConfigError` if it has no valid rule)."""
        return Rule(every=self.every, cron=self.cron, timezone=self.timezone)


#: Bounds that keep one approval's timers few.
