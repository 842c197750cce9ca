"""Turning a finished run into ledger writes: succeeded, retry, dead, checkpoint.

Every task-status write the executor makes is one of the functions here:

* :func:`mark_running` — the claim (the caller writes the record);
* :func:`succeeded_record` — a plain success, encoded ahead of its commit;
* :func:`finish` — a final status (succeeded, dead) and the release of the next
  task of its ordering key;
* :func:`reschedule` — ack this delivery and send the next attempt (a retry, a
  checkpoint, a Retry-After hold);
* :func:`dead_letter` — the dead-letter entry of a task, then :func:`finish`;
* :func:`dead_letter_stray` — a message that is no delivery of any task
  (written around agentq): recorded under its own entry, no task touched.

:func:`apply_outcome` decides which, from an :class:`~agentq.executor.inflight.Outcome`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from agentq.approvals import ApprovalStatus
from agentq.backends import EncodedRecord, Message, encode_record
from agentq.errors import InvalidMessage, PolicyViolation, ToolError
from agentq.executor.holds import Holds
from agentq.executor.inflight import Inflight, Outcome
from agentq.ledger import Tables, TaskStatus
from agentq.retry import PermanentError, RetryLater
from agentq.runtime import Decision, _iso, finish_record

__all__ = [
    "apply_failure",
    "apply_outcome",
    "dead_letter",
    "dead_letter_stray",
    "finish",
    "mark_running",
    "reschedule",
    "succeeded_record",
]

#: How much of a stray message's payload its dead-letter entry keeps.
_STRAY_PAYLOAD_CHARS = 4096

#: Failures that no retry can fix: straight to the dead-letter queue.
_PERMANENT = (PermanentError, PolicyViolation, ToolError, ValidationError)


def apply_outcome(tx: Decision, o: Outcome, holds: Holds) -> str:
    """Ack the delivery and record what the run came to; returns the stats label.

    Pure with respect to in-memory state (``o`` is left as it is), so it can be
    run any number of times; only the last run's writes commit."""
    inf = o.inflight
    rt = tx.runtime
    tx.tx.ack(inf.queue, inf.key, must_exist=True)
    rt.telemetry.acked.add(1, {"queue": inf.queue})
    rt.faults.hit("before_completion_commit", task_id=inf.task_id)
    # The strict ack above proves no one else finished or cancelled this task
    # since the claim, so the claimed record is current. Each run of this
    # function works on its own copy of it: a backend may run a transaction
    # function again (an abort at commit) and the committer re-runs a failed
    # group one outcome at a time, and neither may count a failure twice.
    rec = dict(inf.record)
    if o.final is not None:
        tx.tx.put_record(Tables.TASKS, inf.task_id, o.final)
        return "succeeded"
    if o.kind == "success":
        for fn in o.on_commit:
            fn(tx)
        if rec.get("kind") == "escalation":
            _mark_escalated(tx, rec)
        finish(tx, rec, TaskStatus.SUCCEEDED, result=o.result)
        return "succeeded"
    if o.kind == "checkpoint":
        assert o.checkpoint is not None
        rec["checkpoint"] = o.checkpoint.state
        reschedule(tx, rec, None, None, tx.now + o.checkpoint.after,
                   status=TaskStatus.QUEUED, error=None)  # fmt: skip
        return "checkpointed"
    return apply_failure(tx, rec, inf, o.exc, holds)


def apply_failure(
    tx: Decision, rec: dict[str, Any], inf: Inflight, exc: BaseException | None, holds: Holds
) -> str:
    """A failed attempt: throttled, dead (permanent or out of attempts) or retried."""
    error = f"{type(exc).__name__}: {exc}"
    definition = inf.definition
    if isinstance(exc, RetryLater):
        return _retry_later(tx, rec, exc, error, holds)
    if isinstance(exc, _PERMANENT):
        dead_letter(tx, rec, None, None, error)
        return "dead"
    max_attempts = definition.max_attempts if definition else None
    policy = tx.runtime.policy.retry_policy(rec["tool"], max_attempts)
    rec["failures"] = rec.get("failures", 0) + 1
    if policy.exhausted(rec["failures"]):
        dead_letter(tx, rec, None, None, f"failed {rec['failures']} time(s); last: {error}")
        return "dead"
    delay = policy.delay(rec["failures"])
    reschedule(tx, rec, None, None, tx.now + timedelta(seconds=delay),
               status=TaskStatus.RETRY_SCHEDULED, error=error)  # fmt: skip
    return "retried"


def _retry_later(
    tx: Decision, rec: dict[str, Any], exc: RetryLater, error: str, holds: Holds
) -> str:
    """The tool said 429/503 with Retry-After: hold the tool back and retry then."""
    policy = tx.runtime.policy.retry_policy(rec["tool"])
    rec["throttles"] = rec.get("throttles", 0) + 1
    if rec["throttles"] > policy.max_throttles:
        dead_letter(tx, rec, None, None, f"throttled {rec['throttles']} times: {error}")
        return "dead"
    until = tx.now + timedelta(seconds=exc.after)
    holds.local[rec["tool"]] = until
    tx.tx.put_record(Tables.HOLDS, rec["tool"], {"until": _iso(until), "reason": error})
    reschedule(tx, rec, None, None, until, status=TaskStatus.RETRY_SCHEDULED, error=error)
    return "throttled"


