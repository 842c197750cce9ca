"""The runtime: decisions, tasks, approvals, built only on the backend contract.

``Runtime`` is the entry point for agent frameworks, bots and notebooks::

    rt = Runtime("sqlite:///agentq.db", tools="tools", policies="policies")

    def decide(tx):
        tx.execute("UPDATE orders SET state = 'refunding' WHERE id = ?", (order_id,))
        tx.enqueue("execute_refund", {"order_id": order_id, "amount": 30})

    rt.transact(decide)           # state and task commit together, or neither
    rt.worker().drain()           # or: agentq worker

Every write below happens inside one backend transaction, so a crash between
any two steps leaves no half-done decision.

The facade is made of one part per concern, each a module of this package:
:mod:`.core` (construction, the tool registry, the transaction), :mod:`.decisions`,
:mod:`.reading`, :mod:`.dead_letter_queue`, :mod:`.operations` (workers,
notebooks, async forms), :mod:`.retention`, :mod:`.schedules` and :mod:`.runs`
(durable agent runs); :class:`Runtime`
combines them.
"""

from __future__ import annotations

from agentq.decision import Decision
from agentq.lifecycle.tasks import ESCALATION_QUEUE
from agentq.runtime.dead_letter_queue import REPLAY_REFUSALS, DeadLettersMixin, ReplayReport
from agentq.runtime.decisions import DecisionsMixin, Submission
from agentq.runtime.operations import OperationsMixin
from agentq.runtime.reading import SCAN_PAGE as SCAN_PAGE  # the page size, as before
from agentq.runtime.reading import ApprovalPage, ReadingMixin, TaskPage
from agentq.runtime.retention import PruneReport, RetentionMixin
from agentq.runtime.runs import RunPage, RunsMixin, RunSubmission
from agentq.runtime.schedules import ScheduleInfo, SchedulesMixin

__all__ = [
    "ESCALATION_QUEUE",
    "REPLAY_REFUSALS",
    "ApprovalPage",
    "Decision",
    "PruneReport",
    "ReplayReport",
    "RunPage",
    "RunSubmission",
    "Runtime",
    "ScheduleInfo",
    "Submission",
    "TaskPage",
]


class Runtime(
    DecisionsMixin,
    ReadingMixin,
    DeadLettersMixin,
    OperationsMixin,
    RetentionMixin,
    SchedulesMixin,
    RunsMixin,
):
    """agentq's runtime over one database.

    ``db`` is a URL (``sqlite:///agentq.db``, ``sqlite:///:memory:``,
    ``spanner://...``) or an open backend. ``tools`` is a directory of tool
    modules, a registry, or an iterable of handlers decorated with
    :func:`~agentq.tool` (inline tools, as in a notebook) and directories;
    ``reload=True`` imports a tools directory again even if no file in it changed
    (a changed one is always imported again). ``policies`` is a directory of TOML
    files or a :class:`~agentq.policies.Policy`. ``settings`` is handed to
    handlers (API base URLs and the like). ``retention`` is how long finished
    tasks are kept before workers delete them (default 7 days; ``"off"`` or
    ``None``: forever; a tool's policy ``retention`` wins): see :meth:`prune`.
    A task whose encoded arguments are over ``args_inline_bytes`` (default
    4096) keeps them out of band, in a record of their own deleted with the
    task when it is pruned (:mod:`agentq.lifecycle.payloads`).
    A runtime with tools records them (and its policies, if given) in the
    database's tool catalog (:meth:`record_tools`; ``agentq init`` and every
    worker at start do). A runtime without ``tools`` is a *producer*: it
    enqueues by tool name, validating arguments against the recorded JSON
    Schemas, with the given ``policies`` or else the recorded policy, and
    imports no handler code (see :mod:`agentq.catalog`).
    ``agents`` are durable agents (:class:`~agentq.agents.Agent`; a tools
    folder's are found too) whose runs this runtime starts and its workers
    carry forward (:meth:`start_run`).
    """

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
