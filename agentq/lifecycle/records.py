"""Task records: their shape, how an event changes them, and how they are written.

Pure functions build the next record (or only its changed fields) from the
current one and an event of :mod:`agentq.lifecycle.states`; the ``store*``
functions write them and :func:`send` sends a task's current attempt. Records
are never changed in place, so a transaction function that is re-run starts
from the same input. The events themselves (which record, which messages) are
:mod:`agentq.lifecycle.tasks`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from agentq.backends import Backend, EncodedFields, EncodedRecord, Transaction
from agentq.envelope import envelope_payload
from agentq.errors import TaskNotFound
from agentq.faults import FaultPoints
from agentq.ledger import Tables, TaskStatus
from agentq.lifecycle.states import Event, next_task_state
from agentq.redact import redact_text
from agentq.telemetry import Telemetry

__all__ = [
    "ATTEMPTS_KEPT",
    "Env",
    "Swap",
    "claimed",
    "claimed_fields",
    "due",
    "finished",
    "finished_fields",
    "iso",
    "moved",
    "moved_fields",
    "read",
    "send",
    "store",
    "store_encoded",
    "store_fields",
    "swap_claimed",
    "swap_finals",
]


#: Most ended attempts a task's record keeps in ``attempts`` (the console's
#: timeline of its attempts); older ones are dropped, the attempt numbers say how many.
ATTEMPTS_KEPT = 20
#: Longest error an ended attempt keeps (the record's ``error`` keeps the last whole).
ATTEMPT_ERROR_CHARS = 500


class Env(Protocol):
    """What task events need of the runtime (a :class:`~agentq.runtime.Runtime`)."""

    @property
    def backend(self) -> Backend: ...
    @property
    def telemetry(self) -> Telemetry: ...
    @property
    def faults(self) -> FaultPoints: ...
    @property
    def args_inline_bytes(self) -> int: ...


#: The last time :func:`iso` wrote, and its text: a claimed batch shares one
#: ``now`` (two stamps each), a success writes two stamps of one ``now``.
_last_iso: tuple[datetime | None, str] = (None, "")


def iso(when: datetime) -> str:
    """A time as the ledger stores it."""
    global _last_iso
    last, text = _last_iso  # one tuple, swapped whole: safe from any thread
    if when is last:
        return text
    text = when.isoformat()
    _last_iso = (when, text)
    return text


def read(tx: Transaction, task_id: str) -> dict[str, Any]:
    """A task's record as of this transaction (:class:`TaskNotFound` if none)."""
    rec = tx.get_record(Tables.TASKS, task_id)
    if rec is None:
        raise TaskNotFound(f"no task {task_id!r}")
    return rec


def moved(rec: Mapping[str, Any], event: Event, now: datetime, **changes: Any) -> dict[str, Any]:
    """A new record: ``rec`` after ``event`` (checked against its state), with ``changes``.

    Pure: the caller proves ``rec`` is current (read in the transaction, or
    fenced by a strict ack or a compare-and-swap) and writes it with :func:`store`.
    """
    return {**rec, **moved_fields(rec, event, now, **changes)}


def moved_fields(
    rec: Mapping[str, Any], event: Event, now: datetime, **changes: Any
) -> dict[str, Any]:
    """The fields :func:`moved` changes (checked the same way), and only those."""
    status = next_task_state(str(rec["task_id"]), rec.get("status"), event)
    for name in ("error", "traceback"):  # errors quote URLs, with secrets
        if isinstance(changes.get(name), str):
            changes[name] = redact_text(changes[name])
    history = _attempt_ended(rec, event, now, changes)
    if history is not None:
        changes["attempts"] = history
    return {**changes, "status": status, "updated_at": iso(now)}


def _attempt_ended(
    rec: Mapping[str, Any], event: Event, now: datetime, changes: Mapping[str, Any]
) -> list[dict[str, Any]] | None:
    """The record's ``attempts`` with the one that ``event`` ends, or None when it
    ends none. Only a running attempt ends; a success is not written here (its
    attempt is the record's own ``started_at``/``finished_at``, so the hot path
    writes nothing more), nor a deferral (its handler did not run). A claim of a
    running task is a redelivery: the previous delivery's worker was lost."""
    if rec.get("status") != TaskStatus.RUNNING or event in (Event.SUCCEED, Event.DEFER):
        return None
    lost = event is Event.CLAIM
    error = None if lost else changes.get("error", rec.get("error"))
    entry = {
        "attempt": rec.get("attempt"),
        "delivery": rec.get("deliveries"),
        "started_at": rec.get("started_at"),
        "ended_at": None if lost else iso(now),
        "outcome": "lost" if lost else str(event),
        "error": str(error)[:ATTEMPT_ERROR_CHARS] if error else None,
    }
    kept = list(rec.get("attempts") or ())[-(ATTEMPTS_KEPT - 1) :]
    return [*kept, entry]


def finished(
    rec: Mapping[str, Any],
    event: Event,
    now: datetime,
    *,
    result: Any = None,
    error: str | None = None,
    traceback: str | None = None,
    **changes: Any,
) -> dict[str, Any]:
    """A new record: ``rec`` after a final event (succeed, fail, cancel, ...);
    ``traceback`` is the failure's, kept with its ``error``."""
    fields = finished_fields(
        rec, event, now, result=result, error=error, traceback=traceback, **changes
    )
    return {**rec, **fields}


