"""Approvals: ``approvals`` (the inbox), ``approve ID`` and ``reject ID``.

Decisions go through :meth:`Runtime.approve` / :meth:`Runtime.reject` (the
lifecycle records who decided, when, and the note); an approval already
decided is refused (exit 5), one that does not exist is exit 3. ``approve
--args JSON`` / ``--set KEY=VALUE`` edits the call's arguments before approving
(checked against the tool's schema and the policy, and only if the approval has
not changed since it was read here).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from typing import Any

from agentq import jsontext
from agentq.cli.common import (
    actor,
    add_actor_arg,
    add_db_args,
    open_ledger,
    positive,
    read_args,
)
from agentq.cli.exits import EXIT_OK
from agentq.cli.output import add_format_args, age, emit, print_json
from agentq.errors import ApprovalNotFound, ConfigError, TaskNotFound
from agentq.statuses import ApprovalStatus

__all__ = ["register"]

_COLUMNS = ("approval_id", "status", "tool", "age_s", "task_id", "reason", "args")
#: A listing that may hold decided approvals also says who decided.
_DECIDED_COLUMNS = ("approval_id", "status", "decided_by", "tool", "age_s", "task_id",
                    "reason", "args")  # fmt: skip
_OPEN = ("pending", "escalated")


def _cmd_approvals(args: argparse.Namespace) -> int:
    statuses = {"open": _OPEN, "all": None}.get(args.status, (args.status,))
    rt = open_ledger(args)
    try:
        now = rt.clock.now()
        # One page, the statuses asked for in the query: never every approval.
        page = rt.approval_page(statuses, limit=args.limit, after=args.after,
                                newest_first=not args.oldest_first)  # fmt: skip
        # An empty first page says what exists instead (only then: it reads them all).
        empty = not page.approvals and args.after is None and not (args.json or args.jsonl)
        others = Counter(str(a.status) for a in rt.approvals()) if empty else Counter()
    finally:
        rt.close()
    if empty:
        print(_none_found(args.status, others))
        return EXIT_OK
    rows = [{**a.model_dump(mode="json"), "age_s": age(now, a.requested_at)}
            for a in page.approvals]  # fmt: skip
    columns = _COLUMNS if args.status in ("open", *_OPEN) else _DECIDED_COLUMNS
    emit(args, "approvals", rows, columns, {"next_after": page.next_after})
    if page.next_after is not None and args.jsonl:
        print(f"agentq: more approvals: --after {page.next_after}", file=sys.stderr)
    return EXIT_OK


def _none_found(status: str, others: Counter[str]) -> str:
    """The inbox's empty state: which approvals there are instead, and how to list them."""
    if status == "all":
        return "no approvals yet"
    which = "open (pending or escalated)" if status == "open" else status
    if not others:
        return f"no {which} approvals, and no others"
    listed = ", ".join(f"{n} {s}" for s, n in sorted(others.items()))
    first = sorted(others)[0]
    return f"no {which} approvals; there are {listed} (agentq approvals --status {first})"


def _json_value(text: str) -> Any:
    """A ``--set`` value: JSON if it parses (``40``, ``true``, ``"x"``), else the text."""
    try:
        return jsontext.loads(text)
    except ValueError:
        return text


def _edited_args(args: argparse.Namespace, asked: dict[str, Any]) -> dict[str, Any] | None:
    """The approver's edit: ``--args JSON`` (the whole object), then each ``--set
    KEY=VALUE`` over it (or over the arguments asked); None if neither is given."""
    if args.args is None and not args.set:
        return None
    edited = dict(asked)
    if args.args is not None:
        edited = read_args(args.args)  # JSON, @file or @- as enqueue's --args
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"approve: --set {item!r}: use KEY=VALUE")
        edited[key] = _json_value(value)
    return edited


def _not_a_task_id(rt: Any, given: str) -> None:
    """Refuse a task id where an approval id belongs, naming the task's approval
    (the two are easy to swap: ``agentq enqueue`` and ``tasks`` print task ids)."""
    try:
        rt.approval(given)
        return
    except ApprovalNotFound:
        pass
    try:
        task = rt.task(given)
    except TaskNotFound:
        return  # neither: the decision below says there is no such approval
    if task.approval_id:
        raise ApprovalNotFound(
            f"{given} is a task id, not an approval id: its approval is {task.approval_id} "
            f"(agentq approvals lists them)"
        )
    raise ApprovalNotFound(f"{given} is a task id, not an approval id, and it has no approval")


def _decide(args: argparse.Namespace, verdict: str) -> int:
    if args.by is not None and not args.by.strip():
        raise ConfigError(f"{verdict}: --by must name who decides")
    args.by = actor(args)  # as cancel: the login name unless --by says otherwise
    rt = open_ledger(args)
    try:
        _not_a_task_id(rt, args.approval_id)
        if verdict == "approve":
            seen = rt.approval(args.approval_id)
            edited = _edited_args(args, seen.args)
            # An edit is made on what was read: decided only if nothing changed since.
            version = seen.version if edited is not None else None
            task = rt.approve(args.approval_id, args.by, args.note, if_version=version,
                              args=edited)  # fmt: skip
        else:
            task = rt.reject(args.approval_id, args.by, args.note)
        approval = rt.approval(args.approval_id)
    finally:
        rt.close()
    if args.json:
        print_json({"approval": approval.model_dump(mode="json"),
                    "task": task.model_dump(mode="json")})  # fmt: skip
    else:
        print(f"{approval.approval_id} {approval.status} by {approval.decided_by}: "
              f"task {task.task_id} {task.status}")  # fmt: skip
    return EXIT_OK


def register(sub: Any) -> None:
    """Add ``approvals``, ``approve`` and ``reject``."""
    inbox = sub.add_parser("approvals", help="approval requests, newest first, a page at a time")
    inbox.add_argument(
        "--status", default="open",
        choices=["open", "all", *(s.value for s in ApprovalStatus)],
        help="open (pending or escalated, the default), all, or one status",
    )  # fmt: skip
    inbox.add_argument("--limit", type=positive, default=100, help="page size (default 100)")
    inbox.add_argument("--after", metavar="CURSOR",
                       help="the next page: the cursor the last page printed")  # fmt: skip
    inbox.add_argument("--oldest-first", action="store_true", help="oldest first instead")
    add_format_args(inbox)
    add_db_args(inbox)
    inbox.set_defaults(func=_cmd_approvals)

    for verdict, what in (("approve", "run the task"), ("reject", "cancel the task")):
        p = sub.add_parser(verdict, help=f"{verdict} a pending or escalated request ({what})")
        p.add_argument("approval_id", help="the approval's id (apr_..., from agentq approvals)")
        add_actor_arg(p)
        p.add_argument("--note", default="", help="why (recorded)")
        p.add_argument("--json", action="store_true", help="print approval and task as JSON")
        if verdict == "approve":
            p.add_argument("--args", metavar="JSON|@FILE",
                           help="edit the call: its whole arguments as a JSON object "
                           "(@file or @- reads it)")  # fmt: skip
            p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                           help="edit one argument (VALUE: JSON, else text); repeatable")
        add_db_args(p)
        p.set_defaults(func=lambda a, v=verdict: _decide(a, v))
