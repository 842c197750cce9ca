"""Worker heartbeats as queue messages (issue 13, item 11), on the fake clock and
one SQLite file shared by several workers: a worker that stops beating is reported
once, after its timeout, and the alert tool runs once; a clean stop deletes the
heartbeat (no alert); a restart under the same id raises no false alarm; an
outage of the database past the timeout reports no live worker (issue 42)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from agentq import ConfigError, FakeClock, Policy, Runtime, ToolContext, WorkerDown, tool
from agentq.errors import BackendUnavailable
from agentq.executor.heartbeat import Heartbeat
from agentq.lifecycle.heartbeats import HEARTBEAT_QUEUE
from tests.runtime.test_schedules import Report, report

ALERTS: list[WorkerDown] = []
_LOCK = threading.Lock()


@tool(queue="ops", internal=True)
def worker_down(ctx: ToolContext, args: WorkerDown) -> None:
    with _LOCK:
        ALERTS.append(args)


@tool(queue="ops")
def chores(ctx: ToolContext, args: Report) -> None:
    pass


@pytest.fixture(autouse=True)
def no_alerts() -> Iterator[None]:
    ALERTS.clear()
    yield


@pytest.fixture
def fleet(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Heartbeat]]:
    """Heartbeats of workers, each with its own runtime on one SQLite file."""
    opened: list[Runtime] = []

    def worker(worker_id: str, *tools: Any, timeout: float = 30.0) -> Heartbeat:
        rt = Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", tools=list(tools or (worker_down,)),
                     clock=clock)  # fmt: skip
        opened.append(rt)
        return Heartbeat(rt.worker(), 5.0, None, timeout=timeout, worker_id=worker_id)

    yield worker
    for rt in opened:
        rt.close()


def _beat_for(clock: FakeClock, seconds: int, *beating: Heartbeat) -> list[int]:
    """Every 5 s for ``seconds``: each beats, then checks the others; what each reported."""
    reported = [0] * len(beating)
    for _ in range(seconds // 5):
        clock.advance(5)
        for i, hb in enumerate(beating):
            hb.publish()
            reported[i] += hb.check_others()
    return reported


def test_a_worker_that_stops_beating_is_reported_once_and_alerted_once(
    fleet: Callable[..., Heartbeat], clock: FakeClock
) -> None:
    a, b, c = fleet("worker-a"), fleet("worker-b"), fleet("worker-c")
    for hb in (a, b, c):
        hb.publish()
    assert _beat_for(clock, 10, a, b, c) == [0, 0, 0]
    last_beat = clock.now()  # worker-a is killed here: it never beats again
    assert _beat_for(clock, 25, b, c) == [0, 0]  # 25 s: within its 30 s timeout
    assert {w.worker_id: w.status for w in b.worker.runtime.workers()}["worker-a"] == "live"
    reported = _beat_for(clock, 5, b, c)
    assert sorted(reported) == [0, 1]  # one of the two took it: exactly once
    assert _beat_for(clock, 60, b, c) == [0, 0]
    rt = b.worker.runtime
    status = {w.worker_id: (w.status, w.live) for w in rt.workers()}
    assert status == {"worker-a": ("lost", False), "worker-b": ("live", True),
                      "worker-c": ("live", True)}  # fmt: skip
    assert rt.worker().drain() == 1  # the alert task
    [alert] = ALERTS
    assert (alert.worker_id, alert.last_beat_at, alert.timeout_s) == ("worker-a", last_beat, 30.0)
    assert alert.timed_out_at == last_beat + timedelta(seconds=30)
    [task] = [t for t in rt.tasks() if t.tool == "worker_down"]
    assert task.kind == "notify" and task.status == "succeeded"
    assert b.worker.stats["heartbeat_timeouts"] + c.worker.stats["heartbeat_timeouts"] == 1


def test_a_clean_stop_deletes_the_heartbeat_and_no_alert_fires(
    fleet: Callable[..., Heartbeat], clock: FakeClock
) -> None:
    a, b = fleet("worker-a"), fleet("worker-b")
    a.publish()
    b.publish()
    a.stop()  # what Worker.run does on a clean stop
    assert [w.worker_id for w in b.worker.runtime.workers()] == ["worker-b"]
    assert _beat_for(clock, 120, b) == [0]
    assert b.worker.runtime.worker().drain() == 0 and ALERTS == []
    assert b.worker.runtime.backend.stats(HEARTBEAT_QUEUE).depth == 1  # worker-b's own


def test_a_worker_restarted_under_its_id_raises_no_false_alarm(
    fleet: Callable[..., Heartbeat], clock: FakeClock
) -> None:
    watcher = fleet("watcher")
    first = fleet("worker-a")
    first.publish()
    watcher.publish()
    assert _beat_for(clock, 20, watcher) == [0]  # worker-a crashed at 0 s ...
    again = fleet("worker-a")  # ... and is back at 20 s under the same id
    again.publish()
    assert _beat_for(clock, 40, watcher, again) == [0, 0]  # past the first run's deadline
    assert ALERTS == [] and watcher.worker.runtime.worker().drain() == 0
    # The new run's own heartbeat still times out like any other.
    assert _beat_for(clock, 30, watcher) == [1]


def test_a_worker_reported_lost_that_beats_again_is_live_again(
    fleet: Callable[..., Heartbeat], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    slow, watcher = fleet("slow"), fleet("watcher")
    slow.publish()
    watcher.publish()
    assert _beat_for(clock, 30, watcher) == [1]  # slow hung for 30 s
    slow.publish()  # it wakes up: its message is gone, so it beats as a new run
    assert "went 30s without a heartbeat and was reported lost; beating again" in caplog.text
    rt = watcher.worker.runtime
    assert {w.worker_id: w.status for w in rt.workers()}["slow"] == "live"
    assert _beat_for(clock, 30, watcher) == [1]  # and is reported again if it hangs again


def test_without_an_alert_tool_a_timeout_is_still_reported(
    fleet: Callable[..., Heartbeat], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    gone, watcher = fleet("gone", chores), fleet("watcher", chores)
    gone.publish()
    watcher.publish()
    assert _beat_for(clock, 30, watcher) == [1]
    assert "worker gone (host " in caplog.text and "timed out: no heartbeat since" in caplog.text
    assert [t for t in watcher.worker.runtime.tasks()] == []


def test_a_stray_heartbeat_message_is_reported_with_what_it_says(
    fleet: Callable[..., Heartbeat], clock: FakeClock
) -> None:
    watcher = fleet("watcher")
    watcher.worker.runtime.backend.transact(
        lambda tx: tx.send(HEARTBEAT_QUEUE, ("odd",), {"pid": "not a pid", "host": 7})
    )
    watcher.publish()
    assert watcher.check_others() == 1
    watcher.worker.runtime.worker().drain()
    assert [(a.worker_id, a.pid, a.host) for a in ALERTS] == [("odd", 0, "?")]


def test_heartbeat_settings_are_checked(fleet: Callable[..., Heartbeat]) -> None:
    with pytest.raises(ConfigError, match=r"timeout \(5s\) must be longer than the heartbeat"):
        fleet("w", timeout=5.0)
    with pytest.raises(ConfigError, match="invalid worker id"):
        fleet("\n")
    policy = Policy.model_validate({"defaults": {"worker_alert_tool": "page_someone"}})
    rt = Runtime("sqlite:///:memory:", tools=[page_someone], policies=policy)
    with pytest.raises(ConfigError, match="worker_alert_tool 'page_someone' must take agentq"):
        Heartbeat(rt.worker(), worker_id="w")
    rt.close()


class Page(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = ""


@tool(queue="ops")
def page_someone(ctx: ToolContext, args: Page) -> None:
    """An alert tool whose arguments are not a WorkerDown."""


_METRIC = r"""
import json, sys
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
from agentq import FakeClock, Runtime
from agentq.executor.heartbeat import Heartbeat
clock = FakeClock()
rt = Runtime("sqlite:///:memory:", tools=[], clock=clock)
gone, watcher = (Heartbeat(rt.worker(), worker_id=n) for n in ("gone", "watcher"))
gone.publish()
clock.advance(31)
watcher.publish()
watcher.check_others()
points = {m.name: sum(p.value for p in m.data.data_points)
          for rm in reader.get_metrics_data().resource_metrics
          for sm in rm.scope_metrics for m in sm.metrics}
