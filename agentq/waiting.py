"""Waiting for a task to finish: :meth:`Runtime.wait` and :meth:`Runtime.wait_async`.

Both run one loop (:class:`_TaskWait`; the async one is :func:`task_changes`,
which also feeds server-sent events): subscribe to the backend's commit
notifications for the task's record, then read the task, and wait for the next
commit that wrote it (or the deadline) only while it is unfinished. Because
the subscription comes before every read and the wake-up is cleared before it,
a commit that lands between a read and the wait is never missed.

A waiter is woken only by commits that wrote its task (issue 27: every commit
used to wake every waiter, and 150 parked long-polls made 300 other enqueues
take 8.0 s instead of 0.9 s):

* SQLite: the in-process commit signal of the database file (the records each
  commit wrote), and commits by other processes through the file watcher
  (inotify on the WAL; a short adaptive check where inotify is missing), which
  reads the waited-on tasks' versions in one query and wakes those that
  changed — no polling of the task record.
* PostgreSQL: this process's commits at once; other processes' that sent
  messages by their notification (the same one check), the rest by re-reading
  every ``backend.commit_poll_interval`` seconds.
* Spanner: commits made through this process wake at once; other processes'
  commits are seen by re-reading every ``backend.commit_poll_interval`` seconds
  (a bounded poll: Spanner has no cheap change notification).

Time is the runtime's clock: with a :class:`~agentq.clock.FakeClock` the timeout
passes when the test advances it (the async form then re-checks the fake clock
every few real milliseconds).
"""

from __future__ import annotations

import math
import threading
from collections.abc import AsyncIterator, Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar

from agentq.backends import Backend
from agentq.backends.notify import RecordTopic, record_topic
from agentq.clock import SystemClock
from agentq.errors import InvalidArguments, TaskNotFound
from agentq.ledger import Tables, TaskInfo

if TYPE_CHECKING:
    # Imported where it is used: only code already on an event loop reaches it,
    # and a process that never waits asynchronously is spared the import.
    import asyncio

__all__ = [
    "FAKE_CLOCK_RECHECK",
    "MAX_WAIT_SECONDS",
    "LoopWake",
    "ToInfo",
    "record_changes",
    "task_changes",
    "wait_for_task",
    "wait_for_task_async",
]

#: The longest single wait; a caller wanting longer waits again.
MAX_WAIT_SECONDS = 3600.0
#: Real seconds between re-checks of a non-system clock by the async form.
FAKE_CLOCK_RECHECK = 0.005

#: Makes a task record a :class:`TaskInfo` (the runtime's also reads the task's
#: out-of-band arguments).
ToInfo = Callable[[dict[str, Any]], TaskInfo]
T = TypeVar("T")


def _checked_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArguments(f"timeout must be a number of seconds, got {timeout!r:.80}")
    if math.isnan(timeout) or timeout < 0 or timeout > MAX_WAIT_SECONDS:
        raise InvalidArguments(
            f"timeout must be between 0 and {MAX_WAIT_SECONDS:g} seconds, got {timeout!r}"
        )
    return float(timeout)


class _TaskWait:
    """One wait's state: the deadline and the last read of the task."""

    def __init__(self, backend: Backend, task_id: str, timeout: float, to_info: ToInfo) -> None:
        if not isinstance(task_id, str) or not task_id:
            raise InvalidArguments(f"task_id must be a non-empty string, got {task_id!r:.80}")
        self.backend = backend
        self.task_id = task_id
        self.to_info = to_info
        self.deadline = backend.clock.monotonic() + _checked_timeout(timeout)

    def read(self) -> TaskInfo:
        rec = self.backend.get_record(Tables.TASKS, self.task_id)
        if rec is None:
            raise TaskNotFound(f"no task {self.task_id!r}")
        return self.to_info(rec)

    def pause(self, info: TaskInfo) -> float | None:
        """Seconds (of the clock) to wait before the next read; None: return ``info``."""
        remaining = self.deadline - self.backend.clock.monotonic()
        if info.done or remaining <= 0:
            return None
        poll = self.backend.commit_poll_interval
        return remaining if poll is None else min(remaining, poll)


def wait_for_task(
    backend: Backend, task_id: str, timeout: float, to_info: ToInfo = TaskInfo.model_validate
) -> TaskInfo:
    """Block until the task is finished or ``timeout`` seconds pass; return it as
    it then is. An unknown task raises :class:`~agentq.errors.TaskNotFound`."""
    wait = _TaskWait(backend, task_id, timeout, to_info)
    event = threading.Event()
    backend.subscribe_commits(event, record_topic(Tables.TASKS, wait.task_id))
    try:
        while True:
            event.clear()
            info = wait.read()
            pause = wait.pause(info)
            if pause is None:
                return info
            backend.clock.wait(event, pause)
    finally:
        backend.unsubscribe_commits(event)


