"""agentq's logging: one line per finished task, redacted records, the CLI's setup.

The worker logs each finished task once, at INFO, on the ``agentq.tasks`` logger::

    task 0190c3e2-... dead: attempt 2 of execute_refund in 0.041s; HTTPStatusError: ...

with the fields also on the record (``task_id``, ``tool``, ``attempt``,
``outcome``, ``duration``, ``error``) for structured handlers; the JSON format
of ``agentq worker --log-format json`` prints them as keys. Outcomes are the
worker's counters: ``succeeded``, ``retried``, ``throttled``, ``checkpointed``,
``dead``, ``stale_completion``, ``commit_failed``.

:func:`configure_logging` sets up the ``agentq`` logger, and prints the records
of the database driver's loggers (``psycopg``, and psycopg-pool's
``psycopg.pool``) the same way: third-party loggers keep the application's
levels (``agentq worker`` used to turn INFO on for all of them, and httpx's INFO
line carries each request's full URL). The driver's lines are the most numerous
while the database is out of reach (psycopg-pool warns at every failed attempt to
connect, several a second) and used to come out bare, through Python's
last-resort handler: no time, no level (issue 42). Now each is one line with
the time, level and logger, and :class:`RepeatLimiter` lets through one line of
each kind per interval, which says how many like it it stood for. Everything the
CLI's handler prints passes through :func:`agentq.redact.redact_text`, tracebacks
included; :class:`RedactingFilter` does the same for a logger whose records an
application's own handlers print (agentq installs it on ``httpx``).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any, Literal

from agentq.redact import describe_exception, redact_data, redact_text

__all__ = [
    "DRIVER_LOGGERS",
    "REPEAT_INTERVAL",
    "JsonFormatter",
    "OneLineFilter",
    "RedactingFilter",
    "RepeatLimiter",
    "TextFormatter",
    "configure_logging",
    "failure_traceback",
    "install_redaction",
    "log_task_finished",
]

LogFormat = Literal["text", "json"]
TASK_LOGGER = logging.getLogger("agentq.tasks")
_TASK_FIELDS = ("task_id", "tool", "attempt", "outcome", "duration", "error")
_TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"
#: The most of a traceback kept with a task's error (its innermost frames).
MAX_TRACEBACK_CHARS = 8000
#: The loggers of the database drivers whose records the CLI prints with its own
#: (``psycopg.pool``, psycopg-pool's, is a child of ``psycopg``).
DRIVER_LOGGERS = ("psycopg",)
#: Seconds between two lines of one kind from the driver (:class:`RepeatLimiter`).
REPEAT_INTERVAL = 10.0
_MAX_KINDS = 256  # kinds of line a RepeatLimiter remembers before it forgets old ones


def failure_traceback(exc: BaseException | None) -> str | None:
    """The traceback of a handler's exception, redacted and cut to its last
    :data:`MAX_TRACEBACK_CHARS` characters; ``None`` for an exception never raised."""
    if exc is None or exc.__traceback__ is None:
        return None
    text = redact_text("".join(traceback.format_exception(exc)))
    return text if len(text) <= MAX_TRACEBACK_CHARS else "…" + text[-MAX_TRACEBACK_CHARS:]


def log_task_finished(
    task_id: str,
    tool: str,
    attempt: int,
    outcome: str,
    duration: float,
    exc: BaseException | None = None,
) -> None:
    """Log that one attempt of a task finished (``outcome`` is the worker's label),
    ``duration`` seconds after its handler started, failing with ``exc`` if given."""
    if not TASK_LOGGER.isEnabledFor(logging.INFO):
        return
    if exc is not None and exc.__traceback__ is not None and TASK_LOGGER.isEnabledFor(
        logging.DEBUG
    ):
        # The whole traceback, redacted here (an application's own handlers print
        # the record as it is), and kept off the one INFO line.
        TASK_LOGGER.debug("task %s traceback:\n%s", task_id, failure_traceback(exc),
                          extra={"task_id": task_id, "tool": tool, "attempt": attempt})  # fmt: skip
    # One line per task: a multi-line message (httpx's, pydantic's) is joined.
    error = None if exc is None else " | ".join(describe_exception(exc).split("\n"))
    TASK_LOGGER.info(
        "task %s %s: attempt %d of %s in %.3fs%s",
        task_id, outcome, attempt, tool, duration, "" if error is None else f"; {error}",
        extra={"task_id": task_id, "tool": tool, "attempt": attempt, "outcome": outcome,
               "duration": duration, "error": error},
    )  # fmt: skip


def _redacted_exception(record: logging.LogRecord, formatter: logging.Formatter) -> None:
    """Render the record's traceback once, redacted (formatters reuse ``exc_text``)."""
    if record.exc_info and not record.exc_text:
        record.exc_text = formatter.formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)


