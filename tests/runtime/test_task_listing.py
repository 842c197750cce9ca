"""``rt.tasks()`` filters by status, tool and time and reads the ledger a page at a
time (it used to load and validate every task for any listing); ``task_page``
pages through it with a cursor. A policy naming a tool that does not exist is an
error (a typo such as ``[tools.okk]`` used to leave the real tool unconfigured)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentq import FakeClock, Runtime, TaskStatus
from agentq.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


class CountingBackend:
    """Wraps a backend; records the ``limit`` of every ledger scan."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.scans: list[int | None] = []

    def list_records(self, table: str, prefix: str = "", limit: int | None = None,
                     after: str = "", **options: Any) -> Any:  # fmt: skip
        if table == "tasks":
            self.scans.append(limit)
        return self._inner.list_records(table, prefix, limit, after, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def world(tmp_path: Path) -> Any:
    clock = FakeClock()
    rt = Runtime(f"sqlite:///{tmp_path / 'l.db'}", tools=ROOT / "tools",
                 policies=ROOT / "policies", clock=clock)  # fmt: skip
    for i in range(12):
        rt.enqueue_action("execute_refund", {"order_id": f"o{i}", "amount": 5})
        clock.advance(1)
    for i in range(3):
        ship = {"order_id": f"s{i}", "address": "1 Main St", "items": ["x"]}
        rt.enqueue_action("request_shipping", ship)
    rt.cancel(rt.tasks(tool="execute_refund")[0].task_id)
    yield rt, clock
    rt.close()


def test_filters_by_status_tool_and_time(world: Any) -> None:
    rt, clock = world
    assert len(rt.tasks()) == 15
    assert len(rt.tasks(tool="request_shipping")) == 3
    assert len(rt.tasks(TaskStatus.CANCELLED)) == 1
    assert len(rt.tasks("queued", tool="execute_refund")) == 11
    since = clock.now() - timedelta(seconds=2.5)
    recent = rt.tasks(since=since)
    assert {t.tool for t in recent} == {"execute_refund", "request_shipping"}
    assert len(recent) == 5 and all(t.created_at >= since for t in recent)
    assert [t.args["order_id"] for t in rt.tasks(limit=2)] == ["o0", "o1"]


def test_listing_reads_the_ledger_in_bounded_pages(world: Any, monkeypatch: Any) -> None:
    import agentq.runtime.reading

    rt, _ = world
    monkeypatch.setattr(agentq.runtime.reading, "SCAN_PAGE", 4)
    counting = CountingBackend(rt.backend)
    rt.backend = counting
    assert len(rt.tasks()) == 15
    assert counting.scans and all(limit == 4 for limit in counting.scans)
    counting.scans.clear()
    assert len(rt.tasks(limit=2)) == 2
    assert counting.scans == [3]  # the page and one more: the rest is never read


def test_pages_follow_each_other_without_gaps_or_repeats(world: Any) -> None:
    rt, _ = world
    seen: list[str] = []
    after = None
    for _ in range(20):
        page = rt.task_page(tool="execute_refund", limit=5, after=after)
        seen += [t.task_id for t in page.tasks]
        after = page.next_after
        if after is None:
            break
    assert seen == [t.task_id for t in rt.tasks(tool="execute_refund")]
    assert len(seen) == 12
    with pytest.raises(ValueError, match="limit must be at least 1"):
        rt.task_page(limit=0)


def test_policy_naming_an_unknown_tool_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text('[tools.execute_refundd]\nallowed_hosts = ["x"]\n')
    with pytest.raises(ConfigError, match=r"unknown tool\(s\) 'execute_refundd'.*execute_refund"):
        Runtime("sqlite:///:memory:", tools=ROOT / "tools", policies=tmp_path)
