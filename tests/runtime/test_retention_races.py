"""A prune racing a serving worker on a real SQLite file loses nothing committed
(issue 14). The worker and the pruner each have their own runtime, connection
and writer lock on the file, as two processes would; every task runs exactly
once, every finished one is deleted exactly once, and no message is left
without its task (which the worker would dead-letter as a stray)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentq import Runtime, TaskStatus, ToolContext, tool

RAN: list[int] = []
_LOCK = threading.Lock()


class Args(BaseModel):
    n: int


@tool(queue="work")
def count(ctx: ToolContext, args: Args) -> dict[str, Any]:
    with _LOCK:
        RAN.append(args.n)
    return {"n": args.n}


def test_a_prune_racing_a_worker_loses_nothing(tmp_path: Path) -> None:
    RAN.clear()
    url = f"sqlite:///{tmp_path / 'race.db'}"
    total = 300
    producer = Runtime(url, tools=[count], retention="off")
    serving = Runtime(url, tools=[count], retention="off")
    pruning = Runtime(url, tools=[count], retention="off")
    worker = serving.worker(concurrency=4, batch_size=5, prune=False).start()
    pruned = 0
    try:
        for start in range(0, total, 20):
            producer.transact(
                lambda tx, start=start: [tx.enqueue("count", {"n": i})
                                         for i in range(start, start + 20)]
            )  # fmt: skip
            # Everything finished, however young, goes: the pass races the commits.
            pruned += pruning.prune(older_than=timedelta(0), batch_size=7).counts.tasks
        deadline = time.monotonic() + 60
        while len(RAN) < total or serving.backend.stats("work").depth:
            assert time.monotonic() < deadline, f"ran {len(RAN)} of {total}"
            pruned += pruning.prune(older_than=timedelta(0), batch_size=7).counts.tasks
            time.sleep(0.01)
    finally:
        worker.stop()
    pruned += pruning.prune(older_than=timedelta(0)).counts.tasks
    assert sorted(RAN) == list(range(total))  # each exactly once
    assert pruned == total
    assert producer.tasks() == [] and producer.dead_letters() == []
    assert worker.stats["stray"] == 0 and worker.stats["stale_message"] == 0
    for rt in (producer, serving, pruning):
        rt.close()


def test_two_pruners_at_once_delete_each_record_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'two.db'}"
    with Runtime(url, tools=[count]) as rt:
        for i in range(120):
            rt.enqueue_action("count", {"n": i})
        rt.worker().drain()
        assert all(t.status == TaskStatus.SUCCEEDED for t in rt.tasks())
    counts: list[int] = []
    runtimes = [Runtime(url, tools=[count]) for _ in range(2)]

    def prune(rt: Runtime) -> None:
        counts.append(rt.prune(older_than=timedelta(0), batch_size=9).counts.tasks)

    threads = [threading.Thread(target=prune, args=(rt,)) for rt in runtimes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(counts) == 120 and runtimes[0].tasks() == []
    for rt in runtimes:
        rt.close()
