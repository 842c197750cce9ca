"""Statements as one text, their parameters bound by the client: what a
transaction sends with its ``COMMIT`` (:meth:`.pipeline.TxConn.commit`).

A text of statements goes as one simple-protocol ``Query`` message, which the
server parses and answers once. psycopg's pipeline mode instead feeds each
statement as its own Parse/Bind/Execute and reads each result as it comes: for
an enqueue (``BEGIN``, the message, the ledger record, the ``NOTIFY``, ``COMMIT``)
about three times the client's and the server's work, and on a busy machine
the wake-ups that go with it.

The quoting is libpq's own (``PQescapeLiteral`` on the connection, which knows
its encoding and ``standard_conforming_strings``), for the values agentq's
own writes bind: text, whole numbers, bytes and NULL, and lists of them where
the statement casts the placeholder to an array type (``%b::text[]``: a
worker's sets, one element a task), written as an array's text (``{"a","b"}``,
every element quoted) and then quoted as any text. A list where the
placeholder names no array type is left to the server's binding (an untyped
array's text would be read as a single value, or refused). A statement with
another placeholder or another value is bound by psycopg's client-side cursor
instead, and past :data:`INLINE_LIMIT` characters (large arguments) the caller
sends them bound by the server.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import pq
from psycopg.pq import abc as pq_abc

from agentq.backends.postgres.prepared import Prepared, Session, session_of

__all__ = ["INLINE_LIMIT", "Inlined", "inlined"]

#: Above this many bytes of statements the parameters go bound by the server.
INLINE_LIMIT = 256 * 1024
#: Values bound by psycopg's client-side quoting (one unambiguous literal each).
_PLAIN = (str, int, bytes, list)
#: A placeholder (text ``%s`` or binary ``%b``: inlined, both are a literal).
_PLACEHOLDER = re.compile(r"%[sb]")
#: What follows a placeholder cast to an array type (``%b::bigint[]``).
_ARRAY_CAST = re.compile(r"::\s*[a-z_][a-z0-9_ ]*\[\]", re.IGNORECASE)


class _Pieces(tuple[bytes, ...]):
    """A statement cut at its placeholders; ``arrays[i]``: whether placeholder
    ``i`` is cast to an array type, so a list may go there as an array's text."""

    arrays: tuple[bool, ...]


@lru_cache(maxsize=512)
def _pieces(query: str) -> _Pieces | None:
    """``query`` (UTF-8) cut at its ``%s`` and ``%b`` placeholders; None if it
    has another use of ``%`` (a named placeholder, ``%t``, ``%%``): psycopg
    binds those."""
    texts = _PLACEHOLDER.split(query)
    if any("%" in piece for piece in texts):
        return None
    pieces = _Pieces(piece.encode() for piece in texts)
    pieces.arrays = tuple(_ARRAY_CAST.match(piece) is not None for piece in texts[1:])
    return pieces


def _element(value: Any) -> str | None:
    """One element of an array's text (quoted), or None if it cannot be one."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if "\x00" in value:
            return None
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bytes):
        return '"\\\\x' + value.hex() + '"'
    return None


def _array(escape: pq_abc.Escaping, values: list[Any]) -> bytes | None:
    """``values`` as an array's text, quoted; None if an element is not plain."""
    kinds = {type(v) for v in values}
    if kinds == {str}:  # a worker's keys and records: escaped in a few passes, not each
        joined = "\x00".join(values)
        if joined.count("\x00") != len(values) - 1:
            return None  # an element holds a NUL: psycopg's binding refuses it
        joined = joined.replace("\\", "\\\\").replace('"', '\\"').replace("\x00", '","')
        return escape.escape_literal(('{"' + joined + '"}').encode())
    if kinds == {int}:
        return escape.escape_literal(("{" + ",".join(map(str, values)) + "}").encode())
    elements: list[str] = []
    for value in values:
        element = _element(value)
        if element is None:
            return None
        elements.append(element)
    return escape.escape_literal(("{" + ",".join(elements) + "}").encode())


def _literal(escape: pq_abc.Escaping, value: Any, array: bool = False) -> bytes | None:
    """``value`` as an SQL literal, or None if it is not one of the plain kinds
    (a list only where ``array``: the placeholder is cast to an array type)."""
    if isinstance(value, list):
        return _array(escape, value) if array else None
    if value is None:
        return b"NULL"
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int):
        # A space before a minus: "x -%s" must not become the comment "x --1".
        return b"%d" % value if value >= 0 else b" %d" % value
    if isinstance(value, str):
        if "\x00" in value:
            return None  # psycopg's binding refuses it, with its own error
        return escape.escape_literal(value.encode())
    if isinstance(value, bytes):
        return escape.escape_literal(b"\\x" + value.hex().encode()) + b"::bytea"
    return None


