"""Tasks: ``enqueue``, ``task ID``, ``tasks`` (filtered, paged) and ``cancel``."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentq.cli.common import (
    actor,
    add_actor_arg,
    add_db_args,
    add_runtime_args,
    moment,
    on_ledger,
    open_ledger,
    open_runtime,
    positive,
    positive_float,
    read_args,
    time_or_ago,
    unset_settings,
)
from agentq.cli.exits import EXIT_NEGATIVE, EXIT_OK, EXIT_TIMEOUT
from agentq.cli.output import add_format_args, emit, print_record, print_task
from agentq.errors import ConfigError
from agentq.statuses import TaskStatus

if TYPE_CHECKING:
    from agentq.ledger import TaskInfo
    from agentq.runtime import Runtime

__all__ = ["register", "wait_for"]

_COLUMNS = ("task_id", "tool", "status", "attempt", "created_at", "error")


def _timestamp(text: str) -> datetime:
    """argparse type: an ISO 8601 time with its zone (``2026-01-01T09:00Z``)."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time, got {text!r}") from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone, e.g. {text}Z for UTC")
    return when


#: A page cursor: a task's id (``tsk_…``, or a schedule run's ``sch_…``).
_CURSOR = re.compile(r"(tsk|sch)_[!-~]{1,196}")


def _cursor(text: str) -> str:
    """argparse type: ``--after``, the ``next_after`` of an earlier page. Anything
    else would list from a place in the ledger nobody chose, without a word."""
    if not _CURSOR.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a page cursor: give the next_after an earlier page printed "
            "(a task id, tsk_...)"
        )
    return text


_WAIT_CHUNK = 3600.0  # the longest one Runtime.wait takes


def wait_for(rt: Runtime, task_id: str, timeout: float) -> TaskInfo:
    """The task once it is finished, or as it is when ``timeout`` runs out."""
    deadline = rt.clock.monotonic() + timeout
    while True:
        remaining = deadline - rt.clock.monotonic()
        task = rt.wait(task_id, max(0.0, min(remaining, _WAIT_CHUNK)))
        if task.done or remaining <= _WAIT_CHUNK:
            return task


def _finished_status(task: Any) -> int:
    if not task.done:
        print(f"agentq: {task.task_id} is still {task.status} after the wait", file=sys.stderr)
        return EXIT_TIMEOUT
    return EXIT_OK if task.status == "succeeded" else EXIT_NEGATIVE


def _cmd_enqueue(args: argparse.Namespace) -> int:
    if args.at is not None and args.delay is not None:
        raise ConfigError("give either --at or --delay, not both")
    payload = read_args(args.args)
    rt = open_runtime(args, catalog=True)  # validated by the tool, or its recorded schema
    try:
        task = rt.enqueue_action(
            args.tool, payload, idempotency_key=args.idempotency_key,
            ordering_key=args.ordering_key, at=args.at, delay=args.delay,
        )  # fmt: skip
        # After the enqueue: a refused call is its one error line, nothing before it.
        unset = unset_settings(rt, [args.tool])
        if unset is not None:
            print(f"agentq: warning: {unset}", file=sys.stderr, flush=True)
        if args.wait is not None:
            task = _wait_enqueued(rt, task, args.wait)
    finally:
        rt.close()
    print_task(args, task)
    return EXIT_OK if args.wait is None else _finished_status(task)


def _wait_enqueued(rt: Runtime, task: TaskInfo, timeout: float) -> TaskInfo:
    """``enqueue --wait``: the task is committed before the wait, so its id is said
    first (on standard error: standard output is the task as it ends), and a Ctrl-C
    during the wait says the task stays (running the command again would enqueue
    another, unless it has the same --idempotency-key)."""
    try:
        # Said inside the try: a Ctrl-C right after the line is still answered.
        print(f"agentq: enqueued {task.task_id} ({task.status}); waiting up to {timeout:g}s "
              "for it to finish", file=sys.stderr, flush=True)  # fmt: skip
        return wait_for(rt, task.task_id, timeout)
    except KeyboardInterrupt:
        print(f"agentq: interrupted: {task.task_id} is still {task.status} (Ctrl-C stopped "
              f"the wait, not the task); follow it with: agentq task {task.task_id} --wait 1m",
              file=sys.stderr, flush=True)  # fmt: skip
        raise


