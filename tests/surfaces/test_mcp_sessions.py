"""MCP sessions no single token can exhaust (issue 40 item 2): the streamable
HTTP transport on 127.0.0.1, a flood of raw ``initialize`` requests from one
``read`` token, and the MCP SDK's own client for everyone else.

The SDK's sessions are one pool of 10,000 that idled out after 30 minutes: one
token opening them 16 at a time filled it in about a minute, and every other
principal's ``initialize`` was a 503 from then on."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.surfaces._extras import require

require("mcp", "mcp")

import httpx

from agentq import Runtime
from agentq.mcp.transports import http_app
from agentq.server.auth import Principal, Scope, TokenAuth
from tests.surfaces.test_mcp import _client, run, serving

READER_TOKEN = "reader-token-0123456789abcdef"
AGENT_TOKEN = "agent-token-0123456789abcdef"
TOKENS = {
    READER_TOKEN: Principal("reader", frozenset({Scope.READ})),
    AGENT_TOKEN: Principal("refund-agent", frozenset({Scope.ENQUEUE, Scope.READ})),
}
_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "flood", "version": "0"}}}  # fmt: skip
_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def _flood(url: str, token: str, count: int, at_once: int = 16) -> list[httpx.Response]:
    """``count`` raw ``initialize`` requests, ``at_once`` in flight: each opens a
    session and leaves it open (never deleted)."""
    headers = {**_HEADERS, "Authorization": f"Bearer {token}"}
    gate = asyncio.Semaphore(at_once)
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:

        async def one() -> httpx.Response:
            async with gate:
                return await http.post(url, json=_INIT)

        return list(await asyncio.gather(*(one() for _ in range(count))))


async def _agent_works(url: str) -> Any:
    """Another principal, with the SDK's client: initialize, list, call."""
    async with _client(url, AGENT_TOKEN) as agent:
        names = {t.name for t in (await agent.list_tools()).tools}
        assert "execute_refund" in names
        return await agent.call_tool("agentq_list_runs", {})


def test_one_token_cannot_fill_the_session_pool_by_default(rt: Runtime) -> None:
    """With the defaults: the reader's 101st session is a 429 (it was a 200, up to
    10,000), and the agent still opens its own and works."""
    app = http_app(rt, TokenAuth.from_tokens(TOKENS), wait_seconds=0)

    async def scenario(url: str) -> tuple[list[httpx.Response], list[httpx.Response], Any]:
        opened = await _flood(url, READER_TOKEN, 100)
        beyond = await _flood(url, READER_TOKEN, 20)
        return opened, beyond, await _agent_works(url)

    with serving(app) as url:
        opened, beyond, listed = run(scenario(url))
    assert [r.status_code for r in opened] == [200] * 100
    assert {r.status_code for r in beyond} == {429}, [r.status_code for r in beyond]
    refused = beyond[0]
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert 1 <= int(refused.headers["retry-after"]) <= 300
    assert "at most 100" in refused.json()["detail"]
    assert not listed.is_error


def test_a_small_cap_frees_a_slot_on_delete_and_on_idle(rt: Runtime) -> None:
    """Cap 3, idle timeout 2 s: the flood gets 3; the 4th is a 429 whose
    ``Retry-After`` is the idle timeout's; other principals are untouched; the
    reader's own sessions keep working; a DELETE frees one slot at once, and
    idle sessions free theirs once the timeout passed (the SDK reaps them too)."""
    app = http_app(rt, TokenAuth.from_tokens(TOKENS), wait_seconds=0,
                   max_sessions_per_principal=3, session_idle_timeout=2)  # fmt: skip
    auth = {**_HEADERS, "Authorization": f"Bearer {READER_TOKEN}"}

    async def scenario(url: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        opened = await _flood(url, READER_TOKEN, 8, at_once=8)
        seen["flood"] = sorted(r.status_code for r in opened)
        seen["retry_after"] = next(
            int(r.headers["retry-after"]) for r in opened if r.status_code == 429
        )
        seen["agent"] = await _agent_works(url)
        ids = [r.headers["mcp-session-id"] for r in opened if r.status_code == 200]
        async with httpx.AsyncClient(timeout=30, headers=auth) as http:
            done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            mine = await http.post(url, json=done, headers={"Mcp-Session-Id": ids[0]})
            seen["own_session"] = mine.status_code
            ended = await http.delete(url, headers={"Mcp-Session-Id": ids[0]})
            seen["delete"] = ended.status_code
            seen["after_delete"] = [(await http.post(url, json=_INIT)).status_code,
                                    (await http.post(url, json=_INIT)).status_code]  # fmt: skip
            await asyncio.sleep(2.5)  # every session idle past the timeout
            gone = await http.post(url, json=done, headers={"Mcp-Session-Id": ids[1]})
            seen["idle_session"] = gone.status_code
        seen["after_idle"] = sorted(r.status_code for r in await _flood(url, READER_TOKEN, 4))
        return seen

    with serving(app) as url:
        seen = run(scenario(url))
    assert seen["flood"] == [200] * 3 + [429] * 5
    assert 1 <= seen["retry_after"] <= 2
    assert not seen["agent"].is_error
    assert seen["own_session"] == 202 and seen["delete"] < 300
    assert seen["after_delete"] == [200, 429]
    assert seen["idle_session"] == 404  # the SDK reaped it
    assert seen["after_idle"] == [200] * 3 + [429]


def test_agentq_wait_task_over_http_counts_against_the_principals_wait_cap(
    rt: Runtime,
) -> None:
    """The per-principal wait cap (``max_waits_per_principal``) bounds parked
    ``agentq_wait_task`` calls over streamable HTTP too; another principal's
    waits are its own."""
    app = http_app(rt, TokenAuth.from_tokens(TOKENS), wait_seconds=0, max_waits_per_principal=1)

    async def scenario(url: str) -> tuple[Any, Any]:
        async with _client(url, AGENT_TOKEN) as agent:
            asked = await agent.call_tool("execute_refund", {"order_id": "o9", "amount": 500})
            task_id = asked.structured_content["task_id"]  # awaits approval: never done
            parked = asyncio.create_task(
                agent.call_tool("agentq_wait_task", {"task_id": task_id, "timeout_seconds": 3})
            )
            await asyncio.sleep(0.5)
            refused = await agent.call_tool(
                "agentq_wait_task", {"task_id": task_id, "timeout_seconds": 3}
            )
            return await parked, refused

    with serving(app) as url:
        parked, refused = run(scenario(url))
    assert not parked.is_error
    assert refused.is_error and "at most 1" in refused.content[0].text
