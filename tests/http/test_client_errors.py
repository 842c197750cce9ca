"""Issue 27, item 13: what a client got wrong is a 4xx, never a 500 (which an
agent's HTTP client retries): a body nested 100 k deep, arguments over the
envelope limit. Against a real server on 127.0.0.1."""

from __future__ import annotations

from typing import Any

import httpx

from agentq.envelope import MAX_ENVELOPE_BYTES
from agentq.server.state import MAX_BODY_BYTES
from tests.http.conftest import LiveServer


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    return body


def test_a_body_nested_100k_deep_is_400(server: LiveServer) -> None:
    depth = 100_000
    deep = b'{"args": ' + b"[" * depth + b"]" * depth + b"}"
    assert len(deep) < MAX_BODY_BYTES  # refused for its depth, not its size
    with server.client() as http:
        r = http.post("/v1/tools/execute_refund/actions", content=deep,
                      headers={"content-type": "application/json"})  # fmt: skip
        objects = http.post("/v1/tools/execute_refund/actions",
                            content=b'{"a":' * 20_000 + b"1" + b"}" * 20_000,
                            headers={"content-type": "application/json"})  # fmt: skip
        alive = http.get("/v1/tasks")
    assert "nested" in _problem(r, 400)["detail"]
    _problem(objects, 400)
    assert alive.status_code == 200


def test_args_over_the_envelope_limit_are_413(server: LiveServer) -> None:
    items = ["x" * 1000] * 100  # ~100 KB of arguments: a valid shipment, too big to store
    body = {"args": {"order_id": "o1", "address": "1 Main St", "items": items}}
    with server.client() as http:
        r = http.post("/v1/tools/request_shipping/actions", json=body,
                      headers={"Idempotency-Key": "big"})  # fmt: skip
    problem = _problem(r, 413)
    assert str(MAX_ENVELOPE_BYTES) in problem["detail"]
