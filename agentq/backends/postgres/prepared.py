"""Server-side prepared statements for agentq's hottest statements, kept in the
one text of statements a round trip sends (:mod:`.inline`).

Why: a worker's statements are sent with their values inlined, so the server
parsed and planned each at every call. Measured with ``pg_stat_statements``
(``track_planning``), draining no-op tasks with two workers, the server spent
about 25 µs a task planning against about 65 µs executing the worker's
statements; with the small batches of ``agentq worker --once`` it planned for
longer than it executed.

How: a statement marked with :func:`prepared` goes as ``EXECUTE name(…)``, its
values the same literals the inline text carries. On a connection that has not
prepared it yet, ``PREPARE name AS`` its text (placeholders as ``$1``, ``$2``…)
goes at the front of the same text, so the round trips stay as they were.
``PREPARE`` is not transactional: a statement prepared lasts as long as the
server session, whatever becomes of the transaction it was sent in. If a text
that prepared something fails, that connection forgets those statements and
prepares them again under new names (the server may or may not have run the
``PREPARE``; a new name never collides).

A statement's name is derived from its text, so one name means one statement
in every process: behind a transaction-pooling pooler that agentq was not told
of, an ``EXECUTE`` that lands on a server connection another client prepared
runs the same statement, never another. There, a statement missing (or already
prepared) on the server connection a transaction got fails it, nothing of it
committed; the database's :class:`Switch` then turns preparing off for good,
with one warning that names ``pooler=transaction``, and the transaction runs
again (:meth:`.connection.Database.write`).

Only on connections :func:`enable` was called on: the pool's, unless the
database sits behind a transaction-pooling pooler (``pooler=transaction``), where
the next transaction may get a server connection without the statement.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Sequence
from typing import Any

__all__ = [
    "MAX_PER_SESSION",
    "Prepared",
    "Session",
    "Switch",
    "enable",
    "prepared",
    "session_of",
]

#: At most this many statements prepared on one connection (then inlined).
MAX_PER_SESSION = 128
#: At most this many statement texts' names kept (then computed at each use).
_MAX_NAMES = 4096

_names: dict[str, str] = {}
_names_lock = threading.Lock()


class Prepared(str):
    """SQL text (``%s``/``%b`` placeholders) a connection prepares on first use;
    :attr:`name` is derived from the text (the same in every process)."""

    name: str


def prepared(query: str) -> str:
    """``query`` marked to be prepared (:class:`Prepared`)."""
    with _names_lock:
        name = _names.get(query)
    if name is None:
        name = "agentq_" + hashlib.blake2b(query.encode(), digest_size=10).hexdigest()
        with _names_lock:
            if len(_names) < _MAX_NAMES:  # texts with changing constants: not kept
                _names[query] = name
    marked = Prepared(query)
    marked.name = name
    return marked


class Switch:
    """Whether one database's connections prepare statements (all of them: a
    pooler in front is one for all)."""

    def __init__(self) -> None:
        self.on = True


class Session:
    """What one connection's server session has prepared: statement name to the
    name it was prepared under there."""

    def __init__(self, switch: Switch | None = None) -> None:
        self.switch = switch or Switch()
        self._lock = threading.Lock()
        self._prepared: dict[str, str] = {}
        self._generation = 0

    def use(self, statement: Prepared) -> tuple[str, bool] | None:
        """The server's name of ``statement`` and whether it must be prepared
        first (it is counted as prepared from now on: :meth:`forget` undoes
        that if the text fails); None if this session prepares no more."""
        with self._lock:
            found = self._prepared.get(statement.name)
            if found is not None:
                return found, False
            if len(self._prepared) >= MAX_PER_SESSION:
                return None
            server_name = f"{statement.name}_{self._generation}"
            self._prepared[statement.name] = server_name
            return server_name, True

    def forget(self, names: Sequence[str]) -> None:
        """The text that prepared ``names`` failed (the server may or may not
        have run its ``PREPARE``): the next use prepares them again under new
        names."""
        with self._lock:
            for name in names:
                self._prepared.pop(name, None)
            self._generation += 1


_sessions: weakref.WeakKeyDictionary[Any, Session] = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


def enable(conn: Any, switch: Switch) -> None:
    """Let ``conn`` (a psycopg connection) prepare the marked statements while
    ``switch`` (its database's) is on."""
    with _sessions_lock:
        _sessions.setdefault(conn, Session(switch))


def session_of(conn: Any) -> Session | None:
    """``conn``'s prepared statements, or None if it prepares none (now)."""
    with _sessions_lock:
        session = _sessions.get(conn)
    return session if session is not None and session.switch.on else None
