"""The policy keys of a per-key concurrency limit, checked when a policy loads.

``concurrency_key`` names a top-level argument of the tool and ``max_in_flight``
how many of the tool's tasks sharing one value of it may run at once (see
:mod:`agentq.keylimits` for how the limit is kept). Both are set or neither.
"""

from __future__ import annotations

import re

__all__ = ["MAX_IN_FLIGHT_LIMIT", "check_key_limit"]

#: The largest ``max_in_flight``: beyond it a limit is no limit, and one key's
#: record (which lists its holders) would grow past what a record should hold.
MAX_IN_FLIGHT_LIMIT = 1000

_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def check_key_limit(concurrency_key: str | None, max_in_flight: int | None) -> None:
    """Raise ``ValueError`` naming the problem unless the pair is a valid limit
    (or both are unset)."""
    if concurrency_key is None and max_in_flight is None:
        return
    if concurrency_key is None:
        raise ValueError("max_in_flight needs concurrency_key: the argument whose value is limited")
    if max_in_flight is None:
        raise ValueError(
            f"concurrency_key {concurrency_key!r} needs max_in_flight: how many tasks per "
            "value may run at once"
        )
    if not _FIELD.fullmatch(concurrency_key):
        raise ValueError(
            f"concurrency_key {concurrency_key!r} must name a top-level argument "
            "(letters, digits and _, not starting with a digit, at most 64 characters)"
        )
    if isinstance(max_in_flight, bool) or not 1 <= max_in_flight <= MAX_IN_FLIGHT_LIMIT:
        raise ValueError(
            f"max_in_flight {max_in_flight!r} must be a whole number from 1 to "
            f"{MAX_IN_FLIGHT_LIMIT}"
        )
