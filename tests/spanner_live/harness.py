"""What the conformance and runtime suites need to run in the live mode.

``python -m tests.spanner_live`` (see ``__main__.py``) makes fresh databases and
runs pytest with ``AGENTQ_SPANNER_LIVE`` set to a JSON object: the run's id, the
databases' URLs by dialect (one per pytest-xdist worker), and where the
answers to the live questions go. With it set, the suites get the backend
kinds ``spanner-live-googlesql`` and ``spanner-live-postgresql``:

* every test has names of its own in the run's database: its queues and
  agentq's records table take a namespace (``namespace=r<run>_<test>_``, a URL
  option of the backend), its application tables a name with the same prefix;
  what it created is dropped when it ends, so an instance's queue limit (100 per
  node, fewer for smaller instances) is not reached by the run as a whole;
* time is Spanner's: the clock is the system's, and a test that moves a fake
  clock (``advance``, ``set``, its sleepers) is skipped at that point, naming
  the reason (:class:`LiveClock`).

Without ``AGENTQ_SPANNER_LIVE`` the live kinds skip at once.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agentq.clock import SystemClock

__all__ = [
    "LIVE_VARIABLE",
    "LiveClock",
    "LiveDatabase",
    "live_config",
    "live_database",
    "record_answer",
]

LIVE_VARIABLE = "AGENTQ_SPANNER_LIVE"
NOT_LIVE = (
    "spanner-live: run `python -m tests.spanner_live` (a real instance, or --emulator) "
    "to run the live kinds"
)
FAKE_TIME = (
    "spanner-live: the test moves a fake clock; Spanner's leases, delivery times and "
    "backoff run on its own clock"
)


def live_config() -> dict[str, Any] | None:
    """The live run's settings, or None outside a live run."""
    text = os.environ.get(LIVE_VARIABLE)
    return None if not text else dict(json.loads(text))


def _namespace(run: str, nodeid: str) -> str:
    digest = hashlib.sha1(nodeid.encode()).hexdigest()[:10]
    return f"r{run}_{digest}_"


@dataclass
class LiveDatabase:
    """One test's share of the run's database of a dialect."""

    url: str  # with the test's namespace
    base_url: str
    postgres: bool
    namespace: str

    def table(self, name: str) -> str:
        """An application table's name for this test."""
        return f"{self.namespace}{name}"


def live_database(kind: str, nodeid: str) -> LiveDatabase:
    """The database of ``kind`` (``spanner-live-googlesql``/``-postgresql``) for
    the test ``nodeid``; skips outside a live run."""
    config = live_config()
    if config is None:
        pytest.skip(NOT_LIVE)
    dialect = kind.rsplit("-", 1)[-1]
    urls: list[str] = config["databases"][dialect]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    base = urls[index % len(urls)]
    namespace = _namespace(str(config["run"]), nodeid)
    sep = "&" if "?" in base else "?"
    url = f"{base}{sep}namespace={namespace}"
    return LiveDatabase(url, base, dialect == "postgresql", namespace)


def drop_test_objects(live: LiveDatabase, tables: list[str]) -> None:
    """Drop the test's queues, its records table and ``tables`` (application
    tables, dropped after the queues that may be interleaved in them)."""
    from agentq import open_backend

    backend = open_backend(live.url.replace("ddl=auto", "ddl=manual"))
    try:
        d = backend.dialect  # type: ignore[attr-defined]
        statements = [f"DROP QUEUE {d.queue_ident(q)}" for q in _queues(backend)]
        statements += [f"DROP TABLE {t}" for t in reversed(tables)]
        statements.append(f"DROP TABLE {d.records}")
        try:
            backend.database.update_ddl(statements).result(300)  # type: ignore[attr-defined]
        except Exception as exc:
            # Left for the database's drop at the end of the run; never a test failure.
            print(f"spanner-live: could not drop {live.namespace}*: {exc}")
    finally:
        backend.close()


def _queues(backend: Any) -> list[str]:
    try:
        return list(backend.queues())
    except Exception:  # the records table was never made: the test made no queue
        return []


_TESTS = Path(__file__).resolve().parents[1]
#: What in a test's own code says it needs a fake clock.
_FAKE_TIME_USES = ("clock.advance", "clock.set(", "run_until_idle", "advance_until", ".sleepers",
                   "clock.now()", "clock.monotonic()", "FakeClock(")  # fmt: skip


def skip_if_fake_time(test: Any) -> None:
    """Skip ``test`` before it starts if its own code moves or reads a fake clock
    (skipping at the call, once its threads run, would leave them running)."""
    try:
        source = inspect.getsource(test)
    except (OSError, TypeError):
        return
    used = [use for use in _FAKE_TIME_USES if use in source]
    if used:
        pytest.skip(f"{FAKE_TIME} (it uses {', '.join(used)})")


def _from_test_code() -> bool:
    """Whether the clock is read by the test itself (not by agentq on its behalf)."""
    caller = sys._getframe(2).f_code.co_filename
    return caller.startswith(str(_TESTS)) and not caller.endswith("harness.py")


class LiveClock(SystemClock):
    """The system clock; what only a fake clock can do skips the test: moving it,
    its sleepers, and a test reading it itself (it compares the time with what
    the runtime recorded, as if time stood still between them)."""

    def now(self) -> datetime:
        if _from_test_code():
            pytest.skip(f"{FAKE_TIME} (the test reads the clock: it assumes time stands still)")
        return super().now()

    def monotonic(self) -> float:
        if _from_test_code():
            pytest.skip(f"{FAKE_TIME} (the test reads the clock: it assumes time stands still)")
        return super().monotonic()

    def advance(self, seconds: float) -> None:
        pytest.skip(FAKE_TIME)

    def set(self, when: datetime) -> None:
        pytest.skip(FAKE_TIME)

    def __getattr__(self, name: str) -> Any:  # sleepers, slept, ...: a fake clock's
        pytest.skip(f"{FAKE_TIME} ({name})")


_answers_lock = threading.Lock()


def record_answer(question: str, dialect: str, answer: Any) -> None:
    """Print what the live run observed for ``question`` and add it to the run's
    answers file (the launcher prints them all at the end)."""
    print(f"spanner-live answer [{dialect}] {question}: {answer}")
    config = live_config()
    if config is None or not config.get("answers"):
        return
    line = json.dumps({"question": question, "dialect": dialect, "answer": answer}, default=str)
    with _answers_lock, Path(config["answers"]).open("a") as out:
        out.write(line + "\n")
