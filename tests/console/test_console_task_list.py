"""The task list (issue 28 item 16): error and duration columns, one-line
relative times with the full time on hover, long arguments cut with the whole
value on hover and on click, and the runtime's own tasks behind a toggle that
only operators see."""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq import Runtime  # noqa: E402
from tests.console.conftest import Served, retried_to_death  # noqa: E402
from tests.console.conftest import dead as _dead  # noqa: E402
from tests.console.conftest import pending as _pending  # noqa: E402


def _row(page: str, task_id: str) -> str:
    found = re.search(rf'<tr data-task="{task_id}"[^>]*>(.*?)</tr>', page, re.S)
    assert found, f"no row of {task_id}"
    return found[1]


def _listed(page: str) -> set[str]:
    return set(re.findall(r'<tr data-task="([^"]+)"', page))


def test_rows_show_relative_times_duration_and_the_error(serve: Callable[..., Served]) -> None:
    served = serve()
    rt: Runtime = served.rt
    done = rt.enqueue_action("pay", {"ref": "ok", "amount": 3})
    rt.worker().drain()
    dead_id = _dead(rt)
    rt.clock.advance(125)  # type: ignore[attr-defined]
    with served.client("viewer") as client:
        page = client.get("/tasks").text
    row = _row(page, dead_id)
    # One line, relative to the runtime's clock; the full UTC time on hover.
    created = re.search(
        r'<td class="when"><time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', row
    )
    assert created, row
    assert created[3] == "2 min ago"
    assert created[2].endswith(" UTC") and created[1].startswith(created[2][:10])
    # The error column: redacted, whole on hover (title) and in the expanded part.
    error = re.search(r'<td class="error"><details class="cut err"><summary title="([^"]*)">', row)
    assert error and "PermanentError: refused by https://svc:REDACTED@bank.example" in error[1]
    assert "hunter2" not in page and "k3y" not in page
    # The duration column: the last attempt's run time.
    assert re.search(r'<td class="dur num">0 ms</td>', _row(page, done.task_id))
    assert "<th>error</th>" in page and ">duration</th>" in page


def test_long_arguments_are_cut_with_the_whole_value_on_hover_and_on_click(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    long_ref = "r-" + "x" * 600 + "-end"
    task = served.rt.enqueue_action("pay", {"ref": long_ref, "amount": 3})
    with served.client("viewer") as client:
        row = _row(client.get("/tasks").text, task.task_id)
    cell = re.search(r'<td class="args">(.*?)</td>', row, re.S)
    assert cell, row
    summary = re.search(r'<summary title="([^"]*)">([^<]*)</summary>', cell[1])
    assert summary
    assert len(html.unescape(summary[2])) <= 300 and summary[2].endswith("…")
    assert "-end" in summary[1]  # hover: the whole value
    assert f"&#34;ref&#34;: &#34;{long_ref}&#34;" in cell[1]  # click: the whole, pretty
    # The id column shows the id's tail; the link and the hover have it whole.
    tail = task.task_id[-12:]
    assert f'href="/console/tasks/{task.task_id}" title="{task.task_id}">tsk_…{tail}<' in row


def test_the_runtime_s_own_tasks_are_behind_a_toggle_only_operators_see(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)  # its notification is one of the runtime's own tasks
    action = rt.approval(approval_id).task_id
    own = {t.task_id for t in rt.tasks() if t.kind != "action"}
    assert own, "the world has no internal task to hide"
    with served.client("viewer") as operator:
        hidden = operator.get("/tasks").text
        assert _listed(hidden) == {action}
        assert 'id="filter-internal"' in hidden and "timers and notices hidden" in hidden
        shown = operator.get("/tasks", params={"internal": "1"}).text
        assert _listed(shown) == {action} | own
        assert re.search(r'id="filter-internal" checked', shown)
        assert 'class="internal" data-kind="notify"' in shown
    with served.client("alice") as reader:  # read + approve: never the runtime's own
        page = reader.get("/tasks", params={"internal": "1"}).text
        assert 'id="filter-internal"' not in page
        assert not _listed(page) & own


def test_a_failed_task_s_row_names_its_last_error(serve: Callable[..., Served]) -> None:
    served = serve()
    task_id = retried_to_death(served.rt)
    with served.client("viewer") as client:
        row = _row(client.get("/tasks", params={"status": "dead"}).text, task_id)
    assert "failed 3 time(s); last: ConnectionError: bank.example timed out for s-1" in row
    assert '<td class="num">3</td>' in row
