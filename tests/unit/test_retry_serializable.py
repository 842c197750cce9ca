"""``agentq.retry_serializable``: the retry loop an application's own PostgreSQL
transaction needs (issue 39, item 2.8): a serialization failure or deadlock
re-runs the whole transaction; anything else is raised at once."""

from __future__ import annotations

from typing import Any

import pytest

from agentq import FakeClock, retry_serializable


class _DriverError(Exception):
    """As psycopg's errors carry it: the SQLSTATE."""

    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


class _Wrapped(Exception):
    """As SQLAlchemy's DBAPIError wraps the driver's: ``orig``."""

    def __init__(self, orig: Exception) -> None:
        super().__init__(str(orig))
        self.orig = orig


@pytest.mark.parametrize("error", [_DriverError("40001"), _DriverError("40P01"),
                                   _Wrapped(_DriverError("40001"))])  # fmt: skip
def test_a_conflict_re_runs_the_whole_transaction(error: Exception) -> None:
    runs: list[int] = []

    def transaction() -> str:
        runs.append(1)
        if len(runs) < 3:
            raise error
        return "committed"

    clock = FakeClock(auto_advance=True)
    assert retry_serializable(transaction, clock=clock) == "committed"
    assert len(runs) == 3 and 0 < clock.slept <= 1.0  # two jittered waits of 5 ms to 0.5 s


def test_other_errors_and_the_last_conflict_are_raised() -> None:
    def broken() -> Any:
        raise _DriverError("23505")  # a unique violation: retrying cannot help

    with pytest.raises(_DriverError, match="23505"):
        retry_serializable(broken, clock=FakeClock(auto_advance=True))
    runs: list[int] = []

    def always() -> Any:
        runs.append(1)
        raise _DriverError("40001")

    with pytest.raises(_DriverError, match="40001"):
        retry_serializable(always, attempts=4, clock=FakeClock(auto_advance=True))
    assert len(runs) == 4
