"""What an operator sees of a worker (issue 12, "Operations are blind"), with real
worker processes and real signals.

Before: a dead-lettered task's traceback was lost; shutdown was silent, its 30 s
grace fixed, a second Ctrl-C did not force; counters were printed only on a clean
stop; a cron-style run was impossible; no health or metrics endpoint;
``agentq inspect`` was a snapshot without approvals or per-tool figures; there
was no way to see which workers are alive.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ._project import agentq, make_project

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tmp_path: Path) -> Path:
    make_project(tmp_path)
    assert agentq("init", cwd=tmp_path).returncode == 0
    return tmp_path


class WorkerProcess:
    """``agentq worker`` in its own process; its stderr goes to a file read as it grows."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log_path = cwd / f"worker-{len(list(cwd.glob('worker-*')))}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentq.cli", "worker", "--setting",
             f"marker_dir={cwd / 'markers'}", *args],
            cwd=cwd, stdout=subprocess.PIPE, stderr=self._log, text=True,
            env={**os.environ, **(env or {})},
        )  # fmt: skip

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, what: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if what():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"not seen within {timeout}s; worker log:\n{self.log}")

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        self._log.close()
        return self.proc.returncode, out, self.log

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        self._log.close()


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.kill()


def _enqueue(project: Path, tool: str, name: str) -> str:
    proc = agentq("enqueue", tool, "--args", json.dumps({"name": name}), cwd=project)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()[0]


def _task(project: Path, task_id: str) -> dict[str, object]:
    return json.loads(agentq("task", task_id, "--json", cwd=project).stdout)  # type: ignore[no-any-return]


def test_retried_then_succeeded_task_logs_and_max_tasks(
    project: Path, workers: list[WorkerProcess]
) -> None:
    task_id = _enqueue(project, "flaky", "r1")
    worker = WorkerProcess(project, "--log-level", "debug", "--max-tasks", "2",
                           "--stats-interval", "0.2")  # fmt: skip
    workers.append(worker)
    code, out, log = worker.finish()
    assert code == 0, log
    lines = [line for line in log.splitlines() if task_id in line]
    retried = [line for line in lines if f"task {task_id} retried: attempt 1 of flaky" in line]
    succeeded = [line for line in lines if f"task {task_id} succeeded: attempt 2 of flaky" in line]
    assert len(retried) == 1 and len(succeeded) == 1, log
    assert "RuntimeError: first attempt of r1 fails on purpose" in retried[0]
    assert f"DEBUG agentq.tasks task {task_id} traceback:" in log
    assert 'raise RuntimeError(f"first attempt of {args.name} fails on purpose")' in log
    assert "INFO agentq.worker worker stats: " in log
    assert "agentq worker stopped" in out
    assert _task(project, task_id)["status"] == "succeeded"
    (project / "retried-then-succeeded.log").write_text(log)  # shown in the report


def test_a_dead_tasks_traceback_is_kept_with_its_error(
    project: Path, workers: list[WorkerProcess]
) -> None:
    task_id = _enqueue(project, "broken", "b1")
    worker = WorkerProcess(project, "--once")
    workers.append(worker)
    code, _, log = worker.finish()
    assert code == 0, log
    assert f"task {task_id} dead: attempt 1 of broken" in log
    task = _task(project, task_id)
    assert task["status"] == "dead"
    assert "ValueError: broken tool cannot do b1" in str(task["error"])
    trace = str(task["traceback"])
    assert trace.startswith("Traceback (most recent call last)")
    assert 'raise ValueError(f"broken tool cannot do {args.name}")' in trace
    entry = json.loads(agentq("dlq", "list", "--jsonl", cwd=project).stdout)
    assert entry["traceback"] == trace
    shown = agentq("task", task_id, cwd=project).stdout  # for people: the traceback last, whole
    assert shown.splitlines()[0].split() == ["task_id", task_id]
    assert shown.rstrip().endswith("ValueError: broken tool cannot do b1")
    assert "traceback:\nTraceback (most recent call last)" in shown


def test_once_runs_what_is_ready_and_exits(project: Path, workers: list[WorkerProcess]) -> None:
    ids = [_enqueue(project, "flaky", f"o{i}") for i in range(3)]
    for name in ("o0", "o1", "o2"):
        (project / "markers" / name).write_text("tried")  # they succeed at once
    worker = WorkerProcess(project, "--once")
    workers.append(worker)
    code, _, log = worker.finish()
    assert code == 0, log
    assert all(_task(project, i)["status"] == "succeeded" for i in ids)


def test_graceful_stop_says_what_it_waits_for_and_a_second_signal_forces(
    project: Path, workers: list[WorkerProcess]
) -> None:
    task_id = _enqueue(project, "slow", "s1")
    worker = WorkerProcess(project, "--grace", "120")
    workers.append(worker)
    worker.wait_for(lambda: _task(project, task_id)["status"] == "running")
    worker.proc.send_signal(signal.SIGTERM)
    worker.wait_for(lambda: "waiting up to 120s for 1 task(s) in flight" in worker.log)
    assert "SIGTERM: no new tasks; giving tasks in flight up to 120s" in worker.log
    assert task_id in worker.log
    worker.proc.send_signal(signal.SIGINT)
    code, _, log = worker.finish()
    assert code == 130, log
    assert "SIGINT again: stopping now; tasks in flight are left to redelivery" in log


