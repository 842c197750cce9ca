"""A worker on a database that refuses writes stops with a clear error instead
of retrying forever (issue 9, defect 14's worker part).

Receiving leases messages, which is a write: :class:`DatabaseNotWritable` (the
backend's mapping of a read-only file, a full disk, no permission) cannot get
better by retrying, unlike a briefly unavailable database.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.errors import DatabaseNotWritable


class Arg(BaseModel):
    name: str


@tool(queue="work")
def job(ctx: ToolContext, args: Arg) -> None:
    pass


class ReadOnly:
    """A backend wrapper whose receive fails the way a read-only database does."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.streamed: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def stream(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        self.streamed.append(queue)
        raise DatabaseNotWritable(
            "database 'x.db' is read-only: attempt to write a readonly database"
        )


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Runtime, ReadOnly]]:
    runtime = Runtime(f"sqlite:///{tmp_path / 'x.db'}", tools=[job], clock=clock)
    runtime.enqueue_action("job", {"name": "a"})
    backend = ReadOnly(runtime.backend)
    runtime.backend = backend
    yield runtime, backend
    runtime.backend = backend._inner
    runtime.close()


def test_run_stops_and_raises_when_the_database_is_not_writable(
    rt: tuple[Runtime, ReadOnly],
) -> None:
    runtime, backend = rt
    worker = runtime.worker(receive_timeout=0.05, queues=["work"])
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the worker kept retrying"
    [exc] = failure
    assert isinstance(exc, DatabaseNotWritable) and "read-only" in str(exc)
    # No retry: each queue the worker serves (``work``, and the heartbeats'
    # queue it watches for lost workers) was tried once.
    assert "work" in backend.streamed
    assert len(backend.streamed) == len(set(backend.streamed))
    assert worker.stats["receive_errors"] == 1


def test_drain_raises_when_the_database_is_not_writable(rt: tuple[Runtime, ReadOnly]) -> None:
    runtime, _ = rt
    with pytest.raises(DatabaseNotWritable, match="read-only"):
        runtime.worker().drain()


def test_a_worker_started_in_the_background_reports_it_on_stop(
    rt: tuple[Runtime, ReadOnly],
) -> None:
    runtime, _ = rt
    worker = runtime.worker(receive_timeout=0.05).start()
    for _ in range(1000):
        if worker.failure is not None:
            break
        threading.Event().wait(0.01)
    with pytest.raises(DatabaseNotWritable):
        worker.stop()
