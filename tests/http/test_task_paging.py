"""Issue 28, item 12: ``GET /v1/tasks`` pages with a keyset cursor, newest first
unless ``order=oldest``. Before, ``after=`` was ignored, so a client could read
no task beyond the first ``limit`` (1000 at most) and never knew there were
more; and the oldest tasks came first, so the newest needed every page."""

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
            params = {"limit": "2", "order": "oldest", **({"after": cursor} if cursor else {})}
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


def test_the_newest_come_first_unless_order_says_oldest(server: LiveServer) -> None:
    with server.client() as http:
        made = [http.post("/v1/tools/execute_refund/actions", json=_refund(f"n{i}")).json()
                for i in range(5)]  # fmt: skip
        ids = [t["task_id"] for t in made]
        newest = http.get("/v1/tasks", params={"limit": "3"}).json()
        assert [t["task_id"] for t in newest["tasks"]] == ids[::-1][:3]
        rest = http.get("/v1/tasks", params={"limit": "3", "after": newest["next_after"]}).json()
        assert [t["task_id"] for t in rest["tasks"]] == ids[::-1][3:]
        assert rest["next_after"] is None  # the last page says so (no empty page after it)
        oldest = http.get("/v1/tasks", params={"limit": "3", "order": "oldest"}).json()
        assert [t["task_id"] for t in oldest["tasks"]] == ids[:3]
        bad = http.get("/v1/tasks", params={"order": "sideways"})
        assert bad.status_code == 400
        assert bad.json()["errors"][0]["parameter"] == "order"