def _mark_escalated(tx: Decision, rec: dict[str, Any]) -> None:
    approval = tx.tx.get_record(Tables.APPROVALS, rec["approval_id"])
    if approval is not None and approval["status"] == ApprovalStatus.PENDING:
        approval.update(status=ApprovalStatus.ESCALATED, escalated_at=_iso(tx.now))
        tx.tx.put_record(Tables.APPROVALS, rec["approval_id"], approval)


# -- status writes (always inside the caller's transaction) ------------------------


def mark_running(rec: dict[str, Any], now: datetime) -> None:
    """The claim: ``rec`` (read for this claim, in memory) becomes ``running``. The
    caller writes it: compare-and-swap on the fast path, in the transaction
    otherwise."""
    stamp = _iso(now)
    rec.update(status=TaskStatus.RUNNING, started_at=stamp, updated_at=stamp)


def succeeded_record(rec: dict[str, Any], now: datetime, result: Any) -> EncodedRecord:
    """The succeeded ledger record of a plain success, encoded ahead of the commit
    (by the handler thread) so the commit only writes it; ``rec`` is left as it is."""
    final = dict(rec)
    finish_record(final, TaskStatus.SUCCEEDED, _iso(now), result=result)
    return encode_record(final)


def finish(
    tx: Decision,
    rec: dict[str, Any],
    status: TaskStatus,
    *,
    result: Any = None,
    error: str | None = None,
) -> None:
    """Record a final status; the next task of its ordering key may go."""
    tx._finish(rec, status, result=result, error=error)


def reschedule(
    tx: Decision,
    rec: dict[str, Any],
    queue: str | None,
    key: Iterable[Any] | None,
    at: datetime,
    *,
    status: TaskStatus,
    error: str | None,
) -> None:
    """Ack this delivery (if ``key`` is given) and send the next attempt (a new
    key) for ``at``."""
    if key is not None and queue is not None:
        tx.tx.ack(queue, tuple(key), must_exist=True)
    rec.update(
        attempt=rec["attempt"] + 1, deliveries=0, status=status, error=error,
        updated_at=_iso(tx.now), next_attempt_at=_iso(at),
    )  # fmt: skip
    tx.tx.put_record(Tables.TASKS, rec["task_id"], rec)
    tx._send(rec, at)


def dead_letter(
    tx: Decision,
    rec: dict[str, Any],
    queue: str | None,
    key: Iterable[Any] | None,
    error: str,
) -> None:
    """Ack this delivery (if ``key`` is given) and move the task to the dead-letter queue."""
    if key is not None and queue is not None:
        tx.tx.ack(queue, tuple(key), must_exist=True)
    tx.tx.put_record(
        Tables.DEAD_LETTERS,
        rec["task_id"],
        {
            "task_id": rec["task_id"], "tool": rec["tool"], "queue": rec.get("queue"),
            "args": rec.get("args"), "attempt": rec["attempt"], "error": error,
            "dead_at": _iso(tx.now),
        },
    )  # fmt: skip
    finish(tx, rec, TaskStatus.DEAD, error=error)


def stray_entry_id(msg: Message) -> str:
    """The dead-letter key of a stray message: its queue and a digest of its key,
    never a task id, so a stray entry can neither overwrite a task's entry nor be
    replayed as one."""
    digest = hashlib.sha256(repr(tuple(msg.key)).encode()).hexdigest()[:24]
    return f"stray:{msg.queue}:{digest}"


def dead_letter_stray(tx: Decision, msg: Message, reason: str) -> bool:
    """Ack a message that is no delivery of any task (written around agentq, or a
    corrupt copy) and record it as a stray dead-letter entry with ``reason``.

    No task's record is read or written. Returns whether the message was acked:
    a key that does not fit the queue's key columns cannot be named through the
    queue API, so that row stays (its entry says so) and is redelivered with the
    backend's backoff, recorded again each time under the same entry.
    """
    try:
        tx.tx.ack(msg.queue, msg.key, must_exist=True)
        acked = True
    except InvalidMessage as exc:
        acked = False
        reason = f"{reason}; the row cannot be acked through the queue API ({exc})"
    payload = msg.payload
    if isinstance(payload, str | bytes):
        text = payload if isinstance(payload, str) else payload.decode("utf-8", "replace")
        payload = text[:_STRAY_PAYLOAD_CHARS]
    elif not isinstance(payload, dict | list):
        payload = repr(payload)[:_STRAY_PAYLOAD_CHARS]
    tx.tx.put_record(
        Tables.DEAD_LETTERS,
        stray_entry_id(msg),
        {"kind": "stray", "task_id": None, "tool": None, "queue": msg.queue,
         "message_key": repr(tuple(msg.key)), "args": None, "attempt": None,
         "error": reason, "dead_at": _iso(tx.now), "acked": acked, "payload": payload},
    )  # fmt: skip
    return acked
