"""``agentq worker`` processes through a real outage of their PostgreSQL server
(issue 42): a throwaway cluster of the test's own (never the shared server),
``pg_ctl stop -m fast``, some seconds down, ``pg_ctl start``; nobody is killed.

* No worker is reported lost: the first one back used to take the heartbeats of
  the others, which had had no chance to beat yet, as timed out.
* The worker's log can be read during the outage: psycopg-pool's warnings (a
  failed attempt to connect, several a second) came out bare, without time or
  level; now each line has them, one of a kind per interval says how many like
  it it stands for, and one line says when the connection is back and after how
  long.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import pytest

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import FakeClock, Runtime
from agentq.backends.postgres.connection import ConnectionOutage
from tests.chaos.pgcluster import PgCluster, find_pgbin

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ["--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies")]
#: Short heartbeats, so that an outage past the timeout takes seconds.
INTERVAL, TIMEOUT = 0.3, 3.0


@pytest.fixture
def cluster(server_port: int) -> Iterator[PgCluster]:
    """A PostgreSQL cluster of this test's own, which it may stop and start."""
    if find_pgbin() is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but PostgreSQL's server binaries are not installed")
        pytest.skip("postgres: the server binaries (pg_ctl) are not installed; set PGBIN")
    made = PgCluster(port=server_port)
    try:
        yield made
    finally:
        made.close()


class Workers:
    """``agentq worker`` processes on one database, each writing to a file."""

    def __init__(self, url: str, folder: Path) -> None:
        self.url = url
        self.folder = folder
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self._files: list[IO[str]] = []

    def start(self, name: str, *flags: str) -> None:
        out = (self.folder / f"{name}.out").open("w")
        err = (self.folder / f"{name}.err").open("w")
        self._files += [out, err]
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "agentq.cli", "worker", "--id", name, *PROJECT,
             "--heartbeat-interval", str(INTERVAL), "--heartbeat-timeout", str(TIMEOUT),
             "--stats-interval", "3600", *flags],
            cwd=ROOT, env={**os.environ, "AGENTQ_DB": self.url}, stdout=out, stderr=err,
            text=True,
        )  # fmt: skip

    def log(self, name: str) -> str:
        """What the worker printed on stderr (its log) so far."""
        return (self.folder / f"{name}.err").read_text()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for file in self._files:
            file.close()


