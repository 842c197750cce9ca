"""The runtime's reads: tasks, waiting on them, listing the ledger, approvals and
the audit log. Nothing here writes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentq import waiting
from agentq.approvals import ApprovalInfo, ApprovalStatus
from agentq.backends import Backend, Transaction
from agentq.errors import ApprovalNotFound, TaskNotFound
from agentq.ledger import Tables, TaskInfo, TaskStatus
from agentq.lifecycle import approval_timers, audit, payloads
from agentq.lifecycle import approvals as approval_events
from agentq.lifecycle.audit import AuditEntry
from agentq.lifecycle.tasks import LOCAL
from agentq.notebook.html import ApprovalList, TaskList
from agentq.runtime.core import RuntimeCore
from agentq.runtime.open_pages import open_candidates, open_chunk

#: Ledger records read per query by :meth:`Runtime.task_page` without a ``limit``.
SCAN_PAGE = 500


@dataclass
class TaskPage:
    """One page of :meth:`Runtime.task_page`: the tasks, and the cursor of the next
    page (``None`` when the ledger has no more)."""

    tasks: list[TaskInfo]
    next_after: str | None


@dataclass
class ApprovalPage:
    """One page of :meth:`Runtime.approval_page`: the approvals, and the cursor of
    the next page (``None`` when there are no more)."""

    approvals: list[ApprovalInfo]
    next_after: str | None


def _with_default(values: Iterable[str], default: str) -> list[str | None]:
    """Filter values for a field that older records may lack: a missing field
    reads as ``default``, so asking for ``default`` takes the missing ones too."""
    wanted: list[str | None] = list(values)
    return [*wanted, None] if default in wanted else wanted


def _chunk(
    backend: Backend,
    table: str,
    want: int | None,
    after: str,
    newest_first: bool,
    where: dict[str, list[str | None]],
) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """The next ``want`` records of a listing (a chunk of :data:`SCAN_PAGE`
    without), and whether more follow: one more is read to know."""
    size = SCAN_PAGE if want is None else want
    rows = backend.list_records(
        table, limit=size if want is None else size + 1, after=after,
        descending=newest_first, where=where or None,
    )  # fmt: skip
    return rows[:size], len(rows) > size or (want is None and len(rows) == size)


def task_info(rec: dict[str, Any], read: payloads.Reader) -> TaskInfo:
    """A ledger record as a :class:`TaskInfo`, with its out-of-band arguments
    read (none if an earlier release deleted them with the task's end)."""
    if payloads.is_offloaded(rec):
        try:
            rec = {**rec, "args": payloads.args_of(read, rec)}
        except payloads.ArgumentsUnavailable:
            rec = {**rec, "args": {}}
    return TaskInfo.model_validate(rec)


def _payload_reader(backend: Backend, recs: list[dict[str, Any]]) -> payloads.Reader:
    """A reader of the payload rows of ``recs``, read in one go."""
    wanted = [str(r["task_id"]) for r in recs if payloads.is_offloaded(r)]
    rows = backend.read_records(Tables.PAYLOADS, wanted) if wanted else {}

    def read(table: str, key: str) -> dict[str, Any] | None:
        row = rows.get(key) if table == Tables.PAYLOADS else None
        return None if row is None else row.value

    return read


class ReadingMixin(RuntimeCore):
    """The reads of :class:`~agentq.runtime.Runtime`."""

    def audit_log(
        self, *, target: str | None = None, limit: int | None = None, after: str | None = None
    ) -> list[AuditEntry]:
        """Operator actions (approve, reject, cancel, replay, delete), newest first;
        only those about ``target`` (an approval, task or dead-letter id) if given;
        at most ``limit``, older than the entry ``after`` (its ``audit_id``: the
        last of the page before) if given."""
        return audit.entries(self.backend, target=target, limit=limit, after=after)

    def task(self, task_id: str) -> TaskInfo:
        """Status, attempts, result or error of a task."""
        rec = self.backend.get_record(Tables.TASKS, task_id)
        if rec is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return task_info(rec, self.backend.get_record)

    def wait(self, task_id: str, timeout: float) -> TaskInfo:
        """Block until the task is finished (succeeded, dead or cancelled) or
        ``timeout`` seconds of the runtime's clock pass, and return it as it then
        is (check ``.done``). Woken by commits, this process's and other
        processes' (:mod:`agentq.waiting`), not by polling. An unknown task raises
        :class:`~agentq.errors.TaskNotFound`; ``timeout`` must be 0..3600 s."""
        return waiting.wait_for_task(self.backend, task_id, timeout, self._info)

    async def wait_async(self, task_id: str, timeout: float) -> TaskInfo:
        """Async form of :meth:`wait` (the same loop; no thread held while waiting)."""
        return await waiting.wait_for_task_async(self.backend, task_id, timeout, self._info)

    def task_changes(self, task_id: str, timeout: float) -> AsyncIterator[TaskInfo]:
        """Async iterator: the task now, then at each change, until it is final or
        ``timeout`` seconds pass (the HTTP API's server-sent events)."""
        return waiting.task_changes(self.backend, task_id, timeout, self._info)

    def _info(self, rec: dict[str, Any]) -> TaskInfo:
        return task_info(rec, self.backend.get_record)

    def _task_in(self, tx: Transaction, task_id: str) -> TaskInfo:
        rec = tx.get_record(Tables.TASKS, task_id)
        if rec is None:
            raise TaskNotFound(f"no task {task_id!r}")
        return task_info(rec, tx.get_record)

    def tasks(
        self,
        status: TaskStatus | str | None = None,
        *,
        tool: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
    ) -> list[TaskInfo]:
        """Tasks of the ledger, oldest first: only those with ``status``, of
        ``tool``, created at or after ``since``; at most ``limit`` of them (then
        the first ``limit`` in the ledger's order: see :meth:`task_page`). The
        list (a :class:`~agentq.notebook.html.TaskList`) shows as a table in a
        notebook."""
        page = self.task_page(status, tool=tool, since=since, limit=limit)
        return TaskList(sorted(page.tasks, key=lambda t: t.created_at))

    def task_page(
        self,
        status: TaskStatus | str | None = None,
        *,
        tool: str | None = None,
        since: datetime | None = None,
        limit: int | None = None,
        after: str | None = None,
        newest_first: bool = False,
        kinds: Collection[str] | None = None,
        owner: str | None = None,
    ) -> TaskPage:
        """One page of the ledger in key order (creation order on SQLite and
        PostgreSQL, whose task ids grow with time; any fixed order on Spanner),
        ``newest_first`` from the other end, filtered as in :meth:`tasks` and to
        the ``kinds`` of task (``"action"``: the callers' own, not the runtime's
        timers and notices) and the tasks ``owner`` created. Pass the page's
        ``next_after`` as ``after`` for the next page; it is ``None`` after the
        last.

        The filters (but ``since``) are part of the query: a page of ``limit``
        reads ``limit + 1`` records (the one more says whether a next page
        exists), however large the ledger; without ``limit`` the ledger is read
        :data:`SCAN_PAGE` records at a time, never all at once. Queued or
        running tasks, which the index of rare statuses does not hold, are
        looked for among the unfinished work's (:mod:`agentq.runtime.open_pages`)
        when it is small beside the ledger."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where: dict[str, list[str | None]] = {}
        if status is not None:
            where["status"] = [TaskStatus(status).value]
        if tool is not None:
            where["tool"] = [tool]
        if kinds is not None:
            where["kind"] = _with_default(kinds, "action")
        if owner is not None:
            where["created_by"] = _with_default([owner], LOCAL)
        # Ids grow with time here: newest first, the first task older than
        # ``since`` ends the listing.
        since_ends = since is not None and newest_first and self.backend.ordered_keys
        # Queued or running only: the unfinished work's tasks, if few (open_pages).
        candidates = open_candidates(self.backend, where)
        found: list[TaskInfo] = []
        cursor = after or ""
        while True:
            want = None if limit is None else limit - len(found)
            if candidates is None:
                rows, more = _chunk(self.backend, Tables.TASKS, want, cursor, newest_first, where)
            else:
                rows, more = open_chunk(self.backend, candidates, SCAN_PAGE if want is None
                                        else want, cursor, newest_first, where)  # fmt: skip
            read = _payload_reader(self.backend, [v for _, v in rows])
            for key, value in rows:
                cursor = key
                task = task_info(value, read)
                if since is None or task.created_at >= since:
                    found.append(task)
                elif since_ends:
                    return TaskPage(found, None)
            if not more:
                return TaskPage(found, None)
            if limit is not None and len(found) >= limit:
                return TaskPage(found, cursor)

    def approval(self, approval_id: str) -> ApprovalInfo:
        """One approval request."""
        rec = self.backend.get_record(Tables.APPROVALS, approval_id)
        if rec is None:
            raise ApprovalNotFound(f"no approval {approval_id!r}")
        return ApprovalInfo.model_validate({**rec, "version": approval_events.version(rec)})

    def approvals(self, status: ApprovalStatus | str | None = None) -> list[ApprovalInfo]:
        """Approval requests, optionally filtered by status (a list that shows as a
        table in a notebook); only those of ``status`` are read."""
        statuses = None if status is None else [ApprovalStatus(status)]
        page = self.approval_page(statuses)
        return ApprovalList(sorted(page.approvals, key=lambda a: a.requested_at))

    def approval_page(
        self,
        statuses: Collection[ApprovalStatus | str] | None = None,
        *,
        limit: int | None = None,
        after: str | None = None,
        newest_first: bool = False,
        owner: str | None = None,
    ) -> ApprovalPage:
        """One page of approval requests with one of ``statuses`` (all without),
        those ``owner`` asked for if given, in key order (creation order on
        SQLite and PostgreSQL; ``newest_first`` from the other end). Pass the
        page's ``next_after`` as ``after`` for the next page. The filters are
        part of the query: a page reads what it shows, and one record more."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        where: dict[str, list[str | None]] = {}
        if statuses is not None:
            where["status"] = [ApprovalStatus(s).value for s in statuses]
        if owner is not None:
            where["created_by"] = _with_default([owner], LOCAL)
        found: list[ApprovalInfo] = []
        cursor = after or ""
        while True:
            rows, more = _chunk(self.backend, Tables.APPROVALS, limit, cursor, newest_first, where)
            for key, value in rows:
                cursor = key
                version = approval_events.version(value)
                found.append(ApprovalInfo.model_validate({**value, "version": version}))
            if not more or limit is not None:  # no filter here drops any: the page is full
                return ApprovalPage(found, cursor if more else None)

    def decidable_by(self, by: str, approvals: Iterable[ApprovalInfo]) -> set[str]:
        """The ids of ``approvals`` whose rule lets ``by`` decide them (at their
        level or an earlier one; anyone when the rule names no approvers),
        whatever their status: what an ``approve``-only token may read."""
        ids = [a.approval_id for a in approvals]
        found = self.backend.read_records(Tables.APPROVALS, ids) if ids else {}
        return {k for k, row in found.items() if approval_timers.may_decide(row.value, by)}
