"""SQL written for SQLite (``?`` marks) runs on PostgreSQL unchanged: only the URL
changes. The translation is checked on its own (no server), then on a real one."""

from __future__ import annotations

import pytest

from agentq.backends import open_backend
from agentq.backends.postgres.placeholders import psycopg_placeholders


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("INSERT INTO t VALUES (?, 'decided')", "INSERT INTO t VALUES (%s, 'decided')"),
        # SQLite's modulo stays a modulo: psycopg reads every % of a statement with parameters.
        ("SELECT x % 2 FROM t WHERE id = ?", "SELECT x %% 2 FROM t WHERE id = %s"),
        # A ? in a literal, an identifier, a comment or a dollar quote is text.
        ("SELECT 'a?%', \"b?\" WHERE c=? --?", "SELECT 'a?%%', \"b?\" WHERE c=%s --?"),
        ("SELECT $$ ? $$, $q$ ?$$? $q$, ? /* ? */", "SELECT $$ ? $$, $q$ ?$$? $q$, %s /* ? */"),
        ("SELECT E'it\\'s ?', ?", "SELECT E'it\\'s ?', %s"),
        ("SELECT 'it''s ?', ?", "SELECT 'it''s ?', %s"),
        # jsonb's ?| and ?& are operators, never placeholders.
        ("SELECT j ?| array[?] FROM t", "SELECT j ?| array[%s] FROM t"),
        ("SELECT j ?& array[?] FROM t", "SELECT j ?& array[%s] FROM t"),
        # Block comments nest on PostgreSQL: the comment ends at the outer */.
        ("SELECT ? /* x /* y */ ? */, ?", "SELECT %s /* x /* y */ ? */, %s"),
        ("SELECT ? /* a /* b /* c */ ? */ ? */ + ?", "SELECT %s /* a /* b /* c */ ? */ ? */ + %s"),
        # A -- comment ends at a bare CR as at a LF.
        ("SELECT ? -- c\r, ?", "SELECT %s -- c\r, %s"),
        ("SELECT ? -- c\r\n, ?", "SELECT %s -- c\r\n, %s"),
        # The geometric operators ?# ?- ?-| ?| ?|| and jsonpath's @? are never marks.
        ("SELECT a ?# b, ?", "SELECT a ?# b, %s"),
        ("SELECT a ?- b, ?- a, ?", "SELECT a ?- b, ?- a, %s"),
        ("SELECT a ?-| b, ?", "SELECT a ?-| b, %s"),
        ("SELECT a ?| b, a ?|| b, ?| a, ?", "SELECT a ?| b, a ?|| b, ?| a, %s"),
        ("SELECT j @? '$.a', ?", "SELECT j @? '$.a', %s"),
        # Around other operators a ? is still a mark.
        ("SELECT 1 WHERE a=? AND b<>? AND c>=?", "SELECT 1 WHERE a=%s AND b<>%s AND c>=%s"),
    ],
)  # fmt: skip
def test_sqlite_marks_become_psycopg_placeholders(sql: str, expected: str) -> None:
    assert psycopg_placeholders(sql, ("x",)) == expected


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("SELECT %s, 'a?'", (1,)),  # psycopg's own placeholders: left alone
        ("SELECT %(id)s", {"id": 1}),
        ("SELECT ?", {"id": 1}),  # a mapping goes with psycopg's %(name)s
        ("SELECT '?'", ()),  # no parameters: the text as it is
        ("SELECT 5 % 2", (1,)),  # no mark: psycopg reports the count mismatch itself
    ],
)
def test_statements_in_psycopgs_style_are_left_alone(sql: str, params: object) -> None:
    assert psycopg_placeholders(sql, params) == sql  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT ? /* x /* y */ ? */, ?", ("a", "b")),
        ("SELECT ? -- c\r, ?", ("a", "b")),
        ("SELECT lseg '((0,0),(1,1))' ?# lseg '((0,1),(1,0))', ?", (True, "b")),
        ("SELECT point '(0,0)' ?- point '(1,0)', ?", (True, "b")),
        ("SELECT lseg '((0,0),(0,1))' ?-| lseg '((0,0),(1,0))', ?", (True, "b")),
        ("SELECT point '(0,0)' ?| point '(0,1)', ?", (True, "b")),
        ("SELECT lseg '((0,0),(0,1))' ?|| lseg '((1,0),(1,1))', ?", (True, "b")),
        ("SELECT '{\"a\": 1}'::jsonb ?| array['a'], ?", (True, "b")),
        ("SELECT '{\"a\": 1}'::jsonb ?& array['a'], ?", (True, "b")),
        ("SELECT '{\"a\": 1}'::jsonb @? '$.a', ?", (True, "b")),
    ],
)
def test_comments_and_operators_with_question_marks_run_on_the_server(
    postgres_url: str, sql: str, expected: tuple[object, ...]
) -> None:
    b = open_backend(postgres_url)
    try:
        params = tuple(v for v in ("a", "b") if v in expected)
        assert b.transact(lambda tx: tx.execute(sql, params)) == [expected]
    finally:
        b.close()


def test_sqlite_style_sql_runs_on_the_server(postgres_url: str) -> None:
    b = open_backend(postgres_url)
    try:
        b.transact(lambda tx: tx.execute("CREATE TABLE orders (id text PRIMARY KEY, n int)"))
        b.transact(lambda tx: tx.execute("INSERT INTO orders VALUES (?, ?)", ("o-?%", 7)))
        rows = b.transact(
            lambda tx: tx.execute("SELECT id, n % 4, 'a?' FROM orders WHERE n = ?", (7,))
        )
        assert rows == [("o-?%", 3, "a?")]
    finally:
        b.close()
