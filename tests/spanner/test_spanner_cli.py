"""The CLI on Spanner as a new user meets it (issue 10, defect 9): an unreachable
endpoint is a prompt ``agentq: error: ...`` naming it, a worker blocked in a long
RECEIVE stops promptly on SIGTERM, and ``init --print-ddl`` needs neither
credentials nor the ``spanner`` extra. Real processes, generous bounds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from .conftest import spanner_url
from .mock_server import partial
from .test_spanner_backend import receive_md

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _agentq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args], cwd=ROOT, capture_output=True, text=True,
        timeout=90, env=env,
    )  # fmt: skip


# ``init`` waits out the default connection check (10 s); the other commands take
# the same check with the URL's ``timeout=2`` (the check waits min(timeout, 10) s),
# which proves it as well at a fifth of the wait.
@pytest.mark.parametrize(
    ("command", "timeout"), [(["init"], None), (["inspect"], 2), (["worker"], 2)]
)
def test_unreachable_endpoint_is_a_prompt_clean_error(
    command: list[str], timeout: int | None, closed_port: int
) -> None:
    port = closed_port
    url = f"spanner://projects/p/instances/i/databases/d?endpoint=127.0.0.1:{port}"
    if timeout is not None:
        url += f"&timeout={timeout}"
    start = time.monotonic()
    proc = _agentq(*command, "--db", url)
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("agentq: error: "), proc.stderr
    assert f"127.0.0.1:{port}" in proc.stderr and "Traceback" not in proc.stderr
    assert f"no connection within {timeout or 10} s" in proc.stderr, proc.stderr
    # The connection check plus interpreter start; was 400 s or never.
    assert elapsed < (timeout or 10) + 50


def test_print_ddl_needs_no_credentials_and_no_spanner_extra(tmp_path: Path) -> None:
    # A sitecustomize that makes the client library unimportable, as without the extra.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "for m in ('google.cloud.spanner', 'google.cloud.spanner_v1', 'google.api_core', "
        "'grpc'):\n    sys.modules[m] = None\n"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path),
           "PYTHONPATH": str(tmp_path), "NO_GCE_CHECK": "True"}  # fmt: skip
    proc = _agentq("init", "--print-ddl", "--db",
                   "spanner://projects/p/instances/i/databases/d?dialect=postgresql", env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "CREATE QUEUE IF NOT EXISTS escalations (task_id varchar NOT NULL" in proc.stdout


def test_worker_blocked_in_a_long_receive_stops_promptly_on_sigterm(
    mock_server: Any, svc: Any
) -> None:
    receiving = threading.Event()

    def hold_open(request: Any, context: Any) -> Any:
        receiving.set()
        postgres = "receive_" in request.sql and "spanner.receive_" in request.sql
        yield partial([], metadata=receive_md(postgres))
        while context.is_active():
            time.sleep(0.05)

    svc.on_sql(r"RECEIVE_|spanner\.receive_", stream=hold_open)
    env = {**os.environ, "AGENTQ_WORKER_PROCESSES": "1500"}  # beyond 1000 receives per queue
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "worker", "--db", spanner_url(mock_server[2])],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert receiving.wait(60), "the worker never issued a RECEIVE"
        (req,) = [r for r in svc.of(__import__("google.cloud.spanner_v1", fromlist=["x"])
                  .ExecuteSqlRequest) if "RECEIVE_" in r.sql][:1]  # fmt: skip
        assert "max_duration=>'20m'" in req.sql  # the documented ~20-minute RECEIVE
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - start < 20, err  # was 96 s
        assert proc.returncode == 0, err
        assert "agentq worker stopped" in out
        assert "sizing: 1500 worker processes hold 1500 receives on each queue" in out + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
