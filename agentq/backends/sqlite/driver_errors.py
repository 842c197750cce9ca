"""sqlite3 and file-system errors, mapped once to agentq errors.

Every connection, read and write of the backend goes through :class:`Database`,
which turns the driver errors below into agentq errors naming the database and
what happened, with the driver's exception kept as ``__cause__``:

=====================================  ==========================================
SQLite result (primary code)           agentq error
=====================================  ==========================================
SQLITE_READONLY (file, directory or    :class:`~agentq.errors.DatabaseNotWritable`
mount not writable)
SQLITE_FULL (disk full, size limit)    :class:`~agentq.errors.DatabaseNotWritable`
SQLITE_PERM, SQLITE_AUTH               :class:`~agentq.errors.DatabaseNotWritable`
SQLITE_CANTOPEN                        ``DatabaseNotWritable`` if the file or its
                                       directory is not writable, else
                                       :class:`~agentq.errors.BackendUnavailable`
SQLITE_IOERR, SQLITE_CORRUPT,          :class:`~agentq.errors.BackendUnavailable`
SQLITE_NOTADB
SQLITE_BUSY, SQLITE_LOCKED             retried; then
                                       :class:`~agentq.errors.TransactionAborted`
=====================================  ==========================================

Anything else (a syntax error or constraint in the application's own SQL run
with ``tx.execute``, say) is the application's and passes unchanged.
"""

from __future__ import annotations

import errno
import os
import sqlite3

from agentq.errors import AgentQError, BackendUnavailable, DatabaseNotWritable

__all__ = ["translate", "translate_os_error"]

# Exceptions built without a result code (rare: tests, wrappers) are classified
# by SQLite's standard message for the code.
_BY_MESSAGE = (
    ("readonly database", sqlite3.SQLITE_READONLY),
    ("database or disk is full", sqlite3.SQLITE_FULL),
    ("disk i/o error", sqlite3.SQLITE_IOERR),
    ("unable to open database", sqlite3.SQLITE_CANTOPEN),
    ("malformed", sqlite3.SQLITE_CORRUPT),
    ("not a database", sqlite3.SQLITE_NOTADB),
    ("access permission denied", sqlite3.SQLITE_PERM),
)

_NOT_WRITABLE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}


def _primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF  # extended codes carry the primary one in the low byte
    text = str(exc).lower()
    for fragment, primary in _BY_MESSAGE:
        if fragment in text:
            return primary
    return None


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written, if it cannot: ``os.access`` also reports a
    read-only mount and an immutable file, which bind root too."""
    directory = os.path.dirname(path) or "."
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "the file is not writable by this process"
    if not os.access(directory, os.W_OK):
        return (
            f"its directory {directory!r} is not writable by this process, and SQLite "
            "creates its -wal and -shm files there"
        )
    return None


def translate(exc: sqlite3.Error, path: str) -> AgentQError | None:
    """The agentq error for a driver error on database ``path``, or None when it
    is not the backend's to map (the application's own SQL)."""
    code = _primary_code(exc)
    where = f"SQLite database {path!r}"
    if code == sqlite3.SQLITE_READONLY or (
        code == sqlite3.SQLITE_CANTOPEN and _unwritable(path) is not None
    ):
        why = _unwritable(path)
        return DatabaseNotWritable(
            f"{where} is read-only{f' ({why})' if why else ''}: nothing can be written "
            f"to it ({exc}); make it writable by this user, or work on a writable copy"
        )
    if code == sqlite3.SQLITE_FULL:
        return DatabaseNotWritable(
            f"{where} is full: its disk has no space left or it reached its size limit "
            f"({exc}); the transaction was not committed; free space, then retry"
        )
    if code in (sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH):
        return DatabaseNotWritable(f"{where} refused the access: no permission ({exc})")
    if code == sqlite3.SQLITE_CANTOPEN:
        return BackendUnavailable(
            f"cannot open {where} ({exc}): check that it and its directory exist and are "
            "readable by this user"
        )
    if code == sqlite3.SQLITE_IOERR:
        return BackendUnavailable(f"{where}: disk I/O error, nothing was committed ({exc})")
    if code == sqlite3.SQLITE_CORRUPT:
        return BackendUnavailable(f"{where} is corrupt ({exc}); restore it from a backup")
    if code == sqlite3.SQLITE_NOTADB:
        return BackendUnavailable(f"{where} is not a SQLite database ({exc})")
    return None


def translate_os_error(exc: OSError, path: str) -> AgentQError:
    """The agentq error for failing to create database file ``path``."""
    what = f"cannot create SQLite database {path!r}: {exc.strerror or exc}"
    if exc.errno in _NOT_WRITABLE_ERRNOS:
        return DatabaseNotWritable(f"{what} (read-only, full or no permission)")
    return BackendUnavailable(what)
