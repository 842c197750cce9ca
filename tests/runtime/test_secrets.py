"""Defect 13: a URL's password and ``?api_key=`` never reach logs, the ledger or the DLQ.

A handler calls an API at ``http://user:PASSWORD@host/charge?api_key=KEY`` that
answers 500 and lets ``raise_for_status()`` raise: httpx's error message and its
request log line both carry the full URL.
"""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, TaskStatus, ToolContext, tool
from agentq.policies import Policy

PASSWORD = "pw-b7f1e2"
API_KEY = "key-9c4d0a"
URL = f"http://alice:{PASSWORD}@127.0.0.1:8123/charge?api_key={API_KEY}&order=o1"


class Charge(BaseModel):
    order_id: str


@tool(queue="payments", max_attempts=2)
def charge(ctx: ToolContext, args: Charge) -> None:
    ctx.http.post(URL, json={"order": args.order_id}).raise_for_status()


def _server_error(request: httpx.Request) -> httpx.Response:
    return httpx.Response(500, text="internal error")


@pytest.fixture
def rt(tmp_path: Path) -> Runtime:
    policy = Policy.model_validate(
        {
            "defaults": {"backoff_initial": "1s"},
            "tools": {"charge": {"allowed_hosts": ["127.0.0.1"]}},
        }
    )
    return Runtime(
        f"sqlite:///{tmp_path / 'a.db'}", tools=[charge], policies=policy, clock=FakeClock(),
        http_transport=httpx.MockTransport(_server_error),
    )  # fmt: skip


def _assert_clean(text: str) -> None:
    assert PASSWORD not in text
    assert API_KEY not in text


def test_failed_call_leaks_no_secret_into_logs_ledger_or_dlq(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    task = rt.enqueue_action("charge", {"order_id": "o1"})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.RETRY_SCHEDULED
    retry_error = rt.task(task.task_id).error or ""
    rt.clock.advance(2)  # type: ignore[attr-defined]
    rt.worker().drain()
    record = rt.task(task.task_id)
    assert record.status == TaskStatus.DEAD
    [entry] = rt.dead_letters()
    rt.close()

    # Errors still say what happened, with the secrets replaced.
    assert "500 Internal Server Error" in retry_error
    assert "127.0.0.1:8123/charge" in retry_error and "order=o1" in retry_error
    for text in (retry_error, record.error or "", str(entry["error"])):
        _assert_clean(text)
        assert "REDACTED" in text
    _assert_clean(record.model_dump_json())
    logged = "\n".join(r.getMessage() for r in caplog.records) + caplog.text
    assert "127.0.0.1:8123" in logged  # httpx's request lines are there...
    _assert_clean(logged)  # ...without the secrets


def test_each_finished_task_is_logged_once_with_its_outcome(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agentq")
    task = rt.enqueue_action("charge", {"order_id": "o1"})
    rt.worker().drain()
    rt.clock.advance(2)  # type: ignore[attr-defined]
    rt.worker().drain()
    rt.close()
    lines = [r for r in caplog.records if getattr(r, "task_id", None) == task.task_id]
    assert [(r.levelno, r.tool, r.attempt, r.outcome) for r in lines] == [  # type: ignore[attr-defined]
        (logging.INFO, "charge", 1, "retried"),
        (logging.INFO, "charge", 2, "dead"),
    ]
    for r in lines:
        assert r.duration >= 0  # type: ignore[attr-defined]
        message = r.getMessage()
        for part in (task.task_id, r.tool, f"attempt {r.attempt}", r.outcome):  # type: ignore[attr-defined]
            assert part in message