print(json.dumps(points))
"""


def test_timeouts_are_counted_in_a_metric() -> None:
    proc = subprocess.run([sys.executable, "-c", _METRIC], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["agentq.worker.heartbeat_timeouts"] == 1


def test_the_heartbeat_message_is_acked_before_its_replacement_is_sent(
    fleet: Callable[..., Heartbeat],
) -> None:
    """The documents' rule for mutations (Ack before Send): the operations in order."""
    hb = fleet("w")
    calls: list[str] = []

    class Recording:
        def __init__(self, tx: Any) -> None:
            self.tx = tx

        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(self.tx, name)

    backend = hb.worker.runtime.backend
    backend.transact(lambda tx: _beat(Recording(tx), hb))
    assert calls[0] == "ack" and calls.index("ack") < calls.index("send")


def _beat(tx: Any, hb: Heartbeat) -> None:
    from agentq.lifecycle.heartbeats import beat

    beat(tx, hb.worker_id, hb._record(), hb.timeout, first=True)


def test_a_timeout_not_longer_than_the_interval_is_refused_when_the_worker_is_made(
    clock: FakeClock,
) -> None:
    # Refused at rt.worker(), not inside run(): a worker started in a thread
    # (Worker.start) would otherwise sit there serving nothing until stop().
    rt = Runtime("sqlite:///:memory:", tools=[report], clock=clock)
    try:
        with pytest.raises(ConfigError, match="heartbeat timeout"):
            rt.worker(heartbeat_interval=10, heartbeat_timeout=5)
        assert rt.worker(heartbeat_interval=3600).heartbeat_timeout is None  # stretched later
    finally:
        rt.close()


