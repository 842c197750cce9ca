"""``agentq worker`` processes through a real outage of their PostgreSQL server
(issue 42): a throwaway cluster of the test's own (never the shared server),
``pg_ctl stop -m fast``, some seconds down, ``pg_ctl start``; nobody is killed.

* No worker is reported lost: the first one back used to take the heartbeats of
  the others, which had had no chance to beat yet, as timed out.
"""

from __future__ import annotations

import os
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

from agentq import Runtime
from tests.chaos.pgcluster import PgCluster, find_pgbin

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ["--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies")]
#: Short heartbeats, so that an outage past the timeout takes seconds.
INTERVAL, TIMEOUT = 0.3, 3.0
pytestmark = pytest.mark.slow


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
    back = datetime.now(UTC)
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
