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