class RedactingFilter(logging.Filter):
    """Rewrites a record's message, traceback and stack to their redacted text."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: let the handler report it, as usual
            return True
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        _redacted_exception(record, self._formatter)
        return True


def install_redaction(logger: logging.Logger) -> None:
    """Add a :class:`RedactingFilter` to ``logger`` (once). A logger's filters see
    only the records logged on it, not its children's."""
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())


# httpx logs every request's URL at INFO, secrets in it included: redacted from
# the moment agentq is imported, before anything (a tool's own client, too)
# imports httpx, which agentq itself does only at first use.
install_redaction(logging.getLogger("httpx"))


class OneLineFilter(logging.Filter):
    """Joins the lines of a record's message with `` | `` (libpq's errors come
    with an indented hint on a line of its own), so that each record is one line
    that starts with its time and level."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: let the handler report it, as usual
            return True
        if "\n" in message:
            lines = (line.strip() for line in message.splitlines())
            record.msg, record.args = " | ".join(line for line in lines if line), None
        return True


class RepeatLimiter(logging.Filter):
    """Lets one record of each kind (logger, level and message template) through
    per ``interval`` seconds of ``clock``; the next one after the interval says
    how many it held back, in its message (``(12 more like it in the last 10s)``)
    and as the record's ``repeated`` attribute. A kind first seen, or seen again
    after a quiet interval, goes through at once."""

    def __init__(
        self, interval: float = REPEAT_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[tuple[str, int, str], tuple[float, int]] = {}  # -> (shown at, held)

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is not None and now - seen[0] < self.interval:
                self._kinds[kind] = (seen[0], seen[1] + 1)
                return False
            if seen is None and len(self._kinds) >= _MAX_KINDS:
                self._forget(now)
            self._kinds[kind] = (now, 0)
        if seen is not None and seen[1]:
            try:
                message = record.getMessage()
            except Exception:
                return True
            record.msg = f"{message} ({seen[1]} more like it in the last {now - seen[0]:.0f}s)"
            record.args = None
            record.repeated = seen[1]
        return True

    def _forget(self, now: float) -> None:
        """Forget the kinds shown over an interval ago (their held-back counts too)."""
        for kind, (shown, _) in list(self._kinds.items()):
            if now - shown >= self.interval:
                del self._kinds[kind]


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message``, redacted."""

    def __init__(self) -> None:
        super().__init__(_TEXT)

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the task fields
    and ``repeated`` (:class:`RepeatLimiter`) when present, and ``exception`` (a
    traceback), all redacted."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in (*_TASK_FIELDS, "repeated"):
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        _redacted_exception(record, self)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(redact_data(entry), default=str)


def configure_logging(
    level: int | str = logging.INFO,
    fmt: LogFormat = "text",
    stream: IO[str] | None = None,
    *,
    repeat_interval: float = REPEAT_INTERVAL,
    clock: Callable[[], float] = time.monotonic,
) -> logging.Handler:
    """Send the ``agentq`` logger to ``stream`` (default stderr) at ``level``, in
    ``fmt``, and the records of :data:`DRIVER_LOGGERS` that their own levels let
    through (psycopg's: WARNING) too, one line each, at most one of a kind per
    ``repeat_interval`` seconds of ``clock`` (:class:`RepeatLimiter`). A second
    call replaces the handlers of the first."""
    logger = logging.getLogger("agentq")
    drivers = [logging.getLogger(name) for name in DRIVER_LOGGERS]
    for configured in (logger, *drivers):
        for old in [h for h in configured.handlers if getattr(h, "_agentq_cli", False)]:
            configured.removeHandler(old)
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter)
    handler._agentq_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
    # The CLI owns this process's output: no second copy through the root logger.
    logger.propagate = False
    # The driver's loggers keep their levels; the handler's is the CLI's (a
    # --log-level ERROR hides the driver's warnings too).
    driver_handler = logging.StreamHandler(handler.stream)
    driver_handler.setFormatter(formatter)
    driver_handler.setLevel(level)
    driver_handler.addFilter(RepeatLimiter(repeat_interval, clock))  # by template: before the join
    driver_handler.addFilter(OneLineFilter())
    driver_handler._agentq_cli = True  # type: ignore[attr-defined]
    for driver in drivers:
        driver.addHandler(driver_handler)
        driver.propagate = False
    return handler
