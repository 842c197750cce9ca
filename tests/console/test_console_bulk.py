"""Bulk replay and delete on the dead-letter page (issue 28 item 16): the ticked
entries at once, for admins, with the session's CSRF token; an entry that cannot
be replayed is reported and never stops the others."""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq import TaskStatus  # noqa: E402
from agentq.ledger import Tables  # noqa: E402
from agentq.lifecycle.audit import AuditAction  # noqa: E402
from tests.console.conftest import Served, csrf_of  # noqa: E402
from tests.console.conftest import dead as _dead  # noqa: E402


def _stray(served: Served) -> str:
    """A stray dead-letter entry (a message that was no task's): delete only."""
    served.rt.backend.transact(lambda tx: tx.put_record(
        Tables.DEAD_LETTERS, "stray-1",
        {"entry_id": "stray-1", "kind": "stray", "stray": True, "queue": "work",
         "error": "not a task", "dead_at": served.rt.clock.now().isoformat()},
    ))  # fmt: skip
    return "stray-1"


def _flash(html: str) -> str:
    found = re.search(r'<p class="flash">([^<]*)</p>', html)
    assert found, "no flashed message"
    return found[1]


def test_an_admin_replays_the_ticked_entries_and_hears_which_were_not(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    a, b, c = (_dead(rt, ref=f"d-{n}") for n in range(3))
    stray = _stray(served)
    with served.client("root") as admin:
        page = admin.get("/dead-letters").text
        assert 'id="bulk-form"' in page and 'id="select-all"' in page
        ticks = re.findall(r'<input type="checkbox" name="entry" value="([^"]+)" form="bulk-form"',
                           page)  # fmt: skip
        assert set(ticks) == {a, b, c, stray}
        r = admin.post("/dead-letters/replay",
                       data={"csrf_token": csrf_of(page), "entry": [a, b, stray]})  # fmt: skip
        assert (r.status_code, r.headers["location"]) == (303, "/console/dead-letters")
        after = admin.get("/dead-letters").text
    told = _flash(after)
    assert told.startswith("replayed 2 of 3; not replayed: dead-letter entry &#39;stray-1&#39;")
    assert [rt.task(t).status for t in (a, b, c)] == [
        TaskStatus.QUEUED, TaskStatus.QUEUED, TaskStatus.DEAD,
    ]  # fmt: skip
    assert set(re.findall(r'<tr id="[^"]+" data-entry="([^"]+)"', after)) == {c, stray}
    replays = [e.target for e in rt.audit_log() if e.action == AuditAction.REPLAY]
    assert sorted(replays) == sorted([a, b]) and {e.actor for e in rt.audit_log()} == {"root"}


def test_an_admin_deletes_the_ticked_entries(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    a, b = _dead(rt, ref="d-1"), _dead(rt, ref="d-2")
    with served.client("root") as admin:
        csrf = csrf_of(admin.get("/dead-letters").text)
        r = admin.post("/dead-letters/delete", data={"csrf_token": csrf, "entry": [a, "gone"]})
        assert r.status_code == 303
        assert _flash(admin.get("/dead-letters").text) == "deleted 1 of 2 (1 already gone)"
    assert [e["entry_id"] for e in rt.dead_letters()] == [b]
    assert rt.task(a).status == TaskStatus.DEAD  # the task stays dead in the ledger


def test_bulk_actions_need_admin_csrf_a_tick_and_a_bounded_list(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    dead_id = _dead(rt)
    with served.client("viewer") as operator:  # operate: sees, may not act
        page = operator.get("/dead-letters").text
        assert 'id="bulk-form"' not in page
        r = operator.post("/dead-letters/replay",
                          data={"csrf_token": csrf_of(page), "entry": dead_id})  # fmt: skip
        assert r.status_code == 403
    with served.client("root") as admin:
        csrf = csrf_of(admin.get("/dead-letters").text)
        assert admin.post("/dead-letters/delete", data={"entry": dead_id}).status_code == 403
        none = admin.post("/dead-letters/replay", data={"csrf_token": csrf})
        assert none.status_code == 400 and "tick at least one entry" in none.text
        many = admin.post("/dead-letters/delete",
                          data={"csrf_token": csrf, "entry": [f"e-{n}" for n in range(201)]})
        assert many.status_code == 400 and "at most 200 entries at once, not 201" in many.text
    assert [e["entry_id"] for e in rt.dead_letters()] == [dead_id]
    read_only = serve(read_only=True)
    with read_only.client("root") as admin:
        page = admin.get("/dead-letters").text
        assert 'id="bulk-form"' not in page
        r = admin.post("/dead-letters/replay", data={"csrf_token": csrf_of(page),
                                                     "entry": dead_id})  # fmt: skip
        assert r.status_code == 403
