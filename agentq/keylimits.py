"""Per-key concurrency limits, shared by every worker on one database.

A tool's policy may say ``concurrency_key = "merchant_id"`` and
``max_in_flight = 2``: at most two of its tasks with the same ``merchant_id``
argument run at once, counted across every worker process sharing the
database, not per process. The state lives in the database, one record per
(tool, key value) in the ``key_slots`` table, read and written through the
backend contract (``tx.get_record`` / ``tx.put_record``) inside the
transactions that claim and finish tasks, so it is the same on SQLite and on
Spanner and two workers can never take the same slot.

A key's record holds its **holders** (task id → the attempt it holds the slot
for and until when) and the FIFO of tasks **waiting** for a slot:

* a worker claiming a task takes a slot in the claim transaction
  (:func:`acquire`); with none free, the task is deferred (ack + send later, not
  a failure) and joins the waiting list;
* a task leaving ``running`` (success, failure and its retry, dead letter,
  timeout, cancel, checkpoint) releases its slot in the transaction that
  records it (:func:`release`), which hands the slot to the first waiting task
  and sends that task at once (done by :mod:`agentq.lifecycle.tasks`);
* a holder's slot lasts :data:`SLOT_SECONDS` (one lease) and the worker
  running it extends it with its lease renewals (:func:`renew`). A worker that
  dies stops extending it, so its slots free themselves at most one lease
  later: a crash never holds a slot for longer. Waiting tasks are also sent
  again by then (the earliest holder's expiry), so they notice a slot freed
  that way without anyone writing.

The key's value is canonical JSON of the argument (a missing argument counts as
``null``: every call without it shares one key), hashed into the record key, so
an agent's argument never becomes a record key of its choosing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agentq.backends import LEASE_SECONDS, Transaction
from agentq.clock import from_micros, to_micros
from agentq.policies import Policy

__all__ = [
    "KEY_SLOTS",
    "MAX_WAITING",
    "SLOT_SECONDS",
    "KeyLimit",
    "acquire",
    "hand_over",
    "held_until",
    "holders",
    "key_limit",
    "release",
    "renew",
    "slot_key",
    "take_waiter",
    "waiting_tasks",
]

#: Record table of the keys' holders and waiting tasks.
KEY_SLOTS = "key_slots"
#: Seconds a slot is held without being extended (one lease).
SLOT_SECONDS = float(LEASE_SECONDS)
#: Waiting tasks one key's record lists; more wait by re-checking at the
#: earliest holder's expiry, so a record stays small.
MAX_WAITING = 1000

_SLOT_US = int(SLOT_SECONDS * 1_000_000)


@dataclass(frozen=True)
class KeyLimit:
    """A tool's per-key limit: ``max_in_flight`` tasks per value of ``field``."""

    field: str
    max_in_flight: int


def key_limit(policy: Policy, tool: str) -> KeyLimit | None:
    """The tool's per-key limit, or ``None`` if it has none."""
    configured = policy.for_tool(tool)
    if configured.concurrency_key is None or configured.max_in_flight is None:
        return None
    return KeyLimit(configured.concurrency_key, configured.max_in_flight)


