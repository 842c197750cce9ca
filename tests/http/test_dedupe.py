"""``dedupe_key`` over HTTP: the same call while its task is pending is that task
(200, ``Agentq-Collapsed: true``), scoped to the principal."""

from __future__ import annotations

from agentq import Runtime
from tests.http.conftest import LiveServer

URL = "/v1/tools/execute_refund/actions"
BODY = {"args": {"order_id": "o1", "amount": 30}, "dedupe_key": "order:o1"}


def test_the_same_call_while_pending_collapses_into_its_task(
    server: LiveServer, runtime: Runtime
) -> None:
    with server.client() as http:
        first = http.post(URL, json=BODY)
        again = http.post(URL, json=BODY)
        other = http.post(URL, json={**BODY, "args": {"order_id": "o1", "amount": 31}})
    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 202)
    assert again.json()["task_id"] == first.json()["task_id"]
    assert again.headers["agentq-collapsed"] == "true"
    assert "agentq-collapsed" not in first.headers
    assert other.json()["task_id"] != first.json()["task_id"]  # another call: not dropped
    assert len(runtime.tasks()) == 2


def test_dedupe_keys_are_scoped_to_the_principal(server: LiveServer, runtime: Runtime) -> None:
    with server.client() as agent, server.client("admin-token") as ops:
        a = agent.post(URL, json=BODY)
        b = ops.post(URL, json=BODY)
    assert (a.status_code, b.status_code) == (202, 202)
    assert a.json()["task_id"] != b.json()["task_id"]


def test_an_empty_dedupe_key_is_422_naming_the_field(server: LiveServer) -> None:
    with server.client() as http:
        r = http.post(URL, json={**BODY, "dedupe_key": ""})
    assert r.status_code == 422
    assert "dedupe_key" in r.text
