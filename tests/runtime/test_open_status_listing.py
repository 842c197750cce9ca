"""Issue 38 item 1: a page of queued or running tasks reads the unfinished work,
not the ledger.

The index of rare statuses leaves ``queued`` and ``running`` out (a worker's
status changes touch no index), so ``GET /v1/tasks?status=running``, the
console's filter and ``agentq tasks --status running`` walked every record in
key order: with 100,000 finished tasks and none running, 86 ms on SQLite for an
empty page. They now read the tasks a queue holds a message for or an ordering
key holds back (:mod:`agentq.runtime.open_pages`), and return exactly what the
walk returned: the same tasks, in the same order, page by page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, TaskInfo, TaskStatus, ToolContext, tool
from agentq.backends import Transaction, encode_fields
from agentq.decision import Decision
from agentq.ledger import Tables
from agentq.runtime import open_pages
from tests.record_counter import RecordCounter, SQLiteSteps


class Order(BaseModel):
    ref: str


@tool(queue="orders")
def ship(ctx: ToolContext, args: Order) -> dict[str, Any]:
    return {"shipped": args.ref}


@tool(queue="orders")
def bill(ctx: ToolContext, args: Order) -> dict[str, Any]:
    return {"billed": args.ref}


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(backend_url, tools=[ship, bill], clock=clock)
    yield runtime
    runtime.close()


def _enqueue(rt: Runtime, tool_name: str, ref: str, **options: Any) -> str:
    def one(tx: Decision) -> TaskInfo:
        return tx.enqueue(tool_name, {"ref": ref}, **options)

    task_id = rt.transact(one).task_id
    rt.clock.advance(1)  # type: ignore[attr-defined]
    return task_id


def _finished(rt: Runtime, count: int, start: int) -> None:
    """``count`` tasks finished as a worker's completion finishes them."""
    ids = [_enqueue(rt, "ship", f"done{start + i}") for i in range(count)]
    done = encode_fields({"status": "succeeded", "result": {"ok": True}})

    def finish(tx: Transaction) -> None:
        tx.update_records(Tables.TASKS, [(i, done) for i in ids])
        tx.ack_all("orders", [(i, 1) for i in ids])

    rt.backend.transact(finish)


def _running(rt: Runtime, *task_ids: str, batch: int = 10) -> None:
    """Claimed once their messages were leased, as a worker claims them (the
    messages still there, as leased ones are). The messages ahead of them are
    leased on the way: delivered, not claimed, as a worker that died before its
    claim leaves them. (Spanner's queues do not say which messages were
    delivered, so nothing there depends on it: no lease.)"""
    left = set() if rt.backend.url.startswith("spanner") else set(task_ids)
    for _ in range(100):
        if not left:
            break
        left -= {m.key[0] for m in next(iter(rt.backend.stream("orders", batch)), [])}
    assert not left, f"never leased: {left}"
    running = encode_fields({"status": "running"})
    rt.backend.transact(
        lambda tx: tx.update_records(Tables.TASKS, [(i, running) for i in task_ids])
    )


def _ledger(rt: Runtime, finished: int) -> None:
    """Finished tasks around unfinished ones of two tools and two owners: queued,
    held behind an ordering key, and running."""
    _finished(rt, finished, 0)
    _enqueue(rt, "ship", "a1", by="alice")
    for n in range(3):  # one sent, two held behind it
        _enqueue(rt, "bill", f"k{n}", ordering_key="cart", by="alice")
    _finished(rt, finished, finished)
    _running(rt, _enqueue(rt, "ship", "b1", by="bob"))
    _enqueue(rt, "bill", "b2", by="bob")
    _running(rt, _enqueue(rt, "bill", "a2", by="alice"))


def _pages(rt: Runtime, status: str, **query: Any) -> list[list[str]]:
    pages, after = [], None
    while True:
        page = rt.task_page(status, limit=2, after=after, **query)
        pages.append([t.task_id for t in page.tasks])
        after = page.next_after
        if after is None:
            return pages


