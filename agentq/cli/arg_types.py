"""What the command line's values may be: the argparse types of its numbers,
time spans and moments, and the JSON object ``--args`` gives.

Every time span of the CLI takes seconds (``90``) or a duration as policies
write them (``250ms``, ``30m``, ``1h``, ``2d``). A value out of range is a usage
error naming the limit, not a traceback later.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from agentq import jsontext
from agentq.errors import ConfigError

__all__ = [
    "int_in",
    "moment",
    "non_negative",
    "non_negative_span",
    "positive",
    "positive_float",
    "read_args",
    "time_or_ago",
]


def int_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer from ``low`` to ``high``. The ceilings keep a typo
    (``--concurrency 100000``) a usage error instead of a worker that starts and
    dies in a traceback."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(
                f"must be at least {low}, got {value}" if low else
                f"must not be negative, got {value}"
            )  # fmt: skip
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {value}")
        return value

    return parse


def positive(text: str) -> int:
    """argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative(text: str) -> int:
    """argparse type: an integer of at least 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _span(text: str) -> float:
    """Seconds (``90``, ``1.5``) or a duration as policies write them (``250ms``,
    ``30m``, ``1h``, ``2d``), in seconds."""
    from agentq.policies.base import parse_duration

    try:
        return float(text)
    except ValueError:
        pass
    try:
        return parse_duration(text).total_seconds()
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"expected seconds or a duration (90, 250ms, 30m, 1h, 2d), got {text!r}"
        ) from None


def positive_float(text: str) -> float:
    """argparse type: a time span above 0, in seconds: seconds (``90``) or a
    duration (``30m``, ``1h``; :func:`_span`). Every time span of the CLI takes both."""
    value = _span(text)
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"must be above 0 and finite, got {text}")
    return value


def time_or_ago(text: str) -> datetime | timedelta:
    """argparse type: a moment, as an ISO 8601 time with its zone
    (``2026-01-01T09:00Z``), or as a duration before now (``1h``, ``90``: see
    :func:`positive_float`); :func:`moment` makes the duration a time."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        try:
            return timedelta(seconds=positive_float(text))
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"expected an ISO 8601 time (2026-01-01T09:00Z) or a duration before now "
                f"(90, 30m, 1h, 2d), got {text!r}"
            ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone, e.g. {text}Z for UTC")
    return when


def moment(value: datetime | timedelta | None, now: datetime) -> datetime | None:
    """A :func:`time_or_ago` value as a time: a duration counts back from ``now``."""
    return now - value if isinstance(value, timedelta) else value


_MAX_ARGS_BYTES = 1 << 20  # an --args file larger than this is a mistake


def read_args(text: str) -> dict[str, Any]:
    """``--args`` (enqueue, approve): JSON text, ``@file`` or ``@-`` (standard
    input); an object."""
    source = "--args"
    if text.startswith("@"):
        source = text[1:] or "-"
        if source == "-":
            text = sys.stdin.read(_MAX_ARGS_BYTES + 1)
        else:
            path = Path(source)
            if not path.is_file():
                raise ConfigError(f"--args file {source} does not exist")
            if path.stat().st_size > _MAX_ARGS_BYTES:
                raise ConfigError(f"--args file {source} is larger than {_MAX_ARGS_BYTES} bytes")
            text = path.read_text(encoding="utf-8")
    try:
        value = jsontext.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{source} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{source} must be a JSON object, got {type(value).__name__}")
    return value


def non_negative_span(text: str) -> float:
    """argparse type: a time span of 0 or more, in seconds (as :func:`positive_float`)."""
    value = _span(text)
    if not 0 <= value < 1e9:
        raise argparse.ArgumentTypeError(f"must be 0 or more and finite, got {text}")
    return value
