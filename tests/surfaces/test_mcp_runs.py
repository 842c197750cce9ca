"""Durable agent runs over MCP (issue 37), driven by the MCP SDK's own client, in
process, over stdio (a real server process, restarted) and over streamable HTTP
with bearer tokens: a task-augmented
``agentq_start_run`` is the MCP task whose status follows the run's (through a
human's approval: ``input_required``, then ``completed``); the run tools; a
principal's own runs only, another's answered as a missing one. The model is
the scripted OpenAI-compatible server on loopback; workers drain between steps."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.surfaces._extras import require

require("mcp", "mcp")

import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from agentq import Agent, OpenAICompatibleModel, RunStatus, Runtime
from agentq.demo_server import DemoAPI
from agentq.mcp.server import build_server
from agentq.mcp.transports import http_app
from agentq.server.auth import Principal, Scope, TokenAuth
from agentq.testing import ModelRequest, Reply, ScriptedModel
from tests.surfaces.conftest import ROOT, worker_thread
from tests.surfaces.test_mcp import _client, run, serving

AGENT = Principal("refund-agent", frozenset({Scope.ENQUEUE, Scope.READ}))
RIVAL = Principal("rival-agent", frozenset({Scope.ENQUEUE, Scope.READ}))
READER = Principal("auditor", frozenset({Scope.READ}))
OPERATOR = Principal("ops", frozenset({Scope.OPERATE}))

AGENT_TOKEN = "agent-token-0123456789abcdef"
RIVAL_TOKEN = "rival-token-0123456789abcdef"
CAROL_TOKEN = "carol-token-0123456789abcdef"
TOKENS = {
    AGENT_TOKEN: AGENT,
    RIVAL_TOKEN: RIVAL,
    CAROL_TOKEN: Principal("carol", frozenset({Scope.APPROVE, Scope.READ})),
}


def _script(request: ModelRequest) -> Reply:
    """Asked to refund: the refund (of the amount named), then 'Refunded.';
    anything else is answered at once."""
    if request.last_tool_results():
        return Reply.text("Refunded.")
    said = str(request.messages[-1].get("content", ""))
    if said.startswith("refund "):
        amount = float(said.split()[-1])
        return Reply.tool_calls(("execute_refund", {"order_id": "r1", "amount": amount}))
    return Reply.text(f"You said: {said}")


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(_script) as scripted:
        yield scripted


@pytest.fixture
def rt(open_rt: Callable[..., Runtime], model: ScriptedModel) -> Runtime:
    agent = Agent("refunds", OpenAICompatibleModel(model.base_url, "scripted"),
                  instructions="You refund orders.", tools=["execute_refund"])  # fmt: skip
    return open_rt(agents=[agent])


async def drain(rt: Runtime) -> None:
    """Every queued turn and call of the runs done, as a worker would."""
    await asyncio.to_thread(rt.worker(receive_timeout=0.05).drain)


def _start_as_task(arguments: dict[str, Any]) -> types.CallToolRequest:
    """A task-augmented ``tools/call`` of ``agentq_start_run``."""
    return types.CallToolRequest(params=types.CallToolRequestParams(
        name="agentq_start_run", arguments=arguments, task=types.TaskMetadata(ttl=60_000),
    ))  # fmt: skip


def _get(run_id: str) -> types.GetTaskRequest:
    return types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=run_id))


def test_a_task_augmented_start_is_an_mcp_task_through_an_approval(
    rt: Runtime, api: DemoAPI
) -> None:
    app = http_app(rt, TokenAuth.from_tokens(TOKENS), wait_seconds=0)

    async def scenario(url: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with _client(url, AGENT_TOKEN) as agent:
            started = await agent.session.send_request(
                _start_as_task({"agent": "refunds", "input": "refund 500"}), types.CallToolResult
            )
            run_id = started.structured_content["run_id"]
            seen["started"] = started
            seen["queued"] = await agent.session.send_request(_get(run_id), types.GetTaskResult)
            await drain(rt)
            seen["waiting"] = await agent.session.send_request(_get(run_id), types.GetTaskResult)
            seen["view"] = await agent.call_tool("agentq_get_run", {"run_id": run_id})
        async with _client(url, CAROL_TOKEN) as carol:
            (approval_id,) = seen["view"].structured_content["approval_ids"]
            decided = await carol.call_tool("agentq_approve", {"approval_id": approval_id})
            assert not decided.is_error, decided.content
        async with _client(url, AGENT_TOKEN) as agent:
            await drain(rt)
            seen["done"] = await agent.session.send_request(_get(run_id), types.GetTaskResult)
            seen["result"] = await agent.session.send_request(
                types.GetTaskPayloadRequest(
                    params=types.GetTaskPayloadRequestParams(task_id=run_id)
                ),
                types.CallToolResult,
            )  # fmt: skip
        return seen

    with serving(app) as url:
        seen = run(scenario(url))
    started = seen["started"]
    run_id = started.structured_content["run_id"]
    assert started.meta["io.modelcontextprotocol/related-task"] == {"taskId": run_id}
    assert started.structured_content["status"] == "queued"
    assert started.structured_content["owner"] == "refund-agent"
    assert seen["queued"].status == "working" and seen["queued"].task_id == run_id
    assert seen["waiting"].status == "input_required"
    assert seen["view"].structured_content["status"] == "awaiting_approval"
    assert seen["done"].status == "completed"
    result = seen["result"]
    assert not result.is_error and result.content[0].text == "Refunded."
    assert result.structured_content["run_id"] == run_id
    assert result.structured_content["turns"] == 2
    assert result.structured_content["usage"]["total_tokens"] > 0
    assert [r["amount"] for r in api.applied()] == [500]
    assert rt.run(run_id).status is RunStatus.SUCCEEDED


def test_without_task_augmentation_a_start_answers_with_the_run_at_once(rt: Runtime) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)

    async def scenario() -> list[Any]:
        async with Client(server) as client:
            start = {"agent": "refunds", "input": "hello", "idempotency_key": "conv-1"}
            return [
                await client.call_tool("agentq_start_run", start),
                await client.call_tool("agentq_start_run", start),  # a retry: the same run
                await client.call_tool("agentq_start_run", {**start, "input": "other"}),
                await client.call_tool("agentq_start_run", {"agent": "nobody", "input": "x"}),
            ]

    first, again, conflict, unknown = run(scenario())
    assert not first.is_error  # no MCP task: the run, as it is
    assert "io.modelcontextprotocol/related-task" not in (first.meta or {})
    view = first.structured_content
    assert view["status"] == "queued" and view["mcp_status"] == "working"
    assert view["run_id"].startswith("run_") and view["idempotency_key"] == "conv-1"
    assert again.structured_content["run_id"] == view["run_id"]
    assert conflict.is_error and "conv-1" in conflict.content[0].text
    assert unknown.is_error and "unknown agent 'nobody'" in unknown.content[0].text
    assert [r.run_id for r in rt.runs()] == [view["run_id"]]
    assert rt.run(view["run_id"]).owner == "refund-agent"


def test_get_run_waits_for_the_run_and_counts_against_the_wait_cap(rt: Runtime) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0, max_waits_per_principal=1)

    async def scenario() -> tuple[Any, Any, Any]:
        async with Client(server) as client:
            gated = await client.call_tool("agentq_start_run",
                                           {"agent": "refunds", "input": "refund 900"})  # fmt: skip
            gated_id = gated.structured_content["run_id"]
            await drain(rt)  # it waits for a human from now on
            parked = asyncio.create_task(client.call_tool(
                "agentq_get_run", {"run_id": gated_id, "wait_seconds": 2, "until": "done"}
            ))  # fmt: skip
            await asyncio.sleep(0.5)
            refused = await client.call_tool(
                "agentq_get_run", {"run_id": gated_id, "wait_seconds": 1, "until": "done"}
            )
            await parked
            quick = await client.call_tool("agentq_start_run",
                                           {"agent": "refunds", "input": "hello"})  # fmt: skip
            with worker_thread(rt):
                waited = await client.call_tool("agentq_get_run", {
                    "run_id": quick.structured_content["run_id"], "wait_seconds": 20,
                })  # fmt: skip
            return parked.result(), refused, waited

    parked, refused, waited = run(scenario())
    assert parked.structured_content["status"] == "awaiting_approval"
    assert parked.structured_content["mcp_status"] == "input_required"
    assert refused.is_error and "at most 1" in refused.content[0].text
    assert waited.structured_content["status"] == "succeeded"
    assert waited.content[0].text == "You said: hello"


def test_send_message_continues_a_run_and_cancel_ends_one(rt: Runtime) -> None:
    server = build_server(rt, lambda _ctx: AGENT, wait_seconds=0)

    async def scenario() -> list[Any]:
        async with Client(server) as client:
            started = await client.call_tool("agentq_start_run",
                                             {"agent": "refunds", "input": "hello"})  # fmt: skip
            run_id = started.structured_content["run_id"]
            await drain(rt)
            keyed = {"run_id": run_id, "text": "and again", "idempotency_key": "m-1"}
            sent = await client.call_tool("agentq_send_message", keyed)
            await drain(rt)
            # A retry after a lost answer: the key makes it the same message.
            await client.call_tool("agentq_send_message", keyed)
            await drain(rt)
            answered = await client.call_tool("agentq_get_run", {"run_id": run_id})
            other = await client.call_tool("agentq_start_run",
                                           {"agent": "refunds", "input": "refund 700"})  # fmt: skip
            other_id = other.structured_content["run_id"]
            await drain(rt)
            cancelled = await client.call_tool("agentq_cancel_run", {"run_id": other_id})
            twice = await client.call_tool("agentq_cancel_run", {"run_id": other_id})
            listed = await client.call_tool("agentq_list_runs", {})
            only = await client.call_tool("agentq_list_runs", {"status": "cancelled"})
            third = await client.session.send_request(
                _start_as_task({"agent": "refunds", "input": "hello"}), types.CallToolResult
            )
            as_task = await client.session.send_request(types.CancelTaskRequest(
                params=types.CancelTaskRequestParams(task_id=third.structured_content["run_id"])
            ), types.CancelTaskResult)  # fmt: skip
            return [sent, answered, cancelled, twice, listed, only, as_task, run_id, other_id]

    sent, answered, cancelled, twice, listed, only, as_task, run_id, other_id = run(scenario())
    assert as_task.status == "cancelled"
    assert rt.run(as_task.task_id).status is RunStatus.CANCELLED
    assert sent.structured_content["status"] == "queued"
    assert answered.structured_content["turns"] == 2
    assert answered.content[0].text == "You said: and again"
    assert cancelled.structured_content["status"] == "cancelled"
    assert cancelled.structured_content["mcp_status"] == "cancelled"
    assert "cancelled over MCP (by refund-agent)" in cancelled.structured_content["error"]
    assert twice.is_error
    assert [r["run_id"] for r in listed.structured_content["runs"]] == [other_id, run_id]
    assert [r["run_id"] for r in only.structured_content["runs"]] == [other_id]
    # The gated call of the cancelled run was cancelled with it: nothing will run.
    (call,) = rt.run(other_id).turns[0].calls
    assert call.task_id is not None and rt.task(call.task_id).status == "cancelled"


async def _answers(client: Any, run_id: str) -> list[str]:
    """What each way an MCP client can name a run answered: the error's text,
    or ``LEAK`` when it answered at all."""
    answers = []
    for tool, args in (
        ("agentq_get_run", {"run_id": run_id}),
        ("agentq_get_run", {"run_id": run_id, "wait_seconds": 1}),
        ("agentq_cancel_run", {"run_id": run_id}),
        ("agentq_send_message", {"run_id": run_id, "text": "hi"}),
    ):
        answer = await client.call_tool(tool, args)
        answers.append(answer.content[0].text if answer.is_error else f"LEAK {tool}")
    requests: list[tuple[Any, Any]] = [
        (_get(run_id), types.GetTaskResult),
        (types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=run_id)),
         types.CallToolResult),
        (types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=run_id)),
         types.CancelTaskResult),
    ]  # fmt: skip
    for request, result in requests:
        try:
            await client.session.send_request(request, result)
        except MCPError as exc:
            answers.append(str(exc))
        else:
            answers.append(f"LEAK {request.method}")
    return answers


def test_another_principals_run_is_answered_as_a_missing_one(rt: Runtime) -> None:
    ops_token = "ops-token-0123456789abcdef"
    reader_token = "reader-token-0123456789abcdef"
    tokens = {**TOKENS, ops_token: OPERATOR, reader_token: READER}
    app = http_app(rt, TokenAuth.from_tokens(tokens), wait_seconds=0)
    missing = "run_00000000000000000000000000000000"

    async def scenario(url: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with _client(url, AGENT_TOKEN) as agent:
            start = {"agent": "refunds", "input": "refund 300"}
            started = await agent.call_tool("agentq_start_run", start)
            run_id = out["run_id"] = started.structured_content["run_id"]
            await drain(rt)
        async with _client(url, RIVAL_TOKEN) as rival:
            out["theirs"] = await _answers(rival, run_id)
            out["missing"] = await _answers(rival, missing)
            out["rival_list"] = await rival.call_tool("agentq_list_runs", {})
        async with _client(url, reader_token) as reader:
            out["reader_tools"] = {t.name for t in (await reader.list_tools()).tools}
            out["reader_start"] = await reader.call_tool(
                "agentq_start_run", {"agent": "refunds", "input": "hello"}
            )
        async with _client(url, ops_token) as ops:
            out["ops_get"] = await ops.call_tool("agentq_get_run", {"run_id": run_id})
            out["ops_list"] = await ops.call_tool("agentq_list_runs", {})
        return out

    with serving(app) as url:
        out = run(scenario(url))
    run_id = out["run_id"]
    # Word for word the answers about a run that does not exist, the id aside.
    assert [a.replace(run_id, "ID") for a in out["theirs"]] == [
        a.replace(missing, "ID") for a in out["missing"]
    ]
    assert not any("LEAK" in a for a in out["theirs"]), out["theirs"]
    assert all("no run" in a for a in out["theirs"]), out["theirs"]
    assert out["rival_list"].structured_content["runs"] == []
    assert rt.run(run_id).status is RunStatus.AWAITING_APPROVAL  # untouched
    assert {"agentq_get_run", "agentq_list_runs"} <= out["reader_tools"]
    assert not out["reader_tools"] & {"agentq_start_run", "agentq_cancel_run",
                                      "agentq_send_message"}  # fmt: skip
    assert out["reader_start"].is_error and "'enqueue'" in out["reader_start"].content[0].text
    assert rt.runs() and len(rt.runs()) == 1
    assert out["ops_get"].structured_content["owner"] == "refund-agent"
    assert [r["run_id"] for r in out["ops_list"].structured_content["runs"]] == [run_id]


def test_a_restarted_stdio_server_answers_for_the_run_its_predecessor_started(
    rt: Runtime, db_url: str, tmp_path: Path
) -> None:
    """``agentq mcp`` over stdio, a real server process without the tools' code:
    it finds the agent's turn tool in the database's catalog, as a process that
    only starts runs does; a worker (this test's runtime) carries the run on."""
    rt.record_tools()
    params = StdioServerParameters(
        command=str(Path(sys.executable).parent / "agentq"),
        args=["mcp", "--db", db_url, "--policies", str(ROOT / "policies"), "--wait", "0"],
        env={**os.environ}, cwd=str(tmp_path),  # no tools/ folder here
    )  # fmt: skip

    async def start() -> Any:
        async with Client(params) as client:  # the server process ends with the session
            return await client.session.send_request(
                _start_as_task({"agent": "refunds", "input": "hello"}), types.CallToolResult
            )

    started = run(start())
    assert not started.is_error, started.content
    run_id = started.structured_content["run_id"]

    async def resolve() -> tuple[Any, Any]:
        async with Client(params) as client:  # a new server process on the same database
            await drain(rt)
            got = await client.session.send_request(_get(run_id), types.GetTaskResult)
            return got, await client.call_tool("agentq_get_run", {"run_id": run_id})

    got, view = run(resolve())
    assert got.status == "completed"
    assert view.content[0].text == "You said: hello"
    assert rt.run(run_id).owner.startswith("stdio:")
