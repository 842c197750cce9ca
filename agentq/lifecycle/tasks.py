"""Task events: the only code that writes a task's status.

Each function applies one event of :mod:`agentq.lifecycle.states` inside the
caller's transaction, together with the queue operations it implies (send,
ack, releasing the next task of an ordering key, freeing a per-key slot and
sending the task that waited for it), so a task's record and its
messages never disagree. Records are never changed in place: every function
returns a new dict, so a transaction function that is re-run (an abort, a
group commit falling back to one at a time) starts from the same input and
counts every failure and attempt once.

The records themselves (their shape, the changes an event makes, how they are
written and sent) are :mod:`agentq.lifecycle.records`; what a task's end brings
about (its slot, webhook, ordering key's next task, waiters) is
:mod:`agentq.lifecycle.consequences`; the names callers use are re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from agentq import joins, ordering
from agentq.backends import Transaction, encode_record
from agentq.envelope import TaskKind, check_args_size, checked_payload
from agentq.errors import InvalidArguments
from agentq.idempotency import remember
from agentq.ids import new_task_id
from agentq.ledger import TERMINAL, Tables, TaskStatus
from agentq.lifecycle import payloads
from agentq.lifecycle.consequences import (
    release_key_slot,
    settle_waiters,
    settle_waiters_of_successes,
    write_final,
)
from agentq.lifecycle.records import (
    Env,
    Swap,
    claimed,
    claimed_fields,
    finished,
    finished_fields,
    iso,
    moved,
    moved_fields,
    read,
    send,
    store,
    store_encoded,
    store_fields,
    swap_claimed,
)
from agentq.lifecycle.states import Event, next_approval_state, next_task_state

__all__ = [
    "BUILTIN_AUTO_REJECT",
    "BUILTIN_ESCALATION",
    "BUILTIN_EXPIRY",
    "BUILTIN_REMINDER",
    "BUILTIN_TIMERS",
    "ESCALATION_QUEUE",
    "LOCAL",
    "RUNTIME",
    "Env",
    "Swap",
    "approval_timer_ids",
    "cancel",
    "cancel_timer",
    "claimed",
    "claimed_fields",
    "create",
    "dead_letter",
    "defer",
    "finish",
    "finished",
    "finished_fields",
    "iso",
    "moved",
    "moved_fields",
    "read",
    "reschedule",
    "send",
    "settle_waiters",
    "settle_waiters_of_successes",
    "store",
    "store_encoded",
    "store_fields",
    "swap_claimed",
]

#: Who created a task when no one was named (a Python caller without ``by=``).
LOCAL = "local"
#: Who created the runtime's own tasks (timers, notifications, webhooks).
RUNTIME = "agentq"
#: Queue of the runtime's own timers (escalations and expiries without a tool).
ESCALATION_QUEUE = "escalations"
#: Tool name of an escalation timer when no escalation tool is installed.
BUILTIN_ESCALATION = "_escalation"
#: Tool name of an approval's expiry timer.
BUILTIN_EXPIRY = "_expiry"
#: Tool name of an approval's deadline that rejects it (``on_timeout = "reject"``).
BUILTIN_AUTO_REJECT = "_auto_reject"
#: Tool name of a reminder when no notification tool is installed (it only logs).
BUILTIN_REMINDER = "_reminder"
#: The runtime's own timers, run without a tool handler.
BUILTIN_TIMERS = frozenset({BUILTIN_ESCALATION, BUILTIN_EXPIRY, BUILTIN_AUTO_REJECT,
                            BUILTIN_REMINDER})  # fmt: skip


def create(
    env: Env,
    tx: Transaction,
    *,
    tool: str,
    queue: str,
    args: dict[str, Any],
    kind: TaskKind,
    event: Event,
    ordering_key: str | None = None,
    idempotency_key: str | None = None,
    approval_id: str | None = None,
    deliver: datetime | None = None,
    callback_url: str | None = None,
    http_idempotency_key: str | None = None,
    after: Sequence[str] = (),
    task_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
    args_text: str | None = None,
    created_by: str | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """A new task (enqueue, schedule or request approval); sent if it may run.

    Its envelope is checked even when it is not sent now (behind an ordering
    key, awaiting approval, waiting), so it can always be sent later. A ``callback_url``
    (checked by the caller: :func:`agentq.webhooks.check_callback_url`) gets a
    webhook task in the transaction that finishes the task. ``task_id`` fixes the
    id (a schedule's run: :mod:`agentq.lifecycle.schedules`); ``extra`` are more
    fields of the record. ``args_text`` is
    ``args`` already encoded (:func:`~agentq.lifecycle.payloads.encode_args`,
    done before the transaction when it can be): the arguments are stored once,
    in the record or, above ``env.args_inline_bytes``, out of band
    (:mod:`agentq.lifecycle.payloads`). The returned record carries ``args``
    either way; the stored one only when they are inline. ``after``: the
    unfinished tasks it waits on (checked by :func:`agentq.joins.pending_prerequisites`);
    it is ``waiting`` until the last of them succeeds. ``created_by``: the
    principal that asked for it (None for the runtime's own tasks: timers,
    notifications, webhooks), recorded in the record's JSON (no column, so no
    schema change on either backend). ``fingerprint``: the idempotency key's
    digest of the whole request (:func:`agentq.idempotency.request_digest`).
    """
    if args_text is None:
        try:
            args_text = payloads.encode_args(args)
        except ValueError as exc:
            raise InvalidArguments(f"task of tool {tool!r}: {exc}") from exc
    check_args_size(tool, len(args_text))
    task_id = task_id or new_task_id(tx.now if env.backend.ordered_keys else None)
    if after:
        event = Event.WAIT
    status = next_task_state(task_id, None, event)
    now = iso(tx.now)
    rec: dict[str, Any] = {
        "task_id": task_id,
        "tool": tool,
        "kind": kind,
        "queue": queue,
        "status": status,
        "attempt": 1,
        "failures": 0,
        "throttles": 0,
        "deliveries": 0,
        "ordering_key": ordering_key,
        "approval_id": approval_id,
        "idempotency_key": idempotency_key,
        "trace": env.telemetry.enqueue_trace(tool, task_id),
        "created_at": now,
        "updated_at": now,
        "next_attempt_at": iso(deliver) if deliver else None,
    }
    rec["created_by"] = created_by or (LOCAL if kind == "action" else RUNTIME)
    if callback_url is not None:
        rec["callback_url"] = callback_url
    if http_idempotency_key is not None:
        rec["http_idempotency_key"] = http_idempotency_key
    if after:
        rec["after"] = rec["waiting_on"] = list(after)
        for prerequisite in after:
            joins.add_waiter(tx, prerequisite, task_id)
    if extra:
        rec.update(extra)
    if len(args_text) > env.args_inline_bytes:
        rec["args_ref"] = payloads.offload(tx, task_id, args_text)
        encoded = encode_record(rec)
    else:
        # The record's text with the arguments' text spliced in: encoded once.
        encoded = encode_record(rec).extended(f',"args":{args_text}')
    if status is TaskStatus.QUEUED and (
        ordering_key is None or ordering.admit(tx, ordering_key, task_id)
    ):
        send(env, tx, rec, deliver)  # the send checks the envelope
    else:
        checked_payload(rec)
    store_encoded(tx, task_id, encoded)
    if idempotency_key is not None:
        remember(tx, idempotency_key, tool, args, task_id, created_by=created_by,
                 fingerprint=fingerprint)  # fmt: skip
    env.faults.hit("in_decision", task_id=task_id)
    rec["args"] = args  # for the caller; store() never writes it beside args_ref
    return rec


def finish(
    env: Env,
    tx: Transaction,
    rec: Mapping[str, Any],
    event: Event,
    *,
    result: Any = None,
    error: str | None = None,
    **changes: Any,
) -> dict[str, Any]:
    """Apply a final event, write it, and let the next task of its ordering key go."""
    new = finished(rec, event, tx.now, result=result, error=error, **changes)
    write_final(env, tx, new)
    return new


def reschedule(
    env: Env,
    tx: Transaction,
    rec: Mapping[str, Any],
    event: Event,
    at: datetime,
    *,
    error: str | None,
    ack_key: Sequence[Any] | None = None,
    **changes: Any,
) -> dict[str, Any]:
    """Ack this delivery (if ``ack_key``) and send the next attempt, a new key, for
    ``at``; a per-key slot the task held is freed."""
    if rec.get("key_slot"):
        changes["key_slot"] = None
    new = moved(
        rec, event, tx.now, attempt=int(rec["attempt"]) + 1, deliveries=0, error=error,
        next_attempt_at=iso(at), **changes,
    )  # fmt: skip
    if ack_key is not None:
        tx.ack(new["queue"], tuple(ack_key), must_exist=True)
    store(tx, new)
    send(env, tx, new, at)
    if rec.get("key_slot"):
        release_key_slot(env, tx, rec)
    return new


def defer(
    env: Env,
    tx: Transaction,
    rec: Mapping[str, Any],
    at: datetime,
    *,
    deliveries: int,
    ack_key: Sequence[Any] | None = None,
    changes: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Send a task that did not run now (a hold on its tool, its rate limit, a
    tool this worker does not know) again for ``at``, not as a failure; ``changes``
    are bookkeeping fields to record with it.

    A task is ``queued`` afterwards only if no handler can have run it yet (the
    first delivery of its first attempt); a redelivery after a worker died, or a
    later attempt, may have called the external API already, so it is
    ``retry_scheduled`` (a throttle): an agent must not read "queued" as "never
    charged". ``deliveries`` counts this delivery.
    """
    first_try = int(rec["attempt"]) == 1 and deliveries <= 1
    running = rec["status"] == TaskStatus.RUNNING
    event = Event.THROTTLE if running and not first_try else Event.DEFER
    return reschedule(
        env, tx, rec, event, at, error=rec.get("error"), ack_key=ack_key, **(changes or {})
    )


