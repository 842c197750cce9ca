"""No test depends on the calendar or the time of day (issue 31).

A test that builds an absolute date from the current one (the clock's now with
its year replaced by 2027) turns red by itself on the day that date stops being the future; one
that reads the wall clock where the fake clock belongs depends on the hour it
runs. This scan reads every test module's syntax tree and fails on both:

* ``.replace(year=|month=|day=)`` applied to a current time (an expression that
  mentions ``now`` or ``today``): a time in a test is the test clock's now plus a
  duration;
* ``datetime.now()`` / ``datetime.utcnow()`` / ``datetime.today()`` /
  ``date.today()`` outside :data:`REAL_CLOCK_ALLOWED`, the modules that must read
  the real clock, each for the reason given there.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

#: Modules allowed to read the wall clock, and why (each says so beside the call).
_EMULATOR = "the emulator's CURRENT_TIMESTAMP and the Spanner cases' clock start together"
REAL_CLOCK_ALLOWED = {
    "runtime/conftest.py": _EMULATOR,
    "conformance/conftest.py": _EMULATOR,
    "runtime/test_guarded_kill.py": "worker processes killed with SIGKILL run on the real clock",
    "unit/test_cli_prune.py": "the prune CLI runs in a subprocess and ages by the real clock",
    "http/test_latency.py": "it measures real latency over loopback",
    "postgres/test_outages.py": (
        "a real server is stopped under worker processes, whose heartbeats bear the real clock"
    ),
    "spanner/mock_server.py": "a stand-in server's commit timestamp, as a real server gives it",
    "spanner_emulator/timekeeping.py": "the queue stand-in's real-clock mode (spanner_realtime)",
}

_WALL_CLOCK_READS = {
    "datetime.now",
    "datetime.datetime.now",
    "datetime.utcnow",
    "datetime.datetime.utcnow",
    "datetime.today",
    "datetime.datetime.today",
    "date.today",
    "datetime.date.today",
}
_CALENDAR_FIELDS = {"year", "month", "day"}


def calendar_problems(source: str) -> list[tuple[int, str]]:
    """``(line, problem)`` for each calendar-dependent expression in ``source``."""
    problems: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        if func in _WALL_CLOCK_READS:
            problems.append((node.lineno, f"{func}() reads the wall clock"))
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "replace":
            fields = {k.arg for k in node.keywords} & _CALENDAR_FIELDS
            receiver = ast.unparse(node.func.value).lower()
            if fields and ("now" in receiver or "today" in receiver):
                problems.append(
                    (node.lineno, f"{ast.unparse(node)} builds a date from the current one")
                )
    return problems


def test_the_scan_finds_what_it_is_for() -> None:
    # Spelled in pieces, so that a grep for such dates does not find this test itself.
    replace = ".rep" + "lace("
    bombs = f"""
at = tx.now{replace}year=2027)
b = clock.now(){replace}day=4, hour=1)
c = datetime.now(UTC)
d = date.today()
e = datetime.datetime.utcnow()
"""
    assert [line for line, _ in calendar_problems(bombs)] == [2, 3, 4, 5, 6]
    fine = """
at = tx.now + timedelta(days=365)
start = datetime(2027, 11, 7, tzinfo=UTC).replace(hour=1)
t = clock.now().replace(microsecond=0)
name = path.replace("a", "b")
"""
    assert calendar_problems(fine) == []


def _modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "output" not in p.parts)


def test_no_test_builds_a_date_from_the_current_one_or_reads_the_wall_clock() -> None:
    found = []
    for path in _modules():
        rel = path.relative_to(TESTS).as_posix()
        for line, problem in calendar_problems(path.read_text()):
            if "wall clock" in problem and rel in REAL_CLOCK_ALLOWED:
                continue
            found.append(f"tests/{rel}:{line}: {problem}")
    assert not found, (
        "tests must not depend on the calendar or the time of day: schedule at the "
        "test clock's now plus a duration (or list a module that must read the real "
        "clock in REAL_CLOCK_ALLOWED, with why):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("rel", sorted(REAL_CLOCK_ALLOWED))
def test_each_allowed_wall_clock_reader_exists_and_reads_it(rel: str) -> None:
    """An entry that no longer reads the real clock is removed, not kept as a hole."""
    path = TESTS / rel
    assert path.exists(), f"tests/{rel} is gone: remove it from REAL_CLOCK_ALLOWED"
    assert any("wall clock" in p for _, p in calendar_problems(path.read_text())), (
        f"tests/{rel} no longer reads the wall clock: remove it from REAL_CLOCK_ALLOWED"
    )
