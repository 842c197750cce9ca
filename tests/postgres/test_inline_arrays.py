"""A worker's sets (one array element per task, ``%b::text[]``) inlined into the
one text a lease or completion sends (:mod:`agentq.backends.postgres.inline`):
every element comes back as it was, and a list is inlined only where the
statement casts its placeholder to an array type."""

from __future__ import annotations

from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends.postgres.inline import inlined  # noqa: E402

_TEXTS = ["", "a", 'say "hi"', "back\\slash", "\\\"", "{a,b}", "NULL", " spaced ", "é😀\n\t",
          "it's; COMMIT; -- /*", '{"json": [1, "x\\u0000"]}', None]  # fmt: skip


def test_each_kind_of_array_is_the_literal_of_itself(postgres_url: str) -> None:
    arrays: list[tuple[str, list[Any]]] = [
        ("text", _TEXTS),
        ("text", _TEXTS[:-1]),  # no NULL: every element a text
        ("text", [""]),
        ("text", []),
        ("bigint", [0, -1, 2**63 - 1, -(2**63), None]),
        ("integer", [1, -7]),
        ("bytea", [b"", bytes(range(256)), None]),
    ]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for kind, values in arrays:
            text = inlined(conn, [(f"SELECT 1 -%s, %b::{kind}[]", (0, values))])
            assert text is not None, (kind, values)
            assert conn.execute(text).fetchone() == (1, values), text


def test_a_list_goes_inline_only_where_an_array_type_is_named(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert inlined(conn, [("SELECT %s", (["a"],))]) is None
        assert inlined(conn, [("SELECT unnest(%b)", (["a"],))]) is None
        assert inlined(conn, [("SELECT %b::text", (["a"],))]) is None
        # Elements that have no plain literal: left to the server's binding.
        assert inlined(conn, [("SELECT %b::text[]", (["a\x00"],))]) is None
        assert inlined(conn, [("SELECT %b::text[]", (["a", "\x00"],))]) is None
        assert inlined(conn, [("SELECT %b::text[]", (["a", None, "b\x00"],))]) is None
        assert inlined(conn, [("SELECT %b::bool[]", ([True],))]) is None
        assert inlined(conn, [("SELECT %b::text[]", ([["a"]],))]) is None
        assert inlined(conn, [("SELECT %b::float8[]", ([1.5],))]) is None
        # A literal ``%`` beside a placeholder: psycopg's (and then no list).
        assert inlined(conn, [("SELECT %b::text[], '%%'", (["a"],))]) is None


def test_a_statement_read_with_what_is_held_back_reads_its_own_rows(postgres_url: str) -> None:
    """``TxConn.execute_inlined``: the rows are the statement's (not ``BEGIN``'s
    or a held-back write's), inlined or, with a value that is not plain, bound."""
    from agentq.backends.postgres.pipeline import BEGIN_READ_COMMITTED, TxConn

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE t (k text)")
        for value in ("a'b", 1.5):  # plain: one text; a float: bound by the server
            tx = TxConn(conn, BEGIN_READ_COMMITTED)
            tx.defer("INSERT INTO t SELECT unnest(%b::text[])", (["x", 'y"'],))
            rows = tx.execute_inlined("SELECT %s, count(*) FROM t", (value,)).fetchall()
            assert rows == [(str(value) if isinstance(value, str) else value, 2)]
            tx.rollback()
