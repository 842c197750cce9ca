"""Who may read the database: the mode of the files the backend creates.

The database holds the whole ledger (arguments, results, approval notes), so
its files are created ``0600`` by default: the database itself and the writer
lock here, and ``-wal`` and ``-shm`` by SQLite, which gives them the mode of the
database file. The umask cannot widen it: the mode is set with ``fchmod`` after
creation. ``file_mode`` (``?file_mode=0640`` in the URL) relaxes it, for a group
that must read the ledger. A file that already exists keeps the mode its owner
gave it.
"""

from __future__ import annotations

import os
import re

from agentq.errors import ConfigError

__all__ = ["DEFAULT_FILE_MODE", "create_file", "open_or_create", "parse_file_mode"]

DEFAULT_FILE_MODE = 0o600

_OCTAL_MODE = re.compile(r"(?:0o|0)?([0-7]{3})")


def parse_file_mode(value: object) -> int:
    """A permission mode from ``0640``, ``640``, ``0o640`` or an int; it must give
    the owner read and write (agentq needs both) and nobody execute."""
    if isinstance(value, int) and not isinstance(value, bool):
        mode = value
    elif isinstance(value, str) and (match := _OCTAL_MODE.fullmatch(value)):
        mode = int(match.group(1), 8)
    else:
        raise ConfigError(
            f"invalid SQLite file_mode {value!r}: use an octal permission mode such as 0600 "
            "(the default) or 0640"
        )
    if not 0 <= mode <= 0o777 or mode & 0o600 != 0o600 or mode & 0o111:
        raise ConfigError(
            f"invalid SQLite file_mode {value!r} ({mode:04o}): the owner needs read and "
            "write, and nobody needs execute; use a mode between 0600 and 0666, e.g. 0640"
        )
    return mode


def create_file(path: str, mode: int) -> None:
    """Create ``path`` empty with exactly ``mode`` if it does not exist yet (an
    empty file is an empty SQLite database). Raises ``OSError`` if it cannot."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, mode)  # os.open applied the umask
    finally:
        os.close(fd)


def open_or_create(path: str, mode: int) -> int:
    """Open ``path`` read-write, creating it with exactly ``mode`` if it does not
    exist; returns the file descriptor. Raises ``OSError`` if it cannot."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            try:
                return os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue  # deleted between the two opens: create it after all
        try:
            os.fchmod(fd, mode)  # os.open applied the umask
        except BaseException:
            os.close(fd)
            raise
        return fd
