"""What the Spanner backend offers without the client library, and its floor.

DDL generation and URL parsing are plain Python: ``agentq init --print-ddl`` for a
``spanner://`` URL needs neither the ``spanner`` extra nor credentials.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _spanner_floor() -> tuple[int, ...]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (req,) = [r for r in project["optional-dependencies"]["spanner"] if "spanner" in r]
    match = re.search(r">=\s*([\d.]+)", req)
    assert match, req
    return tuple(int(p) for p in match.group(1).split("."))


def test_the_declared_floor_has_the_queue_mutations() -> None:
    """``Transaction.send`` / ``ack`` first exist in google-cloud-spanner 3.71.0.

    Documented check (issue 10): ``pip download --no-deps google-cloud-spanner==3.70.0``
    and ``grep -n 'def send\\|def ack' google/cloud/spanner_v1/batch.py`` in the wheel
    finds nothing; in 3.71.0 both are in ``_BatchBase`` (batch.py:148/172).
    """
    assert _spanner_floor() >= (3, 71)


def test_installed_client_has_the_queue_mutations() -> None:
    pytest.importorskip("google.cloud.spanner")
    from google.cloud.spanner_v1.transaction import Transaction

    assert callable(getattr(Transaction, "send", None))
    assert callable(getattr(Transaction, "ack", None))


def test_sizing_warnings_name_the_documented_limits() -> None:
    from agentq.backends.spanner.sizing import sizing_warnings

    assert sizing_warnings(["payments", "escalations"], 1200.0, processes=300) == []
    many = sizing_warnings([f"q{i}" for i in range(101)], 1200.0)
    assert len(many) == 1 and "at most 100" in many[0]
    short = sizing_warnings(["payments"], 1.0)
    assert len(short) == 1 and "about 20 minutes" in short[0]
    fleet = sizing_warnings(["payments", "escalations"], 1200.0, processes=2500)
    assert any("1000 active receives per queue" in w for w in fleet)
    assert any("5000 concurrent receives" in w and "2000 per project" in w for w in fleet)


def test_sizing_reads_the_fleet_size_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentq.backends.spanner.sizing import sizing_warnings

    monkeypatch.setenv("AGENTQ_WORKER_PROCESSES", "1200")
    assert any("1200 worker processes" in w for w in sizing_warnings(["q"], 1200.0))
    monkeypatch.setenv("AGENTQ_WORKER_PROCESSES", "many")
    assert sizing_warnings(["q"], 1200.0) == []


def test_print_ddl_function_needs_no_client_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for m in ('google.cloud.spanner', 'google.cloud.spanner_v1', 'google.api_core', 'grpc'):\n"
        "    sys.modules[m] = None\n"
        "from agentq.schema import spanner_ddl\n"
        "url = 'spanner://projects/p/instances/i/databases/d'\n"
        f"print([s for s in spanner_ddl(url, {str(ROOT / 'tools')!r}) if 'QUEUE' in s][0])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CREATE QUEUE IF NOT EXISTS escalations")


def test_url_options_are_parsed_and_checked() -> None:
    from agentq.backends.spanner.config import parse_url
    from agentq.errors import ConfigError

    base = "spanner://projects/p/instances/i/databases/d"
    c = parse_url(base + "?receive_duration=300&timeout=5&database_role=reader&dialect=postgresql")
    assert (c.receive_duration, c.timeout, c.database_role, c.postgres) == (300, 5, "reader", True)
    assert c.safe_url == base + "?dialect=postgresql&database_role=reader"
    default = parse_url(base)
    assert (default.receive_duration, default.timeout, default.database_role) == (1200, 30, None)
    for bad in ("receive_duration=0", "receive_duration=nan", "timeout=-1", "database_role=1x"):
        with pytest.raises(ConfigError):
            parse_url(f"{base}?{bad}")


def test_receive_short_chooses_how_a_one_shot_receive_is_sent() -> None:
    """Issue 29, defect 2: the documents' form (a '1m' RECEIVE the client cancels)
    by default; '0s' only when the URL asks for it."""
    from agentq.backends.spanner.config import DEFAULT_QUIET, ReceiveShort, parse_url
    from agentq.backends.spanner.dialect import minutes
    from agentq.errors import ConfigError

    base = "spanner://projects/p/instances/i/databases/d"
    assert parse_url(base).receive_short == ReceiveShort(zero=False, quiet=DEFAULT_QUIET)
    assert parse_url(base + "?receive_short=cancel").receive_short.text == "cancel:2"
    assert parse_url(base + "?receive_short=cancel:0.3").receive_short == ReceiveShort(quiet=0.3)
    assert parse_url(base + "?receive_short=0s").receive_short == ReceiveShort(zero=True)
    for bad in ("1s", "cancel:", "cancel:0", "cancel:nan", "cancel:99", "zero"):
        with pytest.raises(ConfigError, match="receive_short must be"):
            parse_url(f"{base}?receive_short={bad}")
    # Durations as the documents write them: whole minutes, rounded up.
    seconds = (0, 1, 60, 61, 1200, 1201)
    assert [minutes(s) for s in seconds] == ["1m", "1m", "1m", "2m", "20m", "21m"]
