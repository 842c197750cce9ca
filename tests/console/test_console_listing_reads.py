"""Issue 27 item 12, in the console: the task list and the approvals page read
the page they show (filters and what the user may see in the query, a keyset
cursor), not the whole ledger. Before, every request of the task list read
every task twice (the rows, and the tool filter's choices), and every page read
every approval (the inbox, and the navigation's count of open ones).

The test counts the records the runtime reads for one request (a spy on the
backend) at two sizes of the ledger: the same. Over real HTTP on loopback.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq import Runtime  # noqa: E402
from tests.console.conftest import Served  # noqa: E402
from tests.record_counter import RecordCounter  # noqa: E402

PAGE = 200  # agentq.console.views.TASK_PAGE


def _payments(rt: Runtime, count: int, start: int) -> None:
    rt.transact(lambda tx: [tx.enqueue("pay", {"ref": f"p{start + i}", "amount": 5})
                            for i in range(count)])  # fmt: skip


def _decided(rt: Runtime, count: int) -> None:
    for _ in range(count):
        task = rt.enqueue_action("pay", {"ref": "big", "amount": 500})
        assert task.approval_id is not None
        rt.reject(task.approval_id, "olga", "no")


def _reads(served: Served, user: str, path: str) -> tuple[int, str]:
    rt = served.rt
    with served.client(user) as client:
        counter = RecordCounter(rt.backend)
        rt.backend = counter  # type: ignore[assignment]
        try:
            answer = client.get(path)
        finally:
            rt.backend = counter._inner
    assert answer.status_code == 200, answer.text[:500]
    return counter.read, answer.text


def test_the_task_list_and_the_inbox_read_a_page_whatever_the_ledger(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    _payments(rt, 1000, 0)
    _decided(rt, 60)
    small_tasks, html = _reads(served, "viewer", "/tasks")
    assert html.count('<tr data-task="') == PAGE and 'id="older"' in html
    small_inbox, _ = _reads(served, "olga", "/approvals")

    _payments(rt, 2000, 1000)
    _decided(rt, 100)
    large_tasks, html = _reads(served, "viewer", "/tasks")
    assert html.count('<tr data-task="') == PAGE
    large_inbox, _ = _reads(served, "olga", "/approvals")
    assert small_tasks == large_tasks, (small_tasks, large_tasks)
    assert small_inbox == large_inbox, (small_inbox, large_inbox)
    assert large_tasks < 2 * PAGE  # the page (and one more), its approvals, the open count


def test_older_pages_follow_from_the_newest(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    _payments(rt, PAGE + 5, 0)
    newest_first = [t.task_id for t in rt.task_page(newest_first=True).tasks]
    with served.client("viewer") as client:
        first = client.get("/tasks").text
        shown = re.findall(r'<tr data-task="([^"]+)"', first)
        older = re.search(r'id="older" href="([^"]+)"', first)
        assert older is not None
        second = client.get(older[1].replace("&amp;", "&").removeprefix("/console")).text
        shown += re.findall(r'<tr data-task="([^"]+)"', second)
        assert 'id="older"' not in second
    assert shown == newest_first
