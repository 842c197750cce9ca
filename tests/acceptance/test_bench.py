"""A quick smoke test of `agentq bench` (figures are reported, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


# Many worker processes start one after another: minutes on a loaded machine.
@pytest.mark.timeout(600)
def test_bench_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "bench", "--db", f"sqlite:///{tmp_path}/b.db",
         "--tasks", "60", "--repeats", "1", "--latency-samples", "3", "--workers", "2",
         "--durability", "normal", "--callers", "4", "--args-sizes", "1024", "--runs", "20",
         "--idle-seconds", "0.5", "--out", str(out)],  # idle CPU over 0.5 s, not 5
        capture_output=True, text=True, timeout=570,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tasks_per_s_2w" in proc.stdout and "same_process" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["throughput"]) == {
        "raw_commits_per_s", "queue_send_per_s", "queue_recv_ack_per_s",
        "decisions_per_s", "enqueue_per_s", "enqueue_action_per_s",
        "decisions_per_s_4_callers", "enqueue_action_per_s_4_callers",
        "tasks_per_s_1w", "tasks_per_s_2w", "tasks_per_s_multi_queue",
        "tasks_per_s_2w_args_1024B",
    }  # fmt: skip
    # The ratios the targets name, each from figures of the same round.
    assert set(result["ratios"]) == {
        "end_to_end_2w_over_queue_layer", "end_to_end_1w_over_queue_layer",
        "multi_queue_over_single_queue", "decisions_over_raw", "decisions_4_callers_over_raw",
        "enqueue_over_raw",
    }  # fmt: skip
    assert all(v > 0 for v in result["ratios"].values())
    assert "multi_queue_over_single_queue" in proc.stdout
    assert result["latency_ms"]["other_process"]["samples"] == 3
    assert result["settings"]["callers"] == 4
    assert result["settings"]["idle_seconds"] == 0.5
    assert result["idle_worker_cpu_percent"] >= 0
    assert all(v["median"] > 0 for v in result["throughput"].values())
    # The cost of durability: durable agent runs with an instant scripted model.
    assert set(result["durable_runs"]) == {
        "runs_per_s", "turn_overhead_ms_p50", "turn_overhead_ms_p90",
    }  # fmt: skip
    assert result["durable_runs"]["runs_per_s"]["median"] > 0
    assert "turn_overhead_ms_p50" in proc.stdout


def test_bench_on_spanner_without_credentials_is_a_clear_message(tmp_path: Path) -> None:
    pytest.importorskip("google.cloud.spanner")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_GCE_CHECK": "True",
           "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "bench", "--db",
         "spanner://projects/p/instances/i/databases/d"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no Google Cloud credentials for Spanner" in proc.stderr
    assert "Traceback" not in proc.stderr
