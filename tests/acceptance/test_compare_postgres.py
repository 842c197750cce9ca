"""The PostgreSQL benchmarks run end to end with tiny numbers on the test server:
``tests/bench/compare_postgres.py``, ``tests/bench/pg_retention.py`` and
``agentq bench --db postgresql://``. Their figures are printed, never asserted
(the lead runs them for the note on a quiet machine).

The peers (procrastinate, pgqueuer, DBOS) are not among the project's
dependencies: the comparison installs them into virtual environments of its own
from the package index. Here the comparison runs agentq's side alone, unless
``AGENTQ_BENCH_PEER_VENVS`` names a directory where ``compare_postgres.py
--venvs`` already installed them (then with the peers too); without it that
case skips, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.postgres.server import DatabaseFactory

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[1] / "bench"
ROOT = BENCH.parents[1]
PEER_VENVS = "AGENTQ_BENCH_PEER_VENVS"


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _server(factory: DatabaseFactory) -> str:
    return factory.url  # the role may CREATE DATABASE: each system gets its own


@pytest.mark.timeout(900)
def test_the_comparison_prints_its_table_and_json(
    postgres_url_factory: DatabaseFactory, tmp_path: Path
) -> None:
    out = tmp_path / "cmp.json"
    done = _run(
        [str(BENCH / "compare_postgres.py"), "--server", _server(postgres_url_factory),
         "--rounds", "1", "--tasks", "30", "--workers", "1", "--latency-samples", "2",
         "--decisions", "20", "--callers", "2", "--peers", "", "--json", str(out)],
        timeout=850,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| processed/s, 1 workers |" in done.stdout
    assert "| enqueue -> start p50 / p99 ms, idle worker |" in done.stdout
    result = json.loads(out.read_text())
    figures = result["systems"]["agentq"]
    assert {"tasks_per_s", "enqueue_per_s", "latency_ms", "raw_per_s", "decisions_per_s",
            "raw_per_s_2_callers", "decisions_per_s_2_callers"} <= set(figures)  # fmt: skip
    assert figures["latency_ms"]["samples"] == 2
    assert set(result["targets"]) == {
        "decisions_1_caller_over_raw", "decisions_2_callers_over_raw",
        "decisions_2_callers_over_raw_2_callers",
    }  # fmt: skip
    assert result["settings"]["postgresql"]["fsync"] in ("on", "off")


@pytest.mark.timeout(1800)
def test_the_comparison_with_the_peers(
    postgres_url_factory: DatabaseFactory, tmp_path: Path
) -> None:
    venvs = os.environ.get(PEER_VENVS)
    if not venvs:
        pytest.skip(
            f"the peers are not dependencies of agentq: set {PEER_VENVS} to a directory "
            "where compare_postgres.py --venvs installed them"
        )
    out = tmp_path / "cmp.json"
    done = _run(
        [str(BENCH / "compare_postgres.py"), "--server", _server(postgres_url_factory),
         "--rounds", "1", "--tasks", "30", "--latency-samples", "2", "--decisions", "20",
         "--callers", "2", "--venvs", venvs, "--json", str(out)],
        timeout=1750,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["systems"]) == {"agentq", "procrastinate", "pgqueuer", "dbos"}
    assert "processed_over_fastest_peer" in result["targets"]


@pytest.mark.timeout(600)
def test_the_retention_run_samples_both_tables(
    postgres_url_factory: DatabaseFactory, tmp_path: Path
) -> None:
    out = tmp_path / "ret.json"
    done = _run(
        [str(BENCH / "pg_retention.py"), "--server", _server(postgres_url_factory),
         "--tasks", "300", "--retention", "2s", "--sample-every", "100", "--json", str(out)],
        timeout=550,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["samples"][-1]["processed"] == 300
    assert {"records", "queue"} <= set(doc["samples"][-1])
    assert {"min", "median", "max"} <= set(doc["verdict"]["dead_share"])


@pytest.mark.timeout(900)
def test_agentq_bench_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = _run(
        ["-m", "agentq.cli", "bench", "--db", postgres_url, "--tasks", "40", "--repeats", "1",
         "--latency-samples", "2", "--callers", "2", "--workers", "1", "--no-multi-queue",
         "--runs", "20", "--idle-seconds", "0.5", "--out", str(out)],
        # 20 durable runs, not 200, and idle CPU over 0.5 s, not 5: the same figures
        timeout=850,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PostgreSQL" in done.stdout and "raw_commits_per_s_2_callers" in done.stdout
    result = json.loads(out.read_text())
    assert result["settings"]["backend"] == "postgresql"
    assert {"raw_commits_per_s", "raw_commits_per_s_2_callers", "decisions_per_s",
            "decisions_per_s_2_callers", "enqueue_per_s", "tasks_per_s_1w"} <= set(
        result["throughput"])  # fmt: skip
    assert "decisions_2_callers_over_raw" in result["ratios"]
    assert result["durable_runs"]["runs_per_s"]["median"] > 0  # measured on PostgreSQL too
    # Every measurement's schema was dropped after it.
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench\\_%'"
        ).fetchone()
    assert left == (0,)
