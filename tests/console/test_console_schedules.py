"""The schedules page (issue 28 item 16): each recorded schedule with its rule,
status, next run (linked to its pending task) and last run; for operators."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from tests.console._need import need_ui

need_ui()

from agentq import Runtime, ToolContext, tool  # noqa: E402
from tests.console.conftest import Served  # noqa: E402


class Report(BaseModel):
    scope: str = "all"


@tool(queue="reports", every="1h")
def hourly_report(ctx: ToolContext, args: Report) -> None:
    return None


@tool(queue="reports", cron="0 9 * * MON-FRI")
def weekday_digest(ctx: ToolContext, args: Report) -> None:
    return None


def test_the_schedules_page_lists_each_schedule_with_its_next_and_last_run(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    served = serve()
    with served.client("viewer") as client:
        empty = client.get("/schedules")
        assert empty.status_code == 200 and 'id="no-schedules"' in empty.text
        # A worker with a scheduled tool records its schedule when it starts.
        with Runtime(f"sqlite:///{tmp_path / 'console.db'}", tools=[hourly_report],
                     clock=served.rt.clock) as worker_rt:  # fmt: skip
            assert worker_rt.sync_schedules()
            [info] = worker_rt.schedules()
            served.rt.clock.advance(3600)  # type: ignore[attr-defined]
            worker_rt.worker(queues=["reports"]).drain()  # the first run
        page = client.get("/schedules").text
        overview = client.get("/").text
    row = re.search(r'<tr data-schedule="hourly_report" class="schedule active">(.*?)</tr>',
                    page, re.S)  # fmt: skip
    assert row, page
    assert '<td class="rule"><code>every 1h</code></td>' in row[1]
    assert '<span class="status active">active</span>' in row[1]
    [now] = served.rt.schedules()
    pending = now.pending_task_id
    assert pending and pending != info.pending_task_id
    assert f'<td class="next"><a href="/console/tasks/{pending}"><time' in row[1]
    assert ">in 1 h</time>" in row[1]
    assert '<td class="last"><time' in row[1] and ">just now</time>" in row[1]
    assert '<span class="status succeeded">succeeded</span>' in row[1]
    assert 'id="nav-schedules"' in page and 'id="schedule-count">1 schedule(s)<' in overview


def test_the_schedules_page_is_for_operators(serve: Callable[..., Served]) -> None:
    served = serve()
    with served.client("agent") as agent:
        assert agent.get("/schedules").status_code == 403
    with served.client("viewer") as operator:
        assert operator.get("/schedules").status_code == 200
