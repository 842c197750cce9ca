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


def test_an_owners_counts_and_the_per_tool_counts_agree_with_the_ledger(rt: Runtime) -> None:
    """The owner's counts and the per-tool figures still read the records of
    the queued tasks (an owner and a tool are in the record): the same figures."""
    _backlog(rt, 5)
    tasks = rt.tasks()
    assert overview.status_counts(rt.backend, owner="local") == dict(sorted(Counter(
        t.status.value for t in tasks if t.created_by == "local").items()))  # fmt: skip
    by_tool = {c.tool: (c.queued, c.running, c.waiting) for c in
               overview.tool_counts(rt.backend, rt.clock.now())}  # fmt: skip
    assert by_tool == {"bill": (3, 0, 1), "ship": (6, 2, 0)}
