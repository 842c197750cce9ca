"""The MCP server driven by the MCP SDK's own client: in process, over stdio (a
real server process, restarted mid-task) and over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.surfaces._extras import require

require("mcp", "mcp")

import uvicorn
from mcp import Client, StdioServerParameters

from agentq import Runtime, TaskStatus
from agentq.demo_server import DemoAPI
from agentq.errors import ConfigError
from agentq.mcp.server import IDEMPOTENCY_META, build_server
from agentq.mcp.transports import http_app
from agentq.server.auth import InsecureLocal, Principal, Scope, TokenAuth
from tests.surfaces.conftest import ROOT, worker_thread

AGENT = Principal("refund-agent", frozenset({Scope.ENQUEUE, Scope.READ}))


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_call_answers_with_the_result_when_the_task_finishes_within_the_wait(
    rt: Runtime, api: DemoAPI
) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=20)

    async def scenario() -> dict[str, Any]:
        async with Client(server) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "execute_refund" in names and "agentq_wait_task" in names
            # internal tools (approval notices) and approvals are not offered to this caller
            assert not names & {"request_approval", "escalate", "agentq_approve"}
            result = await client.call_tool("execute_refund", {"order_id": "o1", "amount": 30})
            assert not result.is_error
            return dict(result.structured_content)

    with worker_thread(rt):
        view = run(scenario())
    assert view["status"] == "succeeded" and view["mcp_status"] == "completed"
    assert view["result"]["amount"] == 30
    assert rt.task(view["task_id"]).status is TaskStatus.SUCCEEDED
    assert len(api.applied()) == 1


def test_call_returns_a_task_handle_then_polling_gives_the_result(
    rt: Runtime, api: DemoAPI
) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)

    async def enqueue() -> dict[str, Any]:
        async with Client(server) as client:
            result = await client.call_tool("execute_refund", {"order_id": "o2", "amount": 20})
            return dict(result.structured_content)

    handle = run(enqueue())
    assert handle["mcp_status"] == "working" and not handle["done"]

    async def poll() -> tuple[dict[str, Any], dict[str, Any]]:
        async with Client(server) as client:
            waited = await client.call_tool(
                "agentq_wait_task", {"task_id": handle["task_id"], "timeout_seconds": 20}
            )
            resource = await client.read_resource(f"agentq://tasks/{handle['task_id']}")
            return dict(waited.structured_content), json.loads(resource.contents[0].text)

    with worker_thread(rt):
        waited, resource = run(poll())
    assert waited["status"] == "succeeded" and resource["status"] == "succeeded"
    assert waited["task_id"] == handle["task_id"]
    assert len(api.applied()) == 1


def test_bad_arguments_and_unknown_tasks_are_tool_errors_naming_the_problem(rt: Runtime) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)

    async def scenario() -> list[Any]:
        async with Client(server) as client:
            return [
                await client.call_tool("execute_refund", {"order_id": "o3", "amount": -5}),
                await client.call_tool("agentq_get_task", {"task_id": "tsk_nope"}),
                await client.call_tool("escalate", {"approval_id": "x", "tool": "t", "args": {}}),
                await client.call_tool("agentq_approve", {"approval_id": "apr_x"}),
            ]

    bad_args, unknown, internal, not_allowed = run(scenario())
    assert bad_args.is_error and "amount" in bad_args.content[0].text
    assert unknown.is_error and "tsk_nope" in unknown.content[0].text
    assert internal.is_error and "unknown tool" in internal.content[0].text
    assert "request_approval" not in internal.content[0].text  # internal tools are not listed
    assert not_allowed.is_error and "approve" in not_allowed.content[0].text
    assert rt.tasks() == []


def test_a_misspelled_argument_is_a_tool_error_naming_it(rt: Runtime) -> None:
    """Issue 28: ``curency`` (and ``bogus``) were dropped and the call queued."""
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)

    async def scenario() -> list[Any]:
        async with Client(server) as client:
            typo = {"order_id": "X-1", "amount": 50, "curency": "EUR"}
            return [await client.call_tool("execute_refund", typo),
                    await client.call_tool("execute_refund", {**typo, "bogus": 1})]  # fmt: skip

    typo, bogus = run(scenario())
    assert typo.is_error and "did you mean 'currency'" in typo.content[0].text
    assert bogus.is_error and "'bogus'" in bogus.content[0].text
    assert rt.tasks() == []


def test_an_unknown_tool_gets_a_did_you_mean(rt: Runtime) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)

    async def scenario() -> Any:
        async with Client(server) as client:
            return await client.call_tool("execute_refnd", {"order_id": "o1", "amount": 5})

    result = run(scenario())
    assert result.is_error and "did you mean 'execute_refund'" in result.content[0].text


def test_an_explicit_idempotency_key_gives_one_task_across_connections(
    rt: Runtime, api: DemoAPI
) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)
    meta: Any = {IDEMPOTENCY_META: "refund-o4-attempt"}

    async def call_once() -> str:
        async with Client(server) as client:
            result = await client.call_tool(
                "execute_refund", {"order_id": "o4", "amount": 40}, meta=meta
            )
            return str(result.structured_content["task_id"])

    first, second = run(call_once()), run(call_once())
    assert first == second and len(rt.tasks()) == 1


def test_request_ids_restarting_on_a_new_connection_do_not_reuse_a_task(rt: Runtime) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)

    async def call_once(order: str) -> str:
        async with Client(server) as client:
            result = await client.call_tool("execute_refund", {"order_id": order, "amount": 5})
            return str(result.structured_content["task_id"])

    assert run(call_once("o5")) != run(call_once("o5"))


def _stdio(db_url: str, api: DemoAPI, *extra: str) -> StdioServerParameters:
    agentq = str(Path(sys.executable).parent / "agentq")
    return StdioServerParameters(
        command=agentq,
        args=["mcp", "--db", db_url, "--tools", str(ROOT / "tools"),
              "--policies", str(ROOT / "policies"), "--setting", f"payments_url={api.url}",
              "--setting", f"notifications_url={api.url}", "--wait", "0", *extra],
        env={**os.environ}, cwd=str(ROOT),
    )  # fmt: skip


def test_a_restarted_stdio_server_resolves_the_task_its_predecessor_created(
    db_url: str, api: DemoAPI, open_rt: Callable[[], Runtime]
) -> None:
    params = _stdio(db_url, api)

    async def enqueue() -> str:
        async with Client(params) as client:  # the server process ends with the session
            result = await client.call_tool("execute_refund", {"order_id": "o6", "amount": 25})
            assert result.structured_content["mcp_status"] == "working"
            return str(result.structured_content["task_id"])

    task_id = run(enqueue())
    rt = open_rt()
    assert rt.task(task_id).status is TaskStatus.QUEUED

    async def resolve() -> dict[str, Any]:
        async with Client(params) as client:  # a new server process on the same file
            result = await client.call_tool(
                "agentq_wait_task", {"task_id": task_id, "timeout_seconds": 20}
            )
            return dict(result.structured_content)

    with worker_thread(rt):
        view = run(resolve())
    assert view["task_id"] == task_id and view["status"] == "succeeded"
    assert len(api.applied()) == 1


@contextmanager
def serving(app: Any) -> Iterator[str]:
    # The server gets the bound socket: a port picked beforehand could be taken by
    # a test running in another process before the server bound it.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(400):
            if server.started:
                break
            threading.Event().wait(0.05)
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


AGENT_TOKEN = "agent-token-0123456789abcdef"
CAROL_TOKEN = "carol-token-0123456789abcdef"
TOKENS = {
    AGENT_TOKEN: AGENT,
    CAROL_TOKEN: Principal("carol", frozenset({Scope.APPROVE, Scope.READ})),
}


@asynccontextmanager
async def _client(url: str, token: str) -> AsyncIterator[Client]:
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def test_an_approval_over_http_records_the_authenticated_approver(
    rt: Runtime, api: DemoAPI
) -> None:
    app = http_app(rt, TokenAuth.from_tokens(TOKENS), wait_seconds=0)

    async def scenario(url: str) -> tuple[dict[str, Any], Any, dict[str, Any]]:
        async with _client(url, AGENT_TOKEN) as agent:
            asked = await agent.call_tool("execute_refund", {"order_id": "o7", "amount": 500})
            self_approved = await agent.call_tool(
                "agentq_approve", {"approval_id": asked.structured_content["approval_id"]}
            )
        async with _client(url, CAROL_TOKEN) as carol:
            names = {t.name for t in (await carol.list_tools()).tools}
            assert "agentq_approve" in names and "execute_refund" not in names
            pending = await carol.call_tool("agentq_list_approvals", {})
            (approval,) = pending.structured_content["approvals"]
            decided = await carol.call_tool(
                "agentq_approve", {"approval_id": approval["approval_id"], "note": "ok"}
            )
        async with _client(url, AGENT_TOKEN) as agent:
            done = await agent.call_tool(
                "agentq_wait_task",
                {"task_id": decided.structured_content["task_id"], "timeout_seconds": 20},
            )
        return dict(asked.structured_content), self_approved, dict(done.structured_content)

    with serving(app) as url, worker_thread(rt):
        asked, self_approved, done = run(scenario(url))
    assert asked["mcp_status"] == "input_required"
    assert self_approved.is_error and "approve" in self_approved.content[0].text
    assert done["status"] == "succeeded" and len(api.applied()) == 1
    approval = rt.approval(asked["approval_id"])
    assert approval.decided_by == "carol" and approval.decision_note == "ok"


def test_http_without_a_valid_token_is_refused_before_any_mcp_session(rt: Runtime) -> None:
    app = http_app(rt, TokenAuth.from_tokens(TOKENS))
    with serving(app) as url:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        no_token = httpx.post(url, json=body, timeout=10)
        wrong = httpx.post(url, json=body, headers={"Authorization": "Bearer nope"}, timeout=10)
    assert no_token.status_code == 401 and wrong.status_code == 401
    assert "Bearer" in no_token.headers["www-authenticate"]


def test_insecure_local_refuses_a_non_loopback_address(rt: Runtime) -> None:
    with pytest.raises(ConfigError, match="loopback"):
        http_app(rt, InsecureLocal(), host="0.0.0.0")


@pytest.mark.parametrize(
    ("flags", "message"),
    [([], "requires authentication"),
     (["--insecure-local", "--host", "0.0.0.0"], "loopback only")],
)  # fmt: skip
def test_the_http_transport_will_not_start_without_authentication(
    db_url: str, flags: list[str], message: str
) -> None:
    import subprocess

    agentq = str(Path(sys.executable).parent / "agentq")
    proc = subprocess.run(
        [agentq, "mcp", "--transport", "http", "--db", db_url, "--tools", str(ROOT / "tools"),
         "--policies", str(ROOT / "policies"), *flags],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2 and message in proc.stderr
    assert proc.stderr.startswith("agentq: error:") and "Traceback" not in proc.stderr


def test_the_mcp_tasks_methods_speak_of_the_agentq_task(rt: Runtime, api: DemoAPI) -> None:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)

    async def scenario() -> tuple[Any, Any, Any, Any, str]:
        async with Client(server) as client:
            small = await client.call_tool("execute_refund", {"order_id": "o8", "amount": 10})
            large = await client.call_tool("execute_refund", {"order_id": "o9", "amount": 900})
            assert small.meta is not None
            related = small.meta["io.modelcontextprotocol/related-task"]["taskId"]

            def get(task_id: str) -> Any:
                return types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))

            waiting = await client.session.send_request(
                get(large.structured_content["task_id"]), types.GetTaskResult
            )
            with worker_thread(rt):
                payload = await client.session.send_request(
                    types.GetTaskPayloadRequest(
                        params=types.GetTaskPayloadRequestParams(task_id=related)
                    ),
                    types.CallToolResult,
                )
            cancelled = await client.session.send_request(
                types.CancelTaskRequest(params=types.CancelTaskRequestParams(
                    task_id=large.structured_content["task_id"])),
                types.CancelTaskResult,
            )  # fmt: skip
            with pytest.raises(MCPError, match="tsk_nope"):
                await client.session.send_request(get("tsk_nope"), types.GetTaskResult)
            return small, waiting, payload, cancelled, related

    small, waiting, payload, cancelled, related = run(scenario())
    assert related == small.structured_content["task_id"]  # the MCP task id is agentq's
    assert waiting.status == "input_required" and waiting.ttl is None
    assert payload.structured_content["status"] == "succeeded"
    assert cancelled.status == "cancelled"
    # The audit names the authenticated caller of tasks/cancel.
    cancelled_id = cancelled.task_id
    assert [e.actor for e in rt.audit_log(target=cancelled_id)] == [AGENT.name]


def test_a_dedupe_key_collapses_the_same_call_into_its_pending_task(rt: Runtime) -> None:
    from agentq.mcp.server import DEDUPE_META

    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)
    meta: Any = {DEDUPE_META: "order:o5"}

    async def calls() -> list[str]:
        async with Client(server) as client:
            out = []
            for _ in range(3):  # three requests: three idempotency keys, one pending task
                result = await client.call_tool(
                    "execute_refund", {"order_id": "o5", "amount": 40}, meta=meta
                )
                out.append(str(result.structured_content["task_id"]))
            return out

    ids = run(calls())
    assert len(set(ids)) == 1 and len(rt.tasks()) == 1
