"""Other agentq processes wake a waiting receiver by ringing the doorbell, and
commits that send nothing cost it nothing.

The watcher used to learn of other processes' commits only from the WAL file:
after every commit (acks, leases and claims included) it waited for the commit
to become visible and read every waiting queue, 150-250 µs of CPU per foreign
commit. Now a sender rings its queues' doorbell slots after the commit, and the
WAL is checked once per safety poll for what no ring announced. Real time and
real processes, bounded waits.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.backends import Message
from agentq.backends.notify import record_topic
from agentq.backends.sqlite import SQLiteBackend
from agentq.backends.sqlite import doorbell as sqlite_doorbell
from agentq.backends.sqlite import watcher as sqlite_watcher
from agentq.backends.sqlite.doorbell import Doorbell
from agentq.clock import SystemClock, to_micros
from agentq.spec import QueueSpec
from tests.unit._watching import wait_until_watching

needs_inotify = pytest.mark.skipif(sqlite_watcher._INotify is None, reason="no inotify")


def test_a_ring_changes_exactly_its_queues_slots_whoever_rings(tmp_path: Path) -> None:
    db = str(tmp_path / "x.db")
    assert Doorbell.slot("Jobs") != Doorbell.slot("Mail")
    first, second = Doorbell.open(db, 0o600), Doorbell.open(db, 0o600)  # two processes
    assert first is not None and second is not None
    try:
        before = first.read()
        first.ring({"Jobs"})
        after = second.read()
        assert Doorbell.changed(before, after, {"Jobs", "Mail"}) == {"Jobs"}
        # The other process rings the same slot: still a change (no value repeats).
        second.ring({"Jobs"})
        assert Doorbell.changed(after, first.read(), {"Jobs", "Mail"}) == {"Jobs"}
    finally:
        first.close()
        second.close()
    first.ring({"Jobs"})  # closed: a no-op, never an error


def test_rings_while_one_is_written_are_combined_and_written_after_their_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The members of a commit group ring at once: one thread writes, the others
    only add their slots, which it writes after them (not before: a slot must
    change after the commit that asked for it)."""
    bell = Doorbell.open(str(tmp_path / "x.db"), 0o600)
    assert bell is not None
    writing, go_on = threading.Event(), threading.Event()
    written: list[set[int]] = []
    write = bell._write

    def slow_write(slots: set[int]) -> None:
        written.append(set(slots))
        if len(written) == 1:
            writing.set()
            assert go_on.wait(10)  # the first write is under way while B rings
        write(slots)

    monkeypatch.setattr(bell, "_write", slow_write)
    try:
        a = threading.Thread(target=bell.ring, args=({"Jobs"},))
        a.start()
        assert writing.wait(10)
        before = bell.read()
        bell.ring({"Mail"})  # returns at once: A is writing and takes this one too
        assert written == [{Doorbell.slot("Jobs")}]
        assert Doorbell.changed(before, bell.read(), {"Mail"}) == set()
        go_on.set()
        a.join(10)
        assert written == [{Doorbell.slot("Jobs")}, {Doorbell.slot("Mail")}]
        assert Doorbell.changed(before, bell.read(), {"Mail"}) == {"Mail"}
        bell.ring({"Mail"})  # nobody writing: this call writes itself
        assert len(written) == 3
    finally:
        bell.close()


def test_without_a_doorbell_the_backend_still_works(tmp_path: Path) -> None:
    assert Doorbell.open(str(tmp_path / "missing-dir" / "x.db"), 0o600) is None


class _Receiver:
    """A stream on ``queue`` in a thread, until a message arrives or 20 s pass."""

    def __init__(self, backend: SQLiteBackend, queue: str) -> None:
        self.got: list[Message] = []
        self._thread = threading.Thread(target=self._run, args=(backend, queue))
        self._thread.start()
        wait_until_watching(backend)

    def _run(self, backend: SQLiteBackend, queue: str) -> None:
        for batch in backend.stream(queue, 10, max_duration=20):
            self.got.extend(batch)
            return

    def wait_for_message(self, bound: float = 10) -> None:
        start = time.monotonic()
        while not self.got and time.monotonic() - start < bound:
            time.sleep(0.001)
        assert self.got, f"the receiver got nothing within {bound} s (its wait is 20 s)"

    def join(self) -> None:
        self._thread.join(30)


def _send_from_another_process(path: str, queue: str, key: str) -> None:
    """One agentq commit that sends a message, made by a process of its own."""
    sender = textwrap.dedent(
        f"""
        from agentq.backends.sqlite import SQLiteBackend
        b = SQLiteBackend({path!r})
        b.transact(lambda tx: tx.send({queue!r}, {key!r}, b'"x"'))
        b.close()
        """
    )
    subprocess.run([sys.executable, "-c", sender], check=True, timeout=60)


@pytest.fixture
def receiving(tmp_path: Path) -> Iterator[SQLiteBackend]:
    backend = SQLiteBackend(str(tmp_path / "bell.db"), clock=SystemClock())
    for name in ("Idle", "Busy"):
        backend.create_queue(QueueSpec.simple(name))
    yield backend
    backend.close()


@needs_inotify
@pytest.mark.slow
def test_a_send_from_another_process_rings_the_receivers_queue(
    receiving: SQLiteBackend,
) -> None:
    receiver = _Receiver(receiving, "Idle")
    watcher = receiving._watcher
    assert watcher is not None
    try:
        _send_from_another_process(receiving.path, "Idle", "ping")
        receiver.wait_for_message()
        assert receiver.got[0].key == ("ping",)
        assert watcher.rings >= 1  # woken by the ring, not by the periodic check
    finally:
        receiving.close()
        receiver.join()


