"""The HTTP API on a real uvicorn server (127.0.0.1), driven with httpx."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from agentq import Runtime
from agentq.ledger import TaskStatus
from tests.http.conftest import LiveServer

REFUND = {"args": {"order_id": "o1", "amount": 30}}
SHIP = {"args": {"order_id": "o1", "address": "1 Main St", "items": ["book"]}}


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


# -- the five Idempotency-Key cases ------------------------------------------------


def test_first_request_is_202_with_location(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as http:
        r = http.post("/v1/tools/execute_refund/actions", json=REFUND,
                      headers={"Idempotency-Key": "k1"})  # fmt: skip
    assert r.status_code == 202, r.text
    task = r.json()
    assert r.headers["location"] == f"/v1/tasks/{task['task_id']}"
    assert task["status"] == "queued" and task["args"]["amount"] == 30
    assert runtime.task(task["task_id"]).tool == "execute_refund"


def test_same_key_same_args_is_the_same_task_200(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as http:
        first = http.post("/v1/tools/execute_refund/actions", json=REFUND,
                          headers={"Idempotency-Key": '"k2"'})  # an sf-string, quoted
        again = http.post("/v1/tools/execute_refund/actions", json=REFUND,
                          headers={"Idempotency-Key": "k2"})  # fmt: skip
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["task_id"] == first.json()["task_id"]
    assert again.headers["location"] == first.headers["location"]
    assert len(runtime.tasks()) == 1


def test_same_key_other_args_is_422(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as http:
        first = http.post("/v1/tools/execute_refund/actions", json=REFUND,
                          headers={"Idempotency-Key": "k3"})
        other = http.post("/v1/tools/execute_refund/actions",
                          json={"args": {"order_id": "o1", "amount": 31}},
                          headers={"Idempotency-Key": "k3"})  # fmt: skip
    body = _problem(other, 422)
    assert body["errors"][0]["header"] == "Idempotency-Key"
    assert first.json()["task_id"] in body["detail"] and "'k3'" in body["detail"]
    assert "http:" not in body["detail"]  # the caller's key, not how it is stored
    assert len(runtime.tasks()) == 1


def test_retry_while_the_first_is_being_created_is_409(
    server: LiveServer, runtime: Runtime
) -> None:
    """The first request is held inside its decision transaction (a fault point
    that blocks); a retry with its key meanwhile gets 409, then 200 afterwards."""
    inside, release = threading.Event(), threading.Event()

    def hold(info: dict[str, object]) -> bool:
        inside.set()
        release.wait(20)
        return False  # never raise: only hold

    runtime.faults.arm("in_decision", RuntimeError("unused"), when=hold)
    results: list[httpx.Response] = []
    with server.client() as http:
        first = threading.Thread(target=lambda: results.append(http.post(
            "/v1/tools/execute_refund/actions", json=REFUND, headers={"Idempotency-Key": "k4"})))
        first.start()
        assert inside.wait(20)
        retry = http.post("/v1/tools/execute_refund/actions", json=REFUND,
                          headers={"Idempotency-Key": "k4"})  # fmt: skip
        release.set()
        first.join(20)
        after = http.post("/v1/tools/execute_refund/actions", json=REFUND,
                          headers={"Idempotency-Key": "k4"})  # fmt: skip
    _problem(retry, 409)
    assert results[0].status_code == 202
    assert after.status_code == 200 and after.json()["task_id"] == results[0].json()["task_id"]
    assert len(runtime.tasks()) == 1


def test_key_required_by_policy_and_absent_is_400(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as http:
        missing = http.post("/v1/tools/request_shipping/actions", json=SHIP)
        given = http.post("/v1/tools/request_shipping/actions", json=SHIP,
                          headers={"Idempotency-Key": "ship-1"})  # fmt: skip
        optional = http.post("/v1/tools/execute_refund/actions", json=REFUND)
    body = _problem(missing, 400)
    assert body["errors"] == [{"header": "Idempotency-Key", "detail": "missing"}]
    assert given.status_code == 202 and optional.status_code == 202
    assert len(runtime.tasks()) == 2


def test_keys_are_scoped_to_the_principal(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as agent, server.client("admin-token") as ops:
        a = agent.post("/v1/tools/execute_refund/actions", json=REFUND,
                       headers={"Idempotency-Key": "shared"})
        b = ops.post("/v1/tools/execute_refund/actions", json=REFUND,
                     headers={"Idempotency-Key": "shared"})  # fmt: skip
    assert (a.status_code, b.status_code) == (202, 202)
    assert a.json()["task_id"] != b.json()["task_id"]


# -- errors name the field ---------------------------------------------------------


def test_invalid_args_are_problem_json_naming_the_field(server: LiveServer) -> None:
    with server.client() as http:
        bad = http.post("/v1/tools/execute_refund/actions",
                        json={"args": {"order_id": "o 1", "amount": -5}})
        extra = http.post("/v1/tools/execute_refund/actions", json={**REFUND, "colour": "red"})
        not_json = http.post("/v1/tools/execute_refund/actions", content=b"{",
                             headers={"content-type": "application/json"})
        wrong_type = http.post("/v1/tools/execute_refund/actions", content=b"x",
                               headers={"content-type": "text/plain"})
        unknown = http.post("/v1/tools/nope/actions", json=REFUND)
        internal = http.post("/v1/tools/agentq_webhook/actions", json={"args": {}})
        bad_key = http.post("/v1/tools/execute_refund/actions", json=REFUND,
                            headers={"Idempotency-Key": "x" * 300})  # fmt: skip
    pointers = {e["pointer"] for e in _problem(bad, 422)["errors"]}
    assert pointers == {"/args/order_id", "/args/amount"}
    assert {e["pointer"] for e in _problem(extra, 422)["errors"]} == {"/colour"}
    _problem(not_json, 400)
    _problem(wrong_type, 415)
    _problem(unknown, 404)
    _problem(internal, 404)
    assert _problem(bad_key, 400)["errors"][0]["header"] == "Idempotency-Key"


def test_callback_url_must_be_an_allowed_host_without_credentials(server: LiveServer) -> None:
    with server.client() as http:
        elsewhere = http.post("/v1/tools/execute_refund/actions",
                              json={**REFUND, "callback_url": "https://evil.example/hook"})
        secret = http.post("/v1/tools/execute_refund/actions",
                           json={**REFUND, "callback_url": "http://127.0.0.1:9/h?token=abc"})
        ok = http.post("/v1/tools/execute_refund/actions",
                       json={**REFUND, "callback_url": "http://127.0.0.1:9/hook"})  # fmt: skip
    for r in (elsewhere, secret):
        assert _problem(r, 422)["errors"][0]["pointer"] == "/callback_url"
    assert "abc" not in secret.text
    assert ok.status_code == 202


# -- auth --------------------------------------------------------------------------


def test_no_token_bad_token_and_wrong_scope_are_refused(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(None) as anon, server.client("wrong") as bad, \
            server.client("reader-token") as reader, server.client("alice-token") as alice:
        for path in ("/v1/tasks", "/v1/approvals", "/v1/tasks/t1"):  # the spec is public
            r = anon.get(path)
            _problem(r, 401)
            assert r.headers["www-authenticate"].startswith("Bearer")
        _problem(anon.post("/v1/tools/execute_refund/actions", json=REFUND), 401)
        _problem(bad.get("/v1/tasks"), 401)
        _problem(reader.post("/v1/tools/execute_refund/actions", json=REFUND), 403)
        _problem(alice.post("/v1/tools/execute_refund/actions", json=REFUND), 403)
        assert reader.get("/v1/tasks").status_code == 200
    assert runtime.tasks() == []


def test_insecure_local_serves_loopback_with_every_scope(runtime: Runtime) -> None:
    from agentq.server import InsecureLocal, create_app

    live = LiveServer(create_app(runtime, auth=InsecureLocal())).start()
    try:
        with httpx.Client(base_url=live.url) as http:
            r = http.post("/v1/tools/execute_refund/actions", json=REFUND)
        assert r.status_code == 202
    finally:
        live.stop()


def test_create_app_requires_an_authenticator(runtime: Runtime) -> None:
    from agentq.errors import ConfigError
    from agentq.server import create_app

    with pytest.raises(ConfigError, match="auth"):
        create_app(runtime, auth=None)  # type: ignore[arg-type]


# -- reading, long-poll, SSE, listing, cancel -----------------------------------------


def test_prefer_wait_answers_when_the_task_finishes(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client() as http:
        task = http.post("/v1/tools/execute_refund/actions", json=REFUND).json()
        plain = http.get(f"/v1/tasks/{task['task_id']}")
        assert plain.json()["status"] == "queued" and "preference-applied" not in plain.headers
        timer = threading.Timer(0.3, lambda: runtime.worker().drain())
        timer.start()
        waited = http.get(f"/v1/tasks/{task['task_id']}", headers={"Prefer": "wait=20"})
        timer.join()
    assert waited.status_code == 200
    assert waited.json()["status"] == "succeeded"
    assert waited.headers["preference-applied"] == "wait=20"


def test_prefer_wait_returns_the_unfinished_task_at_its_end(server: LiveServer) -> None:
    with server.client() as http:
        task = http.post("/v1/tools/execute_refund/actions", json=REFUND).json()
        r = http.get(f"/v1/tasks/{task['task_id']}", headers={"Prefer": "wait=1"})
        missing = http.get("/v1/tasks/tsk_nope", headers={"Prefer": "wait=1"})
    assert r.json()["status"] == "queued"
    _problem(missing, 404)


def test_events_stream_each_change_until_final(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as http:
        task = http.post("/v1/tools/execute_refund/actions", json=REFUND).json()
        statuses: list[str] = []
        with http.stream("GET", f"/v1/tasks/{task['task_id']}/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            worker = threading.Thread(target=lambda: runtime.worker().drain())
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    statuses.append(json.loads(line[5:])["status"])
                    if len(statuses) == 1:
                        worker.start()
            worker.join(30)
        _problem(http.get("/v1/tasks/tsk_nope/events"), 404)
    assert statuses[0] == "queued" and statuses[-1] == "succeeded"


def test_list_filters_by_status_and_tool(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as http:
        http.post("/v1/tools/execute_refund/actions", json=REFUND)
        http.post("/v1/tools/request_shipping/actions", json=SHIP, headers={"Idempotency-Key": "s"})
        runtime.worker(queues=["payments"]).drain()
        done = http.get("/v1/tasks", params={"status": "succeeded"}).json()["tasks"]
        ships = http.get("/v1/tasks", params={"tool": "request_shipping"}).json()["tasks"]
        _problem(http.get("/v1/tasks", params={"status": "bogus"}), 400)
        _problem(http.get("/v1/tasks", params={"limit": "0"}), 400)
    assert [t["tool"] for t in done] == ["execute_refund"]
    assert [t["status"] for t in ships] == ["queued"]


def test_cancel_an_unfinished_task_and_refuse_a_finished_one(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client() as http:
        task = http.post("/v1/tools/execute_refund/actions", json=REFUND).json()
        r = http.post(f"/v1/tasks/{task['task_id']}:cancel")
        again = http.post(f"/v1/tasks/{task['task_id']}:cancel")
        _problem(http.post("/v1/tasks/tsk_nope:cancel"), 404)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert "refund-agent" in r.json()["error"]
    _problem(again, 409)
    assert runtime.task(task["task_id"]).status is TaskStatus.CANCELLED
    # The audit names the authenticated caller, not "(unnamed)".
    assert [e.actor for e in runtime.audit_log(target=task["task_id"])] == ["refund-agent"]


# -- approvals -----------------------------------------------------------------------

BIG = {"args": {"order_id": "o2", "amount": 500}}


def test_approval_with_its_etag_records_the_principal(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client() as agent, server.client("alice-token") as alice:
        task = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()
        assert task["status"] == "awaiting_approval"
        pending = alice.get("/v1/approvals", params={"status": "pending"}).json()["approvals"]
        assert [a["task_id"] for a in pending] == [task["task_id"]]
        one = alice.get(f"/v1/approvals/{pending[0]['approval_id']}")
        etag = one.headers["etag"]
        r = alice.post(f"/v1/approvals/{pending[0]['approval_id']}:approve",
                       json={"note": "ok", "by": "mallory"}, headers={"If-Match": etag})
        assert _problem(r, 422)["errors"][0]["pointer"] == "/by"  # no typed-in names
        r = alice.post(f"/v1/approvals/{pending[0]['approval_id']}:approve",
                       json={"note": "ok"}, headers={"If-Match": etag})  # fmt: skip
    assert r.status_code == 200 and r.json()["status"] == "queued"
    approval = runtime.approval(pending[0]["approval_id"])
    assert approval.status == "approved" and approval.decided_by == "alice"


def test_stale_if_match_is_refused_after_an_escalation(
    server: LiveServer, runtime: Runtime
) -> None:
    """The screen read the approval; it escalated since; approving with the old
    ETag is 412 and nothing is decided. Without If-Match it is 428, with one that
    is no approval's ETag 400."""
    with server.client() as agent, server.client("alice-token") as alice:
        task = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()
        approval_id = runtime.task(task["task_id"]).approval_id
        stale = alice.get(f"/v1/approvals/{approval_id}").headers["etag"]
        escalation = runtime.approval(approval_id).escalation_task_id
        runtime.transact(lambda tx: _escalate(runtime, tx, escalation))
        assert runtime.approval(approval_id).status == "escalated"
        refused = alice.post(f"/v1/approvals/{approval_id}:approve",
                             headers={"If-Match": stale})
        no_precondition = alice.post(f"/v1/approvals/{approval_id}:approve")
        star = alice.post(f"/v1/approvals/{approval_id}:approve", headers={"If-Match": "*"})
        assert runtime.approval(approval_id).status == "escalated"
        fresh = alice.get(f"/v1/approvals/{approval_id}").headers["etag"]
        assert fresh != stale
        ok = alice.post(f"/v1/approvals/{approval_id}:reject", headers={"If-Match": fresh})
        unknown = alice.post("/v1/approvals/apr_nope:approve", headers={"If-Match": fresh})
    _problem(refused, 412)
    _problem(no_precondition, 428)
    _problem(star, 400)
    _problem(unknown, 404)
    assert ok.status_code == 200 and ok.json()["status"] == "cancelled"
    assert runtime.approval(approval_id).decided_by == "alice"


