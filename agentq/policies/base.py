"""Durations as policies write them, and the strict base of the policy models."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from pydantic import BaseModel, ConfigDict

#: The longest duration a policy may set: longer ones are "never" in practice,
#: and ``now + duration`` must still be a datetime.
MAX_DURATION = timedelta(days=3650)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}

#: Rate limits from one call per ~11.6 days to a million per second: slower rates
#: would put a tool's next free time (and the retry times it gives tasks) beyond
#: what a datetime can hold; faster ones are no limit at all.
MIN_RATE_PER_SECOND = 1e-6
MAX_RATE_PER_SECOND = 1e6
#: The largest ``max_retry_after`` a policy may set.
MAX_RETRY_AFTER_LIMIT = timedelta(days=365)


def parse_duration(value: object) -> timedelta:
    """``"72h"``, ``"30m"``, ``"1.5s"``, ``"250ms"``, ``"2d"`` or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ValueError(f"invalid duration {value!r}: use e.g. '72h', '30m', '10s' or seconds")
    if seconds < 0:
        raise ValueError(f"duration {value!r} must not be negative")
    if not math.isfinite(seconds) or seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"duration {value!r} is too long (at most {MAX_DURATION.days}d)")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A duration as a policy writes it: ``"72h"``, ``"14d"``, ``"30m"``, ``"1.5s"``."""
    seconds = value.total_seconds()
    if seconds >= 7 * 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g}d"
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"


def retry_after_cap(value: object) -> timedelta:
    """A ``max_retry_after`` value: a positive duration of at most a year."""
    try:
        cap = parse_duration(value)
    except OverflowError as exc:
        raise ValueError(f"duration {value!r} is too large") from exc
    if cap <= timedelta(0) or cap > MAX_RETRY_AFTER_LIMIT:
        raise ValueError(f"max_retry_after {value!r} must be more than 0 and at most 365d")
    return cap


class Strict(BaseModel):
    # Attribute docstrings are the field descriptions docs/reference/policies.md is
    # generated from (python -m agentq.reference, agentq.attribute_docs).
    model_config = ConfigDict(extra="forbid", frozen=True)

