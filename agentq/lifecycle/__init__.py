"""The task and approval lifecycle: one state machine, enforced in one place.

Every change of a task's or an approval's status, from any surface (the
runtime's Python API, the executor, the CLI, and later HTTP, MCP or a console),
goes through this package. Each event reads the record's current state inside
the transaction that applies it and is refused, with
:class:`~agentq.errors.IllegalTransition` naming the task, its state and the
event, when the state does not allow it.

* :mod:`~agentq.lifecycle.states` — the transition tables (printed in the README);
* :mod:`~agentq.lifecycle.tasks` — task events and the queue operations they imply;
* :mod:`~agentq.lifecycle.approvals` — approval events and their timers;
* :mod:`~agentq.lifecycle.dead_letters` — stray entries and replay.
"""

from agentq.lifecycle.states import (
    APPROVAL_TRANSITIONS,
    TASK_TRANSITIONS,
    Event,
    approval_table_markdown,
    task_table_markdown,
)

__all__ = [
    "APPROVAL_TRANSITIONS",
    "TASK_TRANSITIONS",
    "Event",
    "approval_table_markdown",
    "task_table_markdown",
]
