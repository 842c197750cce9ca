"""SQLite's ``?`` placeholders in the application's SQL, accepted on PostgreSQL.

``tx.execute(sql, params)`` takes psycopg's placeholders (``%s``, ``%(name)s``).
So that SQL written for the default SQLite backend runs here by changing only
the database URL (the README's refund bot, the examples, a tool's
``ctx.on_commit`` write), a statement with a sequence of parameters and no
psycopg placeholder may use SQLite's ``?`` instead: each ``?`` outside string
literals, quoted identifiers and comments becomes ``%s``, and every other ``%``
is doubled (psycopg reads ``%`` everywhere in a statement with parameters, so
SQLite's ``x % 2`` stays a modulo).

A statement holding ``%s``, ``%b``, ``%t`` or ``%(`` is psycopg's and is sent as
it is; so is one without parameters or with a mapping.

Comments are read as PostgreSQL reads them: a ``/* ... */`` comment nests (it
ends at the ``*/`` that closes its outermost ``/*``), and a ``--`` comment ends
at a line feed or a carriage return. PostgreSQL's operators that begin with
``?`` are never placeholders: ``jsonb``'s ``?|`` and ``?&``, the geometric
``?#``, ``?-``, ``?-|``, ``?|`` and ``?||``, and ``jsonb``'s ``@?`` (so SQLite's
``? - 1`` needs its space: ``?-1`` is PostgreSQL's ``?-`` operator, as
PostgreSQL itself reads it). The bare ``?`` operator (``jsonb`` key exists) is
ambiguous in a ``?`` statement with parameters: write that statement with
``%s`` (or call ``jsonb_exists``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["psycopg_placeholders"]

_SCAN = re.compile(
    r"""
    (?P<quoted>
        (?<![\w$])[Ee]'(?:[^'\\]|\\.|'')*'                    # E'...' (backslash escapes)
      | '(?:[^']|'')*'                                       # '...'
      | "(?:[^"]|"")*"                                       # "identifier"
      | (?<![\w$])\$(?P<tag>[A-Za-z_]\w*)?\$.*?\$(?(tag)(?P=tag))\$  # $$..$$, $t$..$t$
      | --[^\n\r]*                                           # -- comment (to LF or CR)
    )
  | (?P<comment>/\*)                                         # /* comment */ (nests)
  | (?P<operator>@\?|\?(?:-\|?|\|\|?|[#&]))                   # @? ?- ?-| ?| ?|| ?# ?&
  | (?P<mark>\?)
  | (?P<psycopg>%[sbt(])
    """,
    re.S | re.X,
)


def psycopg_placeholders(sql: str, params: Sequence[Any] | Mapping[str, Any]) -> str:
    """``sql`` with SQLite's ``?`` placeholders turned into psycopg's ``%s``, if it
    uses them (see the module's docstring); otherwise ``sql`` unchanged."""
    if not params or isinstance(params, Mapping):
        return sql
    out: list[str] = []
    done = 0
    marks = 0
    while (match := _SCAN.search(sql, done)) is not None:
        kind = match.lastgroup
        if kind == "psycopg":
            return sql  # psycopg's own placeholders: nothing to translate
        out.append(sql[done : match.start()].replace("%", "%%"))
        end = _comment_end(sql, match.end()) if kind == "comment" else match.end()
        if kind == "mark":
            out.append("%s")
            marks += 1
        else:
            out.append(sql[match.start() : end].replace("%", "%%"))
        done = end
    if marks == 0:
        return sql
    out.append(sql[done:].replace("%", "%%"))
    return "".join(out)


_COMMENT_EDGE = re.compile(r"/\*|\*/")


def _comment_end(sql: str, start: int) -> int:
    """Where the block comment opened just before ``start`` ends (after its
    ``*/``): comments nest on PostgreSQL. Unclosed: the end of ``sql`` (the
    server reports it)."""
    depth = 1
    for edge in _COMMENT_EDGE.finditer(sql, start):
        depth += 1 if edge.group() == "/*" else -1
        if depth == 0:
            return edge.end()
    return len(sql)
