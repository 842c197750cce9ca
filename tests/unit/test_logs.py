"""The worker's log: agentq's logger and the database driver's, redacted text and
JSON lines (defect 13); the driver's lines one of a kind per interval (issue 42)."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from agentq import FakeClock
from agentq.logs import (
    RedactingFilter,
    RepeatLimiter,
    configure_logging,
    install_redaction,
    log_task_finished,
)

SECRET_URL = "http://u:pw-41ab@h/x?token=tk-41ab"


@pytest.fixture
def agentq_logger() -> Iterator[logging.Logger]:
    """The agentq logger, and psycopg's, as they were after the test."""
    loggers = [logging.getLogger("agentq"), logging.getLogger("psycopg")]
    saved = [(lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]
    yield loggers[0]
    for lg, (level, propagate, handlers) in zip(loggers, saved, strict=True):
        lg.level, lg.propagate, lg.handlers[:] = level, propagate, handlers


def _fail() -> None:
    raise RuntimeError(f"call to {SECRET_URL} failed")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_configured_log_is_redacted_including_tracebacks(
    agentq_logger: logging.Logger, fmt: str
) -> None:
    stream = io.StringIO()
    configure_logging("DEBUG", fmt, stream)  # type: ignore[arg-type]
    log = logging.getLogger("agentq.worker.some_tool")
    log.info("calling %s", SECRET_URL)
    try:
        _fail()
    except RuntimeError:
        log.exception("handler failed")
    log_task_finished("t1", "some_tool", 3, "retried", 0.25, RuntimeError(f"500 for {SECRET_URL}"))
    text = stream.getvalue()
    assert "pw-41ab" not in text and "tk-41ab" not in text
    assert "http://u:REDACTED@h/x?token=REDACTED" in text
    lines = text.splitlines()
    if fmt == "json":
        entries = [json.loads(line) for line in lines]
        assert entries[1]["message"] == "handler failed" and "_fail" in entries[1]["exception"]
        assert {k: entries[2][k] for k in ("task_id", "tool", "attempt", "outcome")} == {
            "task_id": "t1", "tool": "some_tool", "attempt": 3, "outcome": "retried",
        }  # fmt: skip
        assert entries[2]["duration"] == 0.25 and entries[2]["logger"] == "agentq.tasks"
    else:
        assert "Traceback" in text and "_fail" in text
        assert lines[-1].endswith(
            "INFO agentq.tasks task t1 retried: attempt 3 of some_tool in 0.250s; "
            "RuntimeError: 500 for http://u:REDACTED@h/x?token=REDACTED"
        )


def test_only_the_agentq_logger_is_configured(agentq_logger: logging.Logger) -> None:
    root, httpx_logger = logging.getLogger(), logging.getLogger("httpx")
    driver = logging.getLogger("psycopg")
    before = (root.level, list(root.handlers), httpx_logger.level, driver.level)
    configure_logging("DEBUG", "text", io.StringIO())
    configure_logging("INFO", "text", io.StringIO())  # replaces, not adds
    assert (root.level, list(root.handlers), httpx_logger.level, driver.level) == before
    assert agentq_logger.level == logging.INFO
    assert sum(getattr(h, "_agentq_cli", False) for h in agentq_logger.handlers) == 1
    assert sum(getattr(h, "_agentq_cli", False) for h in driver.handlers) == 1


def test_redacting_filter_rewrites_records_and_tolerates_bad_formats() -> None:
    logger = logging.getLogger("tests.logs.redacting")
    install_redaction(logger)
    install_redaction(logger)
    assert sum(isinstance(f, RedactingFilter) for f in logger.filters) == 1
    record = logger.makeRecord(
        logger.name, logging.INFO, __file__, 1, "GET %s", (SECRET_URL,), None
    )
    assert logger.filters[0].filter(record)
    assert record.getMessage() == "GET http://u:REDACTED@h/x?token=REDACTED"
    bad = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "%d", ("x",), None)
    assert logger.filters[0].filter(bad)  # left for the handler to report, as logging does


