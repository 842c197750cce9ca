"""Task arguments, stored once: inline in the task's record, or out of band.

Every task's arguments are encoded once, when it is created, and stored in one
place. Up to the runtime's threshold (:data:`DEFAULT_INLINE_BYTES`, 4 KB, the
size Spanner's queue documents recommend for a message; ``Runtime(
args_inline_bytes=...)`` or ``args_inline_bytes`` in ``agentq.toml``) they are
part of the task's ledger record. Above it they get a record of their own in
the ``payloads`` table, keyed by the task's id and written in the transaction
that creates the task; the task record and its envelope carry ``args_ref``
(the arguments' size and SHA-256) instead. Handlers and readers get the
arguments either way (:func:`args_of`). The hard limit
(:data:`~agentq.envelope.MAX_ENVELOPE_BYTES`) applies to both.

A payload lives exactly as long as its task's record: it is deleted in the
transaction that prunes the finished task once it is past its retention
(:mod:`agentq.lifecycle.retention`), never sooner. So storage stays bounded
(the arguments go with the task), a finished task shows its arguments for as
long as it is kept (an adapter comparing a call with its task's ``args`` sees
the same call), and a dead task can be replayed until it is pruned. Records
written by releases that deleted the payload when the task ended say
``released`` in their ``args_ref``; their arguments read as unavailable.

The row is found by the task's own id, never by anything an envelope or the
arguments say, and its digest is checked: arguments that look like a reference
are just arguments, and no task can read another task's payload.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from agentq.backends import EncodedRecord, Transaction
from agentq.errors import ToolError
from agentq.jsontext import compact_text
from agentq.ledger import Tables

__all__ = [
    "DEFAULT_INLINE_BYTES",
    "ArgumentsUnavailable",
    "Reader",
    "args_of",
    "encode_args",
    "is_offloaded",
    "offload",
]

#: Encoded arguments up to this many bytes stay in the task's record.
DEFAULT_INLINE_BYTES = 4096

#: Reads one record: ``get_record`` of a transaction or of a backend.
Reader = Callable[[str, str], dict[str, Any] | None]


class ArgumentsUnavailable(ToolError):
    """A task's out-of-band arguments are gone (deleted by an earlier release)
    or do not match its record: it cannot run."""


def encode_args(args: Mapping[str, Any]) -> str:
    """The stored text of validated arguments (compact, ASCII: its length is its
    size in bytes). NaN and infinities raise ValueError."""
    return compact_text(args)


def offload(tx: Transaction, task_id: str, args_text: str) -> dict[str, Any]:
    """Store a task's encoded arguments in their own record; return its ``args_ref``."""
    digest = hashlib.sha256(args_text.encode()).hexdigest()
    row = EncodedRecord(
        f'{{"task_id":{json.dumps(task_id)},"sha256":"{digest}","args":{args_text}}}'
    )
    tx.put_record(Tables.PAYLOADS, task_id, row)
    return {"bytes": len(args_text), "sha256": digest}


def is_offloaded(rec: Mapping[str, Any]) -> bool:
    """Whether the task's arguments are (or were) kept out of band."""
    return rec.get("args_ref") is not None


def args_of(read: Reader, rec: Mapping[str, Any]) -> dict[str, Any]:
    """A task's arguments: from its record, or its own payload row."""
    ref = rec.get("args_ref")
    if ref is None:
        return dict(rec.get("args") or {})
    task_id = str(rec["task_id"])
    if ref.get("released"):
        raise ArgumentsUnavailable(
            f"task {task_id!r}: its arguments ({ref.get('bytes')} bytes, kept out of band) "
            "were deleted when it finished or its dead-letter entry was deleted (by an "
            "earlier release of agentq)"
        )
    row = read(Tables.PAYLOADS, task_id)
    if row is None or row.get("task_id") != task_id or row.get("sha256") != ref.get("sha256"):
        raise ArgumentsUnavailable(
            f"task {task_id!r}: its out-of-band arguments are missing or do not match its record"
        )
    return dict(row["args"])
