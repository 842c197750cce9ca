"""Issue 38 item 1: the overview's counts and ``agentq inspect`` cost the
unfinished work, not the ledger. Before, the overview's counts built every task
as a model and ``inspect`` read every task (10 s and 5.5 s at 100,000 finished
tasks).

Each test reads at two sizes of the ledger and compares the records read (a
spy on the backend) and the work SQLite did (its virtual machine's steps: also
the rows a query reads and drops): the same, or nearly, at both sizes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from tests.console._need import need_ui

need_ui()

from agentq import Runtime, TaskStatus, overview  # noqa: E402
from agentq.backends import Transaction, encode_fields  # noqa: E402
from agentq.console import views  # noqa: E402
from agentq.ledger import Tables  # noqa: E402
from agentq.lifecycle import audit  # noqa: E402
from agentq.server.auth import Principal, Scope  # noqa: E402
from tests.console.conftest import Served  # noqa: E402
from tests.record_counter import RecordCounter, SQLiteSteps  # noqa: E402


def _finished(rt: Runtime, count: int, start: int) -> None:
    """``count`` tasks that succeeded two days ago, each with a dead-letter entry."""
    long_ago = (rt.clock.now() - timedelta(days=2)).isoformat()
    ids = rt.transact(lambda tx: [tx.enqueue("pay", {"ref": f"p{start + i}", "amount": 5}).task_id
                                  for i in range(count)])  # fmt: skip
    done = encode_fields({"status": "succeeded", "finished_at": long_ago})
    queue = str((rt.backend.get_record(Tables.TASKS, ids[0]) or {})["queue"])

    def finish(tx: Transaction) -> None:  # as a worker's completion would
        tx.update_records(Tables.TASKS, [(i, done) for i in ids])
        tx.ack_all(queue, [(i, 1) for i in ids])
        for i in ids:
            tx.put_record(Tables.DEAD_LETTERS, f"d{i}", {"task_id": None, "stray": True,
                                                        "queue": "q", "error": "e"})  # fmt: skip

    rt.backend.transact(finish)


def _reads(rt: Runtime) -> tuple[int, int, Any]:
    """What the overview's counts and ``inspect``'s figures read."""
    counter = RecordCounter(rt.backend)
    now = rt.clock.now()
    with SQLiteSteps(counter) as steps:
        rt.backend = counter  # type: ignore[assignment]
        try:
            figures = (
                views.status_counts(rt, Principal("root", frozenset({Scope.ADMIN}))),
                [(t.tool, t.queued, t.oldest_unfinished_s) for t in overview.tool_counts(
                    counter, now)],  # type: ignore[arg-type]
                overview.finished_counts(counter),  # type: ignore[arg-type]
                overview.open_approvals(counter, now),  # type: ignore[arg-type]
                overview.dead_letter_count(counter),  # type: ignore[arg-type]
            )  # fmt: skip
        finally:
            rt.backend = counter._inner
    return counter.read, steps.steps, figures


def test_the_overview_counts_and_inspect_read_no_finished_task(
    serve: Callable[..., Served],
) -> None:
    rt = serve().rt
    rt.transact(lambda tx: [tx.enqueue("pay", {"ref": f"q{i}", "amount": 5}) for i in range(3)])
    _finished(rt, 100, 0)
    small = _reads(rt)
    _finished(rt, 1500, 100)
    large = _reads(rt)
    # The three queued tasks, read by key by each of the three counts.
    assert large[0] == small[0] <= 9, ("records read", small[0], large[0])
    assert large[1] <= 1.5 * small[1] + 20, ("SQLite steps (hundreds)", small[1], large[1])
    counts, tools, finished, approvals, dead = large[2]
    assert counts[TaskStatus.SUCCEEDED.value] == 1600 and counts[TaskStatus.QUEUED.value] == 3
    assert [(tool, queued) for tool, queued, _ in tools] == [("pay", 3)]
    assert tools[0][2] is not None  # the oldest's age, from the records read
    assert finished == {TaskStatus.SUCCEEDED.value: 1600}
    assert approvals["pending"] == 0 and dead == 1600


def _page_cost(served: Served, path: str) -> tuple[int, int, str]:
    rt = served.rt
    with served.client("root") as client:
        counter = RecordCounter(rt.backend)
        rt.backend = counter  # type: ignore[assignment]
        try:
            with SQLiteSteps(counter) as steps:
                answer = client.get(path)
        finally:
            rt.backend = counter._inner
    assert answer.status_code == 200, answer.text[:500]
    return counter.read, steps.steps, answer.text


def test_the_dead_letter_and_audit_pages_read_a_page(serve: Callable[..., Served]) -> None:
    """Before, each read every entry (the audit page every entry, then kept 500)."""
    served = serve()
    rt = served.rt

    def notes(count: int, start: int) -> None:
        def write(tx: Any) -> None:
            for i in range(start, start + count):
                audit.record(tx, actor="bob", action=audit.AuditAction.CANCEL, target=f"x{i}")
                tx.put_record(Tables.DEAD_LETTERS, f"d{i:06d}", {
                    "task_id": None, "stray": True, "queue": "q", "error": "e"})  # fmt: skip

        rt.backend.transact(write)

    notes(250, 0)
    small = {p: _page_cost(served, p) for p in ("/dead-letters", "/audit")}
    notes(1500, 250)
    large = {p: _page_cost(served, p) for p in ("/dead-letters", "/audit")}
    for path in small:
        assert large[path][0] == small[path][0], (path, small[path][0], large[path][0])
        assert large[path][1] <= 1.5 * small[path][1] + 20, (path, small[path][1], large[path][1])
    dead_letters = large["/dead-letters"][2]
    assert "older entries" in dead_letters and "1750 entries" in dead_letters
    assert "older entries" in large["/audit"][2]
    with served.client("root") as client:  # the next page goes on where the first ended
        older = client.get("/audit", params={"after": rt.audit_log(limit=200)[-1].audit_id})
    assert "x1549" in older.text and "x1550" not in older.text


def _owned(rt: Runtime, count: int, start: int, by: str) -> None:
    """``count`` tasks of ``by``'s that succeeded, as :func:`_finished` makes them."""
    ids = rt.transact(lambda tx: [tx.enqueue("pay", {"ref": f"{by}{start + i}", "amount": 5},
                                             by=by).task_id for i in range(count)])  # fmt: skip
    done = encode_fields({"status": "succeeded"})
    queue = str((rt.backend.get_record(Tables.TASKS, ids[0]) or {})["queue"])

    def finish(tx: Transaction) -> None:
        tx.update_records(Tables.TASKS, [(i, done) for i in ids])
        tx.ack_all(queue, [(i, 1) for i in ids])

    rt.backend.transact(finish)