def test_httpx_logger_is_redacted_once_agentq_is_imported() -> None:
    # In a fresh process: agentq imports httpx only at first use, and a tool's own
    # httpx client must log redacted URLs all the same.
    code = (
        "import logging, sys, agentq\n"
        "from agentq.logs import RedactingFilter\n"
        "assert 'httpx' not in sys.modules\n"
        "print(any(isinstance(f, RedactingFilter) for f in logging.getLogger('httpx').filters))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert done.stdout.strip() == "True"


#: A line of the text format: time, level, logger, message.
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) (\S+) (.*)$")
REFUSED = (
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection '
    "refused\n\tIs the server running on that host and accepting TCP/IP connections?"
)


def test_the_drivers_warnings_come_with_time_and_level_one_line_each(
    agentq_logger: logging.Logger,
) -> None:
    """Issue 42, item 2: psycopg-pool's warnings came out bare (Python's
    last-resort handler: no time, no level), on two lines each."""
    stream = io.StringIO()
    configure_logging("INFO", "text", stream)
    pool = logging.getLogger("psycopg.pool")
    pool.warning("error connecting in %r: %s", "agentq db", REFUSED)
    pool.info("connection given by %r", "agentq db")  # psycopg's own level: WARNING
    [line] = stream.getvalue().splitlines()
    matched = LINE.match(line)
    assert matched is not None, line
    assert matched.group(1, 2) == ("WARNING", "psycopg.pool")
    assert matched.group(3) == (
        "error connecting in 'agentq db': connection failed: connection to server at "
        '"127.0.0.1", port 5432 failed: Connection refused | Is the server running on that '
        "host and accepting TCP/IP connections?"
    )


def test_a_log_level_above_warning_hides_the_drivers_warnings(
    agentq_logger: logging.Logger,
) -> None:
    stream = io.StringIO()
    configure_logging("ERROR", "text", stream)
    logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "agentq db", "x")
    assert stream.getvalue() == ""


def _limited(clock: FakeClock) -> tuple[logging.Logger, list[logging.LogRecord]]:
    logger = logging.getLogger("tests.logs.repeats")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    shown: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            shown.append(record)

    keep = Keep()
    keep.addFilter(RepeatLimiter(10.0, clock=clock.monotonic))
    logger.handlers[:] = [keep]
    return logger, shown


def test_repeats_are_one_line_per_interval_with_a_count() -> None:
    clock = FakeClock()
    logger, shown = _limited(clock)
    for attempt in range(25):  # one attempt every 0.5 s for 12.5 s
        logger.warning("error connecting in %r: %s", "agentq db", f"refused ({attempt})")
        clock.advance(0.5)
    logger.warning("discarding broken connection: %s", "<conn>")  # another kind: at once
    assert [r.getMessage() for r in shown] == [
        "error connecting in 'agentq db': refused (0)",
        "error connecting in 'agentq db': refused (20) (19 more like it in the last 10s)",
        "discarding broken connection: <conn>",
    ]
    assert getattr(shown[1], "repeated", None) == 19
    clock.advance(60.5)  # quiet for a while: the next one is shown at once, with its count
    logger.warning("error connecting in %r: %s", "agentq db", "refused (25)")
    assert shown[-1].getMessage() == (
        "error connecting in 'agentq db': refused (25) (4 more like it in the last 63s)"
    )
    logger.warning("error connecting in %r: %s", "agentq db", "refused (26)")
    assert len(shown) == 4


def test_the_repeat_count_is_a_key_of_the_json_lines(agentq_logger: logging.Logger) -> None:
    clock = FakeClock()
    stream = io.StringIO()
    configure_logging("INFO", "json", stream, repeat_interval=10, clock=clock.monotonic)
    pool = logging.getLogger("psycopg.pool")
    for _ in range(4):
        pool.warning("error connecting in %r: %s", "agentq db", REFUSED)
        clock.advance(4)
    first, second = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert (first["level"], first["logger"]) == ("WARNING", "psycopg.pool")
    assert "repeated" not in first
    assert second["repeated"] == 2  # the two held back between them
    assert second["message"].endswith("connections? (2 more like it in the last 12s)")