def test_grace_lets_a_task_in_flight_finish(project: Path, workers: list[WorkerProcess]) -> None:
    task_id = _enqueue(project, "slow", "s2")
    worker = WorkerProcess(project, "--grace", "60", "--stats-interval", "0.2")
    workers.append(worker)
    worker.wait_for(lambda: _task(project, task_id)["status"] == "running")
    # The periodic stats line, while the worker serves.
    worker.wait_for(lambda: "INFO agentq.worker worker stats: 1 in flight" in worker.log)
    worker.proc.send_signal(signal.SIGTERM)
    worker.wait_for(lambda: "waiting up to 60s for 1 task(s)" in worker.log)
    (project / "markers" / "release").write_text("go")
    code, _, log = worker.finish()
    assert code == 0, log
    assert _task(project, task_id)["status"] == "succeeded"


def test_workers_inspect_and_metrics_of_a_live_worker(
    project: Path, workers: list[WorkerProcess]
) -> None:
    try:
        import opentelemetry.exporter.prometheus  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise  # .ci/run installs agentq-runtime[metrics]: its absence there is a failure
        pytest.skip("opentelemetry-exporter-prometheus is not installed (agentq-runtime[metrics])")
    held = _enqueue(project, "slow", "held")
    dead = _enqueue(project, "broken", "d1")
    agentq("enqueue", "payout", "--args", '{"amount": 500}', cwd=project)
    worker = WorkerProcess(project, "--metrics-port", "0", "--concurrency", "2",
                           env={"AGENTQ_METRICS_TOKEN": "tok-3e1f"})  # fmt: skip
    workers.append(worker)
    worker.wait_for(lambda: "metrics on http://127.0.0.1:" in worker.log)
    worker.wait_for(lambda: _task(project, dead)["status"] == "dead")
    worker.wait_for(lambda: _task(project, held)["status"] == "running")
    url = worker.log.split("metrics on ", 1)[1].split("/metrics", 1)[0]

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/metrics", timeout=10)
    assert refused.value.code == 401
    refused.value.close()  # an HTTPError holds its response open
    auth = {"Authorization": "Bearer tok-3e1f"}
    with urllib.request.urlopen(urllib.request.Request(f"{url}/metrics", headers=auth),
                                timeout=10) as resp:  # fmt: skip
        text = resp.read().decode()
    assert "agentq_worker_in_flight" in text and "agentq_worker_finished" in text
    with urllib.request.urlopen(urllib.request.Request(f"{url}/healthz", headers=auth),
                                timeout=10) as resp:  # fmt: skip
        assert resp.read() == b"ok\n"

    live = json.loads(agentq("workers", "--json", cwd=project).stdout)["workers"]
    assert len(live) == 1 and live[0]["live"] and "ops" in live[0]["queues"]
    assert live[0]["pid"] == worker.proc.pid

    frames = agentq("inspect", "--watch", "0.2", "--count", "2", cwd=project)
    assert frames.returncode == 0, frames.stderr
    assert frames.stdout.count("agentq inspect at ") == 2
    tools = {line.split()[0]: line.split() for line in frames.stdout.splitlines()
             if line.split() and line.split()[0] in ("slow", "broken", "payout")}  # fmt: skip
    # tool, queued, running, retrying, awaiting_approval, dead, oldest_unfinished_s, ...
    assert tools["slow"][1:6] == ["0", "1", "0", "0", "0"]
    assert tools["broken"][1:6] == ["0", "0", "0", "0", "1"]
    assert tools["payout"][1:6] == ["0", "0", "0", "1", "0"]
    assert "approvals: 1 pending, 0 escalated, oldest" in frames.stdout
    assert "dead letters: 1" in frames.stdout and "live workers: 1" in frames.stdout
    (project / "inspect-watch.txt").write_text(frames.stdout)  # shown in the report

    (project / "markers" / "release").write_text("go")
    worker.proc.send_signal(signal.SIGTERM)
    code, _, log = worker.finish()
    assert code == 0, log
    assert json.loads(agentq("workers", "--json", cwd=project).stdout)["workers"] == []


def test_metrics_need_a_token_unless_insecure_on_loopback(
    project: Path, workers: list[WorkerProcess]
) -> None:
    proc = agentq("worker", "--metrics-port", "0", cwd=project)
    assert proc.returncode == 2
    assert "--metrics-port needs a token in $AGENTQ_METRICS_TOKEN" in proc.stderr
    public = agentq("worker", "--metrics-port", "0", "--metrics-host", "0.0.0.0",
                    "--metrics-insecure-local", cwd=project)  # fmt: skip
    assert public.returncode == 2
    assert "--metrics-insecure-local is for loopback addresses only" in public.stderr
    if not os.environ.get("CI"):
        pytest.importorskip("opentelemetry.exporter.prometheus")
    worker = WorkerProcess(project, "--metrics-port", "0", "--metrics-insecure-local")
    workers.append(worker)
    worker.wait_for(lambda: "metrics on http://127.0.0.1:" in worker.log)
    url = worker.log.split("metrics on ", 1)[1].split("/metrics", 1)[0]
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as resp:
        assert resp.read() == b"ok\n"
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.finish()[0] == 0