def _expected(rt: Runtime, status: str, newest_first: bool = False, **query: Any) -> list[str]:
    """The tasks a walk of the whole ledger finds, in its order."""
    every = sorted(rt.task_page(limit=10_000).tasks, key=lambda t: t.task_id,
                   reverse=newest_first)  # fmt: skip
    tool_name, owner = query.get("tool"), query.get("owner")
    return [t.task_id for t in every if t.status == status
            and (tool_name is None or t.tool == tool_name)
            and (owner is None or t.created_by == owner)]  # fmt: skip


QUERIES: list[dict[str, Any]] = [
    {}, {"newest_first": True}, {"tool": "bill"}, {"owner": "alice"},
    {"owner": "bob", "newest_first": True}, {"tool": "ship", "owner": "alice"},
]  # fmt: skip


@pytest.mark.parametrize("status", ["queued", "running"])
def test_pages_of_queued_or_running_tasks_read_from_the_unfinished_work(
    rt: Runtime, status: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ledger(rt, 20)
    read: list[str] = []
    chunk = open_pages.open_chunk

    def spied(*args: Any, **kwargs: Any) -> Any:
        read.append("open")
        return chunk(*args, **kwargs)

    monkeypatch.setattr("agentq.runtime.reading.open_chunk", spied)
    for query in QUERIES:
        pages = _pages(rt, status, **query)
        assert [i for page in pages for i in page] == _expected(rt, status, **query), query
        assert all(len(page) == 2 for page in pages[:-1]) and len(pages[-1]) <= 2
    assert read, "the pages were not read from the unfinished work"
    # k1 and k2 have no message (held behind k0), and are listed all the same.
    refs = {"queued": ["a1", "k0", "k1", "k2", "b2"], "running": ["b1", "a2"]}[status]
    assert [t.args["ref"] for t in rt.tasks(status)] == refs


def test_with_a_backlog_the_ledgers_walk_is_kept_and_agrees(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ledger(rt, 1)  # most tasks unfinished: reading them all would read more
    used: list[str] = []
    monkeypatch.setattr("agentq.runtime.reading.open_chunk",
                        lambda *a, **k: used.append("open"))  # fmt: skip
    for status in ("queued", "running"):
        for query in QUERIES:
            assert [i for p in _pages(rt, status, **query) for i in p] == _expected(
                rt, status, **query
            )
    assert used == []


@pytest.fixture
def two_sizes(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Runtime, Runtime]]:
    made = []
    for name, finished in (("small", 100), ("large", 2000)):
        runtime = Runtime(f"sqlite:///{tmp_path / name}.db", tools=[ship, bill], clock=clock)
        _ledger(runtime, finished)
        made.append(runtime)
    yield made[0], made[1]
    for runtime in made:
        runtime.close()


@pytest.mark.parametrize("status", ["queued", "running"])
@pytest.mark.parametrize("newest_first", [False, True])
def test_a_page_of_queued_or_running_tasks_costs_the_same_at_twenty_times_the_ledger(
    two_sizes: tuple[Runtime, Runtime], status: str, newest_first: bool
) -> None:
    """SQLite's virtual-machine steps (the rows a query reads and drops too) for
    one page, beside 200 and 4,000 finished tasks. Before: 10 times as many."""
    steps = []
    for runtime in two_sizes:
        with SQLiteSteps(runtime.backend) as counted:
            page = runtime.task_page(status, limit=2, newest_first=newest_first)
        assert [t.status for t in page.tasks] == [TaskStatus(status)] * 2
        steps.append(counted.steps)
    small, large = steps
    assert large <= small + 2, steps


def test_an_owners_page_walks_the_owners_index_when_it_holds_fewer_tasks(rt: Runtime) -> None:
    """An agent with one queued task beside many of another's: its page reads
    its own tasks (the owners' index), not every unfinished task."""
    _finished(rt, 200, 0)
    for n in range(30):
        _enqueue(rt, "ship", f"bob{n}", by="bob")
    mine = _enqueue(rt, "ship", "alice0", by="alice")
    counter = RecordCounter(rt.backend)
    rt.backend = counter
    page = rt.task_page("queued", limit=10, owner="alice")
    assert [t.task_id for t in page.tasks] == [mine]
    assert counter.read <= 2, counter.read  # 31: every unfinished task read


class _KeyCounter(RecordCounter):
    """Counts the message keys read too."""

    keys = 0

    def message_keys(self, *args: Any, **kwargs: Any) -> Any:
        keys = self._inner.message_keys(*args, **kwargs)
        self.keys += len(keys)
        return keys


def test_with_a_backlog_a_page_reads_no_message_key(rt: Runtime) -> None:
    """A backlog is told by counting the messages no further than a quarter of
    the ledger: before, every key of the backlog was read first (100,000 keys,
    50 ms on SQLite) only to find that the ledger's walk is the way."""
    _finished(rt, 4, 0)
    queued = sorted(_enqueue(rt, "ship", f"q{n}") for n in range(40))
    counter = _KeyCounter(rt.backend)
    rt.backend = counter
    page = rt.task_page("queued", limit=5)
    assert [t.task_id for t in page.tasks] == queued[:5]  # the first in key order
    assert counter.keys == 0, counter.keys  # 40: every message's key


@pytest.fixture
def two_backlogs(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[Runtime, Runtime]]:
    made = []
    for name, queued in (("small", 100), ("large", 2000)):
        runtime = Runtime(f"sqlite:///{tmp_path / name}.db", tools=[ship, bill], clock=clock)
        for n in range(queued):
            runtime.transact(lambda tx, n=n: tx.enqueue("ship", {"ref": f"q{n}"}))
        made.append(runtime)
    yield made[0], made[1]
    for runtime in made:
        runtime.close()


@pytest.mark.parametrize("newest_first", [False, True])
def test_a_page_of_queued_tasks_costs_the_same_at_twenty_times_the_backlog(
    two_backlogs: tuple[Runtime, Runtime], newest_first: bool
) -> None:
    """SQLite's virtual-machine steps for one page of a backlog of 100 and of
    2,000 queued tasks. Before: twenty times as many (every message's key)."""
    steps = []
    for runtime in two_backlogs:
        with SQLiteSteps(runtime.backend) as counted:
            page = runtime.task_page("queued", limit=2, newest_first=newest_first)
        assert [t.status for t in page.tasks] == [TaskStatus.QUEUED] * 2
        steps.append(counted.steps)
    small, large = steps
    assert large <= small + 2, steps


def _backlog_with_two_running(rt: Runtime, queued: int) -> list[str]:
    """``queued`` tasks in a backlog behind two that a worker runs; the two, in
    key order."""
    running = [_enqueue(rt, "ship", f"r{n}") for n in range(2)]
    for n in range(queued):
        rt.transact(lambda tx, n=n: tx.enqueue("ship", {"ref": f"q{n}"}))
    _running(rt, *running, batch=2)
    return sorted(running)


class _LedgerWalks(RecordCounter):
    """Counts the walks of the tasks' records (listings) too."""

    walks = 0

    def list_records(self, *args: Any, **kwargs: Any) -> Any:
        self.walks += args[0] == Tables.TASKS
        return super().list_records(*args, **kwargs)


def test_with_a_backlog_a_page_of_running_tasks_reads_the_delivered_ones(rt: Runtime) -> None:
    """In a backlog only the messages delivered at least once can be a running
    task's: the page reads those records (the two running) by key and walks no
    listing of the ledger. Before: the walk of every record in key order,
    filtered on the status in the database, until the page was full or the
    ledger ended (the records it returned were the two; the rows it read, all:
    68 ms on SQLite and 231 ms on PostgreSQL at 100,000 queued)."""
    running = _backlog_with_two_running(rt, 60)
    counter = _LedgerWalks(rt.backend)
    rt.backend = counter
    page = rt.task_page("running", limit=5)
    assert [t.task_id for t in page.tasks] == running
    if not rt.backend.url.startswith("spanner"):  # its queues do not tell delivered ones
        assert (counter.walks, counter.read) == (0, 2)