@pytest.fixture
def workers(cluster: PgCluster, tmp_path: Path) -> Iterator[Workers]:
    done = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "init", *PROJECT], cwd=ROOT,
        env={**os.environ, "AGENTQ_DB": cluster.url}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    running = Workers(cluster.url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _until(condition: Callable[[], bool], what: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within  # real time: other processes' heartbeats
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {within:g} s"
        time.sleep(0.1)


def _records(url: str) -> dict[str, Any]:
    """The workers' records, read by a runtime opened and closed here (none stays
    connected through the outage)."""
    rt = Runtime(url)
    try:
        return {w.worker_id: w for w in rt.workers()}
    finally:
        rt.close()


def _beaten_since(url: str, names: set[str], since: datetime) -> bool:
    records = _records(url)
    return all(
        n in records and datetime.fromisoformat(records[n].heartbeat_at) > since for n in names
    )


@pytest.mark.slow
def test_no_live_worker_is_reported_lost_after_an_outage_past_the_timeout(
    cluster: PgCluster, workers: Workers
) -> None:
    names = {"a", "b", "c"}
    for name in sorted(names):
        workers.start(name)
    _until(lambda: _beaten_since(cluster.url, names, datetime.min.replace(tzinfo=UTC)),
           "heartbeat of every worker")  # fmt: skip
    cluster.stop("fast")
    time.sleep(TIMEOUT + 1.5)  # every heartbeat message comes due meanwhile
    cluster.start()
    back = datetime.now(UTC)  # the workers' heartbeats bear the real clock
    _until(lambda: _beaten_since(cluster.url, names, back), "heartbeat after the outage")
    # Past the time any worker could have taken another's heartbeat as timed out.
    time.sleep(TIMEOUT + 1.0)
    records = _records(cluster.url)
    assert {n: (records[n].status, records[n].live) for n in names} == {
        n: ("live", True) for n in names
    }
    logs = {name: workers.log(name) for name in sorted(names)}
    for name, log in logs.items():
        assert "timed out: no heartbeat" not in log, f"worker {name} reported one lost:\n{log}"
        assert "was reported lost" not in log, f"worker {name} was reported lost:\n{log}"


#: The start of a line of the worker's log: time, level, logger.
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) \S+ ")
HELD = re.compile(r"\((\d+) more like it in the last \d+s\)$")
BACK = re.compile(r"connection back after (\d+\.\d)s without one \((\d+) failed attempts? to")


@pytest.mark.slow
def test_the_log_during_a_refused_connection_has_time_level_and_a_rate_limit(
    cluster: PgCluster, workers: Workers
) -> None:
    workers.start("w", "--log-repeat-interval", "1")
    _until(lambda: _beaten_since(cluster.url, {"w"}, datetime.min.replace(tzinfo=UTC)),
           "heartbeat")  # fmt: skip
    cluster.stop("fast")
    stopped = time.monotonic()
    time.sleep(4)  # psycopg-pool tries to connect several times a second meanwhile
    cluster.start()
    down = time.monotonic() - stopped
    back = datetime.now(UTC)  # the worker's heartbeats bear the real clock
    # Its beat needs a pooled connection: the pool made one, and said so, before.
    _until(lambda: _beaten_since(cluster.url, {"w"}, back), "heartbeat after the outage")
    workers.stop()
    log = workers.log("w")
    lines = log.splitlines()
    assert [line for line in lines if not LINE.match(line)] == [], log
    refused = [line for line in lines if "error connecting in" in line]
    assert refused and all(" WARNING psycopg.pool " in line for line in refused), log
    held = [int(m.group(1)) for line in refused if (m := HELD.search(line))]
    assert held and sum(held) > 0, log  # lines held back, and counted in the next one
    assert len(refused) <= down + 2, log  # at most one a second, and the first
    [back] = [line for line in lines if "connection back after" in line]
    matched = BACK.search(back)
    assert matched is not None and " WARNING agentq.backends.postgres " in back, back
    assert 0 < float(matched.group(1)) <= down + 5
    assert int(matched.group(2)) >= len(refused) + sum(held)  # each failed attempt


def test_one_line_says_how_long_connecting_failed_once_it_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    outage = ConnectionOutage("db:5432/app", clock=clock.monotonic)
    caplog.set_level("INFO", logger="agentq.backends.postgres")
    outage.connected()  # nothing failed: nothing to say
    for _ in range(3):
        outage.failed()
        clock.advance(12)
    outage.connected()
    outage.connected()  # said once
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "PostgreSQL at db:5432/app: connection back after 36.0s without one "
                    "(3 failed attempts to connect)"),
    ]  # fmt: skip


@pytest.mark.slow
def test_an_http_enqueue_while_the_server_is_down_is_a_503_within_seconds(
    cluster: PgCluster, tmp_path: Path
) -> None:
    """Issue 40, item 16: each waited the pool's whole timeout (30 s) for a
    connection the pool could not make; once it knows the server is unreachable
    it says so in a few seconds. After the outage the same server answers again."""
    from agentq.server import TokenAuth, create_app
    from tests.http.conftest import LiveServer, write_tokens

    rt = Runtime(cluster.url, tools=ROOT / "tools", policies=ROOT / "policies")
    auth = TokenAuth.from_file(write_tokens(tmp_path / "tokens.toml"))
    live = LiveServer(create_app(rt, auth=auth)).start()
    answers: list[tuple[int, float]] = []

    def enqueue(order: str) -> int:
        started = time.monotonic()
        r = http.post("/v1/tools/execute_refund/actions",
                      json={"args": {"order_id": order, "amount": 30}})  # fmt: skip
        answers.append((r.status_code, time.monotonic() - started))
        return r.status_code

    try:
        with live.client() as http:
            assert enqueue("o-before") < 300, answers
            cluster.stop("fast")
            stopped = time.monotonic()
            for n in range(3):
                enqueue(f"o-down-{n}")
            down = answers[1:]
            assert time.monotonic() - stopped < 30
            cluster.start()
            _until(lambda: enqueue("o-after") < 300, "enqueue after the outage")
    finally:
        live.stop()
        rt.close()
    assert [code for code, _ in down] == [503] * 3, answers
    assert all(took < 6 for _, took in down), answers