def slot_key(tool: str, args: Mapping[str, Any], field: str) -> str:
    """The record key of the slots of ``tool`` for this call's value of ``field``."""
    value = json.dumps(args.get(field), sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(f"{tool}\x00{value}".encode()).hexdigest()[:40]
    return f"{tool}:{digest}"


def _live(rec: Mapping[str, Any] | None, now: int) -> dict[str, dict[str, int]]:
    """The holders whose slot has not expired (anything malformed counts as free:
    a record agentq did not write must not block the key forever)."""
    found = rec.get("holders") if rec else None
    if not isinstance(found, dict):
        return {}
    live = {}
    for task_id, entry in found.items():
        if (
            isinstance(entry, dict)
            and isinstance(entry.get("until"), int)
            and isinstance(entry.get("attempt"), int)
            and entry["until"] > now
        ):
            live[str(task_id)] = {"attempt": entry["attempt"], "until": entry["until"]}
    return live


def held_until(rec: Mapping[str, Any] | None) -> datetime | None:
    """When the last slot a key's record lists ends (or ended); ``None`` if it lists
    none. Malformed entries hold nothing, as for :func:`acquire`."""
    found = rec.get("holders") if rec else None
    ends = [
        entry["until"]
        for entry in (found.values() if isinstance(found, dict) else ())
        if isinstance(entry, dict)
        and isinstance(entry.get("until"), int)
        and isinstance(entry.get("attempt"), int)
    ]
    if not ends:
        return None
    try:
        return from_micros(max(ends))
    except OverflowError:  # a record agentq did not write: held as long as can be
        return datetime.max.replace(tzinfo=UTC)


def waiting_tasks(rec: Mapping[str, Any] | None) -> list[str]:
    """The tasks a key's record lists as waiting for a slot, first first."""
    return _waiting(rec)


def _waiting(rec: Mapping[str, Any] | None) -> list[str]:
    found = rec.get("waiting") if rec else None
    return [w for w in found if isinstance(w, str)] if isinstance(found, list) else []


def _limit(rec: Mapping[str, Any] | None, default: int) -> int:
    found = rec.get("limit") if rec else None
    if isinstance(found, int) and not isinstance(found, bool) and found > 0:
        return found
    return default


def _store(
    tx: Transaction, key: str, held: dict[str, dict[str, int]], waiting: list[str], limit: int
) -> None:
    if not held and not waiting:
        tx.delete_record(KEY_SLOTS, key)
    else:
        tx.put_record(KEY_SLOTS, key, {"holders": held, "waiting": waiting, "limit": limit})


def acquire(
    tx: Transaction, key: str, task_id: str, attempt: int, max_in_flight: int
) -> datetime | None:
    """Take a slot of ``key`` for ``task_id`` at ``attempt``; ``None`` if taken.

    With every slot held, the task joins the waiting list (keeping its place if
    it is on it) and the answer is when to look again: the earliest holder's
    expiry, by which that slot is free unless its worker extended it.
    A task that holds a slot already (a redelivery after its worker died) takes
    it again rather than a second one.
    """
    now = to_micros(tx.now)
    rec = tx.get_record(KEY_SLOTS, key)
    held = _live(rec, now)
    waiting = _waiting(rec)
    held.pop(task_id, None)
    if len(held) < max_in_flight:
        held[task_id] = {"attempt": attempt, "until": now + _SLOT_US}
        _store(tx, key, held, [w for w in waiting if w != task_id], max_in_flight)
        return None
    if task_id not in waiting and len(waiting) < MAX_WAITING:
        waiting.append(task_id)
    _store(tx, key, held, waiting, max_in_flight)
    return from_micros(min(entry["until"] for entry in held.values()))


def release(tx: Transaction, key: str, task_id: str, attempt: int) -> bool:
    """``task_id`` at ``attempt`` is no longer running: free its slot. Returns
    whether a slot is free for a waiting task now (see :func:`take_waiter`)."""
    now = to_micros(tx.now)
    rec = tx.get_record(KEY_SLOTS, key)
    if rec is None:
        return False
    held = _live(rec, now)
    entry = held.get(task_id)
    if entry is None or entry["attempt"] != attempt:
        return False  # not its slot (any more): nothing to free
    del held[task_id]
    limit = _limit(rec, len(held) + 1)
    waiting = _waiting(rec)
    _store(tx, key, held, waiting, limit)
    return bool(waiting) and len(held) < limit


def take_waiter(tx: Transaction, key: str) -> str | None:
    """Remove and return the first waiting task of ``key`` (the caller sends it,
    then hands it the slot with :func:`hand_over`), or ``None``."""
    rec = tx.get_record(KEY_SLOTS, key)
    waiting = _waiting(rec)
    if not waiting:
        return None
    first = waiting.pop(0)
    now = to_micros(tx.now)
    _store(tx, key, _live(rec, now), waiting, _limit(rec, 1))
    return first


def hand_over(tx: Transaction, key: str, task_id: str, attempt: int) -> None:
    """Give a slot of ``key`` to a waiting task just sent as ``attempt``: the slot
    is kept for it (one lease long) so no newcomer takes it first."""
    rec = tx.get_record(KEY_SLOTS, key)
    now = to_micros(tx.now)
    held = _live(rec, now)
    held[task_id] = {"attempt": attempt, "until": now + _SLOT_US}
    _store(tx, key, held, _waiting(rec), _limit(rec, len(held)))


def renew(tx: Transaction, held_slots: list[tuple[str, str, int]]) -> list[str]:
    """Extend the slots of running tasks, ``(key, task_id, attempt)`` each, by one
    lease from now. Returns the task ids whose slot had expired and was taken by
    another task meanwhile (the key is over its limit until one finishes)."""
    now = to_micros(tx.now)
    lost = []
    by_key: dict[str, list[tuple[str, int]]] = {}
    for key, task_id, attempt in held_slots:
        by_key.setdefault(key, []).append((task_id, attempt))
    for key, tasks in by_key.items():
        rec = tx.get_record(KEY_SLOTS, key)
        held = _live(rec, now)
        limit = _limit(rec, len(held) + len(tasks))
        for task_id, attempt in tasks:
            entry = held.get(task_id)
            if entry is not None and entry["attempt"] != attempt:
                continue  # a newer delivery holds it: this run is stale
            if entry is None and len(held) >= limit:
                lost.append(task_id)
                continue
            held[task_id] = {"attempt": attempt, "until": now + _SLOT_US}
        _store(tx, key, held, _waiting(rec), limit)
    return lost


def holders(tx: Transaction, key: str) -> dict[str, int]:
    """The live holders of ``key`` and the attempt each holds it for (inspection)."""
    live = _live(tx.get_record(KEY_SLOTS, key), to_micros(tx.now))
    return {task_id: entry["attempt"] for task_id, entry in live.items()}
