"""The CLI prints every agentq error as ``agentq: error: ...`` and exits 2 (defect 14).

A read-only database surfaces as :class:`DatabaseNotWritable` (the SQLite backend
maps ``sqlite3.OperationalError`` to it); here a fake runtime raises it where each
command first touches the database, in process, so nothing depends on the driver.
"""

from __future__ import annotations

import logging
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

import agentq.backends
import agentq.cli
import agentq.demo
import agentq.runtime
from agentq.errors import DatabaseNotWritable

SECRET_URL = "spanner://u:pw-0d1e@h/db?token=tk-0d1e"


def _not_writable(*_: Any, **__: Any) -> NoReturn:
    try:
        raise sqlite3.OperationalError("attempt to write a readonly database")
    except sqlite3.OperationalError as exc:
        raise DatabaseNotWritable(f"{SECRET_URL} is read-only: {exc}") from exc


class _FakeWorker:
    queues = ["payments"]
    stats: dict[str, int] = {}
    run = staticmethod(_not_writable)


class _FakeRuntime:
    """Opens fine; every use of the database raises DatabaseNotWritable."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def worker(self, **_: Any) -> _FakeWorker:
        return _FakeWorker()

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        _not_writable()


@pytest.fixture(autouse=True)
def _restore_process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``agentq worker`` installs signal handlers and configures the agentq logger
    (and the database driver's)."""
    monkeypatch.setattr(signal, "signal", lambda *_: None)
    loggers = [logging.getLogger("agentq"), logging.getLogger("psycopg")]
    saved = [(lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]
    yield
    for lg, (level, propagate, handlers) in zip(loggers, saved, strict=True):
        lg.level, lg.propagate, lg.handlers[:] = level, propagate, handlers


@pytest.mark.parametrize(
    "argv",
    [["worker"], ["init"], ["tasks"], ["dlq", "list"], ["dlq", "replay", "t1"], ["inspect"],
     ["demo"], ["runs"], ["runs", "show", "run_1"], ["runs", "cancel", "run_1"]],
)  # fmt: skip
def test_database_not_writable_is_a_clean_error_on_every_command(
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    (tmp_path / "tools").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(agentq.runtime, "Runtime", _FakeRuntime)
    monkeypatch.setattr(agentq.backends, "open_backend", _not_writable)
    monkeypatch.setattr(agentq.demo, "run_demo", _not_writable)
    where = [] if argv == ["demo"] else ["--db", SECRET_URL]
    assert agentq.cli.main([*argv, *where]) == 2
    err = capsys.readouterr().err
    assert err == (
        "agentq: error: spanner://u:REDACTED@h/db?token=REDACTED is read-only: "
        "attempt to write a readonly database\n"
    )


@pytest.mark.parametrize(
    ("argv", "usage", "suggestion"),
    [
        (["worker", "--concurency", "2"], "usage: agentq worker ", "did you mean --concurrency?"),
        (["tasks", "--limt", "3"], "usage: agentq tasks ", "did you mean --limit?"),
        (["runs", "show", "run_x", "--jsn"], "usage: agentq runs show ", "did you mean --json?"),
    ],
)
def test_an_unknown_flag_gets_its_commands_usage_and_a_suggestion(
    argv: list[str], usage: str, suggestion: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 39, 2.12: a misspelt flag of a subcommand printed the top-level usage
    (``usage: agentq [-h] ... COMMAND``) and no suggestion."""
    with pytest.raises(SystemExit) as raised:
        agentq.cli.main(argv)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    last = err.strip().splitlines()[-1]
    command = " ".join(usage.split()[2:])
    assert last.startswith(f"agentq {command}: error: unrecognized argument"), last
    assert suggestion in last, last