@needs_inotify
@pytest.mark.slow
def test_foreign_commits_that_send_nothing_are_not_read_for_each_commit(
    receiving: SQLiteBackend,
) -> None:
    watcher = receiving._watcher
    assert watcher is not None and watcher._receivers is not None
    notifier, changed_queues = watcher._receivers
    checks = 0

    def counted(conn: sqlite3.Connection, waited_on: set[str]) -> set[str]:
        nonlocal checks
        checks += 1
        return changed_queues(conn, waited_on)

    watcher._receivers = (notifier, counted)
    receiver = _Receiver(receiving, "Idle")
    raw = sqlite3.connect(receiving.path, isolation_level=None)
    try:
        raw.execute("PRAGMA synchronous=OFF")  # many commits quickly: file events only
        raw.execute("CREATE TABLE side (v TEXT)")
        start, before = time.monotonic(), checks
        for i in range(200):
            raw.execute("INSERT INTO side VALUES (?)", (f"row-{i}",))
        elapsed = time.monotonic() - start
        # Before: a check (a read of every waiting queue) per commit. Now at most one
        # per safety poll; a slow machine only widens the bound.
        assert checks - before <= elapsed / sqlite_watcher._SAFETY_POLL + 2
        assert not receiver.got
        # A program writing without agentq is still noticed, by the periodic check.
        now = to_micros(receiving.clock.now())
        raw.execute(receiving._queue_sql("Idle").insert, ("ping", b'"x"', now, now, 7))
        receiver.wait_for_message()
    finally:
        raw.close()
        receiving.close()
        receiver.join()


@needs_inotify
@pytest.mark.slow
def test_a_reader_beside_ringing_receivers_still_wakes_on_the_wal(
    receiving: SQLiteBackend,
) -> None:
    """Readers (a wait for a task's record) need every commit, not only sends:
    they still wake on the WAL's events while receivers listen to the doorbell."""
    receiver = _Receiver(receiving, "Idle")
    watcher = receiving._watcher
    assert watcher is not None
    commit = threading.Event()
    receiving.subscribe_commits(commit)
    raw = sqlite3.connect(receiving.path, isolation_level=None)
    try:
        events = watcher.events
        raw.execute("CREATE TABLE side (v TEXT)")
        raw.execute("INSERT INTO side VALUES ('x')")
        assert commit.wait(10)
        # The WAL's events are waited on while a reader waits: the watcher handles
        # them (a loaded machine may let the periodic check wake the reader first).
        deadline = time.monotonic() + 10
        while watcher.events == events and time.monotonic() < deadline:
            time.sleep(0.001)
        assert watcher.events > events
    finally:
        receiving.unsubscribe_commits(commit)
        raw.close()
        receiving.close()
        receiver.join()


@needs_inotify
@pytest.mark.slow
def test_without_a_doorbell_receivers_wake_on_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the doorbell cannot be opened, every change of the WAL is checked, as
    before it existed."""
    monkeypatch.setattr(sqlite_doorbell.Doorbell, "open", classmethod(lambda *a: None))
    backend = SQLiteBackend(str(tmp_path / "nobell.db"), clock=SystemClock())
    backend.create_queue(QueueSpec.simple("Idle"))
    assert backend._bell is None
    receiver = _Receiver(backend, "Idle")
    watcher: Any = backend._watcher
    raw = sqlite3.connect(backend.path, isolation_level=None)
    try:
        events = watcher.events
        now = to_micros(backend.clock.now())
        raw.execute(backend._queue_sql("Idle").insert, ("ping", b'"x"', now, now, 7))
        receiver.wait_for_message()
        assert watcher.events > events and watcher.rings == 0
    finally:
        raw.close()
        backend.close()
        receiver.join()


@needs_inotify
@pytest.mark.slow
def test_rings_cost_the_watcher_nothing_until_a_receiver_waits(
    receiving: SQLiteBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that parks only long-polls (readers) has no receiver: every
    enqueue's ring used to wake its watcher for nothing, one more wake-up per
    commit beside the WAL's. Rings are heard again once a receiver waits."""
    watcher = receiving._watcher
    assert watcher is not None
    reader = threading.Event()
    receiving.subscribe_commits(reader, record_topic("tasks", "parked"))
    wait_until_watching(receiving)
    rung = 0
    real_rung = watcher._rung

    def counted() -> None:
        nonlocal rung
        rung += 1
        real_rung()

    monkeypatch.setattr(watcher, "_rung", counted)
    try:
        for i in range(20):
            checks = watcher.reader_checks
            receiving.transact(lambda tx, i=i: tx.send("Busy", f"m{i}", b'"x"'))
            deadline = time.monotonic() + 10
            while watcher.reader_checks == checks:  # the watcher handled this commit
                assert time.monotonic() < deadline, "the watcher never checked the readers"
                time.sleep(0.001)
        assert rung == 0, f"20 rings with no receiver woke the watcher {rung} times"
        receiver = _Receiver(receiving, "Idle")
        try:
            _send_from_another_process(receiving.path, "Idle", "ping")
            receiver.wait_for_message()
            assert rung >= 1 and watcher.rings >= 1  # woken by the ring
        finally:
            receiving.close()
            receiver.join()
    finally:
        receiving.unsubscribe_commits(reader)
