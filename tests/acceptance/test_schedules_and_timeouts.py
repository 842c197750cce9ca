"""``agentq schedules`` and a lost worker in ``agentq workers`` (issue 13, items 8
and 11), with real worker processes, real time (bounded) and the CLI: a worker
killed with SIGKILL is reported by the other after its heartbeat timeout, and the
alert tool runs once; a worker stopped cleanly is never reported."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.acceptance._project import agentq

pytestmark = pytest.mark.slow

TOOLS = '''
from pathlib import Path

from pydantic import BaseModel

from agentq import ToolContext, WorkerDown, tool


class Scope(BaseModel):
    scope: str = "all"


@tool(queue="ops", cron="0 9 * * MON", timezone="Europe/Paris")
def weekly_digest(ctx: ToolContext, args: Scope) -> None:
    """Mondays at 9 in Paris."""


@tool(queue="ops")
def export(ctx: ToolContext, args: Scope) -> None:
    """Scheduled by the policy."""


@tool(queue="ops", internal=True)
def worker_down(ctx: ToolContext, args: WorkerDown) -> None:
    """The policy's worker_alert_tool: one line per lost worker."""
    with open(Path(ctx.settings["alerts"]), "a") as f:
        f.write(args.worker_id + "\\n")
'''

POLICY = """
[schedules.nightly_export]
tool = "export"
every = "1d"
args = { scope = "eu" }
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "ops.py").write_text(TOOLS)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "jobs.toml").write_text(POLICY)
    assert agentq("init", cwd=tmp_path).returncode == 0
    return tmp_path


class Worker:
    def __init__(self, cwd: Path, *args: str) -> None:
        self.log_path = cwd / f"worker-{len(list(cwd.glob('worker-*')))}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agentq.cli", "worker", "--setting",
             f"alerts={cwd / 'alerts.txt'}", *args],
            cwd=cwd, stdout=subprocess.DEVNULL, stderr=self._log, text=True,
        )  # fmt: skip

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(60)
        self._log.close()
        return code


@pytest.fixture
def started() -> Iterator[list[Worker]]:
    running: list[Worker] = []
    yield running
    for w in running:
        w.stop(signal.SIGKILL)


def _until(what: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError("not seen in time")
        time.sleep(0.2)


def _workers(project: Path, *flags: str) -> dict[str, dict[str, object]]:
    proc = agentq("workers", "--json", *flags, cwd=project)
    assert proc.returncode == 0, proc.stderr
    return {w["worker_id"]: w for w in json.loads(proc.stdout)["workers"]}


def test_schedules_are_listed_after_a_worker_seeds_them(project: Path) -> None:
    assert agentq("schedules", cwd=project).stdout.strip() == "no schedules"
    assert agentq("worker", "--once", cwd=project).returncode == 0
    table = agentq("schedules", cwd=project)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["name", "rule", "status", "next_run", "last_run", "last_status",
                                "runs", "missed", "tool"]  # fmt: skip
    rows = {s["name"]: s for s in json.loads(agentq("schedules", "--json", cwd=project).stdout)
            ["schedules"]}  # fmt: skip
    assert rows["weekly_digest"]["rule"] == "cron 0 9 * * MON (Europe/Paris)"
    assert rows["nightly_export"]["rule"] == "every 24h"
    assert rows["nightly_export"]["next_run"].endswith("T00:00:00+00:00")
    assert {r["status"] for r in rows.values()} == {"active"}
    assert {r["pending_status"] for r in rows.values()} == {"queued"}
    (project / "policies" / "jobs.toml").write_text(
        POLICY.replace('every = "1d"', "enabled = false").replace('args = { scope = "eu" }', "")
    )
    assert agentq("worker", "--once", cwd=project).returncode == 0
    disabled = json.loads(agentq("schedules", "--json", "--status", "disabled", cwd=project).stdout)
    assert [s["name"] for s in disabled["schedules"]] == ["nightly_export"]


def test_bad_input_to_the_commands_is_a_clear_error(project: Path) -> None:
    missing = agentq("schedules", "--db", f"sqlite:///{project / 'nope.db'}", cwd=project)
    assert missing.returncode == 2 and missing.stderr.startswith("agentq: error: no database at")
    assert "Traceback" not in missing.stderr
    wrong = agentq("worker", "--once", "--heartbeat-timeout", "-3", cwd=project)
    assert wrong.returncode == 2 and "--heartbeat-timeout: must be above 0" in wrong.stderr
    short = agentq("worker", "--heartbeat-timeout", "1", cwd=project)
    assert short.returncode == 2
    assert short.stderr.startswith("agentq: error: the heartbeat timeout (1s) must be longer")
    (project / "policies" / "jobs.toml").write_text(POLICY.replace("1d", "every day"))
    bad = agentq("worker", "--once", cwd=project)
    assert bad.returncode == 2 and "schedules.nightly_export.every" in bad.stderr
    assert "invalid duration 'every day'" in bad.stderr


def test_a_killed_worker_is_reported_lost_once_and_a_stopped_one_never(
    project: Path, started: list[Worker]
) -> None:
    fast = ("--heartbeat-interval", "0.3", "--heartbeat-timeout", "3")
    watcher = Worker(project, "--id", "watcher", *fast)
    doomed = Worker(project, "--id", "doomed", *fast)
    polite = Worker(project, "--id", "polite", *fast)
    started.extend([watcher, doomed, polite])
    _until(lambda: set(_workers(project)) == {"watcher", "doomed", "polite"})
    assert polite.stop(signal.SIGTERM) == 0  # a clean stop: its heartbeat is deleted
    assert "polite" not in _workers(project, "--all")
    doomed.proc.kill()  # no clean stop: its heartbeat message stays, and comes due
    doomed.proc.wait(30)
    alerts = project / "alerts.txt"
    _until(lambda: alerts.exists() and alerts.read_text().strip() != "")
    listed = _workers(project)
    assert listed["doomed"]["status"] == "lost" and listed["doomed"]["live"] is False
    assert listed["watcher"]["status"] == "live"
    time.sleep(4)  # longer than the timeout: nothing else is reported
    assert alerts.read_text().split() == ["doomed"]
    assert watcher.stop() == 0
    assert "worker doomed (host " in watcher.log_path.read_text()
    assert "polite" not in alerts.read_text()
    assert os.path.exists(project / "agentq.db")
