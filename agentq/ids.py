"""Task identifiers shaped for the engine that stores them.

A task id keys the ledger record and the queue message, so where new ids land
in the key space decides how many pages a commit touches. SQLite is one B-tree
per table: ids that grow with time put the tasks enqueued together on the same
pages, so a group commit of 30 completions rewrites a handful of pages instead
of 30 scattered ones (measured: about 40 % less write-lock time per task).
Spanner splits tables by key range: ids that grow with time would send every
insert to the last split, a hotspot, so there they stay fully random.

Ids that grow with time are also monotonic within a process: every task of a
transaction shares the transaction's time, and unordered tails would interleave
the tasks of one decision (a thousand enqueued together, leased and completed in
batches of consecutive messages) with each other's pages again. So an id made for
the same microsecond as the previous one continues above it, as monotonic ULIDs
do, but by a random step of up to 2**48, not by one: the ids of one decision
(an approval's action, expiry, deadline and notification) must not be derivable
from each other, or a caller who holds one could name the others (issue 27).
Any other time gets a fresh random tail, so an id's first digits are always its
creation time (retention relies on it), even when runtimes with different clocks
share a process.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime

from agentq.clock import to_micros

__all__ = ["new_approval_id", "new_run_id", "new_task_id"]

_PREFIX = "tsk_"
_TAIL_BITS = 72
_TAIL_LIMIT = 1 << _TAIL_BITS
#: The largest step between two ids of one microsecond: 48 random bits to guess
#: per id, and room for 2**23 ids in a microsecond from the tail's lower half.
_STEP_BITS = 48

_last_lock = threading.Lock()
_last = (-1, 0)  # (micros, tail) of this process's latest time-ordered id

# Random bytes for the tails, drawn from os.urandom a few hundred tails at a
# time: one getrandom call per id was a twentieth of an enqueue's CPU.
_POOL_TAILS = 256
_pool = memoryview(b"")


def _after_fork() -> None:
    """A forked child must neither hand out its parent's remaining random bytes
    nor count up from its parent's last tail: both would repeat the parent's ids."""
    global _pool, _last
    _pool = memoryview(b"")
    _last = (-1, 0)


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork
    os.register_at_fork(after_in_child=_after_fork)


def _random_tail() -> int:
    """A fresh random tail (71 bits; the caller holds ``_last_lock``)."""
    return _random_bits(9) >> 1


def _random_step() -> int:
    """A random step from 1 to 2**48 (the caller holds ``_last_lock``)."""
    return _random_bits(6) + 1


def _random_bits(size: int) -> int:
    """``size`` random bytes as a number, from the pool (the caller holds ``_last_lock``)."""
    global _pool
    if len(_pool) < size:
        _pool = memoryview(os.urandom(9 * _POOL_TAILS))
    chunk, _pool = _pool[:size], _pool[size:]
    return int.from_bytes(chunk, "big")


def new_task_id(now: datetime | None = None) -> str:
    """A new task id: ``tsk_`` and 32 hex digits.

    With ``now``, the first 14 digits are the microseconds since the epoch and
    the other 18 a random tail (71 bits), or, when the previous id was made for
    the same microsecond, the previous tail plus a random step (1 to 2**48): ids
    sort by creation time, those of one transaction in the order they were made,
    and none can be worked out from another. Without ``now``,
    all 32 are random (128 bits).
    """
    return _new_id(_PREFIX, now)


def new_approval_id(now: datetime | None = None) -> str:
    """A new approval id: ``apr_`` and 32 hex digits, made as :func:`new_task_id`
    makes task ids (with ``now``, they sort by creation time: the newest
    approvals are one keyset page away)."""
    return _new_id("apr_", now)


def _new_id(prefix: str, now: datetime | None) -> str:
    if now is None:
        return f"{prefix}{os.urandom(16).hex()}"
    global _last
    micros = to_micros(now)
    with _last_lock:
        last_micros, last_tail = _last
        step = _random_step()
        if micros == last_micros and last_tail + step < _TAIL_LIMIT:
            tail = last_tail + step
        else:
            # Half the tail space: room to count up from it before the next microsecond.
            tail = _random_tail()
        _last = (micros, tail)
    return f"{prefix}{micros:014x}{tail:018x}"


def new_run_id(now: datetime | None = None) -> str:
    """A new durable agent run's id: ``run_`` and 32 hex digits, made as
    :func:`new_task_id` makes task ids (with ``now``, they sort by creation time)."""
    return _new_id("run_", now)
