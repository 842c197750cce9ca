"""The runtime's dead-letter queue: listing, replaying and deleting its entries.

Every replay and deletion is audited in its own transaction; :data:`REPLAY_REFUSALS`
says which failures count as "this entry cannot be replayed" rather than stopping a
replay of many.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agentq.backends import Transaction
from agentq.decision import Decision
from agentq.errors import ConfigError, IllegalTransition, TaskNotFound
from agentq.ledger import Tables, TaskInfo
from agentq.lifecycle import audit, dead_letters
from agentq.lifecycle.audit import AuditAction
from agentq.lifecycle.tasks import BUILTIN_TIMERS
from agentq.runtime.core import RuntimeCore

#: Why one dead-letter entry cannot be replayed; anything else (the database
#: failing, say) stops a replay of many instead of being reported per entry.
REPLAY_REFUSALS = (IllegalTransition, TaskNotFound, ConfigError)


@dataclass
class ReplayReport:
    """What :meth:`Runtime.replay_all` did: ids replayed, and ids skipped with why."""

    replayed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


class DeadLettersMixin(RuntimeCore):
    """The dead-letter operations of :class:`~agentq.runtime.Runtime`."""

    def dead_letters(self) -> list[dict[str, Any]]:
        """Entries of the dead-letter queue with their errors. ``stray`` entries are
        messages that were no task's current delivery (written around agentq, or
        corrupt): they can be deleted, never replayed."""
        return [{**v, "entry_id": k} for k, v in self.backend.list_records(Tables.DEAD_LETTERS)]

    def dead_letter_page(
        self, limit: int, after: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of :meth:`dead_letters`, newest first (by key: creation order
        on SQLite and PostgreSQL), at most ``limit`` entries; and the cursor of
        the next page (pass it as ``after``; None after the last). A page reads
        what it shows and one entry more."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        rows = self.backend.list_records(
            Tables.DEAD_LETTERS, limit=limit + 1, after=after or "", descending=True
        )
        page = [{**v, "entry_id": k} for k, v in rows[:limit]]
        return page, (rows[limit - 1][0] if len(rows) > limit else None)

    def replay(self, task_id: str, *, by: str | None = None) -> TaskInfo:
        """Send a dead task again for a fresh set of attempts. Only dead tasks can
        be replayed: a succeeded, cancelled, queued or running one raises
        :class:`~agentq.errors.IllegalTransition`, a stray entry too. Audited, with
        ``by`` as who replayed it."""

        def fn(tx: Decision) -> TaskInfo:
            rec = tx.tx.get_record(Tables.TASKS, task_id)
            if rec is not None and not self._runnable_tool(tx.tx, rec["tool"]):
                raise ConfigError(f"cannot replay {task_id!r}: unknown tool {rec['tool']!r}")
            task = TaskInfo.model_validate(dead_letters.replay(self._facade, tx.tx, task_id))
            audit.record(
                tx.tx, actor=by, action=AuditAction.REPLAY, target=task_id, task_id=task_id
            )
            return task

        return self.transact(fn)

    def replay_all(self, *, by: str | None = None) -> ReplayReport:
        """Replay every dead task, each in its own transaction; entries that cannot
        be replayed (strays, unknown tools, tasks no longer dead) are skipped and
        reported, never stopping the others."""
        report = ReplayReport()
        for entry_id, _ in self.backend.list_records(Tables.DEAD_LETTERS):
            try:
                self.replay(entry_id, by=by)
                report.replayed.append(entry_id)
            except REPLAY_REFUSALS as exc:
                report.skipped[entry_id] = str(exc)
        return report

    def delete_dead_letters(
        self, entry_ids: Iterable[str], *, by: str | None = None
    ) -> list[str]:
        """Delete dead-letter entries (the tasks stay dead in the ledger); returns
        the ids that were deleted, in one transaction. Each deletion is audited,
        with ``by`` as who deleted it."""
        ids = list(entry_ids)

        def fn(tx: Transaction) -> list[str]:
            deleted = []
            for entry_id in ids:
                entry = dead_letters.delete_entry(tx, entry_id)
                if entry is None:
                    continue
                deleted.append(entry_id)
                audit.record(
                    tx, actor=by, action=AuditAction.DELETE_DEAD_LETTER, target=entry_id,
                    task_id=entry.get("task_id"),
                )  # fmt: skip
            return deleted

        return self.backend.transact(fn)

    def _runnable_tool(self, tx: Transaction, tool: str) -> bool:
        builtin = tool in BUILTIN_TIMERS
        return builtin or self.find_tool(tx, tool) is not None
