"""The keyword options of an enqueue: their names, their checks, and what they
ask for besides the arguments (the rest of an idempotency fingerprint)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypedDict

from agentq.errors import InvalidArguments
from agentq.ledger import TaskInfo

__all__ = [
    "MAX_DEBOUNCE",
    "EnqueueOptions",
    "as_timedelta",
    "asked",
    "checked_key",
    "checked_options",
]

_MAX_KEY_LENGTH = 1024
#: The longest debounce window: a debounce is a burst's settling time, not a timer.
MAX_DEBOUNCE = timedelta(days=1)


def as_timedelta(value: float | timedelta) -> timedelta:
    """Seconds or a timedelta, as a timedelta."""
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


def checked_key(kind: str, key: str | None) -> str | None:
    """``key`` (an ordering, idempotency or dedupe key, or ``by``) if it is a
    non-empty string of at most 1,024 characters; else InvalidArguments."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > _MAX_KEY_LENGTH:
        raise InvalidArguments(
            f"{kind} must be a non-empty string of at most {_MAX_KEY_LENGTH} characters, "
            f"got {key!r:.80}"
        )
    return key


class EnqueueOptions(TypedDict, total=False):
    """The keyword options of an enqueue (:meth:`Decision.enqueue`,
    :meth:`Decision.submit`, ``Runtime.enqueue_action`` and ``Runtime.submit``),
    each optional; :meth:`Decision.enqueue` says what they do. A wrapper that
    passes them on types its ``**options: Unpack[EnqueueOptions]``."""

    ordering_key: str | None
    idempotency_key: str | None
    at: datetime | None
    delay: float | timedelta | None
    reason: str
    callback_url: str | None
    dedupe_key: str | None
    debounce: str | float | timedelta | None
    after: Sequence[str | TaskInfo] | None
    by: str


_OPTIONS = frozenset(EnqueueOptions.__annotations__)


def checked_options(options: Mapping[str, Any]) -> None:
    """A misspelt option is refused, as a named keyword parameter would be: a
    caller without a type checker would otherwise lose it silently."""
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {', '.join(map(repr, unknown))} "
            f"(enqueue options: {', '.join(sorted(_OPTIONS))})"
        )


def asked(options: Mapping[str, Any]) -> dict[str, Any]:
    """What an enqueue asks for besides its arguments, as plain JSON: the rest of
    its idempotency fingerprint. The schedule as asked (``delay`` in seconds,
    not the time it comes to), so a retry later asks the same."""
    out: dict[str, Any] = {}
    for name in ("ordering_key", "reason", "callback_url", "dedupe_key"):
        if options.get(name):
            out[name] = options[name]
    at, delay, debounce = options.get("at"), options.get("delay"), options.get("debounce")
    if at is not None:
        out["at"] = at.isoformat() if isinstance(at, datetime) else str(at)
    if delay is not None:
        out["delay"] = as_timedelta(delay).total_seconds()
    if debounce is not None:
        out["debounce"] = (
            debounce if isinstance(debounce, str) else (as_timedelta(debounce).total_seconds())
        )
    if options.get("after"):
        out["after"] = [a if isinstance(a, str) else a.task_id for a in options["after"]]
    return out
