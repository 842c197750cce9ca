"""Issue 28, item 12 (the cursor): ``GET /v1/tasks`` pages with a keyset cursor.
Before, ``after=`` was ignored, so a client could read no task beyond the first
``limit`` (1000 at most) and never knew there were more."""

from __future__ import annotations

from typing import Any

from tests.http.conftest import LiveServer


def _refund(order: str) -> dict[str, Any]:
    return {"args": {"order_id": order, "amount": 30}}


def test_following_next_after_reads_every_task_once_in_order(server: LiveServer) -> None:
    with server.client() as http:
        made = [http.post("/v1/tools/execute_refund/actions", json=_refund(f"o{i}")).json()
                for i in range(5)]  # fmt: skip
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            params = {"limit": "2", **({"after": cursor} if cursor else {})}
            body = http.get("/v1/tasks", params=params).json()
            assert len(body["tasks"]) <= 2
            seen += [t["task_id"] for t in body["tasks"]]
            cursor = body["next_after"]
            pages += 1
            if cursor is None:
                break
            assert pages < 10, "the cursor does not move"
    assert seen == [t["task_id"] for t in made]  # each once, oldest first
    assert pages == 3


def test_a_bad_cursor_is_a_400_naming_the_parameter(server: LiveServer) -> None:
    with server.client() as http:
        for bad in ("nope", "tsk_" + "z" * 300, "tsk_\u00e9"):
            answer = http.get("/v1/tasks", params={"after": bad})
            assert answer.status_code == 400, bad
            assert answer.json()["errors"][0]["parameter"] == "after"
