"""SQLite's writer lock held by a frozen worker: a stall of every writer.

agentq's SQLite backend queues writers for an advisory ``flock`` on
``<db>-agentq.lock`` (:mod:`agentq.backends.sqlite.writer_lock`). A worker that
the chaos run freezes (SIGSTOP, past its leases) while it holds that lock stops
every process's writes until it is thawed: a turn whose model answered just
then cannot commit before its lease runs out, and is asked again without any
kill, freeze or restart of *its* worker. The run checks count such a freeze as
the database's stop (an outage) only when the frozen worker held the lock,
which :func:`writer_lock_holders` reads from the kernel's table of locks.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["writer_lock_holders", "writer_lock_path"]


def writer_lock_path(url: str) -> str | None:
    """The writer lock's file of a ``sqlite:///`` URL (None for another backend)."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return None
    return f"{'/' + url[len(prefix) :].split('?', 1)[0].lstrip('/')}-agentq.lock"


def writer_lock_holders(lock_path: str, locks: Path = Path("/proc/locks")) -> set[int]:
    """The pids holding an exclusive ``flock`` on ``lock_path`` (empty where the
    kernel's table is not readable, or the file does not exist yet)."""
    try:
        inode = os.stat(lock_path).st_ino
        lines = locks.read_text().splitlines()
    except OSError:
        return set()
    holders = set()
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 7746 fe:00:2146573 0 EOF"; a waiter's line has "->".
        parts = line.split()
        if "->" in parts or len(parts) < 6:
            continue
        if (
            parts[1] == "FLOCK"
            and parts[3] == "WRITE"
            and parts[5].rsplit(":", 1)[-1] == str(inode)
        ):
            holders.add(int(parts[4]))
    return holders
