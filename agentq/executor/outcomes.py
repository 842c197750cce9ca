"""Turning a finished run into lifecycle events: succeed, retry, throttle, fail.

The executor decides *which* event a run or a delivery comes to; the state
change itself, and the queue operations it implies, are
:mod:`agentq.lifecycle.tasks`' (the only code that writes a task's status):

* :func:`apply_outcome` — a run's completion: succeed (with the handler's
  ``on_commit`` writes and an approval timer's effect), checkpoint, or a failure;
  :func:`apply_plain_successes` — a committer's group of plain successes, as sets;
  :func:`apply_fenced_successes` — the same, in a fenced transaction (READ
  COMMITTED on PostgreSQL), where no task waits on them;
* :func:`apply_failure` — defer (rate-limited: not run yet), throttle (429/503
  with a Retry-After within the cap), fail for good (permanent, attempts used
  up), or retry with backoff;
* :func:`succeeded_changes`, :func:`succeeded_record` / :func:`succeeded_fields` —
  a plain success, built (once) and encoded by the handler thread ahead of its
  commit (the whole record, or only the fields the success changes);
* :func:`dead_letter_stray` — a message that is no delivery of any task.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from agentq import joins
from agentq.backends import EncodedFields, EncodedRecord, Message, encode_fields, encode_record
from agentq.decision import Decision
from agentq.errors import InvalidMessage, PolicyViolation, ToolError
from agentq.executor.guarded import may_have_applied, parked_reason
from agentq.executor.holds import Holds
from agentq.executor.inflight import Inflight, Outcome
from agentq.ledger import Tables, TaskStatus
from agentq.lifecycle import approval_timers, dead_letters, tallies
from agentq.lifecycle import guarded as lifecycle_guarded
from agentq.lifecycle import tasks as lifecycle
from agentq.lifecycle.records import swap_finals
from agentq.lifecycle.states import Event
from agentq.logs import failure_traceback
from agentq.ratelimit import RateLimitWait
from agentq.retry import PermanentError, RetryLater, judge_retry_later

__all__ = [
    "TIMER_KINDS",
    "Unfenced",
    "apply_failure",
    "apply_fenced_successes",
    "apply_outcome",
    "apply_plain_successes",
    "dead_letter_stray",
    "fenced_eligible",
    "succeeded_changes",
    "succeeded_fields",
    "succeeded_record",
]

#: Failures that no retry can fix: straight to the dead-letter queue.
_PERMANENT = (PermanentError, PolicyViolation, ToolError, ValidationError)

#: Task kinds whose success moves their approval (escalated, expired).
TIMER_KINDS = frozenset({"escalation", "expiry", "auto_reject", "reminder"})


def apply_outcome(
    tx: Decision,
    o: Outcome,
    holds: Holds,
    finals: list[tuple[str, EncodedFields | lifecycle.Swap]] | None = None,
) -> str:
    """Ack the delivery and record what the run came to; returns the stats label.

    A plain success's encoded fields are appended to ``finals``, when given, for
    the caller to write with the others' as one set
    (:func:`~agentq.lifecycle.tasks.store_fields`) before the transaction ends.

    Pure with respect to in-memory state (``o`` is left as it is), so it can be
    run any number of times; only the last run's writes commit."""
    inf = o.inflight
    rt = tx.runtime
    tx.tx.ack(inf.queue, inf.key, must_exist=True)
    rt.telemetry.acked.add(1, {"queue": inf.queue})
    rt.faults.hit("before_completion_commit", task_id=inf.task_id)
    # The strict ack above proves no one else finished or cancelled this task
    # since the claim, so the claimed record is current. The lifecycle never
    # changes a record in place: a re-run (an abort at commit, the committer
    # re-running a failed group one outcome at a time) starts from the same one.
    rec = inf.record
    if o.final is not None:
        if isinstance(o.final, EncodedRecord):
            lifecycle.store_encoded(tx.tx, inf.task_id, o.final)
        elif finals is None:
            lifecycle.store_fields(tx.tx, [(inf.task_id, o.final)])
        else:
            finals.append((inf.task_id, o.final))
        tallies.add(tx.tx, [o.tally])
        # One point read: a task enqueued with after= may wait on this one.
        lifecycle.settle_waiters(rt, tx.tx, {**rec, "status": TaskStatus.SUCCEEDED})
        return "succeeded"
    if o.kind == "success":
        for fn in o.on_commit:
            fn(tx)
        if rec.get("kind") in TIMER_KINDS:
            approval_timers.fired(rt, tx.tx, rec)
        lifecycle.finish(rt, tx.tx, rec, Event.SUCCEED, result=o.result)
        return "succeeded"
    if o.kind == "checkpoint":
        assert o.checkpoint is not None
        settled: dict[str, Any] = {"unsettled_call": False} if rec.get("unsettled_call") else {}
        lifecycle.reschedule(
            rt, tx.tx, rec, Event.CHECKPOINT, tx.now + o.checkpoint.after, error=None,
            checkpoint=o.checkpoint.state, **settled,
        )  # fmt: skip
        return "checkpointed"
    return apply_failure(tx, rec, inf, o.exc, holds)


