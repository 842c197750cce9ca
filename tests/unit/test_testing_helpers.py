"""agentq.testing: the public loopback API and worker processes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from agentq import ConfigError
from agentq.testing import LoopbackAPI, WorkerNotReady, WorkerProcess


def test_loopback_api_applies_a_key_once() -> None:
    with LoopbackAPI() as api:
        for _ in range(2):
            r = httpx.post(f"{api.url}/refunds", json={"order_id": "o"},
                           headers={"Idempotency-Key": "tsk_1"})  # fmt: skip
            assert r.status_code == 200
        assert api.charges_per_key() == {"tsk_1": 1}
        assert api.attempts_per_key() == {"tsk_1": 2}
        assert api.url.startswith("http://127.0.0.1:")


def test_one_loopback_api_class_under_every_name() -> None:
    """agentq.testing, agentq.demo and agentq.demo_server name the same class
    (there were three: an alias and a subclass)."""
    import agentq.demo
    import agentq.demo_server

    assert agentq.demo.LoopbackAPI is LoopbackAPI
    assert agentq.demo_server.LoopbackAPI is LoopbackAPI
    assert LoopbackAPI.__module__ == "agentq.demo_server"


def test_worker_process_needs_existing_folders(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    with pytest.raises(ConfigError, match="policies folder"):
        WorkerProcess("sqlite:///x.db", tools=tmp_path / "tools", policies=tmp_path / "nope")
    w = WorkerProcess(
        "sqlite:///x.db", tools=tmp_path / "tools", policies=tmp_path / "tools",
        settings={"payments_url": "http://127.0.0.1:1"}, queues=["payments"],
    )  # fmt: skip
    assert w.command[-4:] == ["--setting", "payments_url=http://127.0.0.1:1", "--queue", "payments"]
    assert not w.alive and w.pid is None and w.log() == "" and w.stop() is None


def test_a_worker_process_that_cannot_serve_is_reported_with_its_output(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "broken.py").write_text("raise RuntimeError('no such tool here')\n")
    worker = WorkerProcess(f"sqlite:///{tmp_path / 'w.db'}", tools=tools, policies=tools,
                           ready_timeout=60)  # fmt: skip
    with pytest.raises(WorkerNotReady, match=r"exited with [1-9]") as caught, worker:
        pass
    assert "no such tool here" in str(caught.value)
    assert not worker.alive and worker.log() == ""  # stopped, its log dropped
