"""Reads of the runtime's records outside a transaction (strong snapshots)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from google.cloud.spanner_v1 import param_types

from agentq.backends.base import RecordFilter, StoredRecord, Tally, Transaction
from agentq.backends.owners import OWNED_TABLES, OWNER_FIELD, OWNER_FIELDS, owner_walks
from agentq.backends.record_filters import (
    check_counted,
    check_record_filter,
    prefix_end,
    rare_statuses,
)
from agentq.backends.spanner.api_errors import mapped_errors
from agentq.backends.spanner.wire import storable_key
from agentq.backends.tallies import (
    TALLY_TABLE,
    check_window,
    group,
    merged,
    record_key,
    record_tally,
    tallies_from_records,
)
from agentq.backends.tool_column import TOOL_FIELDS, tool_walks
from agentq.jsontext import decode

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend
    from agentq.spec import QueueSpec

__all__ = ["get_record", "list_records", "read_records"]


#: Keys per query of :func:`read_records` (one round trip each).
READ_CHUNK = 500


def get_record(backend: SpannerBackend, table: str, key: str) -> dict[str, Any] | None:
    """One record, or None."""
    if not storable_key(key):
        return None  # no record can have this key
    d = backend.dialect
    with (
        mapped_errors(f"reading record {table}/{key}", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        rows = list(
            snap.execute_sql(d.record_select(), params=d.param_dict(["tbl", "k"], [table, key]))
        )
    return None if not rows else dict(decode(rows[0][0]))


def read_records(
    backend: SpannerBackend, table: str, keys: Sequence[str]
) -> dict[str, StoredRecord]:
    """Many records with versions (their stored text), in one snapshot and one
    query per :data:`READ_CHUNK` keys (not one round trip per key)."""
    d = backend.dialect
    wanted = [k for k in dict.fromkeys(keys) if storable_key(k)]
    names = ["p1", "p2"] if d.postgres else ["tbl", "keys"]
    types = {names[0]: param_types.STRING, names[1]: param_types.Array(param_types.STRING)}
    out: dict[str, StoredRecord] = {}
    with (
        mapped_errors(f"reading records of {table}", backend.endpoint),
        backend.database.snapshot(multi_use=True) as snap,
    ):
        for start in range(0, len(wanted), READ_CHUNK):
            chunk = wanted[start : start + READ_CHUNK]
            rows = snap.execute_sql(
                d.record_multi_select(),
                params={names[0]: table, names[1]: chunk},
                param_types=types,
            )
            for k, v in rows:
                text = str(v)
                out[str(k)] = StoredRecord(value=dict(decode(text)), version=text)
    return {k: out[k] for k in wanted if k in out}


def list_records(
    backend: SpannerBackend,
    table: str,
    prefix: str = "",
    limit: int | None = None,
    after: str = "",
    *,
    descending: bool = False,
    where: RecordFilter | None = None,
) -> list[tuple[str, dict[str, Any]]]:
    """Records of a table whose key starts with ``prefix``, in key order
    (``descending``: from the highest key down); with ``after``, only keys past
    it in that order (the next page); with ``where``, only records whose fields
    hold the values given (see :meth:`agentq.backends.Backend.list_records`).

    One query reads one page: the prefix's key range, keys past ``after``, the
    filter and ``LIMIT``, as on SQLite (a page used to re-read the rest of the
    table)."""
    if not storable_key(prefix) or not storable_key(after):
        return []
    if limit is not None and limit <= 0:
        return []
    filters = check_record_filter(where)
    walks = (
        rare_statuses(table, where)
        if backend.rare_column and (table != "runs" or backend.runs_in_index)
        else None
    )
    owners = (
        owner_walks(table, where)
        if backend.owner_column and (table != "runs" or backend.runs_owned)
        else None
    )
    walked = (["owner"] if owners is not None else []) + (["rare_status"] if walks is not None
                                                          else [])  # fmt: skip
    fixed: list[tuple[str | None, ...]] = [
        (*([o] if owners is not None else []), *([s] if walks is not None else []))
        for o in (owners if owners is not None else [None])
        for s in (walks if walks is not None else [None])
    ]
    # The tool index only when neither narrower one serves the listing.
    # The runs' agents once init filled those stored before (:mod:`.tool_index`).
    tools = (
        tool_walks(table, where)
        if backend.tool_column and (table != "runs" or backend.runs_named) and not walked
        else None
    )
    if tools is not None:
        walked, fixed = ["tool"], [(t,) for t in tools]
    if walked:
        filters = [f for f in filters if not (
            (walks is not None and f[0] == "status")
            or (owners is not None and f[0] == OWNER_FIELDS[table])
            or (tools is not None and f[0] == TOOL_FIELDS[table]))]
        if not fixed:
            return []  # no value asked for
    upper = prefix_end(prefix)
    d = backend.dialect
    names = ["tbl", "prefix"] + (["after"] if after else []) + ([] if upper is None else ["upper"])
    values: list[Any] = [table, prefix] + ([after] if after else [])
    values += [] if upper is None else [upper]
    types: dict[str, Any] = {}
    for i, (_, strings, _) in enumerate(filters):
        if strings:
            names.append(f"w{i}")
            values.append(strings)
    if walked:
        for i, row in enumerate(fixed):
            names += [f"f{i}c{j}" for j in range(len(walked))]
            values += list(row)
    params = d.param_dict(names, values)
    for key, name in zip(d.param_keys(names), names, strict=True):
        is_array = name.startswith("w")
        types[key] = param_types.Array(param_types.STRING) if is_array else param_types.STRING
    sql = d.record_page(
        upper is not None, limit, after=bool(after), descending=descending,
        where=[(name, bool(strings), missing) for name, strings, missing in filters],
        walked=walked, walks=len(fixed) if walked else 0,
    )  # fmt: skip
    with (
        mapped_errors(f"listing records of {table}", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        rows = list(snap.execute_sql(sql, params=params, param_types=types))
    out = [(str(k), dict(decode(v))) for k, v in rows if str(k).startswith(prefix)]
    if walks:  # an entry an older agentq left stale is read, then dropped here
        out = [(k, v) for k, v in out if v.get("status") in walks]
    if owners:
        out = [(k, v) for k, v in out if v.get(OWNER_FIELDS[table]) in owners]
    if tools:
        out = [(k, v) for k, v in out if v.get(TOOL_FIELDS[table]) in tools]
    if after:
        out = [(k, v) for k, v in out if (k < after if descending else k > after)]
    return out if limit is None else out[:limit]


def record_count(backend: SpannerBackend, table: str, owner: str | None = None) -> int:
    """How many records ``table`` holds (``owner``'s only, if given), counted in
    the query (Spanner keeps no totals yet: the scan of the table's key range,
    not of its values; an owner's, of its part of the owner index)."""
    check_counted(table)
    if owner is not None and table not in OWNED_TABLES:
        return 0
    d = backend.dialect
    names = ["tbl"] if owner is None else ["tbl", "owner"]
    marks = d.params(names)
    sql = f"SELECT COUNT(*) FROM {d.records} WHERE tbl = {marks[0]}"
    if owner is not None and backend.owner_column:  # the owner's part of its index
        index = d.owner_index
        hinted = (f"{d.records} /*@ FORCE_INDEX = {index} */" if d.postgres
                  else f"{d.records}@{{FORCE_INDEX={index}}}")  # fmt: skip
        sql = (f"SELECT COUNT(*) FROM {hinted} WHERE owner IS NOT NULL AND "
               f"owner = {marks[1]} AND tbl = {marks[0]}")  # fmt: skip
    elif owner is not None:  # a table an older agentq made, until `agentq init`
        field = (f"(v::jsonb ->> '{OWNER_FIELD}')" if d.postgres
                 else f"JSON_VALUE(v, '$.{OWNER_FIELD}')")  # fmt: skip
        sql += f" AND {field} = {marks[1]}"
    values = [table] if owner is None else [table, owner]
    types = {key: param_types.STRING for key in d.param_keys(names)}
    with (
        mapped_errors(f"counting records of {table}", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        rows = list(snap.execute_sql(sql, params=d.param_dict(names, values), param_types=types))
    return int(rows[0][0]) if rows else 0


def message_keys(backend: SpannerBackend, spec: QueueSpec) -> list[tuple[Any, ...]]:
    """The keys of every message of the queue ``spec``."""
    d = backend.dialect
    keys = ", ".join(d.ident(c.name) for c in spec.key)
    with (
        mapped_errors(f"reading the keys of queue {spec.name}", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        rows = list(snap.execute_sql(f"SELECT {keys} FROM {d.queue_ident(spec.name)}"))
    return [tuple(row) for row in rows]


def message_count(backend: SpannerBackend, spec: QueueSpec, at_most: int) -> int:
    """How many messages the queue ``spec`` holds, counted no further than ``at_most``."""
    d = backend.dialect
    bound = max(0, int(at_most))  # an integer literal: both dialects take it in LIMIT
    with (
        mapped_errors(f"counting the messages of queue {spec.name}", backend.endpoint),
        backend.database.snapshot() as snap,
    ):
        rows = list(snap.execute_sql(
            f"SELECT COUNT(*) FROM (SELECT 1 FROM {d.queue_ident(spec.name)} LIMIT {bound}) AS m"
        ))  # fmt: skip
    return int(rows[0][0]) if rows else 0


_TALLY_PAGE = 1000


def read_tallies(
    backend: SpannerBackend, first: int, end: int, width: int, owner: str | None
) -> list[Tally]:
    """The window's tallies: its tally records (a key range: the minute leads
    the key), summed here."""
    check_window(first, end, width)
    found: list[Mapping[str, Any]] = []
    after = f"{first:012d}"
    while True:
        page = backend.list_records(TALLY_TABLE, limit=_TALLY_PAGE, after=after)
        inside = [v for k, v in page if int(k[:12]) < end]
        found += inside
        if len(page) < _TALLY_PAGE or len(inside) < len(page):
            break
        after = page[-1][0]
    return group(tallies_from_records(found), first, width, owner)


def delete_tallies(backend: SpannerBackend, before: int) -> int:
    """Delete the tally records of minutes before ``before``, a page at a time."""
    gone = 0
    while True:
        page = backend.list_records(TALLY_TABLE, limit=_TALLY_PAGE)
        keys = [k for k, _ in page if int(k[:12]) < before]
        if keys:
            gone += len(backend.transact(partial(_delete, keys=keys)))
        if len(keys) < _TALLY_PAGE:
            return gone


def _delete(tx: Transaction, keys: list[str]) -> list[str]:
    return tx.delete_records(TALLY_TABLE, keys)


def compact_tallies(backend: SpannerBackend, before: int) -> int:
    """Merge the tally records of each minute before ``before`` into one, a page
    of records per transaction: the records read again in it are replaced by
    their sum under a fresh key, so a concurrent writer's record (a fresh key
    of its own) is merged next time or kept, never lost."""
    merged = 0
    after = ""
    while True:
        page = backend.list_records(TALLY_TABLE, limit=_TALLY_PAGE, after=after)
        old = [k for k, _ in page if int(k[:12]) < before]
        per_minute: dict[str, list[str]] = {}
        for key in old:
            per_minute.setdefault(key[:12], []).append(key)
        keys = [k for ks in per_minute.values() if len(ks) > 1 for k in ks]
        if keys:
            merged += backend.transact(partial(_merge, keys=keys))
        if len(page) < _TALLY_PAGE or len(old) < len(page):
            return merged
        after = page[-1][0]


def _merge(tx: Transaction, keys: list[str]) -> int:
    found = tx.get_records(TALLY_TABLE, keys)
    if not found:
        return 0
    tx.delete_records(TALLY_TABLE, list(found))
    written = record_tally(merged(tallies_from_records(found.values())))
    for minute, value in written.items():
        tx.put_record(TALLY_TABLE, record_key(minute), value)
    return len(found) - len(written)
