"""Durable agent runs on the HTTP API (issue 37), on a real uvicorn server on
127.0.0.1: start (with Idempotency-Key), read and long-poll, list, follow as
server-sent events, cancel, continue with a message; who may see and do what.

The model is an OpenAI-compatible endpoint answered in process by an
``httpx.MockTransport`` (``Runtime(..., http_transport=...)``, :mod:`tests.run_world`);
workers are drained on a :class:`~agentq.FakeClock`, so nothing here waits on
real time but the long-polls and streams themselves.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentq import Runtime
from agentq.ledger import TaskStatus
from tests.http.conftest import LiveServer
from tests.run_world import CHARGES, MockModel, run_runtime

#: token -> (principal, scopes)
TOKENS = {
    "agent-token": ("refund-agent", {"enqueue", "read"}),
    "rival-token": ("rival-agent", {"enqueue", "read"}),
    "reader-token": ("auditor", {"read"}),
    "alice-token": ("alice", {"approve", "read"}),
    "ops-token": ("ops-person", {"operate"}),
    "admin-token": ("root", {"admin"}),
}
AGENT, RIVAL, READER, ALICE, OPS, ADMIN = TOKENS


@pytest.fixture
def model() -> MockModel:
    return MockModel()


@pytest.fixture
def runtime(db_url: str, model: MockModel) -> Iterator[Runtime]:
    rt = run_runtime(db_url, model)
    yield rt
    rt.close()


@pytest.fixture
def server(runtime: Runtime) -> Iterator[LiveServer]:
    from agentq.server import Principal, Scope, TokenAuth, create_app

    auth = TokenAuth.from_tokens({
        token: Principal(name, frozenset(Scope(s) for s in scopes))
        for token, (name, scopes) in TOKENS.items()
    })  # fmt: skip
    live = LiveServer(create_app(runtime, auth=auth, max_wait=30)).start()
    yield live
    live.stop()


def _drain(rt: Runtime, queues: list[str] | None = None) -> None:
    rt.worker(queues=queues, receive_timeout=0.05).drain()


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["title"]
    return body


def _start(http: httpx.Client, text: str, agent: str = "refunds", **kw: Any) -> dict[str, Any]:
    r = http.post("/v1/runs", json={"agent": agent, "input": text}, **kw)
    assert r.status_code in (200, 201), r.text
    run: dict[str, Any] = r.json()
    return run


# -- start, read -------------------------------------------------------------------


def test_start_is_201_with_the_run_and_a_worker_carries_it_to_its_answer(
    server: LiveServer, runtime: Runtime, model: MockModel
) -> None:
    with server.client(AGENT) as http:
        r = http.post("/v1/runs", json={"agent": "refunds", "input": "refund 40"})
        assert r.status_code == 201, r.text
        run = r.json()
        assert r.headers["location"] == f"/v1/runs/{run['run_id']}"
        assert run["status"] == "queued" and run["turn"] == 1
        assert run["owner"] == "refund-agent"  # the principal, never a name in the body
        assert run["messages"] == [{"role": "user", "content": "refund 40"}]
        _drain(runtime)
        done = http.get(r.headers["location"]).json()
    assert done["status"] == "succeeded" and done["output"] == 'done: {"refunded": 40.0}'
    assert [t["number"] for t in done["turns"]] == [1, 2]
    calls = done["turns"][0]["calls"]
    assert [(c["tool"], c["local"]) for c in calls] == [("note_order", True),
                                                        ("refund_order", False)]  # fmt: skip
    assert runtime.task(calls[1]["task_id"]).created_by == "refund-agent"
    assert done["usage"]["total_tokens"] == 30
    assert model.asked(run["run_id"]) == 2


def test_the_same_key_and_body_is_the_same_run_and_the_model_is_asked_once(
    server: LiveServer, runtime: Runtime, model: MockModel
) -> None:
    body = {"agent": "echo", "input": "hello"}
    with server.client(AGENT) as http, server.client(RIVAL) as rival:
        first = http.post("/v1/runs", json=body, headers={"Idempotency-Key": "conv-1"})
        again = http.post("/v1/runs", json=body, headers={"Idempotency-Key": '"conv-1"'})
        theirs = rival.post("/v1/runs", json=body, headers={"Idempotency-Key": "conv-1"})
        _drain(runtime)
        later = http.post("/v1/runs", json=body, headers={"Idempotency-Key": "conv-1"})
    assert (first.status_code, again.status_code, theirs.status_code) == (201, 200, 201)
    run_id = first.json()["run_id"]
    assert again.json()["run_id"] == run_id and again.headers["location"] == f"/v1/runs/{run_id}"
    assert theirs.json()["run_id"] != run_id  # keys are per principal
    assert later.status_code == 200 and later.json()["run_id"] == run_id
    assert later.json()["status"] == "succeeded" and later.json()["output"] == "echo: hello"
    assert first.json()["idempotency_key"] == "conv-1"
    assert model.asked(run_id) == 1  # started three times, asked once


def test_the_same_key_with_another_input_is_422(server: LiveServer, runtime: Runtime) -> None:
    with server.client(AGENT) as http:
        first = _start(http, "hello", "echo", headers={"Idempotency-Key": "k"})
        other = http.post("/v1/runs", json={"agent": "echo", "input": "bye"},
                          headers={"Idempotency-Key": "k"})  # fmt: skip
    body = _problem(other, 422)
    assert body["errors"] == [{"header": "Idempotency-Key", "detail": "reused with another body"}]
    assert first["run_id"] in body["detail"] and "'k'" in body["detail"]
    assert [r.run_id for r in runtime.runs()] == [first["run_id"]]


def test_an_unknown_agent_is_404_with_a_did_you_mean(server: LiveServer, runtime: Runtime) -> None:
    with server.client(AGENT) as http:
        r = http.post("/v1/runs", json={"agent": "refund", "input": "hi"})
    body = _problem(r, 404)
    assert body["title"] == "Unknown agent"
    assert "did you mean 'refunds'" in body["detail"] and "echo, refunds" in body["detail"]
    assert body["errors"] == [{"pointer": "/agent", "detail": "no such agent"}]
    assert runtime.runs() == []


# -- who sees and does what ---------------------------------------------------------


def test_a_principal_reads_and_lists_only_its_own_runs(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(AGENT) as agent, server.client(RIVAL) as rival, \
            server.client(OPS) as ops, server.client(READER) as reader:
        mine = _start(agent, "hello", "echo")
        theirs = _start(rival, "hi", "echo")
        python = runtime.start_run("echo", "from python")  # owned by "local"
        listed = {r["run_id"] for r in agent.get("/v1/runs").json()["runs"]}
        assert listed == {mine["run_id"]}
        assert reader.get("/v1/runs").json() == {"runs": [], "next_after": None}
        everyone = {r["run_id"] for r in ops.get("/v1/runs").json()["runs"]}
        assert everyone == {mine["run_id"], theirs["run_id"], python.run_id}
        assert ops.get(f"/v1/runs/{mine['run_id']}").status_code == 200
        # Another's run answers exactly as one that does not exist.
        hidden = theirs["run_id"]
        missing = "run_" + "0" * 32
        for path in ("", "/events", "?until=done"):
            seen = _problem(agent.get(f"/v1/runs/{hidden}{path}"), 404)
            none = _problem(agent.get(f"/v1/runs/{missing}{path}"), 404)
            assert seen == {**none, "detail": none["detail"].replace(missing, hidden)}
        _problem(agent.post(f"/v1/runs/{hidden}:cancel"), 404)
        _problem(agent.post(f"/v1/runs/{hidden}/messages", json={"text": "x"}), 404)
        _problem(agent.get(f"/v1/runs/{python.run_id}"), 404)
    assert runtime.run(hidden).status == "queued"  # nothing done to it


def test_read_only_scopes_cannot_start_cancel_or_write(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(AGENT) as agent, server.client(READER) as reader, \
            server.client(ALICE) as alice, server.client(OPS) as ops, server.client(None) as anon:
        run = _start(agent, "hello", "echo")
        url = f"/v1/runs/{run['run_id']}"
        for http in (reader, alice, ops):
            _problem(http.post("/v1/runs", json={"agent": "echo", "input": "x"}), 403)
            _problem(http.post(f"{url}/messages", json={"text": "x"}), 403)
        _problem(reader.post(f"{url}:cancel"), 403)
        _problem(alice.post(f"{url}:cancel"), 403)
        for method, path in (("GET", "/v1/runs"), ("POST", "/v1/runs"), ("GET", url),
                             ("POST", f"{url}:cancel")):  # fmt: skip
            r = anon.request(method, path, json={"agent": "echo", "input": "x"})
            assert _problem(r, 401) and r.headers["www-authenticate"].startswith("Bearer")
        assert len(runtime.runs()) == 1 and runtime.run(run["run_id"]).status == "queued"
        # operate cancels everyone's (not its own: it starts none).
        cancelled = ops.post(f"{url}:cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert "ops-person" in cancelled.json()["error"]


# -- cancel, continue -------------------------------------------------------------------


def test_cancel_cancels_the_queued_tool_calls(
    server: LiveServer, runtime: Runtime, model: MockModel
) -> None:
    CHARGES.clear()
    with server.client(AGENT) as http:
        run = _start(http, "refund 40")
        _drain(runtime, ["agent_turns"])  # the turn, not its calls
        url = f"/v1/runs/{run['run_id']}"
        waiting = http.get(url).json()
        assert waiting["status"] == "awaiting_tools" and len(waiting["pending"]) == 1
        r = http.post(f"{url}:cancel", json={"reason": "the customer changed their mind"})
        again = http.post(f"{url}:cancel")
    assert r.status_code == 200, r.text
    cancelled = r.json()
    assert cancelled["status"] == "cancelled" and cancelled["pending"] == []
    assert cancelled["error"] == "the customer changed their mind (by refund-agent)"
    task = runtime.task(waiting["pending"][0])
    assert task.status is TaskStatus.CANCELLED and "changed their mind" in str(task.error)
    assert _problem(again, 409)["title"] == "Not allowed in this state"
    # The audit names the authenticated caller, as a task's cancel does.
    assert [e.actor for e in runtime.audit_log(target=run["run_id"])] == ["refund-agent"]
    _drain(runtime)
    assert CHARGES == [] and model.asked(run["run_id"]) == 1


def test_cancel_before_the_first_turn_cancels_the_turn(
    server: LiveServer, runtime: Runtime, model: MockModel
) -> None:
    with server.client(AGENT) as http:
        run = _start(http, "hello", "echo")
        r = http.post(f"/v1/runs/{run['run_id']}:cancel")  # no body: a default reason
    assert r.status_code == 200 and r.json()["error"] == "cancelled over HTTP (by refund-agent)"
    assert runtime.task(run["turn_task_id"]).status is TaskStatus.CANCELLED
    _drain(runtime)
    assert model.asked(run["run_id"]) == 0


def test_a_message_continues_a_run_that_answered(
    server: LiveServer, runtime: Runtime, model: MockModel
) -> None:
    with server.client(AGENT) as http, server.client(ADMIN) as admin:
        run = _start(http, "hello", "echo")
        url = f"/v1/runs/{run['run_id']}"
        early = http.post(f"{url}/messages", json={"text": "too soon"})  # still queued
        _drain(runtime)
        assert http.get(url).json()["output"] == "echo: hello"
        not_owner = admin.post(f"{url}/messages", json={"text": "from the admin"})
        r = http.post(f"{url}/messages", json={"text": "again"})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "queued" and r.json()["turn"] == 2
        assert r.json()["output"] is None
        _drain(runtime)
        done = http.get(url).json()
    assert _problem(early, 409)["detail"].startswith(f"run {run['run_id']!r} is queued")
    assert _problem(not_owner, 403)["title"] == "Not the run's owner"
    assert done["status"] == "succeeded" and done["output"] == "echo: again"
    assert [m["content"] for m in done["messages"]] == [
        "hello", "echo: hello", "again", "echo: again"]
    assert model.asked(run["run_id"]) == 2


def test_a_retried_message_with_its_idempotency_key_is_appended_once(
    server: LiveServer, runtime: Runtime, model: MockModel
) -> None:
    with server.client(AGENT) as http:
        run = _start(http, "hello", "echo")
        url = f"/v1/runs/{run['run_id']}"
        _drain(runtime)
        keyed = {"Idempotency-Key": "msg-1"}
        first = http.post(f"{url}/messages", json={"text": "again"}, headers=keyed)
        _drain(runtime)
        retry = http.post(f"{url}/messages", json={"text": "again"}, headers=keyed)
        other = http.post(f"{url}/messages", json={"text": "other"}, headers=keyed)
        _drain(runtime)
        done = http.get(url).json()
    assert first.status_code == 200 and retry.status_code == 200, retry.text
    assert retry.json()["status"] == "succeeded" and retry.json()["turn"] == 2
    assert _problem(other, 422)["title"] == "Idempotency-Key reused with another request"
    assert [m["content"] for m in done["messages"]] == [
        "hello", "echo: hello", "again", "echo: again"]
    assert model.asked(run["run_id"]) == 2


# -- long-poll and events ---------------------------------------------------------------


def test_prefer_wait_answers_when_the_run_is_idle(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(AGENT) as http:
        run = _start(http, "refund 40")
        url = f"/v1/runs/{run['run_id']}"
        plain = http.get(url)
        assert plain.json()["status"] == "queued" and "preference-applied" not in plain.headers
        timer = threading.Timer(0.3, lambda: _drain(runtime))
        timer.start()
        waited = http.get(url, headers={"Prefer": "wait=20"})
        timer.join()
    assert waited.status_code == 200 and waited.headers["preference-applied"] == "wait=20"
    assert waited.json()["status"] == "succeeded"


def test_a_run_awaiting_approval_is_idle_and_until_done_waits_past_it(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(AGENT) as http:
        run = _start(http, "refund 500")  # above 100: a human approves the refund
        url = f"/v1/runs/{run['run_id']}"
        timer = threading.Timer(0.2, lambda: _drain(runtime))
        timer.start()
        idle = http.get(url, headers={"Prefer": "wait=20"})
        timer.join()
        assert idle.json()["status"] == "awaiting_approval"
        began = time.monotonic()
        assert http.get(url, headers={"Prefer": "wait=20"}).json()["status"] == (
            "awaiting_approval")  # idle already: answered at once
        assert time.monotonic() - began < 5

        def approve_and_run() -> None:
            (approval,) = runtime.approvals()
            runtime.approve(approval.approval_id, by="alice")
            _drain(runtime)

        timer = threading.Timer(0.3, approve_and_run)
        timer.start()
        done = http.get(url, params={"until": "done"}, headers={"Prefer": "wait=20"})
        timer.join()
        _problem(http.get(url, params={"until": "later"}), 400)
    assert done.json()["status"] == "succeeded" and done.json()["output"].startswith("done: ")


def test_events_stream_the_run_until_it_is_idle(
    server: LiveServer, runtime: Runtime, model: MockModel
) -> None:
    gate = model.gate = threading.Event()  # the first answer waits until "running" is seen
    with server.client(AGENT) as http:
        run = _start(http, "refund 40")
        events: list[str] = []
        seen: list[dict[str, Any]] = []
        with http.stream("GET", f"/v1/runs/{run['run_id']}/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            worker = threading.Thread(target=lambda: _drain(runtime))
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    events.append(line[6:].strip())
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
                    if len(seen) == 1:
                        worker.start()
                    if seen[-1]["status"] == "running":
                        gate.set()
            worker.join(30)
        _problem(http.get("/v1/runs/run_nope/events"), 404)
    statuses = [run["status"] for run in seen]
    assert statuses[0] == "queued" and statuses[-1] == "succeeded", statuses
    assert statuses[1] == "running"  # a worker took the turn: its task's commit woke the stream
    assert set(events) == {"run"} and len(events) == len(seen)
    assert all(a != b for a, b in itertools.pairwise(seen))  # each event a change


# -- listing ------------------------------------------------------------------------------


def test_list_pages_newest_first_and_filters(server: LiveServer, runtime: Runtime) -> None:
    with server.client(AGENT) as http:
        ids = [_start(http, f"hello {i}", "echo")["run_id"] for i in range(3)]
        refund = _start(http, "refund 40")["run_id"]
        first = http.get("/v1/runs", params={"limit": 2}).json()
        second = http.get("/v1/runs", params={"limit": 2, "after": first["next_after"]}).json()
        assert [r["run_id"] for r in first["runs"] + second["runs"]] == [refund, *ids[::-1]]
        assert second["next_after"] is None
        echoes = http.get("/v1/runs", params={"agent": "echo"}).json()["runs"]
        assert [r["run_id"] for r in echoes] == ids[::-1]
        _drain(runtime, ["agent_turns"])
        waiting = http.get("/v1/runs", params={"status": "awaiting_tools"}).json()["runs"]
        done = http.get("/v1/runs", params={"status": "succeeded"}).json()["runs"]
    assert [r["run_id"] for r in waiting] == [refund]
    assert {r["run_id"] for r in done} == set(ids)


# -- refusals: one problem each -----------------------------------------------------------


@pytest.mark.parametrize(("body", "pointer"), [
    ({"input": "hi"}, "/agent"),
    ({"agent": "echo"}, "/input"),
    ({"agent": "echo", "input": ""}, "/input"),
    ({"agent": "echo", "input": " \n\t"}, "/input"),
    ({"agent": "echo", "input": 5}, "/input"),
    ({"agent": "echo", "input": "x" * 100_001}, "/input"),
    ({"agent": "no such!", "input": "hi"}, "/agent"),
    ({"agent": "echo", "input": "hi", "owner": "someone"}, "/owner"),
    ([], "/"),
])  # fmt: skip
def test_a_bad_start_body_is_one_422_naming_the_field(
    server: LiveServer, runtime: Runtime, body: Any, pointer: str
) -> None:
    with server.client(AGENT) as http:
        r = http.post("/v1/runs", json=body)
    problem = _problem(r, 422)
    assert [e["pointer"] for e in problem["errors"]] == [pointer], problem
    assert runtime.runs() == []


def test_bad_requests_are_problems_naming_what_is_wrong(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client(AGENT) as http:
        run = _start(http, "hello", "echo")
        url = f"/v1/runs/{run['run_id']}"
        not_json = http.post("/v1/runs", content=b"{", headers={"content-type": "application/json"})
        text = http.post("/v1/runs", content=b"hi", headers={"content-type": "text/plain"})
        long_key = http.post("/v1/runs", json={"agent": "echo", "input": "x"},
                             headers={"Idempotency-Key": "k" * 201})
        empty_key = http.post("/v1/runs", json={"agent": "echo", "input": "x"},
                              headers={"Idempotency-Key": '""'})
        no_text = http.post(f"{url}/messages", json={})
        blank = http.post(f"{url}/messages", json={"text": "  "})
        bad_reason = http.post(f"{url}:cancel", json={"reason": 5})
        extra = http.post(f"{url}:cancel", json={"by": "someone"})
        listing = {name: http.get("/v1/runs", params={name: value}) for name, value in
                   [("status", "bogus"), ("limit", "0"), ("limit", "1001"), ("after", "tsk_1"),
                    ("agent", "a b")]}  # fmt: skip
    _problem(not_json, 400)
    _problem(text, 415)
    assert _problem(long_key, 400)["errors"][0]["header"] == "Idempotency-Key"
    assert _problem(empty_key, 400)["errors"][0]["header"] == "Idempotency-Key"
    assert [e["pointer"] for e in _problem(no_text, 422)["errors"]] == ["/text"]
    assert [e["pointer"] for e in _problem(blank, 422)["errors"]] == ["/text"]
    assert [e["pointer"] for e in _problem(bad_reason, 422)["errors"]] == ["/reason"]
    assert [e["pointer"] for e in _problem(extra, 422)["errors"]] == ["/by"]
    for name, r in listing.items():
        assert _problem(r, 400)["errors"][0]["parameter"] == name
    assert len(runtime.runs()) == 1 and runtime.run(run["run_id"]).status == "queued"


# -- the OpenAPI document --------------------------------------------------------------


def test_the_openapi_document_has_every_run_route_with_its_schemas(server: LiveServer) -> None:
    with server.client(None) as anon:
        doc = anon.get("/openapi.json").json()
    paths = doc["paths"]
    operations = {op["operationId"]: (path, method) for path, ops in paths.items()
                  for method, op in ops.items() if path.startswith("/v1/runs")}  # fmt: skip
    assert operations == {
        "start_run": ("/v1/runs", "post"), "list_runs": ("/v1/runs", "get"),
        "get_run": ("/v1/runs/{run_id}", "get"),
        "run_events": ("/v1/runs/{run_id}/events", "get"),
        "cancel_run": ("/v1/runs/{run_id}:cancel", "post"),
        "send_run_message": ("/v1/runs/{run_id}/messages", "post"),
    }  # fmt: skip
    schemas = doc["components"]["schemas"]
    assert set(schemas["RunStart"]["required"]) == {"agent", "input"}
    assert schemas["RunStart"]["additionalProperties"] is False
    assert schemas["RunMessage"]["required"] == ["text"]
    assert "calls" in schemas["TurnInfo"]["properties"]
    assert {"run_id", "status", "turns", "output", "owner"} <= set(schemas["RunInfo"]["properties"])
    start = paths["/v1/runs"]["post"]
    assert {"200", "201", "404", "422"} <= set(start["responses"])
    assert start["parameters"][0]["name"] == "Idempotency-Key"
    ok = paths["/v1/runs/{run_id}"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/RunInfo")


def test_long_polls_and_streams_count_against_the_principal_s_open_waits(
    runtime: Runtime,
) -> None:
    from agentq.server import Principal, Scope, TokenAuth, create_app

    auth = TokenAuth.from_tokens({AGENT: Principal("refund-agent", frozenset(
        {Scope.ENQUEUE, Scope.READ}))})  # fmt: skip
    live = LiveServer(create_app(runtime, auth=auth, max_waits_per_principal=1)).start()
    try:
        with live.client(AGENT) as http:
            run = _start(http, "hello", "echo")
            url = f"/v1/runs/{run['run_id']}"
            with http.stream("GET", f"{url}/events") as stream:
                lines = stream.iter_lines()
                while not next(lines).startswith("data:"):
                    pass  # the stream is open: it holds the principal's one wait
                refused = http.get(url, headers={"Prefer": "wait=5"})
                plain = http.get(url)  # no wait: no slot needed
                _drain(runtime)  # the run answers: the stream ends, its slot is free
                for _ in lines:
                    pass
            waited = http.get(url, headers={"Prefer": "wait=5"})
    finally:
        live.stop()
    assert _problem(refused, 429)["title"] == "Too many waits"
    assert refused.headers["retry-after"] == "5"
    assert plain.status_code == 200 and waited.json()["status"] == "succeeded"


def test_a_server_without_the_tools_code_starts_runs_of_the_agents_its_workers_serve(
    runtime: Runtime, db_url: str, model: MockModel
) -> None:
    """``agentq serve`` without a tools folder: the agents are those whose turn
    tools the database's catalog records (a worker recorded them)."""
    from agentq.server import Principal, Scope, TokenAuth, create_app

    _drain(runtime)  # a worker starts: it records the catalog
    bare = Runtime(db_url, clock=runtime.clock)
    auth = TokenAuth.from_tokens({AGENT: Principal("refund-agent", frozenset(
        {Scope.ENQUEUE, Scope.READ}))})  # fmt: skip
    live = LiveServer(create_app(bare, auth=auth)).start()
    try:
        with live.client(AGENT) as http:
            started = http.post("/v1/runs", json={"agent": "echo", "input": "hi"})
            unknown = http.post("/v1/runs", json={"agent": "ech", "input": "hi"})
    finally:
        live.stop()
        bare.close()
    assert started.status_code == 201, started.text
    detail = _problem(unknown, 404)["detail"]
    assert "did you mean 'echo'" in detail and "agents here: echo, refunds" in detail
    _drain(runtime)  # the runtime with the agents carries the run
    assert runtime.run(started.json()["run_id"]).output == "echo: hi"
