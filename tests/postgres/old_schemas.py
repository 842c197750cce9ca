"""A schema as an earlier release left it: agentq's migrations applied up to a
version, so that a test can store rows as that release did and see the next
open of the backend bring them forward."""

from __future__ import annotations

from typing import Any

from agentq.backends.postgres.schema import MIGRATIONS


def schema_at(conn: Any, schema: str, version: int) -> None:
    """Create ``schema`` (quoted) on ``conn`` (autocommit) at ``version``."""
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"CREATE TABLE {schema}.schema_version "
                 "(version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
    for number in range(1, version + 1):
        for stmt in MIGRATIONS[number - 1]:
            conn.execute(stmt.format(s=schema))
        conn.execute(f"INSERT INTO {schema}.schema_version (version) VALUES ({number})")
