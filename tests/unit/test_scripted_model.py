"""agentq.testing.ScriptedModel: a scripted OpenAI-compatible model, over real HTTP on loopback."""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types import Model
from openai.types.chat import ChatCompletion

import agentq.scripted_model
import agentq.testing
from agentq import FakeClock
from agentq.testing import ModelRequest, RecordedRequest, Reply, ScriptedModel

REFUND = ("execute_refund", {"order_id": "o1", "amount": 40.0})
USER = {"role": "user", "content": "Refund order o1, 40 euros."}


def _ask(
    model: ScriptedModel,
    messages: list[dict[str, Any]],
    *,
    headers: dict[str, str] | None = None,
    client: httpx.Client | None = None,
    **body: Any,
) -> httpx.Response:
    url, payload = f"{model.base_url}/chat/completions", {"model": "gpt-test", "messages": messages}
    if client is None:
        return httpx.post(url, json=payload | body, headers=headers, timeout=10)
    return client.post(url, json=payload | body, headers=headers)


def _answered(messages: list[dict[str, Any]], response: httpx.Response) -> list[dict[str, Any]]:
    """The conversation after ``response``'s message, each of its tool calls answered."""
    message = response.json()["choices"][0]["message"]
    results = [
        {"role": "tool", "tool_call_id": call["id"], "content": f"result of {call['id']}"}
        for call in message.get("tool_calls", [])
    ]
    return [*messages, message, *results]


