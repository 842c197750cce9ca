"""A task's page (issue 28 item 16): its attempts as a timeline (start, end,
outcome, error of each), its approval and the approval's timers linked, and
Replay and Cancel buttons that respect scopes, CSRF and read-only mode."""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq import TaskStatus  # noqa: E402
from agentq.lifecycle.audit import AuditAction  # noqa: E402
from tests.console.conftest import Served, csrf_of, retried_to_death  # noqa: E402
from tests.console.conftest import dead as _dead  # noqa: E402
from tests.console.conftest import pending as _pending  # noqa: E402


def _attempts(page: str) -> list[tuple[str, str, str]]:
    """(attempt, outcome, text) of each timeline entry."""
    found = re.search(r'<ol class="timeline" id="attempt-timeline">(.*?)</ol>', page, re.S)
    assert found, "no timeline"
    return re.findall(
        r'<li class="attempt [^"]*" data-attempt="(\d+)" data-outcome="([^"]+)">(.*?)</li>',
        found[1], re.S,
    )  # fmt: skip


def test_a_dead_task_s_timeline_shows_every_attempt_with_its_error(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    task_id = retried_to_death(served.rt)
    with served.client("viewer") as client:
        page = client.get(f"/tasks/{task_id}").text
    attempts = _attempts(page)
    assert [(n, outcome) for n, outcome, _ in attempts] == [
        ("1", "retry"), ("2", "retry"), ("3", "fail"),
    ]  # fmt: skip
    for n, _, text in attempts:
        assert re.search(r"started <time datetime=\"[^\"]+\" title=\"[^\"]+ UTC\">", text), n
        assert "ended <time" in text and "ran " in text
        assert "ConnectionError: bank.example timed out for s-1" in text
    assert "failed, retried" in attempts[0][2] and "failed for good" in attempts[2][2]
    assert "failed 3 time(s)" in attempts[2][2]


def test_a_succeeded_task_s_timeline_ends_with_its_successful_attempt(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    done = served.rt.enqueue_action("pay", {"ref": "ok", "amount": 3})
    served.rt.worker().drain()
    with served.client("viewer") as client:
        attempts = _attempts(client.get(f"/tasks/{done.task_id}").text)
    assert [(n, outcome) for n, outcome, _ in attempts] == [("1", "succeeded")]


def test_a_task_refused_before_running_says_no_attempt_ran(serve: Callable[..., Served]) -> None:
    served = serve()
    task = served.rt.enqueue_action("pay", {"ref": "never", "amount": 3})
    with served.client("viewer") as client:
        page = client.get(f"/tasks/{task.task_id}").text
    assert _attempts(page) == [] and 'data-outcome="none"' in page


def test_the_approval_and_its_timers_are_linked_for_operators_only(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    approval = rt.approval(_pending(rt))
    notice = approval.notify_task_id
    assert notice is not None
    with served.client("olga") as operator:
        page = operator.get(f"/tasks/{approval.task_id}").text
        assert f'id="task-approval">{approval.approval_id}<' in page
        assert f'<tr data-timer="{notice}"><td><a href="/console/tasks/{notice}">notify</a>' in page
        timer_page = operator.get(f"/tasks/{notice}").text  # and back from the timer
        assert f'id="timer-of">{approval.task_id}<' in timer_page
    with served.client("alice") as reader:  # she reads her own tasks: this is "local"'s
        assert reader.get(f"/tasks/{approval.task_id}").status_code == 404
    with served.client("agent") as owner:
        rt.enqueue_action("pay", {"ref": "mine", "amount": 500}, by="agent")
        [mine] = [t for t in rt.tasks() if t.created_by == "agent"]
        page = owner.get(f"/tasks/{mine.task_id}").text
        assert 'id="task-approval"' in page and 'id="approval-timers"' not in page


def test_replay_from_the_task_page_needs_admin_and_the_csrf_token(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    dead_id = _dead(rt)
    with served.client("viewer") as operator:  # operate: no replay
        page = operator.get(f"/tasks/{dead_id}").text
        assert 'id="replay"' not in page
        r = operator.post(f"/tasks/{dead_id}/replay", data={"csrf_token": csrf_of(page)})
        assert r.status_code == 403
    with served.client("root") as admin:
        page = admin.get(f"/tasks/{dead_id}").text
        assert 'id="replay"' in page
        assert admin.post(f"/tasks/{dead_id}/replay").status_code == 403  # no CSRF token
        assert rt.task(dead_id).status == TaskStatus.DEAD
        r = admin.post(f"/tasks/{dead_id}/replay", data={"csrf_token": csrf_of(page)})
        assert (r.status_code, r.headers["location"]) == (303, f"/console/tasks/{dead_id}")
        again = admin.get(f"/tasks/{dead_id}").text
        assert f"replayed {dead_id}" in again and 'id="replay"' not in again
    assert rt.task(dead_id).status == TaskStatus.QUEUED
    assert [(e.actor, e.action) for e in rt.audit_log()] == [("root", AuditAction.REPLAY)]


def test_a_failed_task_waiting_for_its_retry_can_be_cancelled_from_its_page(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    task = rt.enqueue_action("shaky", {"ref": "s-2", "amount": 1})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.RETRY_SCHEDULED
    with served.client("viewer") as operator:
        page = operator.get(f"/tasks/{task.task_id}").text
        assert 'data-outcome="next"' in page  # the next attempt, scheduled
        assert 'id="replay"' not in page and 'id="cancel"' in page
        r = operator.post(f"/tasks/{task.task_id}/cancel",
                          data={"csrf_token": csrf_of(page), "note": "bank is down"})  # fmt: skip
        assert r.status_code == 303
    assert rt.task(task.task_id).status == TaskStatus.CANCELLED
    read_only = serve(read_only=True)
    other = rt.enqueue_action("shaky", {"ref": "s-3", "amount": 1})
    with read_only.client("root") as admin:
        page = admin.get(f"/tasks/{other.task_id}").text
        assert 'id="cancel"' not in page and 'id="task-actions"' not in page
