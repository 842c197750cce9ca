"""``agentq init --print-ddl`` on Spanner prints the schema ``agentq init``
makes (issue 39, 2.9: the webhook delivery queue was missing): the printed DDL
applied by hand to one fresh database gives the catalog that ``init`` gives
another, in both dialects."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentq import open_backend
from agentq.cli import main

from .fixtures import EmulatorDatabase

ROOT = Path(__file__).resolve().parents[2]

#: Tables (queues are tables on the emulator, behind the stand-in), columns and
#: indexes of the default schema (``''`` in GoogleSQL, ``public`` in PostgreSQL).
_CATALOG = (
    "SELECT table_name, parent_table_name FROM information_schema.tables WHERE table_schema = ",
    "SELECT table_name, column_name, spanner_type, is_nullable "
    "FROM information_schema.columns WHERE table_schema = ",
    "SELECT table_name, index_name, index_type, is_unique "
    "FROM information_schema.indexes WHERE table_schema = ",
    "SELECT table_name, index_name, column_name, ordinal_position, column_ordering "
    "FROM information_schema.index_columns WHERE table_schema = ",
)


def _catalog(db: EmulatorDatabase) -> list[tuple[str, ...]]:
    schema = "'public'" if db.postgres else "''"
    found: list[tuple[str, ...]] = []
    with db.client_database().snapshot(multi_use=True) as snap:  # type: ignore[attr-defined]
        for number, query in enumerate(_CATALOG):
            rows: Any = snap.execute_sql(query + schema)
            found += [(str(number), *(str(v) for v in row)) for row in rows]
    return sorted(found)


@pytest.mark.parametrize("dialect", ["googlesql", "postgresql"])
def test_the_printed_ddl_is_what_init_creates(
    dialect: str,
    emulator_database_factory: Callable[[bool], EmulatorDatabase],
    capsys: pytest.CaptureFixture[str],
) -> None:
    postgres = dialect == "postgresql"
    by_hand, by_init = emulator_database_factory(postgres), emulator_database_factory(postgres)
    tools = str(ROOT / "tools")
    assert main(["init", "--print-ddl", "--db", by_hand.url, "--tools", tools]) == 0
    printed = [s for s in capsys.readouterr().out.strip().rstrip(";").split(";\n") if s]
    backend: Any = open_backend(by_hand.url)  # its database handle, through the stand-in
    try:
        backend.database.update_ddl(printed).result(120)
    finally:
        backend.close()
    assert main(["init", "--db", by_init.url, "--tools", tools]) == 0
    made = _catalog(by_init)
    assert any(row[:2] == ("0", "webhooks") for row in made)
    assert _catalog(by_hand) == made
