"""Who may see and change which task, approval or run, on every surface that
serves principals (the HTTP API, the MCP server, the web console).

Every task has an owner, ``created_by``: the principal that enqueued it. The rule:

* a principal with ``read`` sees its own tasks, and ``enqueue`` cancels them;
* ``operate`` (and ``admin``) sees and cancels everyone's;
* an approval is seen by its task's owner, by ``operate``/``admin``, and by an
  ``approve`` principal whose rule lets it decide it;
* a durable agent run (:class:`~agentq.run_info.RunInfo`) is its ``owner``'s: a
  principal with ``read`` sees its own runs, ``enqueue`` cancels and continues
  them; ``operate`` (and ``admin``) sees and cancels everyone's;
* the runtime's own tasks (an approval's expiry, deadline, escalation and
  reminders, notifications, webhooks: every ``kind`` but ``action``) are
  nobody's to read, list or cancel through these surfaces: they change only
  through the lifecycle event that owns them (approve, reject, the action's
  cancel, expiry). The console shows them read-only to ``operate``/``admin``.

A task, run or approval a principal may not see is answered exactly as one that
does not exist (:class:`~agentq.errors.TaskNotFound`,
:class:`~agentq.errors.RunNotFound`, 404), so ids cannot be probed.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentq.approvals import ApprovalInfo
from agentq.errors import ApprovalNotFound, RunNotFound, TaskNotFound
from agentq.ledger import TaskInfo
from agentq.run_info import RunInfo
from agentq.runtime import Runtime
from agentq.server.auth import Principal, Scope

__all__ = [
    "approval_for",
    "cancel_run",
    "cancel_task",
    "is_internal",
    "may_cancel_run",
    "may_cancel_task",
    "may_see_run",
    "may_see_task",
    "run_for",
    "sees_all",
    "task_for",
    "visible_approvals",
    "visible_runs",
    "visible_tasks",
]


def is_internal(task: TaskInfo) -> bool:
    """Whether it is one of the runtime's own tasks (a timer, notice or webhook)."""
    return task.kind != "action"


def sees_all(principal: Principal) -> bool:
    """Whether it sees (and may cancel) everyone's tasks: ``operate`` or ``admin``."""
    return principal.may(Scope.OPERATE)


def may_see_task(principal: Principal, task: TaskInfo, *, internal: bool = False) -> bool:
    """Whether ``principal`` may read ``task``; ``internal``: the surface shows the
    runtime's own tasks to those who see all (the console), never to others."""
    if is_internal(task):
        return internal and sees_all(principal)
    return sees_all(principal) or task.created_by == principal.name


def may_cancel_task(principal: Principal, task: TaskInfo) -> bool:
    """Whether ``principal`` may cancel ``task`` (never one of the runtime's own)."""
    if is_internal(task):
        return False
    if sees_all(principal):
        return True
    return principal.may(Scope.ENQUEUE) and task.created_by == principal.name


def _hidden(task_id: str) -> TaskNotFound:
    return TaskNotFound(f"no task {task_id!r}")


def task_for(
    rt: Runtime, principal: Principal, task_id: str, *, internal: bool = False
) -> TaskInfo:
    """The task, if ``principal`` may see it; :class:`TaskNotFound` otherwise."""
    task = rt.task(task_id)
    if not may_see_task(principal, task, internal=internal):
        raise _hidden(task_id)
    return task


def visible_tasks(
    principal: Principal, tasks: Iterable[TaskInfo], *, internal: bool = False
) -> list[TaskInfo]:
    """Those of ``tasks`` that ``principal`` may see."""
    return [t for t in tasks if may_see_task(principal, t, internal=internal)]


def cancel_task(rt: Runtime, principal: Principal, task_id: str, reason: str) -> TaskInfo:
    """Cancel the task for ``principal`` (audited with its name), if it may;
    :class:`TaskNotFound` if it may not (whether or not it can see it: the
    runtime's own tasks are not to be confirmed either)."""
    task = rt.task(task_id)
    if not may_cancel_task(principal, task):
        raise _hidden(task_id)
    return rt.cancel(task_id, reason, by=principal.name)


def visible_approvals(
    rt: Runtime, principal: Principal, approvals: Iterable[ApprovalInfo]
) -> list[ApprovalInfo]:
    """Those of ``approvals`` that ``principal`` may see (see the module docstring)."""
    found = list(approvals)
    if sees_all(principal):
        return found
    decidable = rt.decidable_by(principal.name, found) if principal.may(Scope.APPROVE) else set()
    owns = principal.may(Scope.READ)
    return [
        a for a in found
        if a.approval_id in decidable or (owns and a.created_by == principal.name)
    ]  # fmt: skip


def approval_for(rt: Runtime, principal: Principal, approval_id: str) -> ApprovalInfo:
    """The approval, if ``principal`` may see it; :class:`ApprovalNotFound` otherwise."""
    approval = rt.approval(approval_id)
    if not visible_approvals(rt, principal, [approval]):
        raise ApprovalNotFound(f"no approval {approval_id!r}")
    return approval


def may_see_run(principal: Principal, run: RunInfo) -> bool:
    """Whether ``principal`` may read ``run``: its owner, or one who sees all."""
    return sees_all(principal) or run.owner == principal.name


def may_cancel_run(principal: Principal, run: RunInfo) -> bool:
    """Whether ``principal`` may cancel ``run``: its owner with ``enqueue``, or
    one who sees all."""
    if sees_all(principal):
        return True
    return principal.may(Scope.ENQUEUE) and run.owner == principal.name


def run_for(rt: Runtime, principal: Principal, run_id: str) -> RunInfo:
    """The run, if ``principal`` may see it; :class:`RunNotFound` otherwise (as
    for a run that does not exist)."""
    run = rt.run(run_id)
    if not may_see_run(principal, run):
        raise RunNotFound(f"no run {run_id!r}")
    return run


def visible_runs(principal: Principal, runs: Iterable[RunInfo]) -> list[RunInfo]:
    """Those of ``runs`` that ``principal`` may see."""
    return [r for r in runs if may_see_run(principal, r)]


def cancel_run(rt: Runtime, principal: Principal, run_id: str, reason: str) -> RunInfo:
    """Cancel the run for ``principal`` (its name recorded with the reason), if
    it may; :class:`RunNotFound` if it may not."""
    run = rt.run(run_id)
    if not may_cancel_run(principal, run):
        raise RunNotFound(f"no run {run_id!r}")
    return rt.cancel_run(run_id, reason, by=principal.name)
