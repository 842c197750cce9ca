"""The dead-letter queue's own events: stray entries and replay.

A task's dead-letter entry is written by :func:`~agentq.lifecycle.tasks.dead_letter`
with its final status. This module keeps what is about entries: a message that
is no task's current delivery becomes a *stray* entry under an id of its own
(it can be deleted, never replayed, and never touches a task), and a replay
sends a dead task again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from agentq import ordering
from agentq.backends import Transaction
from agentq.errors import IllegalTransition, TaskNotFound
from agentq.ledger import Tables
from agentq.lifecycle.states import Event
from agentq.lifecycle.tasks import Env, iso, moved, send, store
from agentq.redact import redact_text

__all__ = ["delete_entry", "record_stray", "replay"]

#: How much of a stray message's payload its dead-letter entry keeps.
_STRAY_PAYLOAD_CHARS = 4096


def record_stray(
    tx: Transaction, queue: str, key: Sequence[Any], payload: Any, error: str, *,
    ack: bool = True, acked: bool | None = None,
) -> str:  # fmt: skip
    """Ack a message that is no task's current delivery (unless ``ack`` is False:
    the caller removed it otherwise, ``acked`` says whether) and keep it as a
    stray dead-letter entry under its own id, never a task's: it can be deleted,
    never replayed, and it touches no task. Returns the entry's id."""
    if ack:
        tx.ack(queue, tuple(key), must_exist=True)
    digest = hashlib.sha256(f"{queue}\x00{tuple(key)!r}".encode()).hexdigest()[:24]
    entry_id = f"stray_{digest}"
    if isinstance(payload, bytes | bytearray):
        payload = bytes(payload).decode("utf-8", "replace")
    if isinstance(payload, str):
        payload = payload[:_STRAY_PAYLOAD_CHARS]
    elif not isinstance(payload, dict | list):
        payload = repr(payload)[:_STRAY_PAYLOAD_CHARS]
    first = key[0] if key and isinstance(key[0], str) else None
    tx.put_record(
        Tables.DEAD_LETTERS,
        entry_id,
        {
            "entry_id": entry_id, "kind": "stray", "stray": True, "task_id": None,
            "claimed_task_id": first, "tool": None, "queue": queue, "args": None,
            "attempt": None, "message_key": repr(tuple(key)),
            "acked": ack if acked is None else acked,
            "error": redact_text(error), "dead_at": iso(tx.now), "payload": payload,
        },
    )  # fmt: skip
    return entry_id


def replay(env: Env, tx: Transaction, task_id: str) -> dict[str, Any]:
    """Send a dead task again with a fresh set of attempts; anything else is refused."""
    entry = tx.get_record(Tables.DEAD_LETTERS, task_id)
    if entry is not None and entry.get("stray"):
        raise IllegalTransition(
            f"dead-letter entry {task_id!r} is a stray message ({entry.get('message_key')} in "
            f"queue {entry.get('queue')!r}), not a task: it cannot be replayed, only deleted"
        )
    rec = tx.get_record(Tables.TASKS, task_id)
    if rec is None:
        raise TaskNotFound(f"no task or dead-letter entry {task_id!r}")
    ref = rec.get("args_ref")
    if ref is not None and ref.get("released"):  # deleted by an earlier release
        raise IllegalTransition(
            f"task {task_id!r} cannot be replayed: its arguments ({ref.get('bytes')} bytes, "
            "kept out of band) were deleted with its dead-letter entry"
        )
    new = moved(
        rec, Event.REPLAY, tx.now, attempt=int(rec["attempt"]) + 1, failures=0, throttles=0,
        deliveries=0, error=None, result=None, finished_at=None, next_attempt_at=None,
    )  # fmt: skip
    tx.delete_record(Tables.DEAD_LETTERS, task_id)
    store(tx, new)
    key = new.get("ordering_key")
    if not key or ordering.admit(tx, key, task_id):
        send(env, tx, new, None)
    return new


def delete_entry(tx: Transaction, entry_id: str) -> dict[str, Any] | None:
    """Delete a dead-letter entry (the task stays dead in the ledger, with its
    arguments, until retention prunes it); returns the entry, or None if there
    was none."""
    entry = tx.get_record(Tables.DEAD_LETTERS, entry_id)
    if entry is None or not tx.delete_record(Tables.DEAD_LETTERS, entry_id):
        return None
    return entry
