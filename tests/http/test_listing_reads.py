"""Issue 27 item 12: ``GET /v1/tasks?limit=10`` reads the page it shows, not the
ledger. The filters (status, tool, what the principal may see: its own tasks,
never the runtime's timers) are part of the query, with a keyset cursor; before,
the runtime read the ledger 500 records at a time, oldest first, and filtered
in Python, so an agent's newest tasks behind everyone else's cost a read of
the whole ledger (0.51 s at 20 k tasks, linear).

The test counts the records the runtime reads (a spy on the backend) for one
request at 1,000 and at 5,000 tasks: the same few. Times are measured by
``tests/bench/listing.py``, not asserted here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq import Runtime
from tests.http.conftest import LiveServer, write_tokens
from tests.record_counter import RecordCounter

PAGE = 10


@pytest.fixture
def listing(runtime: Runtime, tmp_path: Path) -> Iterator[tuple[LiveServer, Runtime]]:
    from agentq.server import TokenAuth, create_app

    auth = TokenAuth.from_file(write_tokens(tmp_path / "tokens.toml"))
    live = LiveServer(create_app(runtime, auth=auth)).start()
    yield live, runtime
    live.stop()


def _grow(rt: Runtime, others: int, start: int) -> None:
    """``others`` tasks of another principal, then the agent's own newest ones."""
    for first in range(0, others, 1000):
        rt.transact(lambda tx, f=first: [
            tx.enqueue("execute_refund", {"order_id": f"x{start + f + i}", "amount": 5},
                       by="someone-else") for i in range(min(1000, others - f))])  # fmt: skip
    rt.transact(lambda tx: [
        tx.enqueue("execute_refund", {"order_id": f"mine{start}-{i}", "amount": 5},
                   by="refund-agent") for i in range(PAGE + 2)])  # fmt: skip


def _records_read(live: LiveServer, rt: Runtime, token: str, **params: str) -> tuple[int, Any]:
    counter = RecordCounter(rt.backend)
    rt.backend = counter  # type: ignore[assignment]
    try:
        with live.client(token) as http:
            answer = http.get("/v1/tasks", params={"limit": str(PAGE), **params})
    finally:
        rt.backend = counter._inner
    assert answer.status_code == 200, answer.text
    return counter.read, answer.json()


def test_a_page_reads_the_same_few_records_at_1k_and_at_5k_tasks(
    listing: tuple[LiveServer, Runtime],
) -> None:
    live, rt = listing
    _grow(rt, 1000, 0)
    small_agent, page = _records_read(live, rt, "agent-token")
    assert len(page["tasks"]) == PAGE
    assert all(t["created_by"] == "refund-agent" for t in page["tasks"])
    small_admin, _ = _records_read(live, rt, "admin-token")
    small_status, _ = _records_read(live, rt, "admin-token", status="queued", order="oldest")

    _grow(rt, 4000, 1000)
    large_agent, page = _records_read(live, rt, "agent-token")
    assert len(page["tasks"]) == PAGE and page["next_after"] is not None
    large_admin, _ = _records_read(live, rt, "admin-token")
    large_status, _ = _records_read(live, rt, "admin-token", status="queued", order="oldest")

    # A page and one more (is there a next page?): the ledger's size changes nothing.
    assert small_agent == large_agent == PAGE + 1
    assert small_admin == large_admin == PAGE + 1
    assert small_status == large_status == PAGE + 1