def test_a_non_admins_overview_counts_read_none_of_its_finished_tasks(
    serve: Callable[..., Served],
) -> None:
    """A principal that sees only its own tasks: its counts come from the owner
    index and the owner's count (``agentq.backends.owners``). Before, they were
    every task of the ledger built and filtered (records read: the ledger)."""
    rt = serve().rt
    ann = Principal("ann", frozenset({Scope.READ, Scope.ENQUEUE}))
    rt.transact(lambda tx: [tx.enqueue("pay", {"ref": f"q{i}", "amount": 5}, by=who)
                            for i, who in enumerate(["ann", "ann", "bob"])])  # fmt: skip

    def reads() -> tuple[int, int, dict[str, int]]:
        counter = RecordCounter(rt.backend)
        with SQLiteSteps(counter) as steps:
            rt.backend = counter  # type: ignore[assignment]
            try:
                counts = views.status_counts(rt, ann)
            finally:
                rt.backend = counter._inner
        # The meaning kept: what the principal may see of every task, counted.
        everyone = rt.tasks()
        assert counts == {s.value: sum(t.status is s and t.created_by == "ann" and
                                       t.kind == "action" for t in everyone)
                          for s in TaskStatus}  # fmt: skip
        return counter.read, steps.steps, counts

    _owned(rt, 50, 0, "ann")
    _owned(rt, 50, 0, "bob")
    small = reads()
    _owned(rt, 750, 50, "ann")
    _owned(rt, 750, 50, "bob")
    large = reads()
    # The three queued tasks (read by key), none of the finished ones.
    assert large[0] == small[0] <= 3, ("records read", small[0], large[0])
    assert large[1] <= 1.5 * small[1] + 20, ("SQLite steps (hundreds)", small[1], large[1])
    assert large[2][TaskStatus.SUCCEEDED.value] == 800 and large[2][TaskStatus.QUEUED.value] == 2
