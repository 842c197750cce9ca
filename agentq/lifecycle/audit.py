"""The audit trail: who did what to which task, approval or dead letter, and when.

Every operator action taken through the :class:`~agentq.runtime.Runtime` facade
(approve, reject, cancel, replay, delete a dead letter, resolve an
unknown outcome), whichever surface asked
for it (Python, the CLI, the web console), is recorded here in the transaction
that applies it: an action that commits is audited, and an audit entry never
describes an action that did not happen. This module is the only writer of the
``audit`` table.

An entry is also listed under what it is about (its target, and its task if
that is another id) in ``audit_targets``, written with it: a task's page
finds its entries by key (:func:`entries` with ``target``), not by reading
the log. A log written before that index is indexed once, by the first such
read (:func:`ensure_indexed`); a prune deletes an entry's index records with it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentq.backends import Backend, Transaction
from agentq.clock import to_micros
from agentq.ledger import Tables
from agentq.redact import REDACTED, is_secret_name, redact_data, redact_text

__all__ = [
    "TARGETS",
    "UNNAMED",
    "AuditAction",
    "AuditEntry",
    "ensure_indexed",
    "entries",
    "index_keys",
    "record",
]

#: The record table that lists each entry under what it is about:
#: ``<target>/<audit id>`` (and ``<task id>/<audit id>``).
TARGETS = "audit_targets"
#: The record of :data:`TARGETS` that says the log written before the index
#: has been indexed.
_INDEXED = "!indexed"

#: The actor recorded when a caller of the Python API names nobody.
UNNAMED = "(unnamed)"
#: Longest note kept in an entry (the rest is cut): notes are free text from a form.
_NOTE_CHARS = 2000
_SEQUENCE = itertools.count()


class AuditAction(StrEnum):
    """What an operator did."""

    APPROVE = "approve"
    REJECT = "reject"
    CANCEL = "cancel"
    REPLAY = "replay"
    DELETE_DEAD_LETTER = "delete_dead_letter"
    RESOLVE = "resolve"


class AuditEntry(BaseModel):
    """One audited action."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    audit_id: str
    at: datetime
    actor: str
    action: AuditAction
    target: str
    task_id: str | None = None
    note: str = ""
    #: An approval whose arguments the approver edited: what was asked and what
    #: was approved (secret-looking fields and URL credentials redacted).
    original_args: dict[str, Any] | None = None
    edited_args: dict[str, Any] | None = None


def _redacted(args: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Arguments as the audit keeps them: a field whose name looks secret is
    replaced, and credentials in URLs anywhere in the rest."""
    if args is None:
        return None

    def mask(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: REDACTED if is_secret_name(str(k)) else mask(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [mask(v) for v in value]
        return value

    redacted: dict[str, Any] = redact_data(mask(args))
    return redacted


def record(
    tx: Transaction,
    *,
    actor: str | None,
    action: AuditAction,
    target: str,
    task_id: str | None = None,
    note: str = "",
    original_args: Mapping[str, Any] | None = None,
    edited_args: Mapping[str, Any] | None = None,
) -> AuditEntry:
    """Record ``action`` on ``target`` by ``actor`` in the caller's transaction
    (with an approver's edit: the arguments asked and those approved)."""
    # Keys sort by time, then (within one microsecond, as under a fake clock) by
    # this process's count, so the newest entries are the last ones read.
    audit_id = f"aud_{to_micros(tx.now):014x}{next(_SEQUENCE) % 16**8:08x}{os.urandom(6).hex()}"
    entry = AuditEntry(
        audit_id=audit_id,
        at=tx.now,
        actor=(actor or "").strip() or UNNAMED,
        action=action,
        target=target,
        task_id=task_id,
        note=redact_text(note[:_NOTE_CHARS]),
        original_args=_redacted(original_args),
        edited_args=_redacted(edited_args),
    )
    value = entry.model_dump(mode="json")
    tx.put_record(Tables.AUDIT, audit_id, value)
    for key in index_keys(audit_id, value):
        tx.put_record(TARGETS, key, {"audit_id": audit_id})
    return entry


def index_keys(audit_id: str, value: Mapping[str, Any]) -> list[str]:
    """The keys of :data:`TARGETS` that list the entry ``audit_id`` (its stored
    ``value``): one per id it is about."""
    about = dict.fromkeys(str(v) for v in (value.get("target"), value.get("task_id")) if v)
    return [f"{a}/{audit_id}" for a in about]


def ensure_indexed(backend: Backend) -> None:
    """Index the entries recorded before :data:`TARGETS` existed, once (a page
    per transaction; two readers doing it at once write the same records)."""
    if backend.get_record(TARGETS, _INDEXED) is not None:
        return
    after = ""
    while True:
        page = backend.list_records(Tables.AUDIT, limit=_PAGE, after=after)
        keys = [k for audit_id, value in page for k in index_keys(audit_id, value)]
        if keys:
            backend.transact(lambda tx, keys=keys: [  # type: ignore[misc]
                tx.put_record(TARGETS, k, {"audit_id": k.rsplit("/", 1)[1]}) for k in keys])
        if len(page) < _PAGE:
            break
        after = page[-1][0]
    backend.transact(lambda tx: tx.put_record(TARGETS, _INDEXED, {"indexed": True}))


#: Entries read at once, newest first.
_PAGE = 500


def entries(
    backend: Backend,
    *,
    target: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> list[AuditEntry]:
    """Audit entries, newest first (their ids sort by time); only those about
    ``target`` (an approval, task or dead-letter id, matched as the target or its
    task) if given; at most ``limit``, those older than the entry id ``after``.
    Read a page at a time from the newest: a page of the log reads that page,
    not the whole log; entries about a target are found through
    :data:`TARGETS` (the entries about it, not the log)."""
    if target is not None:
        return _about(backend, target, limit, after)
    out: list[AuditEntry] = []
    cursor = after or ""
    while True:
        # Without a target, the page is what is still wanted: it is all shown.
        size = _PAGE if limit is None else min(_PAGE, limit - len(out))
        page = backend.list_records(Tables.AUDIT, limit=size, after=cursor, descending=True)
        for _key, value in page:
            out.append(AuditEntry.model_validate(value))
            if limit is not None and len(out) >= limit:
                return out
        if len(page) < size:
            return out
        cursor = page[-1][0]


def _about(backend: Backend, target: str, limit: int | None, after: str | None) -> list[AuditEntry]:
    """:func:`entries` about ``target``, through the index."""
    ensure_indexed(backend)
    prefix = f"{target}/"
    out: list[AuditEntry] = []
    cursor = f"{prefix}{after}" if after else ""
    while True:
        size = _PAGE if limit is None else min(_PAGE, limit - len(out))
        page = backend.list_records(TARGETS, prefix, limit=size, after=cursor, descending=True)
        ids = [k[len(prefix):] for k, _ in page]
        found = backend.read_records(Tables.AUDIT, ids) if ids else {}
        for audit_id in ids:
            if audit_id in found:  # else pruned since
                entry = AuditEntry.model_validate(found[audit_id].value)
                if target in (entry.target, entry.task_id):
                    out.append(entry)
        if len(page) < size or (limit is not None and len(out) >= limit):
            return out
        cursor = page[-1][0]
