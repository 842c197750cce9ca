"""A records table as an earlier agentq made it, so that a test can write to it
as that release did and see ``agentq init`` bring it forward."""

from __future__ import annotations

from typing import Any


def create_old_records_table(b: Any, postgres: bool, columns: tuple[str, ...] = ()) -> None:
    """Create ``b``'s records table with ``tbl``, ``k``, ``v`` and the nullable
    text ``columns`` of that release only, in either dialect."""
    kind = "varchar" if postgres else "STRING(MAX)"
    body = f"tbl {kind} NOT NULL, k {kind} NOT NULL, v {kind} NOT NULL"
    body += "".join(f", {c} {kind}" for c in columns)
    create = (f"CREATE TABLE {b.dialect.records} ({body}, PRIMARY KEY (tbl, k))" if postgres
              else f"CREATE TABLE {b.dialect.records} ({body}) PRIMARY KEY (tbl, k)")
    b.database.update_ddl([create]).result(120)
