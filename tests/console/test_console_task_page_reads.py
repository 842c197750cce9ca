"""Issue 38 item 1: a task's page finds its audit entries through the audit
log's index by target, not by reading the log. Before, it read every entry
(a page of 500 at a time, newest first) to keep the few about the task.

The page is read with a short and a long log of entries about other tasks;
the records read (a spy on the backend) are the same at both. A log written
before the index is indexed once, by the first lookup."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.console._need import need_ui

need_ui()

from agentq.lifecycle import audit  # noqa: E402
from tests.console.conftest import Served  # noqa: E402
from tests.record_counter import RecordCounter  # noqa: E402


def _others(served: Served, count: int, start: int) -> None:
    def write(tx: Any) -> None:
        for i in range(start, start + count):
            audit.record(tx, actor="bob", action=audit.AuditAction.CANCEL, target=f"x{i}")

    served.rt.backend.transact(write)


def _page(served: Served, task_id: str) -> tuple[int, str]:
    rt = served.rt
    with served.client("root") as client:
        counter = RecordCounter(rt.backend)
        rt.backend = counter  # type: ignore[assignment]
        try:
            answer = client.get(f"/tasks/{task_id}")
        finally:
            rt.backend = counter._inner
    assert answer.status_code == 200, answer.text[:500]
    return counter.read, answer.text


def test_a_tasks_page_reads_its_audit_entries_not_the_log(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    assert rt.audit_log(target="none") == []  # the first lookup indexes the (empty) log
    task = rt.enqueue_action("pay", {"ref": "mine", "amount": 3})
    rt.cancel(task.task_id, "not today", by="alice")
    _others(served, 50, 0)
    small = _page(served, task.task_id)
    _others(served, 1200, 50)
    large = _page(served, task.task_id)
    assert large[0] == small[0], ("records read", small[0], large[0])
    assert "not today" in large[1] and "x10" not in large[1]
    assert [e.actor for e in rt.audit_log(target=task.task_id)] == ["alice"]


def test_a_log_written_before_the_index_is_indexed_by_the_first_lookup(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    task = rt.enqueue_action("pay", {"ref": "old", "amount": 3})
    rt.cancel(task.task_id, by="alice")
    _others(served, 600, 0)
    # As an earlier version left it: the entries, no index records.
    keys = [k for k, _ in rt.backend.list_records(audit.TARGETS)]
    rt.backend.transact(lambda tx: tx.delete_records(audit.TARGETS, keys))
    assert [e.actor for e in rt.audit_log(target=task.task_id)] == ["alice"]
    assert [e.target for e in rt.audit_log(target="x599")] == ["x599"]
    assert rt.backend.get_record(audit.TARGETS, "!indexed") is not None
