"""The console's pages over real HTTP on loopback: what each shows, filters and
search, hostile arguments escaped, secrets redacted, the live figures' event
stream (issue 12, web console)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq import TaskStatus  # noqa: E402
from tests.console.conftest import Served  # noqa: E402
from tests.console.conftest import dead as _dead  # noqa: E402
from tests.console.conftest import pending as _pending  # noqa: E402

PAGES = ["/", "/tasks", "/approvals", "/dead-letters", "/audit"]
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'


# -- pages ------------------------------------------------------------------------


def test_every_page_shows_its_key_elements_and_strict_headers(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt)
    dead_id = _dead(rt)
    done = rt.enqueue_action("pay", {"ref": "small", "amount": 3})
    rt.worker().drain()
    with served.client("viewer") as client:
        pages = {path: client.get(path) for path in PAGES}
        for path, r in pages.items():
            assert r.status_code == 200, path
            assert "script-src 'self'" in r.headers["content-security-policy"]
            assert r.headers["x-frame-options"] == "DENY"
            assert r.headers["cache-control"] == "no-store"
        overview = pages["/"].text
        assert 'id="queue-figures"' in overview and 'data-queue="work"' in overview
        assert 'sse-connect="/console/events"' in overview
        succeeded = len(rt.tasks(TaskStatus.SUCCEEDED))  # the small payment, notifications
        assert f'data-status="succeeded">{succeeded}<' in overview
        assert 'data-status="dead">1<' in overview
        assert done.task_id in pages["/tasks"].text and dead_id in pages["/tasks"].text
        assert f'data-approval="{approval_id}"' in pages["/approvals"].text
        assert f'data-entry="{dead_id}"' in pages["/dead-letters"].text
        assert "no recorded action" in pages["/audit"].text
        detail = client.get(f"/tasks/{done.task_id}").text
        assert 'id="task-status">succeeded<' in detail
        assert 'id="task-result"' in detail and "&#34;paid&#34;: 3.0" in detail
        assert client.get("/tasks/tsk_nonexistent").status_code == 404


def test_the_task_list_filters_by_status_and_tool_and_searches(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    small = rt.enqueue_action("pay", {"ref": "needle-42", "amount": 3})
    other = rt.enqueue_action("pay", {"ref": "hay", "amount": 4})
    dead_id = _dead(rt, ref="d-9")
    with served.client("viewer") as client:

        def listed(**params: str) -> set[str]:
            r = client.get("/tasks", params=params)
            assert r.status_code == 200
            return set(re.findall(r'<tr data-task="([^"]+)"', r.text))

        assert listed() == {small.task_id, other.task_id, dead_id}
        assert listed(status="dead") == {dead_id}
        assert listed(tool="pay") == {small.task_id, other.task_id}
        assert listed(q="NEEDLE") == {small.task_id}
        assert listed(q=dead_id[-10:]) == {dead_id}
        assert listed(status="succeeded", q="needle") == {small.task_id}
        assert listed(q="nothing-matches-this") == set()
        assert client.get("/tasks", params={"status": "bogus"}).status_code == 400


def test_the_task_page_shows_attempts_error_trace_id_and_audit(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    dead_id = _dead(served.rt)
    with served.client("viewer") as client:
        page = client.get(f"/tasks/{dead_id}").text
    assert 'id="task-status">dead<' in page
    assert 'id="task-attempt">1<' in page and 'id="task-deliveries">1<' in page
    assert 'id="task-error"' in page and "PermanentError" in page
    assert 'id="task-traceback"' in page and "Traceback (most recent call last)" in page
    assert "raise PermanentError" in page and "hunter2" not in page
    assert 'id="trace-id"' in page
    assert 'id="audit-list"' in page


def test_a_script_in_task_args_is_rendered_inert_on_every_page(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt, ref=HOSTILE)
    task_id = rt.approval(approval_id).task_id
    dead_id = _dead(rt, ref=HOSTILE)
    with served.client("viewer") as client:
        for path in ["/tasks", f"/tasks/{task_id}", f"/tasks/{dead_id}", "/approvals",
                     "/dead-letters", "/tasks?q=" + "%3Cscript%3E"]:  # fmt: skip
            html = client.get(path).text
            assert "<script>window.__pwned" not in html, path
            assert "<img src=x" not in html, path
            assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html, path


def test_secrets_in_args_and_errors_are_never_shown(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    approval_id = _pending(rt, ref="https://bob:hunter2@shop.example/cb?token=s3cr3t")
    dead_id = _dead(rt)
    with served.client("viewer") as client:
        task_id = rt.approval(approval_id).task_id
        for path in [*PAGES, f"/tasks/{task_id}", f"/tasks/{dead_id}"]:
            html = client.get(path).text
            for secret in ("hunter2", "s3cr3t", "k3y"):
                assert secret not in html, (path, secret)
        assert "REDACTED" in client.get(f"/tasks/{dead_id}").text


# -- live figures -------------------------------------------------------------------


def _next_event(lines: object, name: str) -> str:
    event, data = None, []
    for line in lines:  # type: ignore[attr-defined]
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])
        elif line == "" and event is not None:
            if event == name:
                return "\n".join(data)
            event, data = None, []
    raise AssertionError(f"the stream ended before a {name!r} event")


def test_the_event_stream_sends_the_live_queue_figures(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    with served.client("viewer") as client, client.stream("GET", "/events") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = stream.iter_lines()
        first = _next_event(lines, "queues")
        assert '<tr data-queue="work"><td>work</td><td class="depth">0<' in first
        rt.enqueue_action("pay", {"ref": "live", "amount": 1})
        for _ in range(200):  # each event is a fresh reading: the new task shows up
            fragment = _next_event(lines, "queues")
            if '<td class="depth">1<' in fragment:
                break
        else:
            raise AssertionError("the enqueued task never showed in the live figures")
        assert '<td class="ready">1<' in fragment


def test_the_event_stream_ends_after_its_time(serve: Callable[..., Served]) -> None:
    served = serve(stream_seconds=0.5)
    with served.client("viewer") as client, client.stream("GET", "/events") as stream:
        body = "".join(stream.iter_text())  # returns: the server closes the stream
    assert body.count("event: queues") >= 1


def test_one_stream_too_many_is_told_to_retry_later(serve: Callable[..., Served]) -> None:
    served = serve(max_streams=1)
    with served.client("viewer") as client, client.stream("GET", "/events") as first:
        lines = first.iter_lines()  # kept: dropping the iterator closes the stream
        _next_event(lines, "queues")
        assert served.console.open_streams == 1
        with client.stream("GET", "/events") as second:
            body = "".join(second.iter_text())  # ends at once
        assert "retry: 10000" in body and "event: queues" not in body
    # Closing the first stream frees its place once the server notices the
    # disconnect, which takes a moment: retry as a browser would, within 30 s.
    deadline = time.monotonic() + 30
    while True:
        with served.client("viewer") as client, client.stream("GET", "/events") as again:
            head = next(again.iter_text())
            if not head.startswith("retry: 10000"):
                break
        assert time.monotonic() < deadline, "the first stream's place was never freed"
        time.sleep(0.05)


def test_the_overview_says_which_window_each_count_covers(
    serve: Callable[..., Served],
) -> None:
    """Issue 39, 2.12: the chart's throughput (its window) and the status counts
    (the whole ledger) disagreed with no label saying so."""
    served = serve()
    rt = served.rt
    rt.enqueue_action("pay", {"ref": "old", "amount": 3})
    rt.worker().drain()
    rt.clock.advance(2 * 3600)  # type: ignore[attr-defined]  # out of the last hour
    rt.enqueue_action("pay", {"ref": "new", "amount": 3})
    rt.worker().drain()
    with served.client("viewer") as client:
        for window, span in (("1h", "hour"), ("24h", "day")):
            text = re.sub(r"<[^>]+>", "", client.get(f"/?window={window}").text)
            counts = text[text.index("Tasks by status"):]
            assert f"not only the chart's last {span}" in counts, counts[:300]
            assert f"in the last {span}" in text  # the chart's own label
        hour = re.sub(r"<[^>]+>", "", client.get("/?window=1h").text)
    assert "1 in the last hour" in hour  # the chart: the new one only
