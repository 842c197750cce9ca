"""Hostile text stays text in the console's newer fields (issue 28 item 16): the
task list's error and argument cells, the attempt timeline's errors, the
approval's reason on the task page, the dead-letter errors, the workers panel
(page and live stream), and a cancel's reason."""

from __future__ import annotations

from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq.executor.heartbeat import Heartbeat  # noqa: E402
from tests.console.conftest import Served, retried_to_death  # noqa: E402
from tests.console.conftest import dead as _dead  # noqa: E402
from tests.console.test_console_pages import _next_event  # noqa: E402

HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
ESCAPED = "&lt;script&gt;window.__pwned=1&lt;/script&gt;"


def _inert(html: str, where: str) -> None:
    assert "<script>window.__pwned" not in html, where
    assert "<img src=x" not in html, where
    assert ESCAPED in html, where


def test_hostile_errors_reasons_and_worker_ids_are_escaped_everywhere(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    dead_id = _dead(rt, ref=HOSTILE)  # its error quotes the hostile ref
    retried = retried_to_death(rt, ref=HOSTILE)  # three errors on its timeline
    asked = rt.transact(lambda tx: tx.request_approval(
        "pay", {"ref": "r", "amount": 500}, reason=HOSTILE))  # fmt: skip
    cancelled = rt.enqueue_action("pay", {"ref": "c", "amount": 1})
    rt.cancel(cancelled.task_id, HOSTILE)
    Heartbeat(rt.worker(), 5.0, None, worker_id=HOSTILE).publish()
    with served.client("root") as client:
        for path in ["/", "/tasks", "/tasks?internal=1", f"/tasks/{dead_id}", f"/tasks/{retried}",
                     f"/tasks/{asked.task_id}", f"/tasks/{cancelled.task_id}", "/dead-letters",
                     "/schedules"]:  # fmt: skip
            page = client.get(path)
            assert page.status_code == 200, path
            if path != "/schedules":
                _inert(page.text, path)
        timeline = client.get(f"/tasks/{retried}").text
        assert timeline.count(f"timed out for {ESCAPED}") >= 3
        with client.stream("GET", "/events") as stream:
            _inert(_next_event(stream.iter_lines(), "workers"), "the live workers panel")
