"""Authorization over MCP as an attacker would probe it (issue 27): the streamable
HTTP transport on 127.0.0.1 with real bearer tokens; agents reaching for their
approval's timers and for each other's tasks."""

from __future__ import annotations

from typing import Any

from tests.surfaces._extras import require

require("mcp", "mcp")

import mcp_types as types
from mcp.shared.exceptions import MCPError

from agentq import Runtime
from agentq.server.auth import Principal, Scope, TokenAuth
from tests.surfaces.test_mcp import _client, run, serving

AGENT_TOKEN = "agent-token-0123456789abcdef"
RIVAL_TOKEN = "rival-token-0123456789abcdef"
TOKENS = {
    AGENT_TOKEN: Principal("refund-agent", frozenset({Scope.ENQUEUE, Scope.READ})),
    RIVAL_TOKEN: Principal("rival-agent", frozenset({Scope.ENQUEUE, Scope.READ})),
}


async def _refused_everywhere(client: Any, task_id: str) -> list[str]:
    """Every way an MCP client can name a task; what each answered if not refused."""
    leaks = []
    for tool in ("agentq_get_task", "agentq_wait_task", "agentq_cancel_task"):
        args: dict[str, Any] = {"task_id": task_id}
        if tool == "agentq_wait_task":
            args["timeout_seconds"] = 0
        answer = await client.call_tool(tool, args)
        if not answer.is_error:
            leaks.append(f"{tool}: {answer.structured_content}")
    requests: list[tuple[Any, Any]] = [
        (types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
         types.GetTaskResult),
        (types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
         types.CancelTaskResult),
    ]  # fmt: skip
    for request, result in requests:
        try:
            answer = await client.session.send_request(request, result)
        except MCPError:
            continue
        leaks.append(f"{request.method}: {answer}")
    try:
        await client.read_resource(f"agentq://tasks/{task_id}")
    except MCPError:
        pass
    else:
        leaks.append("resources/read")
    return leaks


def test_over_mcp_no_agent_reaches_timers_or_another_agents_tasks(rt: Runtime) -> None:
    from agentq.mcp.transports import http_app

    app = http_app(rt, TokenAuth.from_tokens(TOKENS), wait_seconds=0)

    async def scenario(url: str) -> tuple[str, str, list[str], dict[str, list[str]], bool]:
        async with _client(url, AGENT_TOKEN) as agent:
            asked = await agent.call_tool("execute_refund", {"order_id": "o7", "amount": 500})
            task_id = asked.structured_content["task_id"]
            approval = rt.approval(asked.structured_content["approval_id"])
            timers = [t for t in (approval.escalation_task_id, approval.notify_task_id,
                                  approval.deadline_task_id) if t]  # fmt: skip
            leaks = {t: await _refused_everywhere(agent, t) for t in timers}
            own = await agent.call_tool("agentq_get_task", {"task_id": task_id})
        async with _client(url, RIVAL_TOKEN) as rival:
            leaks[task_id] = await _refused_everywhere(rival, task_id)
        return task_id, approval.approval_id, timers, leaks, own.is_error

    with serving(app) as url:
        task_id, approval_id, timers, leaks, own_refused = run(scenario(url))
    assert len(timers) >= 2
    assert leaks == {t: [] for t in [*timers, task_id]}
    assert not own_refused  # its own task it may read
    assert all(not rt.task(t).done for t in timers)
    assert rt.task(task_id).status == "awaiting_approval"
    assert rt.task(task_id).created_by == "refund-agent"
    assert rt.approval(approval_id).status == "pending"


def test_over_mcp_an_agent_still_cancels_its_own_task(rt: Runtime) -> None:
    from agentq.mcp.transports import http_app

    app = http_app(rt, TokenAuth.from_tokens(TOKENS), wait_seconds=0)

    async def scenario(url: str) -> Any:
        async with _client(url, AGENT_TOKEN) as agent:
            asked = await agent.call_tool("execute_refund", {"order_id": "o8", "amount": 500})
            task_id = asked.structured_content["task_id"]
            return await agent.call_tool("agentq_cancel_task", {"task_id": task_id})

    with serving(app) as url:
        cancelled = run(scenario(url))
    assert cancelled.structured_content["status"] == "cancelled"
    task_id = cancelled.structured_content["task_id"]
    assert [e.actor for e in rt.audit_log(target=task_id)] == ["refund-agent"]


