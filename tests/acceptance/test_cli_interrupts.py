"""Ctrl-C at any point of a command (issue 39, item 2.4): never a raw traceback,
and what the interrupted command leaves behind is said."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.acceptance._project import make_project

pytestmark = pytest.mark.slow


def _start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", *args], cwd=cwd, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _read_until(proc: subprocess.Popen[str], stream: str, text: str, timeout: float = 60) -> str:
    """What ``proc`` wrote on ``stream`` up to the line that holds ``text``."""
    pipe = getattr(proc, stream)
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        assert time.monotonic() < deadline, f"no {text!r} in {seen!r}"
        ready, _, _ = select.select([pipe], [], [], 1)
        if ready:
            line = pipe.readline()
            assert line or proc.poll() is None, f"exited {proc.returncode}: {seen}"
            seen += line
    return seen


def _interrupt(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_enqueue_wait_says_the_task_id_before_waiting_and_that_it_is_queued_at_ctrl_c(
    tmp_path: Path,
) -> None:
    """A second run after Ctrl-C made a second refund: the id was never printed."""
    project = make_project(tmp_path / "p")
    proc = _start("enqueue", "slow", "--args", '{"name": "s1"}', "--wait", "60",
                  "--db", "sqlite:///q.db", cwd=project)  # fmt: skip
    said = _read_until(proc, "stderr", "tsk_")
    task_id = next(w for w in said.split() if w.startswith("tsk_")).strip(".,:;()")
    code, _, err = _interrupt(proc)
    assert code == 130, err
    assert f"{task_id} is still queued" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'a.db'}"
    made = subprocess.run([sys.executable, "-m", "agentq.cli", "init", "--db", url],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert made.returncode == 0, made.stderr
    return url


@pytest.mark.parametrize("delay", [0.2, 0.4, 0.7])
def test_ctrl_c_early_in_any_command_is_no_traceback(
    tmp_path: Path, database: str, delay: float
) -> None:
    """It took a second to import the runtime, before any handler was there."""
    proc = _start("inspect", "--watch", "1", "--db", database, cwd=tmp_path)
    time.sleep(delay)
    code, _, err = _interrupt(proc)
    assert "Traceback" not in err, err
    assert code in (130, -signal.SIGINT), err  # -SIGINT: before Python's own handler


def test_serve_says_it_stopped(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    proc = _start("serve", "--insecure-local", "--port", "0", "--db", "sqlite:///s.db",
                  cwd=project)  # fmt: skip
    _read_until(proc, "stderr", "serving on")
    code, _, err = _interrupt(proc)
    assert "agentq serve: stopped" in err and "Traceback" not in err, err
    assert code == 130


def test_an_interrupted_demo_keep_says_its_database_is_half_run(tmp_path: Path) -> None:
    proc = _start("demo", "--keep", "--no-crash", "--requests", "400", cwd=tmp_path)
    _read_until(proc, "stdout", "in-process worker started")
    code, _, err = _interrupt(proc)
    assert code == 130, err
    assert "Traceback" not in err, err
    assert "interrupted" in err and str(tmp_path / "agentq.db") in err, err
    assert "half" in err and "remove" in err, err
    assert os.path.exists(tmp_path / "agentq.db")
