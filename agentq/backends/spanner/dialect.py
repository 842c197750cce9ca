"""SQL text that differs between GoogleSQL and PostgreSQL databases.

Plain Python (no google-cloud-spanner import), so DDL can be printed without
the ``spanner`` extra.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agentq.spec import QueueSpec

__all__ = ["RECORDS", "Dialect", "minutes"]

#: The one table holding the runtime's own state.
RECORDS = "agentq_records"


def minutes(seconds: float) -> str:
    """A RECEIVE duration as the documents write one (``'20m'``): whole minutes,
    rounded up, at least one. No document shows seconds or a zero duration."""
    return f"{max(1, math.ceil(seconds / 60 - 1e-9))}m"


class Dialect:
    """SQL text that differs between GoogleSQL and PostgreSQL databases, for the
    queues and records of one ``namespace`` (a prefix of their names in the
    database, URL option ``namespace``: Spanner has no named schemas for queues,
    so several projects, or test runs, share a database this way)."""

    def __init__(self, postgres: bool, namespace: str = "") -> None:
        self.postgres = postgres
        self.namespace = namespace
        #: The runtime's records table as named in the database.
        self.records = namespace + RECORDS

    @property
    def rare_index(self) -> str:
        """The records' index of rare statuses (:mod:`.rare_index`), as named in
        the database."""
        return f"{self.records}_rare_status"

    @property
    def owner_index(self) -> str:
        """The records' index of the tasks' owners (:mod:`.owner_index`)."""
        return f"{self.records}_owner"

    @property
    def owner_rare_index(self) -> str:
        """The records' index of the tasks' owners and rare statuses."""
        return f"{self.records}_owner_rare"

    @property
    def tool_index(self) -> str:
        """The records' index of the tasks' tools and the runs' agents (:mod:`.tool_index`)."""
        return f"{self.records}_tool"

    def physical(self, queue: str) -> str:
        """A queue's name in the database (mutations, TVF names): the namespace's
        prefix and the queue's own name."""
        return self.namespace + queue

    def queue_ident(self, queue: str) -> str:
        """A queue's name as addressed in SQL."""
        return self.ident(self.physical(queue))

    def ident(self, name: str) -> str:
        """A queue or column name as addressed in SQL."""
        # PostgreSQL folds unquoted identifiers to lower case; queues and their
        # TVFs are addressed in lower case there.
        return name.lower() if self.postgres else name

    def params(self, names: Sequence[str]) -> list[str]:
        """Placeholders for ``names`` in this dialect (``@name`` or ``$n``)."""
        return (
            [f"${i}" for i in range(1, len(names) + 1)]
            if self.postgres
            else [f"@{n}" for n in names]
        )

    def param_dict(self, names: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
        """The ``params`` mapping the client takes for :meth:`params` placeholders."""
        keys = [f"p{i}" for i in range(1, len(names) + 1)] if self.postgres else list(names)
        return dict(zip(keys, values, strict=True))

    def param_keys(self, names: Sequence[str]) -> list[str]:
        """The keys of :meth:`param_dict` for ``names``."""
        return [f"p{i}" for i in range(1, len(names) + 1)] if self.postgres else list(names)

    def receive_sql(self, spec: QueueSpec, max_batch_size: int, duration: str) -> str:
        """A ``RECEIVE`` of up to ``max_batch_size`` messages a batch for ``duration``
        (as written between the quotes: ``20m``, see :func:`minutes`)."""
        keys = ", ".join(self.ident(c.name) for c in spec.key)
        if self.postgres:
            return (
                f"SELECT {keys}, payload, deliver_time, spanner_lease_expiration_timestamp, "
                "spanner_lease_token, spanner_last_batch_message "
                f"FROM spanner.receive_{self.queue_ident(spec.name)}({max_batch_size}, NULL, '{duration}')"
            )
        return (
            f"SELECT {keys}, Payload, DeliverTime, SpannerLeaseExpirationTimestamp, "
            "SpannerLeaseToken, SpannerLastBatchMessage "
            f"FROM RECEIVE_{self.physical(spec.name)}(max_duration=>'{duration}', "
            f"max_batch_size=>{max_batch_size})"
        )

    def renew_sql(self, queue: str) -> str:
        """A ``RENEWLEASE`` of an array of lease tokens (the one parameter)."""
        if self.postgres:
            return (
                "SELECT spanner_old_lease_token, spanner_new_lease_token, "
                f"spanner_lease_expiration_timestamp FROM spanner.renewlease_{self.queue_ident(queue)}($1)"
            )
        return (
            "SELECT SpannerOldLeaseToken, SpannerNewLeaseToken, SpannerLeaseExpirationTimestamp "
            f"FROM RENEWLEASE_{self.physical(queue)}(lease_tokens => @tokens)"
        )

    def record_select(self) -> str:
        """Read one record by table and key."""
        t, k = self.params(["tbl", "k"])
        return f"SELECT v FROM {self.records} WHERE tbl = {t} AND k = {k}"

    def record_multi_select(self) -> str:
        """Read the records of many keys of one table (an array parameter)."""
        if self.postgres:
            return f"SELECT k, v FROM {self.records} WHERE tbl = $1 AND k = ANY($2)"
        return f"SELECT k, v FROM {self.records} WHERE tbl = @tbl AND k IN UNNEST(@keys)"

    def record_scan(self) -> str:
        """Read a table's records from a key prefix on, in key order."""
        t, k = self.params(["tbl", "prefix"])
        return f"SELECT k, v FROM {self.records} WHERE tbl = {t} AND k >= {k} ORDER BY k"

    def record_page(
        self,
        bounded: bool,
        limit: int | None,
        *,
        after: bool = True,
        descending: bool = False,
        where: Sequence[tuple[str, int, bool]] = (),
        walked: Sequence[str] = (),
        walks: int = 0,
    ) -> str:
        """A page of a table's records in key order (``descending``: from the
        highest key down): keys at or above ``prefix``, past ``after`` in that
        order (keyset paging), below ``upper`` when ``bounded`` (the end of the
        prefix's range), at most ``limit`` rows. ``where`` holds, per filtered
        field, its name, whether an array parameter ``w<i>`` of string values is
        given, and whether a missing or null field matches too.

        With ``walked`` columns (``rare_status`` (:mod:`.rare_index`), ``owner``
        (:mod:`.owner_index`), both, or ``tool`` (:mod:`.tool_index`)), the page walks their index ``walks``
        times, the ``i``-th with the columns' values in parameters
        ``f<i>c<j>``, each walk in key order and cut at the limit, merged by
        key: it reads the records it returns, not the others in between (the
        fields those columns stand for are then not among ``where``)."""
        names = ["tbl", "prefix"] + (["after"] if after else []) + (["upper"] if bounded else [])
        names += [f"w{i}" for i, (_, given, _) in enumerate(where) if given]
        names += [f"f{i}c{j}" for i in range(walks) for j in range(len(walked))]
        placeholders = dict(zip(names, self.params(names), strict=True))
        t, p = placeholders["tbl"], placeholders["prefix"]
        cond = f"tbl = {t} AND k >= {p}"
        if after:
            cond += f" AND k {'<' if descending else '>'} {placeholders['after']}"
        if bounded:
            cond += f" AND k < {placeholders['upper']}"
        for i, (name, given, missing) in enumerate(where):
            # The record is JSON text: the field's string value, NULL if missing or null.
            field = f"(v::jsonb ->> '{name}')" if self.postgres else f"JSON_VALUE(v, '$.{name}')"
            either = []
            if given:
                w = placeholders[f"w{i}"]
                either.append(f"{field} = ANY({w})" if self.postgres else f"{field} IN UNNEST({w})")
            if missing:
                either.append(f"{field} IS NULL")
            cond += f" AND ({' OR '.join(either) or 'FALSE'})"
        order = " ORDER BY k DESC" if descending else " ORDER BY k"
        cut = "" if limit is None else f" LIMIT {int(limit)}"
        if not walked:
            return f"SELECT k, v FROM {self.records} WHERE {cond}{order}{cut}"
        index = {("rare_status",): self.rare_index, ("owner",): self.owner_index,
                 ("owner", "rare_status"): self.owner_rare_index,
                 ("tool",): self.tool_index}[tuple(walked)]  # fmt: skip
        hinted = (f"{self.records} /*@ FORCE_INDEX = {index} */" if self.postgres
                  else f"{self.records}@{{FORCE_INDEX={index}}}")  # fmt: skip
        way = " DESC" if descending else ""
        present = " AND ".join(f"{c} IS NOT NULL" for c in walked)
        columns = "".join(f"{c}{way}, " for c in walked)
        each = [
            f"SELECT k, v FROM {hinted} WHERE {present} AND "
            + "".join(f"{c} = {placeholders[f'f{i}c{j}']} AND " for j, c in enumerate(walked))
            + f"{cond} ORDER BY {columns}tbl{way}, k{way}{cut}"
            for i in range(walks)
        ]
        if walks == 1:
            return each[0]
        merged = " UNION ALL ".join(f"SELECT k, v FROM ({w}) AS w{i}" for i, w in enumerate(each))
        return f"{merged}{order}{cut}"

    def due_sql(self, spec: QueueSpec, limit: int) -> str:
        """The keys of up to ``limit`` messages due by the server's clock or by
        ``now`` (the client's, a parameter), oldest delivery time first: what a
        short receive may find. Leased messages count too: SQL cannot see leases."""
        deliver = "deliver_time" if self.postgres else "DeliverTime"
        server_now = "CURRENT_TIMESTAMP" if self.postgres else "CURRENT_TIMESTAMP()"
        (now,) = self.params(["now"])
        keys = ", ".join(self.ident(c.name) for c in spec.key)
        return (
            f"SELECT {keys} FROM {self.queue_ident(spec.name)} "
            f"WHERE {deliver} <= {server_now} OR {deliver} <= {now} "
            f"ORDER BY {deliver} LIMIT {int(limit)}"
        )

    def stats_sql(self, spec: QueueSpec) -> str:
        """Depth, ready, scheduled and the oldest delivery time of a ready message."""
        deliver = "deliver_time" if self.postgres else "DeliverTime"
        now = "CURRENT_TIMESTAMP" if self.postgres else "CURRENT_TIMESTAMP()"
        ready = f"COALESCE(SUM(CASE WHEN {deliver} <= {now} THEN 1 ELSE 0 END), 0)"
        scheduled = f"COALESCE(SUM(CASE WHEN {deliver} > {now} THEN 1 ELSE 0 END), 0)"
        oldest = f"MIN(CASE WHEN {deliver} <= {now} THEN {deliver} END)"
        return f"SELECT COUNT(*), {ready}, {scheduled}, {oldest} FROM {self.queue_ident(spec.name)}"
