"""The runtime's durable agent runs: start, read, wait, list, cancel, continue.

A run is carried forward by workers, one leased turn at a time
(:mod:`agentq.agents`, :mod:`agentq.lifecycle.runs`); these methods only write
the events a user causes and read what the workers committed.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from agentq import waiting
from agentq.agents import turn_tool_name
from agentq.backends.notify import RecordTopic, record_topic
from agentq.clock import SystemClock
from agentq.decision import Decision
from agentq.errors import InvalidArguments, RunNotFound, UnknownTool
from agentq.ledger import Tables, TaskStatus
from agentq.lifecycle import audit, run_budgets, runs
from agentq.lifecycle.audit import AuditAction
from agentq.lifecycle.tasks import LOCAL
from agentq.run_info import RunInfo, RunStatus
from agentq.runtime.core import RuntimeCore
from agentq.waiting import FAKE_CLOCK_RECHECK, MAX_WAIT_SECONDS, LoopWake

__all__ = ["MAX_RUNS_LISTED", "RunPage", "RunSubmission", "RunsMixin"]

#: Most runs one listing returns.
MAX_RUNS_LISTED = 1000


@dataclass(frozen=True)
class RunPage:
    """One page of runs (:meth:`RunsMixin.run_page`); ``next_after`` is the
    ``after`` of the next page, ``None`` after the last."""

    runs: list[RunInfo]
    next_after: str | None


@dataclass(frozen=True)
class RunSubmission:
    """What :meth:`RunsMixin.submit_run` did: the run, and whether this call
    created it (False: its idempotency key had started it before)."""

    run: RunInfo
    created: bool


class RunsMixin(RuntimeCore):
    """Durable agent runs (see :mod:`agentq.agents`)."""

    def start_run(
        self,
        agent: str,
        input: str,
        *,
        idempotency_key: str | None = None,
        by: str | None = None,
    ) -> RunInfo:
        """Start a durable run of ``agent`` on the user's message ``input``; its
        first turn is queued for a worker. Returns at once.

        With ``idempotency_key``, starting the same run again (a restarted
        process, a retried request) returns the run the key started, whatever
        it has done since, and asks the model nothing; the same key with
        another agent or input raises :class:`~agentq.errors.IdempotencyConflict`.
        ``by`` is the run's owner (default ``"local"``): its tool calls are
        enqueued by it, so it can never approve them itself."""
        return self.transact(
            lambda tx: self.start_run_in(tx, agent, input, idempotency_key=idempotency_key, by=by)
        )

    def submit_run(
        self,
        agent: str,
        input: str,
        *,
        idempotency_key: str | None = None,
        by: str | None = None,
    ) -> RunSubmission:
        """:meth:`start_run`, also telling whether this call created the run
        (the HTTP API answers 201 or 200)."""
        return self.transact(lambda tx: self._submit_run_in(
            tx, agent, input, idempotency_key=idempotency_key, by=by))  # fmt: skip

    def start_run_in(
        self,
        tx: Decision,
        agent: str,
        input: str,
        *,
        idempotency_key: str | None = None,
        by: str | None = None,
    ) -> RunInfo:
        """:meth:`start_run` inside a decision ``tx``: the application's own writes
        and the run's start commit together, or neither does."""
        return self._submit_run_in(tx, agent, input, idempotency_key=idempotency_key, by=by).run

    def _submit_run_in(
        self,
        tx: Decision,
        agent: str,
        input: str,
        *,
        idempotency_key: str | None,
        by: str | None,
    ) -> RunSubmission:
        tool = self.find_tool(tx.tx, turn_tool_name(agent)) if isinstance(agent, str) else None
        if tool is None:
            names = sorted(self.agents)
            raise UnknownTool(f"unknown agent {agent!r}; agents: {', '.join(names) or 'none'}")
        _check_key(idempotency_key)
        owner = by or LOCAL
        defined = self.agents.get(agent)
        coded = defined.budget() if defined is not None else {}
        budget = run_budgets.run_budget(self.policy, agent, coded)
        rec, created = runs.create(
            self, tx.tx, agent=agent, turn_tool=tool.name, turn_queue=tool.queue, input=input,
            owner=owner, idempotency_key=idempotency_key, budget=budget,
        )  # fmt: skip
        return RunSubmission(self._run_info(rec), created)

    def run(self, run_id: str) -> RunInfo:
        """A run as its record says (:class:`~agentq.errors.RunNotFound` if none)."""
        rec = self.backend.get_record(Tables.RUNS, run_id) if isinstance(run_id, str) else None
        if rec is None:
            raise RunNotFound(f"no run {run_id!r}")
        return self._run_info(rec)

    def wait_run(self, run_id: str, timeout: float, *, until: str = "idle") -> RunInfo:
        """Block until the run is ``idle`` (done, or waiting for a human's
        approval) or ``done`` (succeeded, failed or cancelled), or until
        ``timeout`` seconds of the runtime's clock pass; returns it as it then
        is. Woken by commits, not by polling. A run waiting for a human holds
        nothing while nobody waits for it: this only reads."""
        _check_wait(timeout, until)
        clock = self.backend.clock
        deadline = clock.monotonic() + float(timeout)
        event = threading.Event()
        self.backend.subscribe_commits(event, record_topic(Tables.RUNS, run_id))
        try:
            while True:
                event.clear()
                info = self.run(run_id)
                if info.done or (until == "idle" and info.idle):
                    return info
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return info
                poll = self.backend.commit_poll_interval
                clock.wait(event, remaining if poll is None else min(remaining, poll))
        finally:
            self.backend.unsubscribe_commits(event)

    async def wait_run_async(self, run_id: str, timeout: float, *, until: str = "idle") -> RunInfo:
        """Async form of :meth:`wait_run` (the same loop; no thread held while
        waiting, each read a short one in the default executor)."""
        import asyncio

        _check_wait(timeout, until)
        clock = self.backend.clock
        deadline = clock.monotonic() + float(timeout)
        wake = LoopWake(asyncio.get_running_loop())
        real_time = isinstance(clock, SystemClock)
        topic = record_topic(Tables.RUNS, run_id)
        await asyncio.to_thread(self.backend.subscribe_commits, wake, topic)
        try:
            while True:
                wake.event.clear()
                info = await asyncio.to_thread(self.run, run_id)
                if info.done or (until == "idle" and info.idle):
                    return info
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return info
                poll = self.backend.commit_poll_interval
                pause = remaining if poll is None else min(remaining, poll)
                if not real_time:
                    pause = min(pause, FAKE_CLOCK_RECHECK)
                try:
                    await asyncio.wait_for(wake.event.wait(), pause)
                except TimeoutError:
                    pass
        finally:
            self.backend.unsubscribe_commits(wake)

    def run_changes(
        self, run_id: str, timeout: float, *, until: str = "idle"
    ) -> AsyncIterator[RunInfo]:
        """Async iterator: the run now, then at each change, until it is ``idle``
        (done, or waiting for a human's approval) or ``done``, or ``timeout``
        seconds pass (the HTTP API's server-sent events). Woken by
        commits that wrote the run's record or its queued turn's task (a worker
        taking the turn shows as ``running``), not by polling. An unknown run
        raises :class:`~agentq.errors.RunNotFound` at the first read."""
        _check_wait(timeout, until)
        if not isinstance(run_id, str) or not run_id:
            raise RunNotFound(f"no run {run_id!r}")

        def finished(info: RunInfo) -> bool:
            return info.done or (until == "idle" and info.idle)

        return waiting.record_changes(self.backend, lambda: self.run(run_id), timeout,
                                      finished=finished, topics=_run_topics)  # fmt: skip

    def runs(
        self,
        status: RunStatus | str | None = None,
        *,
        agent: str | None = None,
        owner: str | None = None,
        limit: int = 100,
        after: str = "",
    ) -> list[RunInfo]:
        """Runs, newest first: only those with ``status``, of ``agent``, of
        ``owner``; at most ``limit``, after the run id ``after`` (a page's last)."""
        return self.run_page(status, agent=agent, owner=owner, limit=limit, after=after).runs

    def run_page(
        self,
        status: RunStatus | str | None = None,
        *,
        agent: str | None = None,
        owner: str | None = None,
        limit: int = 100,
        after: str = "",
    ) -> RunPage:
        """:meth:`runs` with the cursor of the next page: ``limit + 1`` records
        are read, the one more says whether there is a next page. A page of
        ``running`` or ``queued`` runs may hold fewer than ``limit`` while more
        follow (the two share a stored status, told apart by the turn's task):
        page on until ``next_after`` is ``None``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not (
            0 < limit <= MAX_RUNS_LISTED
        ):
            raise InvalidArguments(f"limit must be from 1 to {MAX_RUNS_LISTED}")
        where: dict[str, list[str | None]] = {}
        if status is not None:
            stored = RunStatus(status)
            # "running" is a queued run whose turn a worker holds: read as queued.
            where["status"] = [str(RunStatus.QUEUED if stored is RunStatus.RUNNING else stored)]
        if agent is not None:
            where["agent"] = [agent]
        if owner is not None:
            where["owner"] = [owner]
        rows = self.backend.list_records(Tables.RUNS, limit=limit + 1, after=after or "",
                                         descending=True, where=where or None)  # fmt: skip
        next_after = rows[limit - 1][0] if len(rows) > limit else None
        infos = [self._run_info(rec) for _key, rec in rows[:limit]]
        if status is not None and RunStatus(status) in (RunStatus.QUEUED, RunStatus.RUNNING):
            infos = [i for i in infos if i.status is RunStatus(status)]
        return RunPage(infos, next_after)

    def cancel_run(
        self, run_id: str, reason: str = "cancelled", *, by: str | None = None
    ) -> RunInfo:
        """Cancel a run: its queued turn and unfinished tool calls (with their
        approvals and timers) are cancelled in the same transaction, and the
        cancel is audited with ``by`` as who cancelled. A finished run raises
        :class:`~agentq.errors.IllegalTransition`."""
        why = f"{reason} (by {by})" if by else reason

        def fn(tx: Decision) -> dict[str, Any]:
            rec = runs.cancel(self, tx.tx, run_id, why)
            # Audited as a task's cancel is (the console's Cancel run, the CLI's).
            audit.record(tx.tx, actor=by, action=AuditAction.CANCEL, target=run_id, note=reason)
            return rec

        return self._run_info(self.transact(fn))

    def send_message(
        self,
        run_id: str,
        text: str,
        *,
        by: str | None = None,
        idempotency_key: str | None = None,
    ) -> RunInfo:
        """Continue a run that answered (succeeded) with the user's next message;
        its next turn is queued. Only its owner may (``by``, default ``"local"``).

        With ``idempotency_key``, sending the same text with the same key again
        (a retry after a lost answer) appends nothing and returns the run as it
        is; the same key with another text raises
        :class:`~agentq.errors.IdempotencyConflict`."""
        owner = by or LOCAL
        _check_key(idempotency_key)
        return self._run_info(self.transact(lambda tx: runs.add_message(
            self, tx.tx, run_id, text, by=owner, key=idempotency_key)))  # fmt: skip

    def _run_info(self, rec: dict[str, Any]) -> RunInfo:
        info = dict(rec)
        if rec.get("status") == RunStatus.QUEUED and rec.get("turn_task_id"):
            task = self.backend.get_record(Tables.TASKS, str(rec["turn_task_id"]))
            if task is not None and task.get("status") == TaskStatus.RUNNING:
                info["status"] = RunStatus.RUNNING
        return RunInfo.model_validate(info)


def _check_key(key: str | None) -> None:
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 200):
        raise InvalidArguments("idempotency_key must be a string of 1 to 200 characters")


def _check_wait(timeout: float, until: str) -> None:
    if until not in ("idle", "done"):
        raise InvalidArguments(f"until must be 'idle' or 'done', got {until!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
        0 <= timeout <= MAX_WAIT_SECONDS
    ):
        raise InvalidArguments(f"timeout must be 0..{MAX_WAIT_SECONDS:g} seconds")


def _run_topics(info: RunInfo) -> list[RecordTopic]:
    """The records a run's reader is woken by: the run's, and its queued
    turn's task (taken by a worker, it reads as ``running``)."""
    topics = [record_topic(Tables.RUNS, info.run_id)]
    if info.turn_task_id and info.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        topics.append(record_topic(Tables.TASKS, info.turn_task_id))
    return topics
