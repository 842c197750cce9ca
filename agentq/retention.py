"""Retention settings: how long finished tasks are kept before workers delete them.

A setting is a positive duration or ``"off"`` (kept forever). It is read in
three places, the most specific winning: ``[tools.NAME] retention`` in a policy,
then ``Runtime(retention=...)`` / ``[agentq] retention`` in ``agentq.toml``,
then :data:`DEFAULT_RETENTION`. Zero is refused rather than guessed at: some
systems read it as "delete at once", others as "never", and either reading
taken by mistake loses records or keeps them forever.

This module only parses and checks values; what is deleted, and when, is
:mod:`agentq.lifecycle.retention`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Final, Literal

__all__ = [
    "DEFAULT_AUDIT_RETENTION",
    "DEFAULT_RETENTION",
    "OFF",
    "RetentionValue",
    "parse_retention",
]

#: How long a finished task is kept unless configured otherwise.
DEFAULT_RETENTION: Final = timedelta(days=7)
#: How long an audit entry is kept at least, whatever the tasks' retention or
#: ``--older-than``: who approved, cancelled or resolved what outlives the task.
DEFAULT_AUDIT_RETENTION: Final = timedelta(days=90)
#: The setting that keeps finished tasks forever.
OFF: Final = "off"

#: A parsed setting: a positive duration, or ``"off"``.
RetentionValue = timedelta | Literal["off"]

_OFF_WORDS = frozenset({"off", "never", "forever"})


def parse_retention(value: object, parse_duration: Callable[[object], timedelta]) -> RetentionValue:
    """A retention setting: ``"off"`` (also ``"never"``, ``"forever"``), or a
    duration that ``parse_duration`` reads (``"7d"``, ``"36h"``, seconds, a
    ``timedelta``) and that is more than zero.

    Raises :class:`ValueError` naming the value; ``parse_duration`` is passed in
    (:func:`agentq.policies.parse_duration`) so that every duration in agentq is
    written the same way.
    """
    if isinstance(value, str) and value.strip().lower() in _OFF_WORDS:
        return OFF
    if isinstance(value, bool):
        raise ValueError(f"invalid retention {value!r}: use a duration such as '7d', or 'off'")
    try:
        duration = parse_duration(value)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"invalid retention: {exc} (or 'off' to keep finished tasks)") from exc
    if duration <= timedelta(0):
        raise ValueError(
            f"retention {value!r} must be more than 0: use 'off' to keep finished tasks "
            "forever (0 is refused, not read as 'delete at once' or as 'never')"
        )
    return duration