class LoopWake:
    """Sets an asyncio.Event from whichever thread committed."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        import asyncio

        self._loop = loop
        self.event = asyncio.Event()

    def set(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self.event.set)
        except RuntimeError:  # the loop closed meanwhile: nobody is waiting any more
            pass


async def task_changes(
    backend: Backend, task_id: str, timeout: float, to_info: ToInfo = TaskInfo.model_validate
) -> AsyncIterator[TaskInfo]:
    """The task as it is now, then each time it changes, until it is finished or
    ``timeout`` seconds pass (server-sent events are built on it). No thread is
    held while waiting; each read is a short strong read in the default executor."""
    import asyncio

    wait = _TaskWait(backend, task_id, timeout, to_info)
    wake = LoopWake(asyncio.get_running_loop())
    real_time = isinstance(backend.clock, SystemClock)
    topic = record_topic(Tables.TASKS, wait.task_id)
    await asyncio.to_thread(backend.subscribe_commits, wake, topic)
    try:
        last: TaskInfo | None = None
        while True:
            wake.event.clear()
            info = await asyncio.to_thread(wait.read)
            if info != last:
                yield info
                last = info
            pause = wait.pause(info)
            if pause is None:
                return
            if not real_time:
                pause = min(pause, FAKE_CLOCK_RECHECK)
            try:
                await asyncio.wait_for(wake.event.wait(), pause)
            except TimeoutError:
                pass
    finally:
        backend.unsubscribe_commits(wake)


async def wait_for_task_async(
    backend: Backend, task_id: str, timeout: float, to_info: ToInfo = TaskInfo.model_validate
) -> TaskInfo:
    """The async form of :func:`wait_for_task`: the last of :func:`task_changes`."""
    last: TaskInfo | None = None
    async for info in task_changes(backend, task_id, timeout, to_info):
        last = info
    assert last is not None  # task_changes yields the first read at least
    return last


class _Forward:
    """One subscription (a backend wakes one object per topic) that sets a
    shared :class:`LoopWake`."""

    def __init__(self, wake: LoopWake) -> None:
        self._wake = wake

    def set(self) -> None:
        self._wake.set()


async def record_changes(
    backend: Backend,
    read: Callable[[], T],
    timeout: float,
    *,
    finished: Callable[[T], bool],
    topics: Callable[[T], Collection[RecordTopic]],
) -> AsyncIterator[T]:
    """``read()`` now, then each time what it reads changes, until ``finished``
    says so or ``timeout`` seconds of the backend's clock pass: :func:`task_changes`
    for a value made of several records (a durable run and its turn's task).
    It is woken by commits that wrote one of ``topics`` of the last read, and
    follows them as they change: a topic new since the read is subscribed to,
    then read again, so no commit is missed. ``read`` runs in the default
    executor (a short strong read); no thread is held while waiting."""
    import asyncio

    deadline = backend.clock.monotonic() + _checked_timeout(timeout)
    wake = LoopWake(asyncio.get_running_loop())
    real_time = isinstance(backend.clock, SystemClock)
    held: dict[RecordTopic, _Forward] = {}
    try:
        last: T | None = None
        while True:
            wake.event.clear()
            info = await asyncio.to_thread(read)
            wanted = set(topics(info))
            for topic in [t for t in held if t not in wanted]:
                await asyncio.to_thread(backend.unsubscribe_commits, held.pop(topic))
            new = [t for t in wanted if t not in held]
            for topic in new:
                held[topic] = _Forward(wake)
                await asyncio.to_thread(backend.subscribe_commits, held[topic], topic)
            if new:
                continue  # subscribed after that read: read again before waiting
            if info != last:
                yield info
                last = info
            remaining = deadline - backend.clock.monotonic()
            if finished(info) or remaining <= 0:
                return
            poll = backend.commit_poll_interval
            pause = remaining if poll is None else min(remaining, poll)
            if not real_time:
                pause = min(pause, FAKE_CLOCK_RECHECK)
            try:
                await asyncio.wait_for(wake.event.wait(), pause)
            except TimeoutError:
                pass
    finally:
        for forward in held.values():
            backend.unsubscribe_commits(forward)
