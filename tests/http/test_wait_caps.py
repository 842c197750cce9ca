"""Issue 27 item 10, the cap: one principal's open ``Prefer: wait`` long-polls
and event streams are capped (``[servers] max_waits_per_principal``); one more
is 429 with ``Retry-After``. Another principal is not affected, and a slot is
free again once a wait ends. A real uvicorn server on 127.0.0.1, real tokens.

Real time only in that the parked waits are real requests left open; nothing
waits for time to pass: each wait ends by the task's own change (a cancel).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentq import Runtime
from tests.http.conftest import LiveServer, write_tokens

CAP = 2
BOUND = 30.0


@pytest.fixture
def capped(runtime: Runtime, tmp_path: Path) -> Iterator[LiveServer]:
    from agentq.server import TokenAuth, create_app

    auth = TokenAuth.from_file(write_tokens(tmp_path / "tokens.toml"))
    app = create_app(runtime, auth=auth, max_wait=60, max_waits_per_principal=CAP)
    live = LiveServer(app).start()
    yield live
    live.stop()


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _until_parked(runtime: Runtime, count: int) -> None:
    """Until ``count`` waiters have subscribed to the backend's commits."""
    notifier = runtime.backend._commits  # type: ignore[attr-defined]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + BOUND
    while len(notifier._topic_of) < count:
        assert loop.time() < deadline, "the long-polls never parked"
        await asyncio.sleep(0.005)


def test_a_principal_beyond_its_waits_gets_429_with_retry_after(
    capped: LiveServer, runtime: Runtime
) -> None:
    async def scenario() -> None:
        limits = httpx.Limits(max_connections=20)
        async with httpx.AsyncClient(base_url=capped.url, timeout=BOUND, limits=limits) as http:
            agent = _headers("agent-token")
            made = await http.post("/v1/tools/execute_refund/actions", headers=agent,
                                   json={"args": {"order_id": "cap-1", "amount": 30}})  # fmt: skip
            task = made.json()["task_id"]
            wait = {**agent, "Prefer": "wait=60"}
            parked = [asyncio.ensure_future(http.get(f"/v1/tasks/{task}", headers=wait))
                      for _ in range(CAP)]  # fmt: skip
            await _until_parked(runtime, CAP)

            refused = await http.get(f"/v1/tasks/{task}", headers=wait)
            assert refused.status_code == 429, refused.text
            assert refused.headers["Retry-After"].isdigit()
            assert "at most 2" in refused.json()["detail"]
            stream = await http.get(f"/v1/tasks/{task}/events", headers=agent)
            assert stream.status_code == 429  # an event stream takes a slot too

            # Without Prefer: wait the task is read as always; another principal may wait.
            assert (await http.get(f"/v1/tasks/{task}", headers=agent)).status_code == 200
            admin = {**_headers("admin-token"), "Prefer": "wait=60"}
            other = asyncio.ensure_future(http.get(f"/v1/tasks/{task}", headers=admin))
            await _until_parked(runtime, CAP + 1)

            await asyncio.to_thread(runtime.cancel, task, "the waits end")
            answers = await asyncio.gather(*parked, other)
            assert [a.status_code for a in answers] == [200] * (CAP + 1)
            assert all(a.json()["status"] == "cancelled" for a in answers)

            # The slots are free again.
            again = await http.get(f"/v1/tasks/{task}", headers=wait)
            assert again.status_code == 200 and again.headers["Preference-Applied"]

    asyncio.run(scenario())


def test_an_ended_event_stream_gives_its_slot_back(capped: LiveServer, runtime: Runtime) -> None:
    with httpx.Client(base_url=capped.url, headers=_headers("agent-token"), timeout=BOUND) as h:
        for i in range(CAP + 2):
            refund = {"args": {"order_id": f"s{i}", "amount": 30}}
            task: Any = h.post("/v1/tools/execute_refund/actions", json=refund).json()
            runtime.cancel(task["task_id"], "final: the stream ends after one event")
            with h.stream("GET", f"/v1/tasks/{task['task_id']}/events") as events:
                assert events.status_code == 200
                body = "".join(events.iter_text())
            assert "cancelled" in body