def finished_fields(
    rec: Mapping[str, Any],
    event: Event,
    now: datetime,
    *,
    result: Any = None,
    error: str | None = None,
    traceback: str | None = None,
    **changes: Any,
) -> dict[str, Any]:
    """The fields :func:`finished` changes, and only those (for :func:`store_fields`)."""
    stamp = iso(now)
    if event is Event.SUCCEED and error is None and traceback is None and not changes:
        # A plain success (every completion of the hot path): what moved_fields
        # gives for it, without its general steps (no text to redact, no attempt
        # history: a success's attempt is the record's own started_at/finished_at).
        status = next_task_state(str(rec["task_id"]), rec.get("status"), event)
        return {"result": result, "error": None, "traceback": None, "finished_at": stamp,
                "next_attempt_at": None, "status": status, "updated_at": stamp}  # fmt: skip
    # Out-of-band arguments stay until the task is pruned (agentq.lifecycle.payloads).
    return moved_fields(
        rec, event, now, result=result, error=error, traceback=traceback, finished_at=stamp,
        next_attempt_at=None, **changes,
    )  # fmt: skip


def claimed(rec: Mapping[str, Any], now: datetime, deliveries: int) -> dict[str, Any]:
    """A new record: ``rec`` claimed by a worker for this delivery."""
    return {**rec, **claimed_fields(rec, now, deliveries)}


def claimed_fields(rec: Mapping[str, Any], now: datetime, deliveries: int) -> dict[str, Any]:
    """The fields :func:`claimed` changes, and only those (for :func:`swap_claimed`)."""
    return moved_fields(rec, Event.CLAIM, now, started_at=iso(now), deliveries=deliveries)


def store(tx: Transaction, rec: Mapping[str, Any]) -> None:
    """Write a record produced by this module (arguments kept out of band are
    never written into it, even if a caller put them in the dict it holds)."""
    if "args" in rec and rec.get("args_ref") is not None:
        rec = {k: v for k, v in rec.items() if k != "args"}
    tx.put_record(Tables.TASKS, str(rec["task_id"]), rec)


def store_encoded(tx: Transaction, task_id: str, encoded: EncodedRecord) -> None:
    """Write the encoding of a record this module produced, made ahead of the
    transaction (:func:`finished`, then ``encode_record``, off the write lock)."""
    tx.put_record(Tables.TASKS, task_id, encoded)


@dataclass(frozen=True)
class Swap:
    """A moved record to write whole where the backend would otherwise read,
    decode and merge its changed fields in Python (PostgreSQL): ``record``, the
    whole new record encoded ahead, replaces the stored text ``version`` (the
    text the claim wrote) in one compare-and-swap, with no read of the record
    and nothing decoded; ``fields`` are its changed fields, set into whatever is
    stored should the record not be at ``version`` after all."""

    version: str
    record: EncodedRecord
    fields: EncodedFields


def store_fields(tx: Transaction, items: Sequence[tuple[str, EncodedFields | Swap]]) -> None:
    """Write, as one set, the changed fields of records this module moved
    (:func:`finished_fields`, encoded ahead of the transaction, off the write
    lock); the rest of each record (its arguments) is not written again. The
    caller has proved each record current (a strict ack in this transaction).
    A :class:`Swap` is swapped in whole from its version, its fields set as the
    others' are if the record is not at that version."""
    swaps = [(key, f.version, f.record) for key, f in items if isinstance(f, Swap)]
    changed = set(tx.replace_records(Tables.TASKS, swaps)) if swaps else set()
    fields = [
        (key, f.fields if isinstance(f, Swap) else f)
        for key, f in items
        if not isinstance(f, Swap) or key in changed
    ]
    missing = tx.update_records(Tables.TASKS, fields) if fields else []
    if missing:
        raise TaskNotFound(f"no task {missing[0]!r} to record the outcome of")


def swap_finals(tx: Transaction, items: Sequence[tuple[str, Swap]]) -> list[str]:
    """Swap each record in whole from its :class:`Swap`'s version and nothing
    else (a fenced completion: no merge into a record changed since its claim);
    returns the ids not at their version, for which nothing was written."""
    return tx.replace_records(Tables.TASKS, [(key, f.version, f.record) for key, f in items])


def swap_claimed(
    tx: Transaction, items: Sequence[tuple[str, str, EncodedRecord | EncodedFields]]
) -> list[str]:
    """Write claimed records (made by :func:`claimed` from a read outside the
    transaction, or only their :func:`claimed_fields`) where each is still the
    version read: a compare-and-swap. Returns the ids that changed since their
    read, to be decided again in a transaction."""
    return tx.replace_records(Tables.TASKS, items)


def send(env: Env, tx: Transaction, rec: Mapping[str, Any], deliver: datetime | None) -> None:
    """Send the message of a task's current attempt."""
    tx.send(rec["queue"], (rec["task_id"], rec["attempt"]), envelope_payload(rec), deliver)
    env.telemetry.sent.add(1, {"queue": rec["queue"]})


def due(tx: Transaction, rec: Mapping[str, Any]) -> datetime | None:
    """When a task that is being sent now should run: its scheduled time, if ahead."""
    at = rec.get("next_attempt_at")
    if not at:
        return None
    when = datetime.fromisoformat(at)
    return when if when > tx.now else None