def _literals(
    escape: pq_abc.Escaping, pieces: _Pieces | None, params: Sequence[Any]
) -> list[bytes] | None:
    """``params`` quoted for the placeholders between ``pieces``; None if one
    is not a plain value for its place."""
    if pieces is None or len(pieces) != len(params) + 1:
        return None
    literals = []
    for value, array in zip(params, pieces.arrays, strict=True):
        literal = _literal(escape, value, array)
        if literal is None:
            return None
        literals.append(literal)
    return literals


def _bound(pieces: _Pieces, literals: list[bytes]) -> bytes:
    """The statement cut into ``pieces`` with ``literals`` between them."""
    parts = [pieces[0]]
    for literal, piece in zip(literals, pieces[1:], strict=True):
        parts += (literal, piece)
    return b"".join(parts)


def _numbered(pieces: _Pieces) -> bytes:
    """The statement with ``$1``, ``$2``… for its placeholders (to prepare)."""
    parts = [pieces[0]]
    for n, piece in enumerate(pieces[1:], start=1):
        parts += (b"$%d" % n, piece)
    return b"".join(parts)


class Inlined(bytes):
    r"""A text of statements, with :attr:`prepares` ``PREPARE``\ s (one result
    each) before its statement number :attr:`prepared_at` (the first with
    parameters: after a ``BEGIN``, which must come first), of the statements
    named in :attr:`preparing` (of :attr:`session`)."""

    prepares: int = 0
    prepared_at: int = 0
    session: Session | None = None
    preparing: tuple[str, ...] = ()

    def failed(self) -> None:
        """The server refused the text: what it prepared is prepared again (under
        new names) at its next use. (A statement found missing or taken turns
        preparing off: :meth:`.connection.Database.write`.)"""
        if self.session is not None and self.preparing:
            self.session.forget(self.preparing)


def inlined(
    conn: psycopg.Connection[Any], statements: Sequence[tuple[str, Sequence[Any] | None]]
) -> Inlined | None:
    """``statements`` (SQL with ``%s`` placeholders, and their parameters or None)
    as one text, or None if a parameter is not a plain value or the text would
    pass :data:`INLINE_LIMIT`. A statement marked :class:`~.prepared.Prepared`
    goes as ``EXECUTE`` where ``conn`` prepares statements (:mod:`.prepared`)."""
    encoding = conn.info.encoding
    utf8 = encoding == "utf-8"
    escape = pq.Escaping(conn.pgconn)
    session = session_of(conn) if utf8 else None
    binder: psycopg.ClientCursor[Any] | None = None
    out: list[bytes] = []
    prepares: list[bytes] = []
    preparing: list[str] = []
    size = 0
    prepared_at = None

    def not_inlined() -> Inlined | None:
        # What this text would have prepared was counted as prepared: undone.
        if session is not None and preparing:
            session.forget(preparing)
        return None

    for query, params in statements:
        if params is not None and prepared_at is None:
            prepared_at = len(out)
        if params is None:
            text = query.encode(encoding)
        else:
            if not all(p is None or isinstance(p, _PLAIN) for p in params):
                return not_inlined()
            pieces = _pieces(query) if utf8 else None
            literals = _literals(escape, pieces, params)
            marked = query if isinstance(query, Prepared) else None
            if pieces is not None and literals is not None:
                used = None
                if session is not None and marked is not None:
                    used = session.use(marked)
                if used is None or marked is None:
                    text = _bound(pieces, literals)
                else:
                    name, new = used
                    if new:
                        prepares.append(b"PREPARE %s AS %s" % (name.encode(), _numbered(pieces)))
                        preparing.append(marked.name)
                    text = b"EXECUTE " + name.encode()
                    if literals:
                        text += b"(" + b", ".join(literals) + b")"
            elif any(isinstance(p, list) for p in params):
                return not_inlined()  # an array whose type only the server's binding gives
            else:
                binder = binder or psycopg.ClientCursor(conn)
                text = binder.mogrify(query, params).encode(encoding)
        size += len(text)
        if size > INLINE_LIMIT:
            return not_inlined()
        out.append(text)
    if prepares:
        assert prepared_at is not None  # a statement with parameters asked for them
        out[prepared_at:prepared_at] = prepares
    result = Inlined(b";\n".join(out))
    if prepares:
        result.prepares, result.prepared_at = len(prepares), prepared_at or 0
    result.session, result.preparing = session, tuple(preparing)
    return result