def dead_letter(
    env: Env,
    tx: Transaction,
    rec: Mapping[str, Any],
    error: str,
    *,
    event: Event = Event.DEAD_LETTER,
    ack_key: Sequence[Any] | None = None,
    traceback: str | None = None,
) -> dict[str, Any]:
    """Ack this delivery (if ``ack_key``) and move the task to the dead-letter queue."""
    new = finished(rec, event, tx.now, error=error, traceback=traceback)
    if ack_key is not None:
        tx.ack(new["queue"], tuple(ack_key), must_exist=True)
    tx.put_record(
        Tables.DEAD_LETTERS,
        str(new["task_id"]),
        {
            "entry_id": new["task_id"], "kind": "task", "stray": False,
            "task_id": new["task_id"], "tool": new["tool"], "queue": new.get("queue"),
            "args": new.get("args"), "args_ref": new.get("args_ref"),
            "attempt": new["attempt"], "error": new["error"],
            "traceback": new.get("traceback"), "dead_at": iso(tx.now),
        },
    )  # fmt: skip
    write_final(env, tx, new)
    return new


def cancel(
    env: Env, tx: Transaction, task_id: str, *, reason: str = "cancelled", skip: str = ""
) -> dict[str, Any]:
    """Cancel a task that has not finished: its message is deleted (a running
    attempt's completion then fails, so nothing of it is recorded), its approval
    is voided and its approval's timers are cancelled. A finished task raises
    :class:`IllegalTransition`."""
    rec = read(tx, task_id)
    new = finished(rec, Event.CANCEL, tx.now, error=reason)
    status = rec["status"]
    if status == TaskStatus.AWAITING_APPROVAL:
        if _void_approval(env, tx, rec):
            new["approval_status"] = "void"
    else:
        key = rec.get("ordering_key")
        waiting = key is not None and ordering.forget(tx, key, task_id)
        if not waiting:
            tx.ack(rec["queue"], (task_id, rec["attempt"]), must_exist=False)
    write_final(env, tx, new)
    return new


