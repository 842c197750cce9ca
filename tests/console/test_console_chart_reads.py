"""Issue 38 item 1: the overview's throughput and latency chart reads the
per-minute tallies, not the tasks that finished in its window. Before, it read
every task record (1.8 s of the overview's 10 s at 100,000 finished tasks).

The overview is read at two sizes of the last hour's finished tasks; the
records read (a spy on the backend, tally rows counted as records) and
SQLite's steps are the same, or nearly, at both."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from tests.console._need import need_ui

need_ui()

from agentq import Runtime  # noqa: E402
from agentq.backends import Transaction, encode_fields  # noqa: E402
from agentq.ledger import Tables  # noqa: E402
from tests.console.conftest import Served  # noqa: E402
from tests.record_counter import RecordCounter, SQLiteSteps  # noqa: E402


def _finished_lately(rt: Runtime, count: int, start: int) -> None:
    """``count`` tasks that succeeded a minute ago (written as a completion would)."""
    lately = (rt.clock.now() - timedelta(minutes=1)).isoformat()
    ids = rt.transact(lambda tx: [tx.enqueue("pay", {"ref": f"p{start + i}", "amount": 5}).task_id
                                  for i in range(count)])  # fmt: skip
    done = encode_fields({"status": "succeeded", "started_at": lately, "finished_at": lately})
    queue = str((rt.backend.get_record(Tables.TASKS, ids[0]) or {})["queue"])

    def finish(tx: Transaction) -> None:
        tx.update_records(Tables.TASKS, [(i, done) for i in ids])
        tx.ack_all(queue, [(i, 1) for i in ids])

    rt.backend.transact(finish)


def _overview_cost(served: Served, who: str) -> tuple[int, int, str]:
    rt = served.rt
    with served.client(who) as client:
        counter = RecordCounter(rt.backend)
        rt.backend = counter  # type: ignore[assignment]
        try:
            with SQLiteSteps(counter) as steps:
                answer = client.get("/")
        finally:
            rt.backend = counter._inner
    assert answer.status_code == 200, answer.text[:500]
    return counter.read, steps.steps, answer.text


def test_the_overview_chart_reads_no_finished_task(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    for n in range(3):  # through a worker: their completions add the tallies
        rt.enqueue_action("pay", {"ref": f"w{n}", "amount": 3})
    rt.worker().drain()
    _finished_lately(rt, 100, 0)
    small = _overview_cost(served, "root")
    _finished_lately(rt, 1500, 100)
    large = _overview_cost(served, "root")
    assert large[0] == small[0] <= 20, ("records read", small[0], large[0])
    assert large[1] <= 1.5 * small[1] + 20, ("SQLite steps (hundreds)", small[1], large[1])
    assert "3 in the last hour" in large[2]  # the worker's three, from their tallies