def test_over_mcp_an_admin_cannot_approve_its_own_call(rt: Runtime) -> None:
    from agentq.mcp.transports import http_app

    root_token = "root-token-0123456789abcdef"
    tokens = {**TOKENS, root_token: Principal("root", frozenset({Scope.ADMIN}))}
    app = http_app(rt, TokenAuth.from_tokens(tokens), wait_seconds=0)

    async def scenario(url: str) -> tuple[str, Any, Any]:
        async with _client(url, root_token) as root:
            asked = await root.call_tool("execute_refund", {"order_id": "o9", "amount": 500})
            approval_id = asked.structured_content["approval_id"]
            approved = await root.call_tool("agentq_approve", {"approval_id": approval_id})
            rejected = await root.call_tool("agentq_reject", {"approval_id": approval_id})
            return approval_id, approved, rejected

    with serving(app) as url:
        approval_id, approved, rejected = run(scenario(url))
    for answer in (approved, rejected):
        assert answer.is_error and "four eyes" in answer.content[0].text
    assert rt.approval(approval_id).status == "pending"


# -- item 7: a session belongs to the token that opened it ------------------------------------

_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "probe", "version": "0"}}}  # fmt: skip


def test_another_token_cannot_use_or_delete_a_session(rt: Runtime) -> None:
    import httpx

    from agentq.mcp.transports import http_app

    app = http_app(rt, TokenAuth.from_tokens(TOKENS), wait_seconds=0)

    def as_(token: str, session: str | None = None) -> dict[str, str]:
        headers = {**_ACCEPT, "Authorization": f"Bearer {token}"}
        if session is not None:
            headers["Mcp-Session-Id"] = session
        return headers

    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    with serving(app) as url, httpx.Client(timeout=20) as http:
        opened = http.post(url, json=_INIT, headers=as_(AGENT_TOKEN))
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert http.post(url, json=done, headers=as_(AGENT_TOKEN, session)).status_code == 202
        stolen = http.post(url, json=listing, headers=as_(RIVAL_TOKEN, session))
        killed = http.delete(url, headers=as_(RIVAL_TOKEN, session))
        mine = http.post(url, json=listing, headers=as_(AGENT_TOKEN, session))
        closed = http.delete(url, headers=as_(AGENT_TOKEN, session))
        after = http.post(url, json=listing, headers=as_(AGENT_TOKEN, session))
    assert (stolen.status_code, killed.status_code) == (404, 404)
    assert "execute_refund" not in stolen.text
    assert mine.status_code == 200 and "execute_refund" in mine.text
    assert closed.status_code < 300 and after.status_code == 404


def test_over_mcp_an_approval_one_may_not_decide_answers_as_a_missing_one(
    open_rt: Any, tmp_path: Any
) -> None:
    """Issue 40 item 3, on MCP: only alice decides refunds here; carol
    (``approve``) got "not an approver" for alice's approval and "no approval"
    for a made-up id, so ids could be probed."""
    from mcp import Client

    from agentq.mcp.server import build_server
    from tests.surfaces.conftest import ROOT

    policies = tmp_path / "policies"
    policies.mkdir()
    text = (ROOT / "policies" / "refunds.toml").read_text()
    (policies / "refunds.toml").write_text(
        text.replace('# approvers = ["alice", "bob"]', 'approvers = ["alice"]\n#')
    )
    rt = open_rt(policies)
    who = {"now": TOKENS[AGENT_TOKEN]}
    carol = Principal("carol", frozenset({Scope.APPROVE}))
    server = build_server(rt, lambda _ctx: who["now"], wait_seconds=0)
    missing = "apr_" + "0" * 26

    async def scenario() -> list[tuple[str, str]]:
        async with Client(server) as client:
            asked = await client.call_tool("execute_refund", {"order_id": "o5", "amount": 500})
            approval_id = asked.structured_content["approval_id"]
            who["now"] = carol
            seen = []
            for tool in ("agentq_approve", "agentq_reject"):
                for target in (approval_id, missing):
                    answer = await client.call_tool(tool, {"approval_id": target})
                    assert answer.is_error
                    seen.append((tool, answer.content[0].text.replace(target, "ID")))
            return seen

    seen = run(scenario())
    assert seen[0] == seen[1] and seen[2] == seen[3], seen
    assert rt.approvals()[0].status == "pending"
