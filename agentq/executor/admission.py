"""Admission: turning a leased batch into tasks that may run.

A claim marks a delivery ``running`` (delivery count, ``started_at``) after the
checks that decide whether it may run at all: the message must be the task's
current attempt and the task unfinished; a delivery that keeps failing to
complete is a poison task; the tool must exist, not be held back by a
Retry-After, and a call that needs approval must have an approved approval; a
tool with a per-key limit must get a slot of its key (:mod:`.keyslots`).

On a single-writer backend (SQLite) the common case is prepared outside any
write transaction (the *fast path*): the ledger records are read, checked and
updated in memory, then swapped in with one compare-and-swap write, so the
write lock that every other writer waits for is held only for the swap.
Anything unusual (a record changed since the read, a stale or poison message, a
hold, an approval to check, a corrupt envelope), and every claim on other
backends, is decided the careful way: read and written inside the transaction.

What a message is, decided in :meth:`Admission._claim_one`:

* a **stray** — its key is no task key (wrong types: SQLite keeps whatever
  another program wrote), no task has its id, or its payload is not the
  envelope of its key and it is not the task's current delivery. It is acked
  and recorded as a stray dead-letter entry with the reason
  (:func:`~agentq.executor.outcomes.dead_letter_stray`); no task is read or
  changed, and the tasks leased beside it are claimed as usual;
* **stale** — a well-formed envelope whose task awaits approval, is finished or
  cancelled, or is at another attempt (or in another queue): acked and
  counted, the task left as it is;
* the task's own current delivery with a payload damaged in place: the task is
  dead-lettered (replayable from its ledger record);
* otherwise a delivery to claim (or a poison task, a held-back one, a policy
  refusal).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from agentq.approvals import ApprovalStatus
from agentq.backends import EncodedFields, Message, encode_fields
from agentq.decision import Decision
from agentq.envelope import TaskEnvelope
from agentq.errors import DatabaseNotWritable, TransactionError
from agentq.executor.guarded import claim_guarded, guarded_tool
from agentq.executor.holds import Holds
from agentq.executor.inflight import Inflight, looks_like_envelope
from agentq.executor.keyslots import KeySlots
from agentq.executor.outcomes import dead_letter_stray
from agentq.executor.running import tool_timeout
from agentq.faults import WorkerCrash
from agentq.ledger import TERMINAL, Tables, TaskStatus
from agentq.lifecycle import payloads
from agentq.lifecycle import tasks as lifecycle
from agentq.lifecycle.approvals import approved_args
from agentq.policies import format_duration
from agentq.tools import ToolDef

if TYPE_CHECKING:
    from agentq.runtime import Runtime

__all__ = ["DEFAULT_UNKNOWN_TOOL_GRACE", "Admission"]

log = logging.getLogger("agentq.worker")

#: Statuses in which a task has no delivery to run: a message for it is stale.
_NOT_RUNNABLE = TERMINAL | {TaskStatus.AWAITING_APPROVAL}

#: How long a task for a tool this worker does not know is left for a worker
#: that knows it (a rolling deploy) before it is dead-lettered.
DEFAULT_UNKNOWN_TOOL_GRACE = timedelta(hours=24)
_UNKNOWN_TOOL_FIRST_DELAY = timedelta(seconds=1)
_UNKNOWN_TOOL_MAX_DELAY = timedelta(minutes=5)

#: The runtime's own timers, run without a tool handler.
BUILTIN_TOOLS = lifecycle.BUILTIN_TIMERS


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


class Admission:
    """Claims leased messages for one worker; see the module docstring."""

    def __init__(
        self,
        runtime: Runtime,
        holds: Holds,
        count: Callable[[str], None],
        *,
        max_deliveries: int,
        unknown_tool_grace: timedelta = DEFAULT_UNKNOWN_TOOL_GRACE,
    ) -> None:
        self.runtime = runtime
        self.holds = holds
        self.max_deliveries = max_deliveries
        self.unknown_tool_grace = unknown_tool_grace
        self._unknown_logged: set[str] = set()
        self._count = count
        self.key_slots = KeySlots(runtime)

    def claim(self, batch: list[Message]) -> list[Inflight]:
        """Mark a leased batch running and return what may run."""
        rt = self.runtime
        labels: list[str] = []
        fast, slow = self._plan_claims(batch)
        runnable: list[Inflight] = []
        if fast:
            # Only the claim's fields: SQLite sets them inside the stored record,
            # so the rest of it (the arguments) is not encoded or written again.
            items = [(inf.task_id, version, fields) for inf, version, _, fields in fast]
            try:
                # Bookkeeping: after a power loss it may be lost, which only
                # undercounts a delivery by one.
                changed = set(
                    rt.transact(lambda tx: lifecycle.swap_claimed(tx.tx, items), durable=False)
                )
            except TransactionError:
                changed = {inf.task_id for inf, _, _, _ in fast}
            for inf, _, msg, _ in fast:
                if inf.task_id in changed:
                    slow.append(msg)  # written since the read: decide again, in the tx
                else:
                    runnable.append(inf)
        if slow:
            claimed, labels = self._claim_in_transaction(slow)
            runnable.extend(claimed)
        for label in labels:
            self._count(label)
        kept = []
        for inflight in runnable:
            try:
                rt.faults.hit("after_lease", task_id=inflight.task_id)
            except WorkerCrash:
                self._count("crashed")  # abandoned while leased: redelivered later
                continue
            kept.append(inflight)
        return kept

    # -- the fast path: read, check, swap in ---------------------------------------

    def _plan_claims(
        self, batch: list[Message]
    ) -> tuple[list[tuple[Inflight, str, Message, EncodedFields]], list[Message]]:
        """Split a batch into claims prepared from a read (with the version read
        and the claim's changed fields, encoded) and messages to claim inside a
        transaction."""
        rt = self.runtime
        if not rt.backend.single_writer:
            return [], list(batch)  # reading first would only add a read per task
        checked = [(m, looks_like_envelope(m.payload, m.key)) for m in batch]
        keys = [str(m.key[0]) for m, wellformed in checked if wellformed]
        stored = rt.backend.read_records(Tables.TASKS, keys) if keys else {}
        offloaded = [k for k, found in stored.items() if payloads.is_offloaded(found.value)]
        rows = rt.backend.read_records(Tables.PAYLOADS, offloaded) if offloaded else {}
        now = rt.clock.now()
        fast: list[tuple[Inflight, str, Message, EncodedFields]] = []
        slow: list[Message] = []

        def read(table: str, key: str) -> dict[str, Any] | None:
            row = rows.get(key) if table == Tables.PAYLOADS else None
            return None if row is None else row.value

        for msg, wellformed in checked:
            found = stored.get(str(msg.key[0])) if wellformed else None
            prepared = None if found is None else self._prepare_claim(msg, found.value, now, read)
            if prepared is None or found is None:
                slow.append(msg)
            else:
                fast.append((prepared[0], found.version, msg, prepared[1]))
        return fast, slow

    def _prepare_claim(
        self, msg: Message, rec: dict[str, Any], now: datetime, read: payloads.Reader
    ) -> tuple[Inflight, EncodedFields] | None:
        """The running record of an ordinary delivery and its changed fields, or
        None to decide in a transaction (every branch that writes more than the
        claim goes there)."""
        rt = self.runtime
        try:
            args = payloads.args_of(read, rec) if payloads.is_offloaded(rec) else None
        except payloads.ArgumentsUnavailable:
            return None  # decided (dead-lettered, saying why) in the transaction
        if (
            rec["status"] in _NOT_RUNNABLE
            or rec["attempt"] != msg.key[1]
            or rec.get("queue", msg.queue) != msg.queue
            or rec.get("ordering_key")  # whether it is the key's active task: read in the tx
        ):
            return None
        deliveries = rec.get("deliveries", 0) + 1
        if deliveries > self.max_deliveries:
            return None
        definition: ToolDef | None = None
        if rec["tool"] not in BUILTIN_TOOLS:
            if rec["tool"] not in rt.tools or self.key_slots.limited(rec["tool"]):
                return None
            definition = rt.tools.get(rec["tool"])
            if definition.guarded:
                return None  # its claim is durable and may hold the delivery off
            hold = self.holds.until(rt.backend, now, rec["tool"])
            if (hold is not None and hold > now) or self._needs_approval(rec, definition, args):
                return None
        fields = lifecycle.claimed_fields(rec, now, deliveries)
        inflight = self._make_inflight(msg, {**rec, **fields}, definition)
        inflight.args = args
        return inflight, encode_fields(fields)

    # -- the careful path: decided inside the transaction ----------------------------

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

    def _unknown_tool(
        self, tx: Decision, rec: dict[str, Any], key: Sequence[Any], deliveries: int
    ) -> str:
        """A task for a tool this worker does not know. During a rolling deploy a
        newer worker may know it, so it is left for one: sent again after a delay
        that grows with the time it has waited (1 s, doubling, at most 5 min), not
        counted as a failure. Only after ``unknown_tool_grace`` is it dead-lettered,
        saying why. Returns the stats label."""
        rt, now, tool = self.runtime, tx.now, str(rec["tool"])
        since_text = rec.get("unknown_tool_since")
        since = datetime.fromisoformat(since_text) if since_text else now
        waited = now - since
        grace = format_duration(self.unknown_tool_grace)
        if waited >= self.unknown_tool_grace:
            known = ", ".join(rt.tools.names()) or "none"
            lifecycle.dead_letter(
                rt, tx.tx, rec,
                f"unknown tool {tool!r}: no worker that knows it took this task within "
                f"{grace} (this worker knows: {known}); deploy a worker with this tool, "
                "then replay the task", ack_key=key,
            )  # fmt: skip
            return "dead"
        if tool not in self._unknown_logged:
            self._unknown_logged.add(tool)
            log.warning(
                "tool %r is not known to this worker: its tasks are left for a worker that "
                "knows it (dead-lettered after %s)", tool, grace,
            )  # fmt: skip
        delay = min(max(waited, _UNKNOWN_TOOL_FIRST_DELAY), _UNKNOWN_TOOL_MAX_DELAY)
        lifecycle.defer(
            rt, tx.tx, rec, now + delay, deliveries=deliveries, ack_key=key,
            changes={"unknown_tool_since": lifecycle.iso(since)},
        )  # fmt: skip
        return "unknown_tool"

    # -- checks ------------------------------------------------------------------------

    def _make_inflight(
        self, msg: Message, rec: dict[str, Any], definition: ToolDef | None
    ) -> Inflight:
        return Inflight(
            queue=msg.queue,
            key=tuple(msg.key),
            token=msg.lease_token,
            lease_expiry=msg.lease_expiry,
            record=rec,
            definition=definition,
            timeout=tool_timeout(self.runtime, definition),
        )

    def _needs_approval(
        self, rec: dict[str, Any], definition: ToolDef, args: dict[str, Any] | None
    ) -> bool:
        """``args``: the task's out-of-band arguments (None: they are in ``rec``)."""
        if rec.get("kind", "action") != "action":
            return False
        call_args = rec["args"] if args is None else args
        rule = self.runtime.policy.approval_rule(definition.name, call_args)
        return rule is not None or definition.requires_approval

    def _policy_violation(
        self, tx: Decision, rec: dict[str, Any], definition: ToolDef, args: dict[str, Any] | None
    ) -> str | None:
        """The executor's own check: approval rules are read from policy and the
        approval record, never from the task's arguments or envelope."""
        if not self._needs_approval(rec, definition, args):
            return None
        approval_id = rec.get("approval_id")
        approval = tx.tx.get_record(Tables.APPROVALS, approval_id) if approval_id else None
        if (
            approval is None
            or approval["status"] != ApprovalStatus.APPROVED
            or approval["task_id"] != rec["task_id"]
            or approved_args(approval) != (rec["args"] if args is None else args)
        ):
            return (
                f"policy: tool {definition.name!r} with these arguments needs an approved "
                "approval, and this task has none"
            )
        return None