def apply_plain_successes(tx: Decision, outcomes: list[Outcome]) -> list[str]:
    """:func:`apply_outcome` for outcomes that are all plain successes (each with
    its ``final`` encoded ahead), written as sets: one strict ack per queue, the
    ledger fields as one set, one read for the tasks waiting on them. Any message
    already gone rolls all of it back (the committer then commits each alone)."""
    rt = tx.runtime
    _ack_by_queue(tx, outcomes)
    fields: list[tuple[str, EncodedFields | lifecycle.Swap]] = []
    for o in outcomes:
        inf = o.inflight
        rt.faults.hit("before_completion_commit", task_id=inf.task_id)
        if isinstance(o.final, EncodedFields | lifecycle.Swap):
            fields.append((inf.task_id, o.final))
        else:
            assert o.final is not None, "not a plain success"
            lifecycle.store_encoded(tx.tx, inf.task_id, o.final)
    if fields:
        lifecycle.store_fields(tx.tx, fields)
    tallies.add(tx.tx, (o.tally for o in outcomes))  # the group's, at once
    # The strict acks prove each claimed record current (see apply_outcome).
    lifecycle.settle_waiters_of_successes(rt, tx.tx, [o.inflight.record for o in outcomes])
    return ["succeeded"] * len(outcomes)


class Unfenced(Exception):
    """A completion run as a fenced transaction (:func:`apply_fenced_successes`)
    found what only a serializable one may decide: nothing of it commits, and the
    committer runs it again as any other."""


def fenced_eligible(outcomes: list[Outcome]) -> bool:
    """Whether a committer's group can be written by :func:`apply_fenced_successes`:
    plain successes, each swapped in whole from the text its claim wrote (no
    ordering key, run, slot, schedule, webhook or handler write: those take the
    general path, see ``Running._encode_success``)."""
    return all(isinstance(o.final, lifecycle.Swap) for o in outcomes)


def apply_fenced_successes(tx: Decision, outcomes: list[Outcome]) -> list[str]:
    """:func:`apply_plain_successes` for a fenced transaction
    (``Backend.transact(fn, fenced=True)``: READ COMMITTED on PostgreSQL), where
    every write rests only on itself: each strict ack must find its message, and
    each record is swapped in from the very text its claim wrote (a
    compare-and-swap, re-checked on the newest row after any concurrent writer).
    Anything else raises :class:`Unfenced`, for the committer to run the group
    again at SERIALIZABLE: a record changed since its claim (a redelivery's claim,
    a cancel), or a task waiting on one of these (releasing it reads and writes
    the waiter's record, which two completions may do at once).

    No task waits on them is checked *after* the swaps, by the next statement
    (PostgreSQL checks it with the commit): an enqueue that registers a waiter
    reads its prerequisite locked (:func:`agentq.joins.pending_prerequisites`),
    so a swap either waited for that enqueue's commit, and the check then sees
    its waiter, or came first, and the enqueue fails as a conflict and reads the
    success when it runs again."""
    rt = tx.runtime
    _ack_by_queue(tx, outcomes)
    swaps: list[tuple[str, lifecycle.Swap]] = []
    for o in outcomes:
        final = o.final
        assert isinstance(final, lifecycle.Swap), "not a plain success swapped in whole"
        rt.faults.hit("before_completion_commit", task_id=o.inflight.task_id)
        swaps.append((o.inflight.task_id, final))
    changed = swap_finals(tx.tx, swaps)
    if changed:
        raise Unfenced(f"task {changed[0]!r} changed since its claim")
    tallies.add(tx.tx, (o.tally for o in outcomes))  # appended: no row two writers share
    waited = joins.waited_on(tx.tx, [o.inflight.task_id for o in outcomes])
    if waited:
        raise Unfenced(f"a task waits on {sorted(waited)[0]!r}")
    return ["succeeded"] * len(outcomes)


def _ack_by_queue(tx: Decision, outcomes: list[Outcome]) -> None:
    """The outcomes' strict acks, one set per queue."""
    by_queue: dict[str, list[tuple[Any, ...]]] = {}
    for o in outcomes:
        by_queue.setdefault(o.inflight.queue, []).append(o.inflight.key)
    for queue, keys in by_queue.items():
        tx.tx.ack_all(queue, keys)
        tx.runtime.telemetry.acked.add(len(keys), {"queue": queue})


