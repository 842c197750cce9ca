"""Issue 38 item 1: the overview's counts during a backlog.

The counts by status (the console's overview, ``agentq inspect``'s empty
state) read every queued task's record to tell queued from running: 747 ms on
SQLite at 100,000 queued. A task is running only once a worker leased its
message and claimed it, so the tasks whose messages no worker has leased are
queued (or in a rare status, whose records are read anyway): their messages'
keys count them, and only the records of the leased ones are read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from agentq import FakeClock, Runtime, overview
from agentq.decision import Decision
from tests.record_counter import RecordCounter
from tests.runtime.test_open_status_listing import _enqueue, _finished, _running, bill, ship


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(backend_url, tools=[ship, bill], clock=clock)
    yield runtime
    runtime.close()


def _backlog(rt: Runtime, queued: int) -> None:
    """Finished tasks; two running and one leased by a worker that died before
    its claim; one waiting on another (rare), two held behind an ordering key;
    and a backlog of ``queued`` more."""
    _finished(rt, 3, 0)
    first = [_enqueue(rt, "ship", f"r{n}") for n in range(3)]
    _running(rt, *first[:2], batch=3)  # the third leased on the way, not claimed
    prerequisite = first[0]
    rt.transact(lambda tx: tx.enqueue("bill", {"ref": "w"}, after=[prerequisite]))
    for n in range(3):  # one sent, two held behind it
        _enqueue(rt, "bill", f"k{n}", ordering_key="cart")

    def many(tx: Decision) -> None:
        for n in range(queued):
            tx.enqueue("ship", {"ref": f"q{n}"})

    rt.transact(many)


def test_in_a_backlog_the_counts_read_the_rare_and_the_leased_tasks_only(rt: Runtime) -> None:
    _backlog(rt, 40)
    expected = dict(sorted(Counter(t.status.value for t in rt.tasks()).items()))
    assert expected == {"queued": 44, "running": 2, "succeeded": 3, "waiting": 1}
    counter = RecordCounter(rt.backend)
    assert overview.status_counts(counter) == expected  # type: ignore[arg-type]
    if not rt.backend.url.startswith("spanner"):  # its queues do not tell leased ones
        # The waiting task, the three leased messages' tasks and the ordering
        # key's record (its held tasks); before, every unfinished task's record
        # too (48).
        assert counter.read == 5, counter.read


def _by_bob(rt: Runtime) -> list[str]:
    """Three of bob's tasks queued in the backlog, a second apart, due in an
    hour (so a worker's lease passes them by)."""
    return [_enqueue(rt, "bill", f"bob{n}", by="bob", delay=3600) for n in range(3)]


def _tool_figures(rt: Runtime) -> dict[str, tuple[int, ...]]:
    """The per-tool figures from a read of the whole ledger (the oracle): queued,
    running, waiting, and the age of the oldest unfinished task in seconds."""
    now = rt.clock.now()
    out: dict[str, list[int]] = {}
    for t in rt.tasks():
        if t.status.value not in ("queued", "running", "waiting"):
            continue
        row = out.setdefault(t.tool, [0, 0, 0, 0])
        row[("queued", "running", "waiting").index(t.status.value)] += 1
        row[3] = max(row[3], round((now - t.created_at).total_seconds()))
    return {tool: tuple(row) for tool, row in sorted(out.items())}


def test_in_a_backlog_the_per_tool_figures_read_the_rare_leased_and_held_tasks_only(
    rt: Runtime,
) -> None:
    """``agentq inspect``'s figures per tool: the tasks no worker has leased are
    counted by tool in the database (their oldest's age too), only the others'
    records read. Before, every unfinished task's record was read (51)."""
    _enqueue(rt, "ship", "first", delay=3600)  # never leased: the oldest of ship
    _by_bob(rt)
    _backlog(rt, 40)
    rt.clock.advance(30)
    expected = _tool_figures(rt)
    # The oldest of each tool is one of those due in an hour: counted in the database.
    assert expected == {"bill": (6, 0, 1, 42), "ship": (42, 2, 0, 43)}, expected
    counter = RecordCounter(rt.backend)
    found = overview.tool_counts(counter, rt.clock.now())  # type: ignore[arg-type]
    assert {c.tool: (c.queued, c.running, c.waiting, round(c.oldest_unfinished_s or 0))
            for c in found} == expected  # fmt: skip
    if not rt.backend.url.startswith("spanner"):  # its queues do not tell leased ones
        # The waiting task, the ordering key's record, its two held tasks and
        # the three leased messages' tasks.
        assert counter.read == 7, counter.read


def test_in_a_backlog_an_owners_counts_read_its_rare_leased_and_held_tasks_only(
    rt: Runtime,
) -> None:
    """An agent's own overview: its tasks no worker has leased are counted in
    the database (the owner column), only its others' records read. Before,
    every unfinished task's record was read, everyone's (49)."""
    _by_bob(rt)
    _backlog(rt, 40)
    tasks = rt.tasks()
    counter = RecordCounter(rt.backend)
    for owner in ("local", "bob"):
        expected = dict(sorted(Counter(
            t.status.value for t in tasks if t.created_by == owner).items()))  # fmt: skip
        assert overview.status_counts(counter, owner=owner) == expected  # type: ignore[arg-type]
    assert expected == {"queued": 3}
    if not rt.backend.url.startswith("spanner"):
        # For each owner, the ordering key's record, its two held tasks and the
        # three leased (read by key, then kept if they are the owner's: local's);
        # and local's waiting task, through the index of owners.
        assert counter.read == 13, counter.read
