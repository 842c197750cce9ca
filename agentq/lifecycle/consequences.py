"""What a task's end brings about, in the transaction that records it.

A final record frees what the task held and moves what waited on it: its
per-key slot (handed to the first waiter), its completion webhook, its
schedule's next run, the next task of its ordering key, and the tasks waiting
on it with ``after=`` (released or voided). Out-of-band arguments stay until
retention prunes the task (:mod:`agentq.lifecycle.payloads`). Every task
event that ends a task goes through :func:`write_final`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentq import joins, keylimits, ordering, webhooks
from agentq.backends import Transaction
from agentq.ledger import Tables, TaskStatus
from agentq.lifecycle import tallies
from agentq.lifecycle.records import Env, due, finished, iso, moved, send, store
from agentq.lifecycle.states import Event

__all__ = [
    "after_final",
    "release_key_slot",
    "send_webhook",
    "settle_waiters",
    "settle_waiters_of_successes",
    "write_final",
]


def write_final(env: Env, tx: Transaction, new: Mapping[str, Any]) -> None:
    """Write a final record and everything its end brings about."""
    store(tx, new)
    tallies.add_finished(tx, [new])  # the console's chart: succeeded or dead actions
    after_final(env, tx, new)
    settle_waiters(env, tx, new)


def settle_waiters(env: Env, tx: Transaction, new: Mapping[str, Any]) -> None:
    """``new`` is final in this transaction: decide the tasks waiting on it. Its
    success releases each one it was the last prerequisite of (its message is
    sent now); any other end voids them (cancelled, the reason naming ``new``),
    and their own waiters in turn, worked through a list, not by recursion."""
    finished_now: list[Mapping[str, Any]] = [new]
    while finished_now:
        done = finished_now.pop()
        done_id = str(done["task_id"])
        for waiter_id in joins.take_waiters(tx, done_id):
            waiter = tx.get_record(Tables.TASKS, waiter_id)
            if waiter is None or waiter["status"] != TaskStatus.WAITING:
                continue  # cancelled meanwhile
            if done["status"] != TaskStatus.SUCCEEDED:
                reason = (
                    f"task {done_id!r} ({done['tool']}) that it waited on is "
                    f"{done['status']}: {done.get('error') or 'no result'}"
                )
                voided = finished(waiter, Event.VOID, tx.now, error=reason)
                store(tx, voided)
                after_final(env, tx, voided)
                finished_now.append(voided)
                continue
            left = [t for t in waiter.get("waiting_on", []) if t != done_id]
            if left:
                store(tx, {**waiter, "waiting_on": left, "updated_at": iso(tx.now)})
            else:
                released = moved(waiter, Event.RELEASE, tx.now, waiting_on=[])
                store(tx, released)
                send(env, tx, released, due(tx, released))


def settle_waiters_of_successes(
    env: Env, tx: Transaction, succeeded: Sequence[Mapping[str, Any]]
) -> None:
    """:func:`settle_waiters` for tasks that succeeded in this transaction (their
    records as they were before, the status aside), finding with one read which
    of them any task waits on: a committer's group asks once, not once per task."""
    waited = joins.waited_on(tx, [str(rec["task_id"]) for rec in succeeded])
    for rec in succeeded:
        if str(rec["task_id"]) in waited:
            settle_waiters(env, tx, {**rec, "status": TaskStatus.SUCCEEDED})


def after_final(env: Env, tx: Transaction, new: Mapping[str, Any]) -> None:
    """What a final record brings about besides its waiters: its webhook, its
    schedule's next run, its durable run's join, and the next task of its
    ordering key."""
    if new.get("key_slot"):
        release_key_slot(env, tx, new)
    if new.get("callback_url"):
        send_webhook(env, tx, new)
    if new.get("schedule"):
        from agentq.lifecycle import schedules  # it builds on this module

        schedules.run_finished(env, tx, new)  # the next run, in this transaction
    if new.get("run"):
        from agentq.lifecycle import runs  # it builds on this module

        runs.task_ended(env, tx, new)  # a durable run's join, in this transaction
    key = new.get("ordering_key")
    if not key:
        return
    nxt = ordering.release(tx, key, str(new["task_id"]))
    while nxt is not None:
        waiting = tx.get_record(Tables.TASKS, nxt)
        if waiting is not None and waiting["status"] == TaskStatus.QUEUED:
            # A waiting task never had a message: a row under its key was written
            # around agentq, and must not make this (the head's) transaction fail.
            tx.ack(waiting["queue"], (nxt, waiting["attempt"]), must_exist=False)
            send(env, tx, waiting, due(tx, waiting))
            return
        nxt = ordering.release(tx, key, nxt)  # not sendable (gone): skip it


#: Statuses of a task that waits for a per-key slot (deferred, with a message).
_WAITING = (TaskStatus.QUEUED, TaskStatus.RETRY_SCHEDULED)


def release_key_slot(env: Env, tx: Transaction, rec: Mapping[str, Any]) -> None:
    """``rec`` left ``running``: free the per-key slot it held and send the first
    task waiting for one now, handing it the slot (:mod:`agentq.keylimits`)."""
    from agentq.lifecycle import tasks  # it builds on this module

    key = str(rec["key_slot"])
    if not keylimits.release(tx, key, str(rec["task_id"]), int(rec["attempt"])):
        return
    while (waiter := keylimits.take_waiter(tx, key)) is not None:
        waiting = tx.get_record(Tables.TASKS, waiter)
        if waiting is None or waiting["status"] not in _WAITING:
            continue  # finished, cancelled or running meanwhile: not waiting any more
        # Its message is the fallback re-check, scheduled later: replaced by one
        # for now (a new attempt key, so a worker holding the old one finds it stale).
        tx.ack(waiting["queue"], (waiter, waiting["attempt"]), must_exist=False)
        sent = tasks.reschedule(env, tx, waiting, Event.DEFER, tx.now, error=waiting.get("error"))
        keylimits.hand_over(tx, key, waiter, int(sent["attempt"]))
        return


def send_webhook(env: Env, tx: Transaction, new: Mapping[str, Any]) -> None:
    """The completion webhook of a finished task, in its completion transaction:
    it commits with the outcome or not at all (:mod:`agentq.webhooks`)."""
    from agentq.lifecycle import tasks  # it builds on this module

    args = webhooks.webhook_args(new)
    tasks.create(
        env, tx, tool=webhooks.WEBHOOK_TOOL, queue=webhooks.WEBHOOK_QUEUE, args=args,
        kind="webhook", event=Event.ENQUEUE, http_idempotency_key=args["webhook_id"],
    )  # fmt: skip
