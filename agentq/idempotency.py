"""Idempotency keys of the enqueue-action API.

A key names one call: the same key with the same tool and arguments returns the
task it created; the same key with other arguments or another tool is an
:class:`IdempotencyConflict` naming the original task (an agent that re-sends
a corrected call under an old key must learn that it was not applied, as the
IETF Idempotency-Key draft answers such a request with 422).

Arguments are compared by a digest of their canonical JSON (sorted keys, no
whitespace), stored with the key, so a lookup never reads the task's record.
The digest covers everything the call asks for (the IETF draft's fingerprint of
the request): its arguments, and its options — ordering key, reason, callback
URL, schedule, dedupe key and debounce, prerequisites — so a retry that changes
any of them under the same key is a conflict, not silently the first call's
task. Keys recorded before options were covered are compared by their arguments.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from agentq.backends import Transaction
from agentq.errors import IdempotencyConflict
from agentq.jsontext import canonical
from agentq.ledger import Tables

__all__ = ["args_digest", "lookup", "remember", "request_digest"]


def args_digest(tool: str, args: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a call (tool and validated arguments)."""
    text = canonical({"tool": tool, "args": args})
    return hashlib.sha256(text.encode()).hexdigest()


def request_digest(tool: str, args: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of a call and its options (plain JSON values)."""
    text = canonical({"tool": tool, "args": args, "options": options})
    return hashlib.sha256(text.encode()).hexdigest()


def lookup(
    tx: Transaction,
    key: str,
    tool: str,
    args: Mapping[str, Any],
    *,
    by: str | None = None,
    fingerprint: str | None = None,
) -> str | None:
    """The task id this key already created for this very call, or None if unused.
    A key recorded by another principal than ``by`` is a conflict: one principal
    cannot claim another's task by reusing its key."""
    # Keys are almost always new (a retry is the exception): a backend may guess so
    # and check it with the commit instead of reading first (a round trip), running
    # the transaction again, reading, when the key turns out to be used.
    rec = tx.get_records(Tables.IDEMPOTENCY, [key], likely_absent=True).get(key)
    if rec is None:
        return None
    task_id = str(rec["task_id"])
    owner = rec.get("created_by")
    if by is not None and owner is not None and owner != by:
        raise IdempotencyConflict(
            f"idempotency key {key!r} was used by another principal; use a new key"
        )
    if rec["tool"] != tool:
        raise IdempotencyConflict(
            f"idempotency key {key!r} belongs to task {task_id!r} of tool {rec['tool']!r}, "
            f"not {tool!r}"
        )
    digest = rec.get("digest")
    recorded = rec.get("request_digest")
    if recorded is not None and fingerprint is not None:
        if recorded != fingerprint:
            raise IdempotencyConflict(
                f"idempotency key {key!r} belongs to task {task_id!r}, created with other "
                "arguments or options; use a new key for a different call"
            )
        return task_id
    if digest is None:  # written before digests existed: compare with the task itself
        task = tx.get_record(Tables.TASKS, task_id) or {}
        same = args_digest(tool, task.get("args") or {}) == args_digest(tool, args)
    else:
        same = digest == args_digest(tool, args)
    if not same:
        raise IdempotencyConflict(
            f"idempotency key {key!r} belongs to task {task_id!r}, created with other "
            "arguments; use a new key for a different call"
        )
    return task_id


def remember(
    tx: Transaction,
    key: str,
    tool: str,
    args: Mapping[str, Any],
    task_id: str,
    *,
    created_by: str | None = None,
    fingerprint: str | None = None,
) -> None:
    """Record that ``key`` created ``task_id`` for this call (by ``created_by``;
    ``fingerprint``: its :func:`request_digest`)."""
    rec: dict[str, Any] = {"task_id": task_id, "tool": tool, "digest": args_digest(tool, args)}
    if created_by is not None:
        rec["created_by"] = created_by
    if fingerprint is not None:
        rec["request_digest"] = fingerprint
    tx.put_record(Tables.IDEMPOTENCY, key, rec)
