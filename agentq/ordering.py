"""Ordering keys (the semantics of Pub/Sub ordering keys).

Tasks that share an ordering key run one at a time, in enqueue order; tasks of
different keys run in parallel. A key's record holds the active task and the
FIFO of tasks waiting behind it. Only the active task has a queue message, so a
retried task holds back every later task of its key. When the active task
reaches a final status (succeeded, dead, cancelled) the next one is sent, in the
same transaction. A dead-lettered task releases its key, so dead letters may
break the order, as in Pub/Sub.
"""

from __future__ import annotations

from agentq.backends import Transaction
from agentq.ledger import Tables

__all__ = ["admit", "forget", "release"]


def admit(tx: Transaction, key: str, task_id: str) -> bool:
    """Register ``task_id`` under ``key``; True if it may be sent now."""
    rec = tx.get_record(Tables.ORDERING, key) or {"active": None, "pending": []}
    if rec["active"] is None:
        rec["active"] = task_id
        tx.put_record(Tables.ORDERING, key, rec)
        return True
    rec["pending"].append(task_id)
    tx.put_record(Tables.ORDERING, key, rec)
    return False


def release(tx: Transaction, key: str, task_id: str) -> str | None:
    """``task_id`` finished; return the next task of ``key`` to send, if any."""
    rec = tx.get_record(Tables.ORDERING, key)
    if rec is None or rec["active"] != task_id:
        return None
    if not rec["pending"]:
        tx.delete_record(Tables.ORDERING, key)
        return None
    rec["active"] = rec["pending"].pop(0)
    tx.put_record(Tables.ORDERING, key, rec)
    return str(rec["active"])


def forget(tx: Transaction, key: str, task_id: str) -> bool:
    """Remove a waiting (not active) task from ``key``; True if it was waiting."""
    rec = tx.get_record(Tables.ORDERING, key)
    if rec is None or task_id not in rec["pending"]:
        return False
    rec["pending"].remove(task_id)
    tx.put_record(Tables.ORDERING, key, rec)
    return True