def test_if_match_with_a_well_formed_tag_that_does_not_match_is_412(
    server: LiveServer, runtime: Runtime
) -> None:
    """RFC 9110: a condition that is false is 412, whatever tag was sent; only a
    header that is no list of entity tags is a bad request (issue 28, item 11)."""
    with server.client() as agent, server.client("alice-token") as alice:
        task = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()
        approval_id = runtime.task(task["task_id"]).approval_id
        url = f"/v1/approvals/{approval_id}:approve"
        fresh = alice.get(f"/v1/approvals/{approval_id}").headers["etag"]
        false = ['"' + "0" * 32 + '"', '"not-a-version"', '""', f"W/{fresh}", '"a", "b"']
        answers = {tag: alice.post(url, headers={"If-Match": tag}) for tag in false}
        malformed = {tag: alice.post(url, headers={"If-Match": tag})
                     for tag in ["abc", fresh[:-1], f"{fresh} junk", ",", ""]}  # fmt: skip
        assert runtime.approval(approval_id).status == "pending"  # nothing decided
        listed = alice.post(url, headers={"If-Match": f'"other",, {fresh},'})  # empties ignored
    for tag, r in answers.items():
        assert r.status_code == 412, (tag, r.text)
    for tag, r in malformed.items():
        assert r.status_code == 400, (tag, r.text)
    assert listed.status_code == 200, listed.text  # one of the listed tags matches