def cancel_timer(env: Env, tx: Transaction, task_id: str | None, reason: str) -> None:
    """Cancel an approval's timer or notification if it has not run yet."""
    if not task_id:
        return
    rec = tx.get_record(Tables.TASKS, task_id)
    if rec is not None and rec["status"] not in TERMINAL:
        cancel(env, tx, task_id, reason=reason)


def approval_timer_ids(approval: Mapping[str, Any]) -> list[str]:
    """Every timer (and notification) task an approval record names."""
    fields = ("escalation_task_id", "notify_task_id", "expiry_task_id", "deadline_task_id")
    named = [approval.get(field) for field in fields]
    named += list(approval.get("reminder_task_ids") or ())
    return list(dict.fromkeys(str(t) for t in named if t))


def _void_approval(env: Env, tx: Transaction, task: Mapping[str, Any]) -> bool:
    approval_id = task.get("approval_id")
    approval = tx.get_record(Tables.APPROVALS, approval_id) if approval_id else None
    if approval is None:
        return False
    status = next_approval_state(str(approval_id), approval["status"], Event.CANCEL)
    voided = {**approval, "status": status, "decided_at": iso(tx.now)}
    tx.put_record(Tables.APPROVALS, str(approval_id), voided)
    for timer in approval_timer_ids(approval):
        cancel_timer(env, tx, timer, "its approval was voided")
    return True
