"""The runtime's periodic schedules: seeding them, and listing them.

Schedules are declared in code (``@tool(every="1h")``, ``@tool(cron=...)``) and
in policy (``[schedules.NAME]``); every worker records them when it starts
(:meth:`SchedulesMixin.sync_schedules`, see :mod:`agentq.lifecycle.schedules`),
and ``agentq schedules`` lists the records (:meth:`SchedulesMixin.schedules`),
with no tools loaded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentq.ledger import Tables
from agentq.lifecycle import schedules as schedule_events
from agentq.runtime.core import RuntimeCore

__all__ = ["ScheduleInfo", "SchedulesMixin"]

log = logging.getLogger("agentq.schedules")


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule as its record describes it: ``next_run`` is the nominal time of
    its pending run (``pending_status`` that task's status), ``last_run`` the
    nominal time of the last run that finished (``last_status`` how it ended);
    ``missed`` counts the overdue slots skipped after downtime."""

    name: str
    tool: str
    rule: str
    status: str
    next_run: datetime | None
    last_run: datetime | None
    last_status: str | None
    runs: int
    missed: int
    pending_task_id: str | None
    pending_status: str | None
    source: str

    def as_row(self) -> dict[str, Any]:
        """The schedule as a listing row (times in ISO 8601)."""
        return {k: v.isoformat() if isinstance(v, datetime) else v
                for k, v in self.__dict__.items()}  # fmt: skip


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


class SchedulesMixin(RuntimeCore):
    """Periodic schedules of :class:`~agentq.runtime.Runtime`."""

    def sync_schedules(self) -> list[str]:
        """Record the schedules this runtime's tools and policy declare, seed their
        first runs, and change or remove the recorded ones that differ, in one
        transaction; returns (and logs) what changed. Idempotent: every worker
        does this when it starts. A runtime without tools (a producer) does nothing."""
        if self.from_catalog:
            return []
        declared, disabled = schedule_events.declared(self.tools, self.policy)
        recorded = [name for name, _ in self.backend.list_records(Tables.SCHEDULES)]
        if not declared and not recorded:
            return []
        known = set(self.tools.names())
        rt = self._facade
        changes = self.transact(
            lambda tx: schedule_events.sync(rt, tx.tx, declared, disabled, recorded, known)
        )
        for line in changes:
            log.info("%s", line)
        return changes

    def schedules(self) -> list[ScheduleInfo]:
        """Every recorded schedule, by name (removed ones included, marked so)."""
        rows = [rec for _, rec in self.backend.list_records(Tables.SCHEDULES)]
        pending = [str(r["pending_task_id"]) for r in rows if r.get("pending_task_id")]
        runs = self.backend.read_records(Tables.TASKS, pending) if pending else {}
        out = []
        for rec in rows:
            run = runs.get(str(rec.get("pending_task_id")))
            out.append(ScheduleInfo(
                name=str(rec.get("name")), tool=str(rec.get("tool")),
                rule=schedule_events.describe(rec.get("rule") or {}),
                status=str(rec.get("status")), next_run=_when(rec.get("next_at")),
                last_run=_when(rec.get("last_at")), last_status=rec.get("last_status"),
                runs=int(rec.get("runs", 0)), missed=int(rec.get("missed", 0)),
                pending_task_id=rec.get("pending_task_id"),
                pending_status=None if run is None else str(run.value.get("status")),
                source=str(rec.get("source", "")),
            ))  # fmt: skip
        return out
