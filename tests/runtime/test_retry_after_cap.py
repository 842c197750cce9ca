"""Retry-After is honoured only up to the tool's cap (issue 9, defect 7): one 429
saying "ten years" must not freeze the tool on every worker (fake clock, httpx
MockTransport)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from agentq import FakeClock, Policy, Runtime, TaskStatus, ToolContext, tool
from agentq.http import checked
from agentq.ledger import Tables


class Call(BaseModel):
    n: int


@tool(queue="api_calls")
def call_api(ctx: ToolContext, args: Call) -> None:
    checked(ctx.http.get(f"https://api.example.com/{args.n}"), "api")


class Scripted:
    """Answers the next requests with the queued (status, Retry-After) pairs, then 200."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, str | None]] = []
        self.requests = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if not self.answers:
            return httpx.Response(200, json={})
        status, after = self.answers.pop(0)
        return httpx.Response(status, headers={} if after is None else {"Retry-After": after})


@pytest.fixture
def api() -> Scripted:
    return Scripted()


def make_runtime(
    url: Path | str, clock: FakeClock, api: Scripted, **tool_policy: Any
) -> Runtime:
    policy = Policy.model_validate(
        {"defaults": {"backoff_initial": "1s", "backoff_max": "10s"},
         "tools": {"call_api": {"allowed_hosts": ["api.example.com"], **tool_policy}}}
    )  # fmt: skip
    return Runtime(
        url if isinstance(url, str) else f"sqlite:///{url / 'ra.db'}",
        tools=[call_api], policies=policy, clock=clock,
        http_transport=httpx.MockTransport(api),
    )  # fmt: skip


@pytest.fixture
def rt(backend_url: str, clock: FakeClock, api: Scripted) -> Iterator[Runtime]:
    runtime = make_runtime(backend_url, clock, api)
    yield runtime
    runtime.close()


def http_date(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("315360000", "315360000"), ("Fri, 31 Dec 9999 23:59:59 GMT", None)],
    ids=["ten-years", "http-date-9999"],
)
def test_a_retry_after_beyond_the_cap_is_an_ordinary_failure(
    rt: Runtime, api: Scripted, clock: FakeClock, header: str, seconds: str | None
) -> None:
    api.answers.append((429, header))
    first = rt.enqueue_action("call_api", {"n": 1}).task_id
    rt.worker().drain()
    info = rt.task(first)
    assert info.status == TaskStatus.RETRY_SCHEDULED
    assert info.failures == 1  # counted as a failure, with the ordinary backoff
    assert info.next_attempt_at is not None
    assert info.next_attempt_at <= clock.now() + timedelta(seconds=1)
    assert "exceeds this tool's cap of 3600 s" in (info.error or "")
    if seconds is not None:
        assert f"Retry-After of {seconds} s" in (info.error or "")
    # No tool-wide hold was set: other tasks of the tool run at once.
    assert rt.backend.get_record(Tables.HOLDS, "call_api") is None
    second = rt.enqueue_action("call_api", {"n": 2}).task_id
    rt.worker().drain()
    assert rt.task(second).status == TaskStatus.SUCCEEDED
    clock.set(info.next_attempt_at)
    rt.worker().drain()
    assert rt.task(first).status == TaskStatus.SUCCEEDED
    assert api.requests == 3


def test_a_retry_after_within_the_cap_is_honoured_and_holds_the_tool(
    rt: Runtime, api: Scripted, clock: FakeClock
) -> None:
    api.answers.append((503, "3600"))  # exactly the default cap
    first = rt.enqueue_action("call_api", {"n": 1}).task_id
    rt.worker().drain()
    info = rt.task(first)
    assert info.status == TaskStatus.RETRY_SCHEDULED and info.failures == 0
    assert info.next_attempt_at == clock.now() + timedelta(hours=1)
    second = rt.enqueue_action("call_api", {"n": 2}).task_id
    rt.worker().drain()
    assert rt.task(second).status != TaskStatus.SUCCEEDED  # held back with the tool
    clock.advance(3600)
    rt.worker().drain()
    assert {rt.task(first).status, rt.task(second).status} == {TaskStatus.SUCCEEDED}


def test_the_cap_is_configurable_per_tool(tmp_path: Path, api: Scripted, clock: FakeClock) -> None:
    rt = make_runtime(tmp_path, clock, api, max_retry_after="2h")
    try:
        api.answers.append((429, "5400"))
        task = rt.enqueue_action("call_api", {"n": 1}).task_id
        rt.worker().drain()
        info = rt.task(task)
        assert info.failures == 0
        assert info.next_attempt_at == clock.now() + timedelta(seconds=5400)
        api.answers.append((429, "7201"))
        clock.advance(5400)
        rt.worker().drain()
        info = rt.task(task)
        assert info.failures == 1
        assert "Retry-After of 7201 s exceeds this tool's cap of 7200 s" in (info.error or "")
    finally:
        rt.close()


def test_a_hold_beyond_the_cap_already_in_the_database_is_ignored(
    rt: Runtime, api: Scripted, clock: FakeClock
) -> None:
    """A ledger written before the cap existed may hold a tool for ten years."""
    until = clock.now() + timedelta(days=3650)
    rt.backend.transact(
        lambda tx: tx.put_record(
            Tables.HOLDS, "call_api", {"until": until.isoformat(), "reason": "old 429"}
        )
    )
    task = rt.enqueue_action("call_api", {"n": 1}).task_id
    rt.worker().drain()
    assert rt.task(task).status == TaskStatus.SUCCEEDED


@pytest.mark.parametrize(
    "record",
    [{"until": "next tuesday"}, {"reason": "no until"}, {"until": "2026-01-01T00:00:00"}],
    ids=["garbage", "missing", "naive"],
)
def test_a_hold_record_agentq_did_not_write_is_ignored(rt: Runtime, record: dict[str, Any]) -> None:
    rt.backend.transact(lambda tx: tx.put_record(Tables.HOLDS, "call_api", record))
    task = rt.enqueue_action("call_api", {"n": 1}).task_id
    rt.worker().drain()
    assert rt.task(task).status == TaskStatus.SUCCEEDED