def apply_failure(
    tx: Decision, rec: dict[str, Any], inf: Inflight, exc: BaseException | None, holds: Holds
) -> str:
    """A failed (or not started) attempt: deferred, throttled, dead or retried."""
    rt = tx.runtime
    error = f"{type(exc).__name__}: {exc}"
    trace = failure_traceback(exc)
    definition = inf.definition
    if rec.get("unsettled_call") and definition is not None and definition.guarded:
        if not may_have_applied(exc):
            rec = {**rec, "unsettled_call": False}  # the handler judged its own call
        elif definition.reconcile is None:
            lifecycle_guarded.park(rt, tx.tx, rec, parked_reason(rec, error))
            return "outcome_unknown"
        # else: retried below with the call unsettled: the next delivery reconciles
    if isinstance(exc, RateLimitWait):  # its turn is later: it did not run, not a failure
        waiting = dict(rec)
        exc.keep_turn(waiting)
        lifecycle.defer(rt, tx.tx, waiting, exc.at, deliveries=int(rec.get("deliveries", 1)))
        return "rate_limited"
    if isinstance(exc, RetryLater):
        until, error = judge_retry_later(exc, tx.now, rt.policy.max_retry_after(rec["tool"]))
        if until is not None:  # None: beyond the cap, an ordinary failure below
            throttles = int(rec.get("throttles", 0)) + 1
            if throttles > rt.policy.retry_policy(rec["tool"]).max_throttles:
                lifecycle.dead_letter(rt, tx.tx, rec, f"throttled {throttles} times: {error}",
                                      event=Event.FAIL)  # fmt: skip
                return "dead"
            holds.local[rec["tool"]] = until
            tx.tx.put_record(
                Tables.HOLDS, rec["tool"], {"until": lifecycle.iso(until), "reason": error}
            )
            lifecycle.reschedule(rt, tx.tx, rec, Event.THROTTLE, until, error=error,
                                 throttles=throttles)  # fmt: skip
            return "throttled"
    if isinstance(exc, _PERMANENT):
        lifecycle.dead_letter(rt, tx.tx, rec, error, event=Event.FAIL, traceback=trace)
        return "dead"
    max_attempts = definition.max_attempts if definition else None
    policy = rt.policy.retry_policy(rec["tool"], max_attempts)
    failures = int(rec.get("failures", 0)) + 1
    if policy.exhausted(failures):
        lifecycle.dead_letter(
            rt, tx.tx, {**rec, "failures": failures},
            f"failed {failures} time(s); last: {error}", event=Event.FAIL, traceback=trace,
        )  # fmt: skip
        return "dead"
    at = tx.now + timedelta(seconds=policy.delay(failures))
    lifecycle.reschedule(
        rt, tx.tx, rec, Event.RETRY, at, error=error, failures=failures, traceback=trace
    )
    return "retried"


def succeeded_changes(rec: dict[str, Any], now: datetime, result: Any) -> dict[str, Any]:
    """The fields a plain success changes (made once, by the handler thread, for
    both :func:`succeeded_fields` and :func:`succeeded_record`)."""
    return lifecycle.finished_fields(rec, Event.SUCCEED, now, result=result)


def succeeded_record(rec: dict[str, Any], changes: dict[str, Any]) -> EncodedRecord:
    """The succeeded record of a plain success (``rec`` with its
    :func:`succeeded_changes`), encoded ahead of the commit (by the handler
    thread) so the commit only writes it; ``rec`` is left as it is."""
    return encode_record({**rec, **changes})


def succeeded_fields(changes: dict[str, Any]) -> EncodedFields | None:
    """The fields a plain success changes (its :func:`succeeded_changes`),
    encoded ahead of the commit (by the handler thread): the commit then neither
    decodes nor re-encodes the rest of the record. None for a result no JSON can
    hold (NaN): the commit writes the whole record instead, as before."""
    try:
        return encode_fields(changes)
    except ValueError:
        return None


def dead_letter_stray(tx: Decision, msg: Message, reason: str) -> bool:
    """Ack a message that is no delivery of any task (written around agentq, or a
    corrupt copy) and record it as a stray dead-letter entry; no task is touched.

    Returns whether the message was removed. A key that does not fit the queue's
    key types (SQLite keeps whatever another program wrote) cannot be acked, so
    it is deleted by its key exactly as stored (``ack_stored``): otherwise the
    row would come back after every lease and be dead-lettered again, forever."""
    try:
        dead_letters.record_stray(tx.tx, msg.queue, msg.key, msg.payload, reason)
        return True
    except InvalidMessage as exc:
        removed = tx.tx.ack_stored(msg.queue, msg.key)
        how = "removed by its key as stored" if removed else "could not be removed"
        dead_letters.record_stray(
            tx.tx, msg.queue, msg.key, msg.payload, f"{reason} ({exc}; {how})",
            ack=False, acked=removed,
        )  # fmt: skip
        return removed
