"""``agentq worker --batch-size/--prefetch`` reach the worker; bad values are refused.

In process, with a fake runtime that records the worker's options and a worker
whose run returns at once, so nothing here waits on a real worker.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentq.cli
import agentq.runtime


class _Worker:
    queues = ["payments"]
    stats: dict[str, int] = {}

    def run(self, *_: Any, **__: Any) -> None:
        return None


class _Runtime:
    options: dict[str, Any] = {}
    tools: list[Any] = []  # no tool reads a setting (the worker warns of unset ones)
    settings: dict[str, Any] = {}

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def worker(self, **options: Any) -> _Worker:
        _Runtime.options = options
        return _Worker()

    def close(self) -> None:
        pass


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "tools").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(signal, "signal", lambda *_: None)
    monkeypatch.setattr(agentq.runtime, "Runtime", _Runtime)
    _Runtime.options = {}
    # The worker configures the agentq logger and the database driver's: put back.
    loggers = [logging.getLogger("agentq"), logging.getLogger("psycopg")]
    saved = [(lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]
    yield tmp_path
    for lg, (level, propagate, handlers) in zip(loggers, saved, strict=True):
        lg.level, lg.propagate, lg.handlers[:] = level, propagate, handlers


def test_batch_size_and_prefetch_reach_the_worker(project: Path) -> None:
    argv = ["worker", "--db", "sqlite:///x.db", "--batch-size", "50", "--prefetch", "0"]
    assert agentq.cli.main(argv) == 0
    assert _Runtime.options["batch_size"] == 50
    assert _Runtime.options["prefetch"] == 0


def test_unset_they_leave_the_worker_its_defaults(project: Path) -> None:
    assert agentq.cli.main(["worker", "--db", "sqlite:///x.db"]) == 0
    assert _Runtime.options["batch_size"] is None
    assert _Runtime.options["prefetch"] is None


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [("--prefetch", "-1", "must not be negative"), ("--batch-size", "0", "must be at least 1")],
)
def test_bad_values_are_refused_naming_the_option(
    project: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, says: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        agentq.cli.main(["worker", "--db", "sqlite:///x.db", flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and says in err and "Traceback" not in err
