"""Checks a transaction makes in SQL, sent with its next round trip (or its
``COMMIT``) instead of reading an answer first.

A worker's completion needs to know that each of its acks found its message, that
the records it writes are still as it claimed them, and that no task waits on the
ones it finishes. Read first, each costs a round trip before the ``COMMIT`` can go;
checked in SQL, they travel in the one pipeline that ``BEGIN`` ... ``COMMIT``
is (:mod:`.pipeline`). A statement that finds what it did not expect fails, and
with it the transaction: nothing of it commits, and the error is turned into the
one to report by the check's ``translate`` (:meth:`.pipeline.TxConn.defer`).

How a plain statement fails on purpose without a function in agentq's schema (a
new schema version would stop the previous release during a rolling deploy):
the count is compared in a ``CASE`` whose other arm is a text that names the
check, cast to an integer at run time. The server's error then quotes that text,
so each check knows its own failure from any other statement's.

A check that a *guess* was right (a record as this process last wrote it, no
record where one is rare) fails with :class:`SpeculationFailed`: the backend runs
the transaction function again, and the guess is not made the second time.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pgerr

from agentq.backends.postgres.prepared import prepared
from agentq.errors import TransactionAborted

__all__ = ["Guesses", "SpeculationFailed", "count_check", "is_failure_of"]

_counter = itertools.count(1)


class SpeculationFailed(TransactionAborted):
    """What a transaction guessed to save a round trip was wrong: nothing of it was
    written, and it runs again without the guess."""


def count_check(
    cte: str, params: Sequence[Any], expected: int, what: str
) -> tuple[str, tuple[Any, ...], str]:
    """A statement that runs ``cte`` (a query, or a data-modifying statement with
    ``RETURNING``) and fails unless it gives exactly ``expected`` rows; its SQL,
    parameters, and the token its failure quotes (:func:`is_failure_of`)."""
    token = f"agentq check {os.getpid()}.{next(_counter)}: {what}"
    query = prepared(
        f"WITH checked AS ({cte}) "
        "SELECT (CASE WHEN count(*) = %s THEN '0' ELSE %s END)::integer FROM checked"
    )
    return query, (*params, expected, token), token


def is_failure_of(exc: psycopg.Error, token: str) -> bool:
    """Whether ``exc`` is the failure of the check that quotes ``token``."""
    return isinstance(exc, pgerr.InvalidTextRepresentation) and token in (
        exc.diag.message_primary or ""
    )


class Guesses:
    """What a backend guesses instead of reading, bounded and shared by threads:
    the text of records as this process last swapped them in (a worker's claims:
    its completion writes from them), and the records found to exist where one is
    rare (not guessed absent again until read)."""

    def __init__(self, limit: int = 2048) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._texts: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._present: set[tuple[str, str]] = set()

    def wrote(self, table: str, texts: dict[str, str]) -> None:
        """These records were swapped in with these texts (by this process)."""
        with self._lock:
            for key, text in texts.items():
                self._texts[(table, key)] = text
            while len(self._texts) > self._limit:
                self._texts.popitem(last=False)

    def take_texts(self, table: str, keys: Sequence[str]) -> dict[str, str] | None:
        """The last texts written of every one of ``keys``, forgotten now (a guess
        is made once); None if one of them is not known."""
        with self._lock:
            found = {key: self._texts.pop((table, key), None) for key in keys}
        if any(text is None for text in found.values()):
            return None
        return {key: text for key, text in found.items() if text is not None}

    def may_be_absent(self, table: str, keys: Sequence[str]) -> bool:
        """Whether none of ``keys`` was found to exist since it was last read."""
        with self._lock:
            return not any((table, key) in self._present for key in keys)

    def present(self, table: str, keys: Sequence[str]) -> None:
        """One of ``keys`` has a record: read them next time."""
        with self._lock:
            if len(self._present) > self._limit:
                self._present.clear()
            self._present.update((table, key) for key in keys)

    def read(self, table: str, keys: Sequence[str]) -> None:
        """``keys`` were read: they may be guessed absent again."""
        with self._lock:
            if self._present:
                self._present.difference_update((table, key) for key in keys)
