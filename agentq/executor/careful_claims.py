"""The careful path of a claim: each message decided inside the transaction.

Every claim the fast path of :class:`~agentq.executor.admission.Admission` does
not prepare (a record changed since its read, a stale, stray or poison message,
a hold, an approval to check, a tool with a per-key limit or a guarded call, a
corrupt envelope), and every claim on a backend with more than one writer,
is decided here by :meth:`CarefulClaims._claim_one`, reading and writing in the
transaction; see :mod:`agentq.executor.admission` for what each outcome is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agentq.backends import Message
from agentq.decision import Decision
from agentq.envelope import TaskEnvelope
from agentq.errors import DatabaseNotWritable, TransactionError
from agentq.executor.guarded import claim_guarded, guarded_tool
from agentq.executor.inflight import Inflight, looks_like_envelope
from agentq.executor.outcomes import dead_letter_stray
from agentq.ledger import Tables
from agentq.lifecycle import payloads
from agentq.lifecycle import tasks as lifecycle
from agentq.tools import ToolDef

if TYPE_CHECKING:
    pass
from agentq.executor.claim_checks import (
    _NOT_RUNNABLE,
    BUILTIN_TOOLS,
    ClaimChecks,
)

__all__ = ["CarefulClaims"]

log = logging.getLogger("agentq.worker")


def _fits_task_key(key: Sequence[Any]) -> bool:
    """Whether ``key`` is a task queue key (task_id, attempt) of the right types;
    a row written around agentq may hold anything (SQLite keeps what it is given)."""
    return (
        len(key) == 2
        and isinstance(key[0], str)
        and isinstance(key[1], int)
        and not isinstance(key[1], bool)
    )


def _has_its_message(tx: Decision, rec: dict[str, Any]) -> bool:
    """Whether the task's current attempt has a queue message of its own: not so
    for a task waiting behind the active task of its ordering key, so a row under
    its key was written by someone else."""
    key = rec.get("ordering_key")
    if not key:
        return True
    ordering = tx.tx.get_record(Tables.ORDERING, key)
    return ordering is not None and ordering.get("active") == rec["task_id"]


def _corrupt_envelope(msg: Message) -> str:
    """Why a payload is not this message's envelope, precisely."""
    if isinstance(msg.payload, str):
        return "corrupt envelope: the payload is not JSON"
    try:
        TaskEnvelope.model_validate(msg.payload)
    except ValidationError as exc:
        return f"corrupt envelope: {exc.error_count()} error(s): {exc}"
    return f"corrupt envelope: key {tuple(msg.key)!r} does not match its payload"


