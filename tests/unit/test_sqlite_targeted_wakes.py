"""Receivers of an idle queue are not woken by commits that cannot concern it.

Every commit used to wake every waiting receiver of the file: a worker serving
four queues, one of them busy, spent its time waking the three idle receivers
(0.74-0.79x the rate of a worker serving only the busy queue). Now a commit
that sent messages wakes the receivers of those queues, and a change seen by
the watcher wakes a queue's receivers only if a message there is ready or the
earliest visibility time moved. Real time, bounded.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Message
from agentq.backends.notify import Notifier
from agentq.backends.sqlite import SQLiteBackend
from agentq.clock import SystemClock, to_micros
from agentq.spec import QueueSpec
from tests.unit._watching import wait_until_watching


def test_a_notification_naming_topics_sets_only_their_subscribers_and_the_untopical() -> None:
    notifier = Notifier()
    idle, busy, reader = threading.Event(), threading.Event(), threading.Event()
    notifier.subscribe(idle, "idle")
    notifier.subscribe(busy, "busy")
    notifier.subscribe(reader)
    assert notifier.topics() == {"idle", "busy"}
    notifier.notify({"busy"})
    assert busy.is_set() and reader.is_set() and not idle.is_set()
    notifier.notify()
    assert idle.is_set()
    notifier.unsubscribe(idle)
    assert notifier.topics() == {"busy"}


class _Receiver:
    """A stream on ``queue`` in a thread, counting the leases it tries."""

    def __init__(self, backend: SQLiteBackend, queue: str, duration: float) -> None:
        self.leases = 0
        self.got: list[Message] = []
        lease = backend._leases.lease

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.leases += 1
            return lease(*args, **kwargs)

        backend._leases.lease = counted  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._run, args=(backend, queue, duration))
        self._thread.start()
        wait_until_watching(backend)

    def _run(self, backend: SQLiteBackend, queue: str, duration: float) -> None:
        for batch in backend.stream(queue, 10, max_duration=duration):
            self.got.extend(batch)

    def wait_for_message(self, bound: float) -> float:
        start = time.monotonic()
        while not self.got and time.monotonic() - start < bound:
            time.sleep(0.001)
        assert self.got, f"the receiver got nothing within {bound} s"
        return time.monotonic() - start

    def join(self) -> None:
        self._thread.join(30)


@pytest.fixture
def two_backends(tmp_path: Path) -> Iterator[tuple[SQLiteBackend, SQLiteBackend, Path]]:
    """A receiver's backend and a producer's, on one file (as two processes are;
    in one process they also share the in-process notifier)."""
    db = tmp_path / "wakes.db"
    receiving = SQLiteBackend(str(db), clock=SystemClock())
    for name in ("Idle", "Busy"):
        receiving.create_queue(QueueSpec.simple(name))
    producing = SQLiteBackend(str(db), clock=SystemClock())
    yield receiving, producing, db
    producing.close()
    receiving.close()


@pytest.mark.slow
def test_commits_to_a_busy_queue_do_not_wake_an_idle_queues_receiver(
    two_backends: tuple[SQLiteBackend, SQLiteBackend, Path],
) -> None:
    receiving, producing, _ = two_backends
    receiver = _Receiver(receiving, "Idle", duration=20)
    try:
        settled = receiver.leases
        for i in range(30):  # 30 commits, each sending to Busy
            producing.transact(lambda tx, i=i: tx.send("Busy", f"m{i}", b'"x"'))
        # Real time: the watcher runs on it whatever the clock. A slow machine can
        # only make this wait see fewer wake-ups, never more; the old code failed
        # anyway, as its in-process notification woke the receiver on every commit.
        time.sleep(0.5)  # let the watcher see the last of them (two safety polls)
        # Before: every commit woke it (30 or more leases). Now only its first look at
        # the queue, as the watcher starts tracking it, may.
        assert receiver.leases - settled <= 2
        producing.transact(lambda tx: tx.send("Idle", "ping", b'"x"'))
        receiver.wait_for_message(10)  # its full wait is 20 s
        assert receiver.got[0].key == ("ping",)
    finally:
        receiving.close()
        receiver.join()


@pytest.mark.slow
def test_a_foreign_commit_that_brings_the_next_visibility_forward_wakes_the_receiver(
    two_backends: tuple[SQLiteBackend, SQLiteBackend, Path],
) -> None:
    receiving, _, db = two_backends
    later = to_micros(receiving.clock.now()) + 600_000_000
    raw = sqlite3.connect(db, isolation_level=None)
    insert = receiving._queue_sql("Idle").insert
    raw.execute(insert, ("in-ten-minutes", b'"x"', later, later, 7))
    receiver = _Receiver(receiving, "Idle", duration=20)
    try:
        # Not ready and from a plain connection: no notification, only the file
        # changes. The receiver sleeps until 10 minutes from now unless woken.
        soon = to_micros(receiving.clock.now()) + 1_000_000
        raw.execute(insert, ("in-a-second", b'"x"', soon, soon, 7))
        receiver.wait_for_message(15)
        assert receiver.got[0].key == ("in-a-second",)
    finally:
        raw.close()
        receiving.close()
        receiver.join()