def test_a_failing_check_for_lost_workers_is_logged_at_warning_and_counted(
    fleet: Callable[..., Heartbeat], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29, defect 2: a check that fails (on Spanner, a RECEIVE the instance
    refuses) meant no lost worker was ever reported, and it was logged at DEBUG."""
    hb = fleet("worker-a")
    backend = hb.worker.runtime.backend
    real_stream = backend.stream

    checked = threading.Event()

    def refusing(queue: str, *args: Any, **kwargs: Any) -> Any:
        if queue == HEARTBEAT_QUEUE:
            checked.set()
            raise ConnectionError("RECEIVE refused")
        return real_stream(queue, *args, **kwargs)

    backend.stream = refusing  # type: ignore[method-assign]
    caplog.set_level("WARNING", logger="agentq.worker")
    hb.start()
    try:
        while not checked.is_set():  # the second beat checks the others
            clock.advance(5)
            checked.wait(0.01)
    finally:
        hb.stop()  # joins the beating thread: the failed check was handled
    assert hb.worker.stats["heartbeat_check_errors"] >= 1
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert any("RECEIVE refused" in r.getMessage() for r in warnings), warnings


class Unreachable:
    """A runtime's backend whose database cannot be reached while ``down`` is
    set: every call fails as a refused connection does. ``called`` is set at
    each call."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.down = False
        self.called = threading.Event()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.called.set()
            if self.down:
                raise BackendUnavailable("PostgreSQL at db:5432: connection refused")
            return attr(*args, **kwargs)

        return call


@contextmanager
def _outage(kind: str, hb: Heartbeat, path: Path) -> Iterator[Unreachable]:
    """The database out of reach of ``hb``'s worker: its calls fail
    (``refused``), or another connection holds the file's write lock, so that
    every writer waits (``locked``)."""
    rt = hb.worker.runtime
    backend = Unreachable(rt.backend)
    rt.backend = backend
    if kind == "refused":
        backend.down = True
        try:
            yield backend
        finally:
            backend.down = False
        return
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield backend
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _settle(clock: FakeClock, sleeping: int) -> None:
    """Wait (real time, bounded) until ``sleeping`` heartbeat threads wait on the
    fake clock again: each finished its beat (and its check of the others)."""
    deadline = time.monotonic() + 60
    while clock.sleeping("agentq-heartbeat") != sleeping:
        assert time.monotonic() < deadline, "the heartbeat thread did not finish its beat"
        time.sleep(0.002)


@pytest.mark.parametrize("outage", ["refused", "locked"])
def test_no_live_worker_is_reported_lost_after_an_outage_past_the_timeout(
    fleet: Callable[..., Heartbeat],
    clock: FakeClock,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    outage: str,
) -> None:
    """Issue 42, item 1: after the database was out of reach for longer than the
    timeout, the first worker back beat and at once took the heartbeats of the
    others, which had had no chance to beat yet, as timed out (a false "worker
    lost" alert each). A worker whose own beats failed or stalled checks no one
    until a timeout after it beat again; a worker that died meanwhile is still
    reported, then. ``refused``: every call of the watcher fails (a server that
    is down); ``locked``: the SQLite file's write lock is held elsewhere, and the
    watcher's beat waits for it (a beat that stalls instead of failing)."""
    watcher, peer, gone = fleet("watcher"), fleet("peer"), fleet("gone")
    caplog.set_level("DEBUG", logger="agentq.worker")
    peer.publish()
    gone.publish()  # ... and never again: it dies during the outage
    watcher.start()  # its own loop on the fake clock; the peer beats when told
    try:
        _settle(clock, 1)
        for _ in range(2):
            clock.advance(5)
            _settle(clock, 1)
            peer.publish()
        assert watcher.reported == 0
        with _outage(outage, watcher, tmp_path / "agentq.db") as backend:
            for turn in range(7):  # 35 s out of reach: past the 30 s timeout
                backend.called.clear()
                clock.advance(5)
                if outage == "refused":
                    _settle(clock, 1)
                elif turn == 0 and not backend.called.wait(60):  # locked: it waits for the lock
                    pytest.fail("the heartbeat thread did not try to beat")
        if outage == "refused":
            clock.advance(5)  # its next beat is its first one back; locked: the one waiting
        _settle(clock, 1)  # the watcher beat again (and checked the others, or not)
        back = clock.monotonic()
        assert watcher.reported == 0, "a worker was reported lost when the database came back"
        clock.advance(5)  # the peer is slower to reconnect: it beats an interval later
        _settle(clock, 1)
        peer.publish()
        assert "without a heartbeat and was reported lost" not in caplog.text
        while clock.monotonic() < back + 35:  # the dead one is reported, still
            clock.advance(5)
            _settle(clock, 1)
            peer.publish()
    finally:
        watcher.stop()
    assert watcher.reported == 1
    rt = peer.worker.runtime
    assert {w.worker_id: w.status for w in rt.workers()} == {"peer": "live", "gone": "lost"}
    assert rt.worker().drain() == 1
    assert [a.worker_id for a in ALERTS] == ["gone"]
    assert "went 30s without a heartbeat" not in caplog.text