class CarefulClaims(ClaimChecks):
    """Claims decided inside a transaction, one message at a time."""

    def _claim_in_transaction(self, batch: list[Message]) -> tuple[list[Inflight], list[str]]:
        """Claim ``batch`` in one transaction (one at a time if that fails); returns
        what may run and the stats labels of what may not. Each run of a claim
        function starts afresh (its own labels, records read in the transaction):
        the backend may run it again after an abort."""
        rt = self.runtime

        def claim_all(tx: Decision) -> tuple[list[Inflight], list[str]]:
            labels: list[str] = []
            out = []
            for msg in batch:
                inflight = self._claim_one(tx, msg, labels)
                if inflight is not None:
                    out.append(inflight)
            return out, labels

        # A guarded tool's claim records that its call starts: it must survive a
        # power loss (see agentq.executor.guarded); other claims are bookkeeping.
        durable = any(guarded_tool(rt, m.payload) for m in batch)
        try:
            return rt.transact(claim_all, durable=durable)
        except DatabaseNotWritable:
            raise  # nothing can be claimed: the worker stops
        except Exception:
            # One message (already acked elsewhere, say, or one whose claim hits a
            # bug) must not block the others.
            runnable: list[Inflight] = []
            all_labels: list[str] = []
            for msg in batch:

                def claim_alone(
                    tx: Decision, m: Message = msg
                ) -> tuple[Inflight | None, list[str]]:
                    labels: list[str] = []
                    return self._claim_one(tx, m, labels), labels

                try:
                    inflight, labels = rt.transact(claim_alone, durable=durable)
                except DatabaseNotWritable:
                    raise
                except TransactionError as exc:
                    log.info("claim of %s skipped: %s", msg.key, exc)
                    continue
                except Exception:
                    log.exception("claim of %s failed; it will be redelivered", msg.key)
                    continue
                all_labels.extend(labels)
                if inflight is not None:
                    runnable.append(inflight)
            return runnable, all_labels

    def _claim_one(self, tx: Decision, msg: Message, labels: list[str]) -> Inflight | None:
        """Decide one message inside the transaction: a stray (dead-lettered as
        such), stale (acked), poison, held back, refused, or claimed."""
        rt = self.runtime
        key = msg.key
        if not _fits_task_key(key):
            dead_letter_stray(
                tx, msg, f"key {tuple(key)!r} is not a task key (task_id: str, attempt: int)"
            )
            labels.append("stray")
            return None
        task_id, attempt = str(key[0]), key[1]
        rec = tx.tx.get_record(Tables.TASKS, task_id)
        current = (
            rec is not None
            and rec["attempt"] == attempt
            and rec.get("queue", msg.queue) == msg.queue
            and rec["status"] not in _NOT_RUNNABLE
            and _has_its_message(tx, rec)
        )
        if not looks_like_envelope(msg.payload, key):
            reason = _corrupt_envelope(msg)
            if rec is not None and current:
                # The task's own delivery (its key is unique in the queue) with a
                # payload damaged in place: the task is dead-lettered, replayable.
                lifecycle.dead_letter(rt, tx.tx, rec, reason, ack_key=key)
                labels.append("dead")
            else:
                dead_letter_stray(tx, msg, reason)
                labels.append("stray")
            return None
        if rec is None:
            dead_letter_stray(tx, msg, f"no task {task_id!r} in the ledger")
            labels.append("stray")
            return None
        if not current:
            # Awaiting approval, finished, cancelled, or another attempt than the
            # task's current one: nothing to run, and the task stays as it is.
            tx.tx.ack(msg.queue, key, must_exist=False)
            labels.append("stale_message")
            return None
        deliveries = int(rec.get("deliveries", 0)) + 1
        if deliveries > self.max_deliveries:
            lifecycle.dead_letter(
                rt, tx.tx, rec,
                f"delivered {deliveries - 1} times without completing "
                "(the worker crashed or lost its lease each time)", ack_key=key,
            )  # fmt: skip
            labels.append("dead")
            return None
        args: dict[str, Any] | None = None
        if payloads.is_offloaded(rec):
            try:
                args = payloads.args_of(tx.tx.get_record, rec)
            except payloads.ArgumentsUnavailable as exc:
                lifecycle.dead_letter(rt, tx.tx, rec, str(exc), ack_key=key)
                labels.append("dead")
                return None
        definition: ToolDef | None = None
        if rec["tool"] not in BUILTIN_TOOLS:
            if rec["tool"] not in rt.tools:
                labels.append(self._unknown_tool(tx, rec, key, deliveries))
                return None
            definition = rt.tools.get(rec["tool"])
            hold = self.holds.until(tx.tx, tx.now, rec["tool"])
            if hold is not None and hold > tx.now:
                lifecycle.defer(rt, tx.tx, rec, hold, deliveries=deliveries, ack_key=key)
                labels.append("held_back")
                return None
            violation = self._policy_violation(tx, rec, definition, args)
            if violation is not None:
                lifecycle.dead_letter(rt, tx.tx, rec, violation, ack_key=key)
                labels.append("policy_refused")
                return None
        if definition is not None and definition.guarded:
            slot = lambda c: self.key_slots.take(tx, rec, c, tuple(key), deliveries)  # noqa: E731
            return claim_guarded(rt, tx, msg, rec, definition, deliveries, labels,
                                 self._make_inflight, slot)  # fmt: skip
        claimed = lifecycle.claimed(rec, tx.now, deliveries)
        if definition is not None:
            holding = self.key_slots.take(tx, rec, claimed, tuple(key), deliveries, args)
            if holding is None:
                labels.append("key_limited")  # deferred until its key has a free slot
                return None
            claimed = holding
        lifecycle.store(tx.tx, claimed)
        inflight = self._make_inflight(msg, claimed, definition)
        inflight.args = args
        return inflight