def _escalate(runtime: Runtime, tx: Any, escalation_task_id: str) -> None:
    """Fire the approval's escalation as its timer's completion would."""
    from agentq.lifecycle import approval_timers

    approval_timers.fired(runtime, tx.tx, runtime._task_in(tx.tx, escalation_task_id).model_dump())


def test_approving_needs_the_approve_scope(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as agent:
        task = agent.post("/v1/tools/execute_refund/actions", json=BIG).json()
        approval_id = runtime.task(task["task_id"]).approval_id
        etag = agent.get(f"/v1/approvals/{approval_id}").headers["etag"]
        _problem(agent.post(f"/v1/approvals/{approval_id}:approve",
                            headers={"If-Match": etag}), 403)  # fmt: skip
    assert runtime.approval(approval_id).status == "pending"


# -- OpenAPI ---------------------------------------------------------------------------


def test_openapi_is_generated_from_the_tool_models(server: LiveServer) -> None:
    with server.client("reader-token") as http:
        doc = http.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    assert "/v1/tools/execute_refund/actions" in paths
    assert "/v1/tools/agentq_webhook/actions" not in paths  # internal
    assert "/v1/tools/request_approval/actions" not in paths  # named by the policy: internal
    body = paths["/v1/tools/execute_refund/actions"]["post"]["requestBody"]
    ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    args_ref = doc["components"]["schemas"][ref]["properties"]["args"]["$ref"].rsplit("/", 1)[1]
    args = doc["components"]["schemas"][args_ref]
    assert args["properties"]["amount"]["exclusiveMinimum"] == 0
    assert args["additionalProperties"] is False  # unknown argument names are refused (422)
    shipping = paths["/v1/tools/request_shipping/actions"]["post"]["parameters"][0]
    assert shipping["name"] == "Idempotency-Key" and shipping["required"] is True


# -- the mount point other surfaces (the console) use ---------------------------------


def test_a_mounted_app_sees_the_principal_the_scopes_and_the_runtime(runtime: Runtime) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    from agentq.server import Principal, Scope, TokenAuth, create_app, require, server_state
    from agentq.server.problems import PROBLEM_HANDLERS

    async def page(request: Request) -> JSONResponse:
        who = require(request, Scope.APPROVE)
        tasks = len(server_state(request).runtime.tasks())
        return JSONResponse({"user": who.name, "tasks": tasks})

    console = Starlette(routes=[Route("/", page)], exception_handlers=PROBLEM_HANDLERS)
    auth = TokenAuth.from_tokens({"a": Principal("alice", frozenset({Scope.APPROVE})),
                                  "b": Principal("bot", frozenset({Scope.READ}))})  # fmt: skip
    live = LiveServer(create_app(runtime, auth=auth, mounts=[Mount("/console", console)])).start()
    try:
        with live.client("a") as alice, live.client("b") as bot, live.client(None) as anon:
            assert alice.get("/console/").json() == {"user": "alice", "tasks": 0}
            _problem(bot.get("/console/"), 403)
            _problem(anon.get("/console/"), 401)
    finally:
        live.stop()


def test_a_misspelled_argument_is_422_pointing_at_it(server: LiveServer, runtime: Runtime) -> None:
    """Issue 28: ``curency`` was dropped and the refund queued in USD."""
    typo = {"args": {"order_id": "X-1", "amount": 50, "curency": "EUR"}}
    with server.client() as http:
        r = http.post("/v1/tools/execute_refund/actions", json=typo)
    body = _problem(r, 422)
    (error,) = body["errors"]
    assert error["pointer"] == "/args/curency"
    assert "did you mean 'currency'" in error["detail"] and "order_id, amount" in error["detail"]
    assert runtime.tasks() == []


def test_an_unknown_tool_is_404_with_a_did_you_mean(server: LiveServer) -> None:
    with server.client() as http:
        r = http.post("/v1/tools/execute_refnd/actions", json=REFUND)
    body = _problem(r, 404)
    assert "did you mean 'execute_refund'" in body["detail"]
    assert "escalate" not in body["detail"]  # internal: not exposed


def test_a_misspelled_required_argument_is_422_with_a_did_you_mean(
    server: LiveServer, runtime: Runtime
) -> None:
    """Issue 39, item 2.3: ``amout`` for the required ``amount`` was only "Field
    required" (the CLI and MCP name the misspelling)."""
    typo = {"args": {"order_id": "X-1", "amout": 50}}
    with server.client() as http:
        r = http.post("/v1/tools/execute_refund/actions", json=typo)
    body = _problem(r, 422)
    by_pointer = {e["pointer"]: e["detail"] for e in body["errors"]}
    assert "did you mean 'amount'" in by_pointer["/args/amout"], body
    assert "/args/amount" in by_pointer  # still said: it is missing
    assert runtime.tasks() == []
