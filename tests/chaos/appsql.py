"""The chaos run's application tables and SQL, on each backend's own dialect.

The agent writes an ``orders`` row per refund; the refund tool's completion (its
``on_commit``) sets the order ``refunded`` and, in the same transaction, adds a
``refund_commits`` row, so a completion recorded twice shows as two rows.

Application SQL is each database's own (agentq passes it through): SQLite takes
``?``, psycopg ``%s``, Spanner's GoogleSQL ``@name`` with a dict. The chaos code
writes ``?`` and :func:`portable` rewrites it; the statements here contain no
``?`` inside literals, which is all the rewrite needs.

The refund bot's ``execute_refund`` (``tools/refunds.py``) writes its completion
with SQLite's ``?``: :func:`portable_refund_tool` runs that very handler with a
context whose ``on_commit`` rewrites the statement for the backend and records
the completion row, so every backend runs the shipped tool's code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any

from agentq.decision import Decision
from agentq.tools import ToolDef

__all__ = ["BACKENDS", "SPANNER_DDL", "portable", "portable_refund_tool", "sqlite_pg_schema"]

#: The backends a chaos run can use.
BACKENDS = ("sqlite", "postgresql", "spanner")

_COMMON = (
    "CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount {real}, "
    "state TEXT NOT NULL, refund_id TEXT)",
    "CREATE TABLE IF NOT EXISTS refund_commits (order_id TEXT NOT NULL, "
    "commit_id TEXT NOT NULL, refund_id TEXT, PRIMARY KEY (order_id, commit_id))",
)

#: The same tables on Spanner (GoogleSQL): applied through the admin API.
SPANNER_DDL = (
    "CREATE TABLE orders (id STRING(64) NOT NULL, amount FLOAT64, "
    "state STRING(32) NOT NULL, refund_id STRING(64)) PRIMARY KEY (id)",
    "CREATE TABLE refund_commits (order_id STRING(64) NOT NULL, "
    "commit_id STRING(64) NOT NULL, refund_id STRING(64)) PRIMARY KEY (order_id, commit_id)",
)


def sqlite_pg_schema(kind: str) -> list[str]:
    """The application tables' DDL on SQLite or PostgreSQL (run through ``tx.execute``)."""
    real = "DOUBLE PRECISION" if kind == "postgresql" else "REAL"
    return [s.format(real=real) for s in _COMMON]


def portable(kind: str, sql: str, params: Sequence[Any] = ()) -> tuple[str, Any]:
    """``sql`` written with ``?`` placeholders, and its ``params``, for ``kind``."""
    if kind == "sqlite" or not params:
        return sql, tuple(params)
    if kind == "postgresql":
        return sql.replace("?", "%s"), tuple(params)
    if kind == "spanner":
        first, *rest = sql.split("?")
        text = first + "".join(f"@p{i}{piece}" for i, piece in enumerate(rest, start=1))
        return text, {f"p{i}": value for i, value in enumerate(params, start=1)}
    raise ValueError(f"unknown backend kind {kind!r} (known: {', '.join(BACKENDS)})")


class _PortableDecision:
    """The completion's ``Decision`` as the tool sees it: SQL rewritten for ``kind``."""

    def __init__(self, decision: Decision, kind: str) -> None:
        self._decision = decision
        self._kind = kind

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._decision.execute(*portable(self._kind, sql, params))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._decision, name)


class _PortableContext:
    """A tool context whose ``on_commit`` writes portable SQL and counts the commit."""

    def __init__(self, ctx: Any, kind: str, order_id: str) -> None:
        self._ctx = ctx
        self._kind = kind
        self._order_id = order_id

    def on_commit(self, fn: Callable[[Any], None]) -> None:
        def completion(tx: Decision) -> None:
            portable_tx = _PortableDecision(tx, self._kind)
            fn(portable_tx)
            rows = portable_tx.execute(
                "SELECT refund_id FROM orders WHERE id = ? AND state = 'refunded'",
                (self._order_id,),
            )
            if rows:  # the order's completion, one row per time it was recorded
                portable_tx.execute(
                    "INSERT INTO refund_commits (order_id, commit_id, refund_id) VALUES (?, ?, ?)",
                    (self._order_id, os.urandom(8).hex(), rows[0][0]),
                )

        self._ctx.on_commit(completion)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def portable_refund_tool(definition: ToolDef, kind: str) -> ToolDef:
    """``execute_refund`` with its completion SQL rewritten for ``kind``."""
    real = definition.handler

    def handler(ctx: Any, args: Any) -> Any:
        return real(_PortableContext(ctx, kind, args.order_id), args)

    return dataclasses.replace(definition, handler=handler)


def rows(kind: str, decision: Decision, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run the agent's ``?`` SQL in ``decision`` on ``kind``."""
    return decision.execute(*portable(kind, sql, params))