def _assert_error_shape(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    return dict(error)


def test_replies_are_openai_chat_completions() -> None:
    script = [
        Reply.tool_calls(REFUND, ("notify", {"to": "c1"}), content="Refunding."),
        Reply.text("All done."),
    ]
    with ScriptedModel(script) as model:
        tools = [{"type": "function", "function": {"name": "execute_refund", "parameters": {}}}]
        first = _ask(model, [USER], tools=tools)
        assert first.status_code == 200
        ChatCompletion.model_validate(first.json())
        body = first.json()
        assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
        assert isinstance(body["created"], int) and body["model"] == "gpt-test"
        (choice,) = body["choices"]
        assert choice["index"] == 0 and choice["finish_reason"] == "tool_calls"
        message = choice["message"]
        assert message["role"] == "assistant" and message["content"] == "Refunding."
        calls = message["tool_calls"]
        assert [c["function"]["name"] for c in calls] == ["execute_refund", "notify"]
        assert json.loads(calls[0]["function"]["arguments"]) == REFUND[1]
        assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
        assert calls[0]["id"] != calls[1]["id"]
        usage = body["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0

        second = _ask(model, _answered([USER], first))
        ChatCompletion.model_validate(second.json())
        (choice,) = second.json()["choices"]
        assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
        assert choice["message"]["content"] == "All done."


def test_the_openai_client_reads_it() -> None:
    with ScriptedModel([Reply.tool_calls(REFUND, usage=(7, 3))], api_key="sk-test") as model:
        client = openai.OpenAI(base_url=model.base_url, api_key="sk-test", max_retries=0)
        completion = client.chat.completions.create(model="gpt-test", messages=[USER])  # type: ignore[list-item]
        call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert json.loads(call.function.arguments) == REFUND[1]  # type: ignore[union-attr]
        assert completion.usage is not None and completion.usage.total_tokens == 10
        model.fail_next(429, retry_after=3)
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="gpt-test", messages=[USER])  # type: ignore[list-item]
        assert caught.value.response.headers["retry-after"] == "3"
        client.close()


def test_models_are_listed() -> None:
    with ScriptedModel(model="scripted-1") as model:
        listed = httpx.get(f"{model.base_url}/models").json()
        assert listed["object"] == "list"
        assert [Model.model_validate(m).id for m in listed["data"]] == ["scripted-1"]
        one = httpx.get(f"{model.base_url}/models/scripted-1").json()
        assert Model.model_validate(one).id == "scripted-1"


def test_the_same_turn_asked_twice_gets_fresh_call_ids() -> None:
    with ScriptedModel([Reply.tool_calls(REFUND)]) as model:
        first, again = _ask(model, [USER]).json(), _ask(model, [USER]).json()
        ids = [b["choices"][0]["message"]["tool_calls"][0]["id"] for b in (first, again)]
        assert ids[0] != ids[1] and first["id"] != again["id"]
        assert [r.call_ids for r in model.requests()] == [(ids[0],), (ids[1],)]
        assert model.requests_per_turn() == {(None, 1): 2}


def test_the_turn_is_one_plus_the_assistant_messages_whatever_the_server() -> None:
    def script(request: ModelRequest) -> Reply:
        return Reply.text(f"turn {request.turn}")

    conversation = [{"role": "system", "content": "Be brief."}, USER]
    with ScriptedModel(script) as model:
        for turn in (1, 2, 3):
            answer = _ask(model, conversation)
            assert answer.json()["choices"][0]["message"]["content"] == f"turn {turn}"
            conversation = [*_answered(conversation, answer), {"role": "user", "content": "Go on."}]
    # Restarted at the same address, with nothing carried over: the same turn again.
    with ScriptedModel(script, port=model.port) as restarted:
        assert restarted.base_url == model.base_url
        assert _ask(restarted, conversation).json()["choices"][0]["message"]["content"] == "turn 4"


def test_a_sequence_script_answers_by_turn_then_done() -> None:
    with ScriptedModel([Reply.tool_calls(REFUND), Reply.text("second")]) as model:
        conversation = [USER]
        contents = []
        for _ in range(3):
            answer = _ask(model, conversation)
            contents.append(answer.json()["choices"][0]["message"]["content"])
            conversation = _answered(conversation, answer)
        assert contents == [None, "second", "done"]
    with ScriptedModel() as model:
        assert _ask(model, [USER]).json()["choices"][0]["message"]["content"] == "done"


def test_a_callable_script_reads_the_tool_results() -> None:
    seen: list[tuple[list[tuple[str, str]], str | None, list[str]]] = []

    def script(request: ModelRequest) -> Reply:
        seen.append((request.last_tool_results(), request.last_user_text(), request.tool_names()))
        if request.turn == 1:
            return Reply.tool_calls(("lookup", {"id": "o1"}), ("lookup", {"id": "o2"}))
        return Reply.text(" + ".join(content for _, content in request.last_tool_results()))

    tools = [{"type": "function", "function": {"name": "lookup"}}]
    with ScriptedModel(script) as model:
        first = _ask(model, [USER], tools=tools)
        ids = [c["id"] for c in first.json()["choices"][0]["message"]["tool_calls"]]
        second = _ask(model, _answered([USER], first), tools=tools)
        expected = [(i, f"result of {i}") for i in ids]
        assert second.json()["choices"][0]["message"]["content"] == " + ".join(
            c for _, c in expected
        )
        assert seen == [([], USER["content"], ["lookup"]), (expected, USER["content"], ["lookup"])]


def test_fail_next_429_with_retry_after_then_the_script() -> None:
    with ScriptedModel([Reply.text("ok")]) as model:
        model.fail_next(429, retry_after=2, count=2)
        for _ in range(2):
            refused = _ask(model, [USER])
            assert refused.headers["Retry-After"] == "2"
            assert _assert_error_shape(refused, 429)["code"] == "rate_limit_exceeded"
        assert _ask(model, [USER]).json()["choices"][0]["message"]["content"] == "ok"
        assert [r.status for r in model.requests()] == [429, 429, 200]
        assert model.attempts_per_turn() == {(None, 1): 3}
        assert model.requests_per_turn() == {(None, 1): 1}


def test_faults_of_one_turn_and_server_errors() -> None:
    with ScriptedModel([Reply.tool_calls(REFUND), Reply.text("ok")]) as model:
        model.fail_next(500, turn=2)
        model.fail_next(503, turn=2)
        first = _ask(model, [USER])
        assert first.status_code == 200  # turn 1: the faults wait for turn 2
        conversation = _answered([USER], first)
        assert _assert_error_shape(_ask(model, conversation), 500)["type"] == "server_error"
        assert _assert_error_shape(_ask(model, conversation), 503)["type"] == "server_error"
        assert _ask(model, conversation).status_code == 200
        assert "Retry-After" not in _ask(model, conversation).headers


def test_scripted_errors_and_a_broken_script() -> None:
    def script(request: ModelRequest) -> Reply:
        if request.turn == 1:
            return Reply.error(429, retry_after=0.5, message="slow down")
        raise RuntimeError("bug in the test's script")

    with ScriptedModel(script) as model:
        limited = _ask(model, [USER])
        assert _assert_error_shape(limited, 429)["message"] == "slow down"
        assert limited.headers["Retry-After"] == "0.5"
        conversation = [USER, {"role": "assistant", "content": "?"}, USER]
        broken = _assert_error_shape(_ask(model, conversation), 500)
        assert "RuntimeError: bug in the test's script" in broken["message"]


def test_a_stall_holds_back_the_next_answer_on_the_models_clock() -> None:
    clock = FakeClock()
    with ScriptedModel([Reply.text("slow").slow(5)], clock=clock) as model:
        model.stall_next(10)
        answers: list[httpx.Response] = []
        asking = threading.Thread(target=lambda: answers.append(_ask(model, [USER])))
        asking.start()
        clock.wait_for_sleepers(1)
        clock.advance(14)
        assert answers == []  # held back 10 + 5 seconds
        clock.advance(1)
        asking.join(10)
        assert answers[0].json()["choices"][0]["message"]["content"] == "slow"


def test_a_delay_is_real_time_by_default() -> None:
    with ScriptedModel([Reply.text("x", delay=0.2)]) as model:
        started = time.monotonic()
        assert _ask(model, [USER]).status_code == 200
        assert time.monotonic() - started >= 0.2


def test_hooks_run_after_the_answer_is_computed_and_before_it_is_sent() -> None:
    order: list[str] = []
    in_hook, release = threading.Event(), threading.Event()
    records: list[RecordedRequest] = []

    def first(request: ModelRequest, record: RecordedRequest) -> None:
        order.append(f"first turn {request.turn}")
        records.append(record)
        in_hook.set()
        release.wait(10)

    with ScriptedModel([Reply.tool_calls(REFUND)], on_answered=first) as model:
        model.hook(lambda request, record: order.append(f"second {record.status}"))
        answers: list[httpx.Response] = []
        asking = threading.Thread(target=lambda: answers.append(_ask(model, [USER])))
        asking.start()
        assert in_hook.wait(10)
        assert model.requests() == records and answers == []  # recorded, not yet sent
        release.set()
        asking.join(10)
        call_id = answers[0].json()["choices"][0]["message"]["tool_calls"][0]["id"]
        assert order == ["first turn 1", "second 200"] and records[0].call_ids == (call_id,)


def test_counting_per_run_and_turn() -> None:
    def headers(run: str, turn: int) -> dict[str, str]:
        return {"X-AgentQ-Run": run, "X-AgentQ-Turn": f"{turn}", "Idempotency-Key": f"t{run}{turn}"}

    with ScriptedModel([Reply.tool_calls(REFUND)]) as model:
        model.fail_next(429, retry_after=1)
        for run, turn in [("r1", 1), ("r1", 1), ("r2", 1), ("r1", 2)]:
            _ask(model, [USER], headers=headers(run, turn))
        _ask(model, [USER, {"role": "assistant", "content": "hm"}, USER])  # no headers: turn 2
        assert model.attempts_per_turn() == {("r1", 1): 2, ("r2", 1): 1, ("r1", 2): 1, (None, 2): 1}
        assert model.requests_per_turn() == {("r1", 1): 1, ("r2", 1): 1, ("r1", 2): 1, (None, 2): 1}
        first = model.requests()[0]
        assert (first.run_id, first.run_turn, first.turn, first.status) == ("r1", 1, 1, 429)
        assert first.idempotency_key == "tr11" and first.completion_id is None
        bad_turn = _ask(model, [USER], headers={"X-AgentQ-Turn": "one"})
        assert "X-AgentQ-Turn" in _assert_error_shape(bad_turn, 400)["message"]


def test_an_api_key_is_required_when_set_and_never_echoed() -> None:
    seen: list[ModelRequest] = []

    def script(request: ModelRequest) -> Reply:
        seen.append(request)
        return Reply.text("ok")

    with ScriptedModel(script, api_key="sk-secret-123") as model:
        for auth in ({}, {"Authorization": "Bearer sk-wrong-456"}):
            refused = _ask(model, [USER], headers=auth)
            assert _assert_error_shape(refused, 401)["code"] == "invalid_api_key"
            assert "sk-" not in refused.text
        listing = httpx.get(f"{model.base_url}/models")
        _assert_error_shape(listing, 401)
        assert _ask(model, [USER], headers={"Authorization": "Bearer sk-secret-123"}).is_success
        assert "sk-secret-123" not in repr(seen[0]) and "sk-secret-123" not in repr(model.__dict__)
        assert len(model.requests()) == 1


def test_refusals_in_openais_error_shape() -> None:
    def message(response: httpx.Response, status: int) -> str:
        return str(_assert_error_shape(response, status)["message"])

    tool_call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    orphan_result: list[dict[str, Any]] = [USER, {"role": "tool", "tool_call_id": "call_x"}]
    unanswered_call: list[dict[str, Any]] = [
        USER,
        {"role": "assistant", "tool_calls": [tool_call]},
        USER,
    ]
    invalid_bodies: list[Any] = [
        [],
        {"messages": [USER]},
        {"model": "m", "messages": []},
        {"model": "m", "messages": [{"role": "robot"}]},
        {"model": "m", "messages": [USER], "stream": True},
    ]
    with ScriptedModel() as model, httpx.Client(timeout=10) as client:
        url = f"{model.base_url}/chat/completions"
        wrong_path = client.post(f"{model.base_url}/completions", json={})
        assert message(wrong_path, 404) == "Invalid URL (POST /v1/completions)"
        assert message(client.get(url), 404) == "Invalid URL (GET /v1/chat/completions)"
        assert "JSON" in message(client.post(url, content=b"{not json"), 400)
        for body in invalid_bodies:
            message(client.post(url, json=body), 400)
        assert "role 'tool'" in message(_ask(model, orphan_result, client=client), 400)
        assert "call_1" in message(_ask(model, unanswered_call, client=client), 400)
        huge = b'"' + b"x" * agentq.scripted_model.MAX_BODY_BYTES + b'"'
        message(client.post(url, content=huge), 413)
        assert client.get(f"{model.base_url}/models").status_code == 200  # still serving
        assert model.requests() == []  # nothing refused reached the script


def test_it_stops_its_connections_and_its_held_back_answers() -> None:
    arrived = threading.Event()

    def script(request: ModelRequest) -> Reply:
        arrived.set()
        return Reply.text("never sent", delay=60)

    model, kept_alive = ScriptedModel(script), httpx.Client(timeout=10)
    with model:
        assert kept_alive.get(f"{model.base_url}/models").status_code == 200
        errors: list[Exception] = []

        def ask() -> None:
            try:
                _ask(model, [USER])
            except httpx.TransportError as exc:
                errors.append(exc)

        asking = threading.Thread(target=ask)
        asking.start()
        assert arrived.wait(10)
        started = time.monotonic()
        model.stop()
        assert time.monotonic() - started < 5  # not the 60 s the answer is held back
    asking.join(10)
    assert len(errors) == 1
    assert [r.unsent for r in model.requests()] == [True]  # recorded, never answered
    assert model.requests_per_turn() == {} and model.attempts_per_turn() == {(None, 1): 1}
    with pytest.raises(httpx.TransportError):
        kept_alive.get(f"{model.base_url}/models")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{model.base_url}/models")
    kept_alive.close()
    model.stop()  # a third time: nothing to do


def test_a_client_gone_mid_answer_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    arrived, hooked = threading.Event(), threading.Event()

    def script(request: ModelRequest) -> Reply:
        arrived.set()
        return Reply.text("x" * 100_000, delay=0.2)

    with ScriptedModel(script, on_answered=lambda request, record: hooked.set()) as model:
        host, port = model.base_url.split("//")[1].split("/")[0].split(":")
        body = json.dumps({"model": "m", "messages": [USER]}).encode()
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert arrived.wait(10)
            # Closing with linger 0 resets the connection: the server's write fails.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        assert hooked.wait(10)
    assert capfd.readouterr().err == ""
    assert [r.status for r in model.requests()] == [200]


def test_replies_and_scripts_are_checked() -> None:
    with pytest.raises(ValueError):
        Reply.tool_calls()
    for status in (200, 302):
        with pytest.raises(ValueError):
            Reply.error(status)
    with pytest.raises(ValueError):
        Reply.text("x", delay=-1)
    with pytest.raises(TypeError):
        ScriptedModel("not a script")  # type: ignore[arg-type]
    assert Reply.tool_calls(("f", "{not json")).calls == (("f", "{not json"),)
    assert agentq.testing.ScriptedModel is agentq.scripted_model.ScriptedModel
    assert {"ScriptedModel", "Reply", "ModelRequest", "RecordedRequest"} <= set(
        agentq.testing.__all__
    )


def test_the_docs_example_runs() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "testing-agents.md"
    (code,) = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    namespace: dict[str, Any] = {}
    exec(compile(code, str(doc), "exec"), namespace)
    namespace["test_the_agent_retries_then_refunds"]()
