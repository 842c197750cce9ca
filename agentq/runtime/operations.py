"""The runtime's operations, notebook and async forms: per-tool counts, workers,
queue statistics, running until idle, the ledger as a frame or a timeline, and the
async wrappers of the facade's calls (the notebook code is in :mod:`agentq.notebook`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Unpack

from agentq import overview
from agentq.clock import FakeClock
from agentq.ledger import TaskInfo, TaskStatus
from agentq.lifecycle.tasks import ESCALATION_QUEUE
from agentq.notebook.html import QueueStatsList
from agentq.overview import ToolCounts, WorkerInfo
from agentq.runtime.core import RuntimeCore

if TYPE_CHECKING:
    from agentq.decision import EnqueueOptions
    from agentq.notebook.idle import IdleReport


class OperationsMixin(RuntimeCore):
    """The operations, notebook and async forms of :class:`~agentq.runtime.Runtime`."""

    # -- workers ----------------------------------------------------------------

    def tool_counts(self) -> list[ToolCounts]:
        """Per tool: tasks queued, running, retrying, awaiting approval and dead, and
        the oldest unfinished one's age; read a page of the ledger at a time."""
        return overview.tool_counts(self.backend, self.clock.now())

    def workers(self, live_within: float = overview.LIVE_SECONDS) -> list[WorkerInfo]:
        """Workers that published a heartbeat (``live``: heard from within
        ``live_within`` seconds); see :mod:`agentq.executor.heartbeat`."""
        return overview.workers(self.backend, self.clock.now(), live_within)

    def worker(self, **options: Any) -> Any:
        """An executor over this runtime's queues; see :class:`agentq.executor.Worker`."""
        from agentq.executor import Worker

        return Worker(self._facade, **options)

    # -- notebooks (the code is in agentq.notebook) ---------------------------------

    def queue_stats(self) -> QueueStatsList:
        """Depth, ready, scheduled and leased messages of every queue this runtime uses."""
        names = sorted(self.tools.queues() | {ESCALATION_QUEUE})
        return QueueStatsList(self.backend.stats(q) for q in names)

    def run_until_idle(
        self,
        *,
        clock: FakeClock | None = None,
        until: datetime | timedelta | None = None,
        max_steps: int = 100,
        **worker_options: Any,
    ) -> IdleReport:
        """Run every ready task, jump the fake clock to the next timer (retry,
        delayed task, escalation, expiry), and again, until nothing is due and
        no durable run's turn waits for a worker (a run awaiting a human's
        approval is idle); see :func:`agentq.notebook.idle.run_until_idle`."""
        from agentq.notebook.idle import run_until_idle

        return run_until_idle(
            self._facade, clock=clock, until=until, max_steps=max_steps, **worker_options
        )

    def tasks_frame(self, status: TaskStatus | str | None = None) -> Any:
        """The ledger as a pandas DataFrame, one row per task (``agentq-runtime[notebook]``)."""
        from agentq.notebook.frame import tasks_frame

        return tasks_frame(self._facade.tasks(status))

    def plot_timeline(self, **options: Any) -> Any:
        """A matplotlib figure of the run: a bar per task from enqueue to finish,
        coloured by outcome, escalations marked (``agentq-runtime[notebook]``); see
        :func:`agentq.notebook.timeline.plot_timeline`."""
        from agentq.notebook.timeline import plot_timeline

        return plot_timeline(self._facade.tasks(), self._facade.approvals(), **options)

    # -- async forms (one implementation, thin wrappers) -------------------------------
    # asyncio is imported inside them: whoever awaits one has it loaded already,
    # and a process that never does is spared it (a twelfth of ``import agentq``).

    async def aenqueue_action(
        self, tool: str, args: Mapping[str, Any] | Any, **options: Unpack[EnqueueOptions]
    ) -> TaskInfo:
        """Async form of :meth:`enqueue_action` for async agent frameworks."""
        import asyncio

        return await asyncio.to_thread(self._facade.enqueue_action, tool, args, **options)

    async def atask(self, task_id: str) -> TaskInfo:
        """Async form of :meth:`task`."""
        import asyncio

        return await asyncio.to_thread(self._facade.task, task_id)

    async def aapprove(
        self, approval_id: str, by: str, note: str = "", *, args: Any = None
    ) -> TaskInfo:
        """Async form of :meth:`approve`."""
        import asyncio

        return await asyncio.to_thread(
            lambda: self._facade.approve(approval_id, by, note, args=args)
        )