def _cmd_task(args: argparse.Namespace) -> int:
    rt = open_ledger(args)
    try:
        task = rt.task(args.task_id)
        if args.wait is not None:
            task = wait_for(rt, task.task_id, args.wait)
    finally:
        rt.close()
    print_record(args, task.model_dump(mode="json"), block="traceback")
    return EXIT_OK if args.wait is None else _finished_status(task)


def _cmd_tasks(args: argparse.Namespace) -> int:
    rt = open_ledger(args)
    try:
        status = None if args.status in (None, "all") else args.status
        page = rt.task_page(
            status, tool=args.tool, since=moment(args.since, rt.clock.now()), limit=args.limit,
            after=args.after,
            newest_first=not args.oldest_first,
        )  # fmt: skip
    finally:
        rt.close()
    rows = [t.model_dump(mode="json") for t in page.tasks]
    emit(args, "tasks", rows, _COLUMNS, {"next_after": page.next_after})
    if page.next_after is not None and args.jsonl:
        print(f"agentq: more tasks: --after {page.next_after}", file=sys.stderr)
    return EXIT_OK


def _cmd_cancel(args: argparse.Namespace) -> int:
    task = on_ledger(args, lambda rt: rt.cancel(args.task_id, args.reason, by=actor(args)))
    print_task(args, task)
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``enqueue``, ``task``, ``tasks`` and ``cancel``."""
    enqueue = sub.add_parser("enqueue", help="enqueue a tool call (validated by the tool)")
    enqueue.add_argument("tool", help="the tool's name")
    enqueue.add_argument(
        "--args",
        required=True,
        metavar="JSON|@FILE",
        help="arguments: a JSON object, @file, or @- for standard input",
    )
    enqueue.add_argument("--idempotency-key", help="the same key returns the same task")
    enqueue.add_argument("--ordering-key", help="tasks with one key run one at a time, in order")
    enqueue.add_argument("--at", type=_timestamp, help="run at this ISO 8601 time (with zone)")
    enqueue.add_argument("--delay", type=positive_float, metavar="DURATION", help="run later")
    enqueue.add_argument(
        "--wait",
        type=positive_float,
        metavar="DURATION",
        help="wait for the task to finish (exit 0 succeeded, 1 not, 4 timeout)",
    )
    enqueue.add_argument("--json", action="store_true", help="print the task as JSON")
    add_runtime_args(enqueue)
    enqueue.set_defaults(func=_cmd_enqueue)

    task = sub.add_parser("task", help="one task: status, attempts, result or error")
    task.add_argument("task_id", help="the task's id (tsk_...)")
    task.add_argument(
        "--wait",
        type=positive_float,
        metavar="DURATION",
        help="wait for it to finish (exit 0 succeeded, 1 not, 4 timeout)",
    )
    add_format_args(task)
    add_db_args(task)
    task.set_defaults(func=_cmd_task)

    tasks = sub.add_parser("tasks", help="list the ledger, newest first, a page at a time")
    tasks.add_argument("--status", choices=[*(s.value for s in TaskStatus), "all"],
                       help="only tasks with this status (default all)")  # fmt: skip
    tasks.add_argument("--tool", help="only tasks of this tool")
    tasks.add_argument("--since", type=time_or_ago, metavar="TIME",
                       help="only tasks created at or after this time: ISO 8601 "
                       "(2026-01-01T09:00Z) or a duration before now (30m, 1h, 2d)")  # fmt: skip
    tasks.add_argument("--limit", type=positive, default=100, help="page size (default 100)")
    tasks.add_argument("--after", type=_cursor, metavar="CURSOR",
                       help="the next page: the next_after the last page printed")  # fmt: skip
    tasks.add_argument("--oldest-first", action="store_true", help="oldest first instead")
    add_format_args(tasks)
    add_db_args(tasks)
    tasks.set_defaults(func=_cmd_tasks)

    cancel = sub.add_parser("cancel", help="cancel a task that has not finished")
    cancel.add_argument("task_id", help="the task's id (tsk_...)")
    cancel.add_argument("--reason", default="cancelled from the command line",
                        help="why, recorded with the task (default: %(default)r)")  # fmt: skip
    cancel.add_argument("--json", action="store_true", help="print the task as JSON")
    add_actor_arg(cancel)
    add_db_args(cancel)
    cancel.set_defaults(func=_cmd_cancel)
