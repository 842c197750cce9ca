"""The worker's log: agentq's logger only, redacted text and JSON lines (defect 13)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from agentq.logs import RedactingFilter, configure_logging, install_redaction, log_task_finished

SECRET_URL = "http://u:pw-41ab@h/x?token=tk-41ab"


@pytest.fixture
def agentq_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("agentq")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    yield logger
    logger.level, logger.propagate, logger.handlers[:] = saved[0], saved[1], saved[2]


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
    before = (root.level, list(root.handlers), httpx_logger.level)
    configure_logging("DEBUG", "text", io.StringIO())
    configure_logging("INFO", "text", io.StringIO())  # replaces, not adds
    assert (root.level, list(root.handlers), httpx_logger.level) == before
    assert agentq_logger.level == logging.INFO
    assert sum(getattr(h, "_agentq_cli", False) for h in agentq_logger.handlers) == 1


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
