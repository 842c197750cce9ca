"""The doorbell: how a commit that sent messages tells other processes which
queues to look at, without them reading the database.

Beside ``x.db`` lives ``x.db-bell``, 4 KiB of 512 slots. After a transaction
that sent to queue ``q`` has committed (it is visible to every reader), the
sender writes a fresh value into ``q``'s slot (:meth:`Doorbell.ring`). A
process whose receivers wait watches the file (:mod:`.watcher`), reads it on
every change and wakes the receivers of the queues whose slots changed; no
SQL, and no wait for the commit to become visible (it already is).

Before the doorbell the watcher learnt of other processes' commits only from
the WAL file, which every commit writes, acks and leases included: after each
one it waited for the commit to become visible and read every waiting queue.
A worker waiting on idle queues beside a busy one spent 150-250 µs of CPU per
foreign commit that way (40-50 % of a core at 2,000 commits/s), and a worker
serving every queue ran at about 0.9x one serving only the busy queue.

Slots are picked by a hash of the queue name; two queues sharing one only wake
each other's receivers spuriously (they lease nothing and wait again). Each
ring writes a value no earlier ring wrote, so a change is never hidden by two
writers racing on a slot. A ring is a hint, never a promise: a process killed
between its commit and its ring, or a program that writes the database without
agentq, is noticed by the watcher's periodic check (:data:`.watcher._SAFETY_POLL`).
The file holds no data (random values only) and gets the database's file mode.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import struct
import threading
import zlib
from collections.abc import Collection

from agentq.backends.sqlite.files import open_or_create

__all__ = ["SLOTS", "Doorbell"]

log = logging.getLogger("agentq.sqlite")

#: Slots in the file (8 bytes each: 4 KiB, one page).
SLOTS = 512
_SLOT = struct.Struct("<Q")
_SIZE = SLOTS * _SLOT.size


def _fresh_values() -> itertools.count[int]:
    return itertools.count(int.from_bytes(os.urandom(8), "big") >> 1)


# Values no other ring writes: a random start per process, counting up. A forked
# child gets a start of its own: counting on from its parent's, the two would
# write the same values into a slot, and a watcher would miss the second ring
# until its periodic check.
_values = _fresh_values()


def _after_fork() -> None:
    global _values
    _values = _fresh_values()


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork
    os.register_at_fork(after_in_child=_after_fork)


@functools.lru_cache(maxsize=1024)  # queue names are few; every ring looks them up
def _slot_of(queue: str) -> int:
    return zlib.crc32(queue.encode()) % SLOTS


class Doorbell:
    """The ``-bell`` file of one database, open for ringing and reading."""

    def __init__(self, fd: int, path: str) -> None:
        self.path = path
        self._fd = fd
        self._lock = threading.Lock()
        # Rings are combined: slots to ring, and whether a thread is ringing them.
        self._pending: set[int] = set()
        self._ringing = False
        self._pending_lock = threading.Lock()
        self.closed = False

    @classmethod
    def open(cls, database: str, file_mode: int) -> Doorbell | None:
        """The doorbell of ``database`` (created with ``file_mode`` if missing), or
        None if it cannot be opened (receivers then rely on the WAL file alone)."""
        path = database + "-bell"
        try:
            fd = open_or_create(path, file_mode)
        except OSError as exc:
            log.info("no doorbell %s (%s): other processes' sends are seen from the WAL", path, exc)
            return None
        try:
            if os.fstat(fd).st_size < _SIZE:
                os.ftruncate(fd, _SIZE)  # zero slots; racing openers truncate to the same size
        except OSError as exc:
            os.close(fd)
            log.info("no doorbell %s (%s): other processes' sends are seen from the WAL", path, exc)
            return None
        return cls(fd, path)

    @staticmethod
    def slot(queue: str) -> int:
        """The slot of ``queue``."""
        return _slot_of(queue)

    def ring(self, queues: Collection[str]) -> None:
        """Tell other processes that messages were sent to ``queues`` (call after
        the commit). Never raises: a lost ring is caught up by the watcher's
        periodic check.

        Rings are combined: while one thread writes, others only add their
        slots, and it writes those too before it returns (each after the commit
        that asked for it). The members of a commit group all ring at once as
        they wake; the write itself is cheap (under a microsecond), but each one
        released the GIL into the next group's transaction, which with eight
        callers cost a quarter of a decision (NORMAL: 196 µs, 146 µs with no
        ringing at all, 170 µs combined).
        """
        slots = {self.slot(q) for q in queues}
        with self._pending_lock:
            if self._ringing:
                self._pending |= slots
                return  # the ringing thread writes them after its current write
            self._ringing = True
        try:
            while True:
                self._write(slots)
                with self._pending_lock:
                    slots, self._pending = self._pending, set()
                    if not slots:
                        self._ringing = False
                        return
        except BaseException:  # Ctrl-C mid-write: the next ring writes again
            with self._pending_lock:
                self._ringing = False
            raise

    def _write(self, slots: set[int]) -> None:
        with self._lock:
            if self.closed:
                return
            try:
                for slot in slots:
                    value = next(_values) & 0xFFFF_FFFF_FFFF_FFFF
                    os.pwrite(self._fd, _SLOT.pack(value), slot * _SLOT.size)
            except OSError as exc:
                log.debug("doorbell %s: ring failed (%s)", self.path, exc)

    def read(self) -> bytes:
        """The slots as they are now (zeros where the file is short)."""
        with self._lock:
            if self.closed:
                return bytes(_SIZE)
            try:
                data = os.pread(self._fd, _SIZE, 0)
            except OSError:
                data = b""
        return data.ljust(_SIZE, b"\0")

    @classmethod
    def changed(cls, before: bytes, after: bytes, queues: Collection[str]) -> set[str]:
        """Of ``queues``, those whose slot differs between two reads."""
        changed = set()
        for queue in queues:
            at = cls.slot(queue) * _SLOT.size
            if before[at : at + _SLOT.size] != after[at : at + _SLOT.size]:
                changed.add(queue)
        return changed

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                self.closed = True
                os.close(self._fd)
