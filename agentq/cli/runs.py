"""Durable agent runs: ``runs`` (the list), ``runs show RUN_ID`` and ``runs cancel RUN_ID``.

They open an existing database without the project's tools: a run's record
says what happened (its turns, their tokens and latency, the tool calls and
their tasks), and cancelling it cancels its queued turn and unfinished tool
calls in one transaction (:meth:`Runtime.cancel_run`). An unknown run is exit 3,
cancelling one that is done exit 5.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING, Any

from agentq.cli.common import actor, add_actor_arg, add_db_args, int_in, on_ledger, open_ledger
from agentq.cli.exits import EXIT_OK
from agentq.cli.output import add_format_args, emit, print_json, print_record, table
from agentq.errors import TaskNotFound
from agentq.redact import redact_text
from agentq.statuses import RunStatus

if TYPE_CHECKING:
    from agentq.ledger import TaskInfo
    from agentq.run_info import CallInfo, RunInfo, TurnInfo, Usage
    from agentq.runtime import Runtime

__all__ = ["register"]

_COLUMNS = ("run_id", "agent", "owner", "status", "turn", "tokens", "updated_at", "outcome")
_CALL_COLUMNS = ("call", "tool", "task", "status", "args")
#: A page cursor: a run's id (``next_after`` of the page before).
_CURSOR = re.compile(r"^run_[!-~]{1,196}$")


def _cursor(text: str) -> str:
    """argparse type: ``--after``, the ``next_after`` of an earlier page."""
    if not _CURSOR.match(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a page cursor: give the next_after an earlier page printed "
            "(a run id, run_...)"
        )
    return text


def _outcome(run: RunInfo) -> str | None:
    return run.output if run.output is not None else run.error


def _cmd_runs(args: argparse.Namespace) -> int:
    rt = open_ledger(args)
    try:
        status = None if args.status in (None, "all") else args.status
        page = rt.run_page(status, agent=args.agent, owner=args.owner, limit=args.limit,
                           after=args.after or "")  # fmt: skip
    finally:
        rt.close()
    rows = [r.model_dump(mode="json") for r in page.runs]
    if not (args.json or args.jsonl):  # the table's own columns
        rows = [{**row, "tokens": r.usage.total_tokens, "outcome": _outcome(r)}
                for row, r in zip(rows, page.runs, strict=True)]  # fmt: skip
    emit(args, "runs", rows, _COLUMNS, {"next_after": page.next_after})
    if page.next_after is not None and args.jsonl:
        print(f"agentq: more runs: --after {page.next_after}", file=sys.stderr)
    return EXIT_OK


def _call_tasks(rt: Runtime, run: RunInfo) -> dict[str, TaskInfo | None]:
    """The task of each call that has one (None: its record is gone, pruned)."""
    found: dict[str, TaskInfo | None] = {}
    for turn in run.turns:
        for call in turn.calls:
            if call.task_id and call.task_id not in found:
                try:
                    found[call.task_id] = rt.task(call.task_id)
                except TaskNotFound:
                    found[call.task_id] = None
    return found


def _task_status(task: TaskInfo | None) -> str:
    return "pruned" if task is None else str(task.status)


def _call_status(call: CallInfo, tasks: dict[str, TaskInfo | None]) -> str:
    if call.error:
        return "refused"
    if not call.task_id:
        return "ran locally"
    return _task_status(tasks.get(call.task_id))


def _tokens(usage: Usage) -> str:
    cost = "" if usage.cost is None else f", cost {usage.cost:g}"
    return (f"{usage.total_tokens} ({usage.prompt_tokens} prompt, "
            f"{usage.completion_tokens} completion{cost})")  # fmt: skip


def _turn_line(turn: TurnInfo) -> str:
    latency = "-" if turn.latency_ms is None else f"{turn.latency_ms:.0f} ms"
    what = (f"{len(turn.calls)} call{'s' if len(turn.calls) != 1 else ''}" if turn.calls
            else "answered")  # fmt: skip
    return (f"turn {turn.number}  {what}  tokens {_tokens(turn.usage)}  latency {latency}  "
            f"model {turn.model or '-'}  task {turn.task_id}")  # fmt: skip


def _cmd_show(args: argparse.Namespace) -> int:
    rt = open_ledger(args)
    try:
        run = rt.run(args.run_id)
        tasks = _call_tasks(rt, run)
    finally:
        rt.close()
    record = run.model_dump(mode="json")
    for turn in record["turns"]:
        for call in turn["calls"]:
            task_id = call["task_id"]
            call["task_status"] = _task_status(tasks.get(task_id)) if task_id else None
    if args.json or args.jsonl:
        print_record(args, record)
        return EXIT_OK
    head = {
        "run_id": run.run_id, "agent": run.agent, "owner": run.owner, "status": run.status,
        "turn": run.turn, "input": run.input, "output": run.output, "error": run.error,
        "tokens": _tokens(run.usage),
        "pending": ", ".join(run.pending) or None, "idempotency_key": run.idempotency_key,
        "created_at": run.created_at, "updated_at": run.updated_at,
    }  # fmt: skip
    print_record(args, head)
    for turn in run.turns:
        print()
        print(redact_text(_turn_line(turn)))
        if turn.calls:
            rows = [{"call": c.position, "tool": c.tool,
                     "task": c.task_id or ("-" if c.error else "local"),
                     "status": _call_status(c, tasks),
                     "args": c.args if not c.error else f"{c.error}"}
                    for c in turn.calls]  # fmt: skip
            print("\n".join("  " + line for line in table(rows, _CALL_COLUMNS).splitlines()))
            for c in turn.calls:
                task = tasks.get(c.task_id) if c.task_id else None
                if task is not None and task.status == "awaiting_approval" and task.approval_id:
                    print(f"  call {c.position} awaits approval {task.approval_id} "
                          f"(agentq approve {task.approval_id} --by NAME)")  # fmt: skip
    if run.turn_task_id:
        print()
        print(f"turn {run.turn}  {run.status}  task {run.turn_task_id}")
    return EXIT_OK


def _cmd_cancel(args: argparse.Namespace) -> int:
    run = on_ledger(args, lambda rt: rt.cancel_run(args.run_id, args.reason, by=actor(args)))
    if args.json:
        print_json(run.model_dump(mode="json"))
    else:
        print(f"{run.run_id} {run.status}")
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``runs`` with ``runs show`` and ``runs cancel``."""
    runs = sub.add_parser(
        "runs", help="durable agent runs: list them (newest first), show one, cancel one",
        description="List durable agent runs, newest first, a page at a time; "
                    "`agentq runs show RUN_ID` shows one turn by turn, "
                    "`agentq runs cancel RUN_ID` cancels one.",
    )  # fmt: skip
    runs.add_argument("--status", choices=[*(s.value for s in RunStatus), "all"],
                      help="only runs with this status (default all)")  # fmt: skip
    runs.add_argument("--agent", help="only runs of this agent")
    runs.add_argument("--owner", help="only runs this principal started (Python: local)")
    runs.add_argument("--limit", type=int_in(1, 1000), default=100,
                      help="page size (default 100, at most 1000)")  # fmt: skip
    runs.add_argument("--after", type=_cursor, metavar="CURSOR",
                      help="the next page: the next_after the last page printed")  # fmt: skip
    add_format_args(runs)
    add_db_args(runs)
    runs.set_defaults(func=_cmd_runs)
    # The verbs' options default to nothing (SUPPRESS), so `runs --db X show ID` keeps --db.
    verbs = runs.add_subparsers(dest="runs_command", metavar="{show,cancel}")

    show = verbs.add_parser(
        "show", argument_default=argparse.SUPPRESS,
        help="one run: its turns (tokens, latency), their tool calls with their tasks' "
             "statuses, its output or error",
    )  # fmt: skip
    show.add_argument("run_id", help="the run's id (run_...)")
    add_format_args(show)
    add_db_args(show)
    show.set_defaults(func=_cmd_show)

    cancel = verbs.add_parser(
        "cancel", argument_default=argparse.SUPPRESS,
        help="cancel a run: its queued turn and unfinished tool calls are cancelled with it",
    )  # fmt: skip
    cancel.add_argument("run_id", help="the run's id (run_...)")
    cancel.add_argument("--reason", default="cancelled from the command line",
                        help="why, recorded as the run's error (default: %(default)r)")  # fmt: skip
    cancel.add_argument("--json", action="store_true", help="print the run as JSON")
    add_actor_arg(cancel)
    add_db_args(cancel)
    cancel.set_defaults(func=_cmd_cancel)
