"""Issue 27 item 10 on PostgreSQL: another process's commit wakes only the
readers whose record it changed. A notification (a commit that sent messages)
from a connection that is not this backend's is one read of the waited-on
records' versions, not a read by every waiter; this process's own
notifications (marked) cost no read at all.

Real PostgreSQL; the other process is a plain connection that writes a record
and notifies, as agentq's commits do. Bounded waits on the listener's signal.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq.backends import open_backend  # noqa: E402
from agentq.backends.notify import record_topic  # noqa: E402
from agentq.clock import SystemClock  # noqa: E402
from agentq.spec import QueueSpec  # noqa: E402

pytestmark = pytest.mark.slow
BOUND = 20.0


class CountingWake:
    def __init__(self) -> None:
        self.count = 0
        self.event = threading.Event()

    def set(self) -> None:
        self.count += 1
        self.event.set()


def _until(what: Any, bound: float = BOUND) -> None:
    deadline = time.monotonic() + bound
    while not what():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.005)


def test_another_process_notification_wakes_only_the_changed_record(postgres_url: str) -> None:
    backend: Any = open_backend(postgres_url, clock=SystemClock())
    listener = backend._listener
    other = psycopg.connect(postgres_url, autocommit=True)
    try:
        backend.transact(lambda tx: [tx.put_record("tasks", k, {"n": 0}) for k in ("a", "b")])
        mine, bystander = CountingWake(), CountingWake()
        backend.subscribe_commits(mine, record_topic("tasks", "a"))
        backend.subscribe_commits(bystander, record_topic("tasks", "b"))
        assert listener.listening.wait(BOUND)

        def foreign(key: str, value: str) -> None:
            checks = listener.reader_checks
            other.execute("UPDATE agentq.records SET v = %s WHERE tbl = 'tasks' AND k = %s",
                          (value, key))  # fmt: skip
            other.execute("SELECT pg_notify(%s, 'Somewhere')", (backend._channel,))
            _until(lambda: listener.reader_checks > checks)

        foreign("c", '{"n": 9}')  # no such record: it wakes neither
        mine.count = bystander.count = 0
        foreign("b", '{"n": 1}')
        assert (mine.count, bystander.count) == (0, 1)
        foreign("a", '{"n": 2}')
        assert (mine.count, bystander.count) == (1, 1)

        # This process's own commits are marked: they wake their readers in
        # process, and the listener reads nothing for them.
        backend.create_queue(QueueSpec.simple("Jobs"))
        heard, foreign = listener.heard, listener.foreign
        backend.transact(lambda tx: (tx.put_record("tasks", "a", {"n": 3}),
                                     tx.send("Jobs", "k1", b"x")))  # fmt: skip
        assert (mine.count, bystander.count) == (2, 1)  # set before transact returned
        _until(lambda: listener.heard > heard)
        assert listener.foreign == foreign
    finally:
        other.close()
        backend.close()


def test_a_new_reader_is_not_woken_by_a_notification_that_left_its_record(
    postgres_url: str,
) -> None:
    """A reader's record is looked at when it subscribes: the next notification
    from another process wakes it only if that commit changed it (its first
    check used to count as a change, so N long-polls parked at once were N
    wake-ups and reads at the next foreign commit, whatever it wrote)."""
    backend: Any = open_backend(postgres_url, clock=SystemClock())
    listener = backend._listener
    other = psycopg.connect(postgres_url, autocommit=True)
    try:
        keys = [f"r{i}" for i in range(20)]
        backend.transact(lambda tx: [tx.put_record("tasks", k, {"n": 0}) for k in keys])
        wakes = [CountingWake() for _ in keys]
        for key, wake in zip(keys, wakes, strict=True):
            backend.subscribe_commits(wake, record_topic("tasks", key))
        assert listener.listening.wait(BOUND)
        checks = listener.reader_checks
        other.execute("SELECT pg_notify(%s, 'Somewhere')", (backend._channel,))
        _until(lambda: listener.reader_checks > checks)
        assert [w.count for w in wakes] == [0] * len(keys)
        checks = listener.reader_checks
        other.execute("UPDATE agentq.records SET v = %s WHERE tbl = 'tasks' AND k = %s",
                      ('{"n": 1}', keys[4]))  # fmt: skip
        other.execute("SELECT pg_notify(%s, 'Somewhere')", (backend._channel,))
        _until(lambda: listener.reader_checks > checks)
        assert [k for k, w in zip(keys, wakes, strict=True) if w.count] == [keys[4]]
    finally:
        other.close()
        backend.close()
