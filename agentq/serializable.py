"""The retry loop of an application's own SERIALIZABLE transaction.

``rt.decision(conn)`` enqueues and approves inside a PostgreSQL transaction the
application opened and commits, so agentq never re-runs it: a serialization
failure (SQLSTATE ``40001``) or a deadlock (``40P01``) reaches the application,
whose transaction must run again from its start, as ``rt.transact(fn)`` does for
its own. At SERIALIZABLE such a failure is normal, not a bug: PostgreSQL tracks
reads per index page, so two transactions that touch neighbouring rows (agentq's
records beside a worker's) may conflict, and the first try fails now and then.
:func:`retry_serializable` is that loop::

    def refund() -> None:
        with Session(engine) as session, session.begin():
            session.get(Order, order_id).state = "refunding"
            rt.decision(session).enqueue("execute_refund", {"order_id": order_id})

    retry_serializable(refund)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

from agentq.clock import Clock, SystemClock

__all__ = ["RETRYABLE_SQLSTATES", "retry_serializable"]

T = TypeVar("T")

#: Serialization failure and deadlock: the transaction may succeed if run again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a driver's error (psycopg's ``sqlstate``, psycopg2's
    ``pgcode``), also wrapped by SQLAlchemy (``orig``) or chained."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        state = getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None)
        if isinstance(state, str):
            return state
        seen = getattr(seen, "orig", None) or seen.__cause__
    return None


def retry_serializable(
    transaction: Callable[[], T],
    *,
    attempts: int = 8,
    backoff: tuple[float, float] = (0.005, 0.5),
    clock: Clock | None = None,
) -> T:
    """Run ``transaction()`` — a function that opens, does and commits one whole
    transaction of yours — and run it again, up to ``attempts`` runs in all, when it
    raises a serialization failure or a deadlock (SQLSTATE ``40001``, ``40P01``;
    from psycopg, psycopg2 or SQLAlchemy), after a jittered wait that doubles
    from ``backoff[0]`` up to ``backoff[1]`` seconds. Any other error, and the
    last conflict, are raised as they are. Its result is ``transaction()``'s.

    Everything the function does must be in the transaction (it runs again from
    the start): agentq's enqueues, approvals and wake-ups exist only once a run
    commits, so a re-run never makes a second task."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    clock = clock or SystemClock()
    first, most = backoff
    for attempt in range(1, attempts + 1):
        try:
            return transaction()
        except Exception as exc:
            if attempt == attempts or _sqlstate(exc) not in RETRYABLE_SQLSTATES:
                raise
            clock.sleep(random.uniform(0, min(most, first * 2 ** (attempt - 1))) + first / 2)
    raise AssertionError("unreachable")  # pragma: no cover
