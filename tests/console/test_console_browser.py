"""The web console in headless Chromium at 1280x800: every page screenshotted
and checked for its key elements; an approval approved, a dead letter replayed, dead letters
replayed and deleted in bulk, a task cancelled, all by clicking; hostile task
arguments left inert; live figures updated by server-sent events (issue 12, web
console; issue 28 item 16, a console worth opening).

The pictures go to a temporary folder, so a test run leaves the checkout as it
was; ``AGENTQ_UPDATE_SCREENSHOTS=1`` writes them to docs/assets/screenshots/
instead, the pictures docs/how-to/console.md shows (committed).

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them):
skipped locally when they are absent, a failure when ``CI`` is set. One browser
serves the module's tests, which run in one xdist group (one Chromium at a time
on a small machine); each test is bounded by its timeout.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console._need import need_ui

need_ui()

from agentq import ApprovalStatus, Runtime, TaskStatus  # noqa: E402
from agentq.executor.heartbeat import Heartbeat  # noqa: E402
from agentq.lifecycle.audit import AuditAction  # noqa: E402
from tests.console.conftest import TOKENS, Served, retried_to_death  # noqa: E402
from tests.console.test_console_schedules import hourly_report, weekday_digest  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
COMMITTED_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "assets" / "screenshots"
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
WAIT = 30  # seconds: generous, the machine is shared
WIDTH, HEIGHT = 1280, 800

pytestmark = [pytest.mark.xdist_group("chromium"), pytest.mark.timeout(180)]


def _need_browser() -> Any:
    missing = [p for p in (CHROMIUM, DRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if missing:
        why = f"headless Chromium tests need {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(f"{why} (CI is set: .ci/run must install them)")
        pytest.skip(why)


@pytest.fixture(scope="module")
def chromium(shots_folder: Path) -> Iterator[Any]:
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="agentq-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                 "--disable-dev-shm-usage", f"--window-size={WIDTH},{HEIGHT}",
                 f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    driver.agentq_shots = shots_folder
    driver.set_page_load_timeout(WAIT)
    # The page's viewport itself is 1280x800 (the window's would be less its frame).
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False,
    })  # fmt: skip
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def browser(chromium: Any) -> Any:
    """The module's browser, with no cookie of an earlier test's console."""
    chromium.delete_all_cookies()
    return chromium


@pytest.fixture(scope="module")
def shots_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this run's screenshots go (see the module's docstring)."""
    if os.environ.get("AGENTQ_UPDATE_SCREENSHOTS") == "1":
        return COMMITTED_SHOTS
    return tmp_path_factory.mktemp("screenshots")


def shot(driver: Any, name: str) -> Path:
    """Save the viewport as NAME.png in the run's screenshots folder, 1280x800."""
    folder: Path = driver.agentq_shots
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    path.unlink(missing_ok=True)
    assert driver.save_screenshot(str(path)), f"no screenshot {path}"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, f"{path} is (nearly) empty"
    assert struct.unpack(">II", data[16:24]) == (WIDTH, HEIGHT), f"{path} is not {WIDTH}x{HEIGHT}"
    committed = COMMITTED_SHOTS / path.name
    assert committed.is_file(), f"{committed} is missing: AGENTQ_UPDATE_SCREENSHOTS=1 takes it"
    return path


def fits_the_width(driver: Any) -> None:
    width = driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= WIDTH, f"{driver.current_url} is {width} px wide"


def sign_in(driver: Any, served: Served, user: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(served.url + "/login")
    driver.find_element(By.ID, "token").send_keys(TOKENS[user])
    driver.find_element(By.ID, "sign-in").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "principal").text == user)


def wait_for(driver: Any, condition: Callable[[Any], Any]) -> Any:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The live figures are swapped in by server-sent events: an element read a
    # moment ago may be gone, so each try looks everything up afresh.
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, WAIT, ignored_exceptions=ignored).until(condition)


def live_text(driver: Any, selector: str) -> str:
    """The text of an element read in one script step (never a stale reference)."""
    text = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
        selector,
    )
    assert text is not None, f"nothing matches {selector}"
    return str(text)


def _world(rt: Runtime) -> dict[str, str]:
    """A pending approval with hostile args, a plain one, a finished task, a dead one."""
    hostile = rt.enqueue_action("pay", {"ref": HOSTILE, "amount": 900})
    rt.clock.advance(60)  # type: ignore[attr-defined]  # a FakeClock: the plain one is newer
    plain = rt.enqueue_action("pay", {"ref": "order-17", "amount": 250})
    done = rt.enqueue_action("pay", {"ref": "order-18", "amount": 12})
    dead = rt.enqueue_action("flaky", {"ref": "order-19", "amount": 3})
    rt.worker().drain()
    assert hostile.approval_id and plain.approval_id
    return {"hostile": hostile.approval_id, "plain": plain.approval_id,
            "done": done.task_id, "dead": dead.task_id,
            "hostile_task": hostile.task_id}  # fmt: skip


def _an_hour_of_work(served: Served, tmp_path: Path) -> dict[str, str]:
    """The tour's world: two schedules, one of which ran twice and whose next
    run now waits for a worker of its queue; a task retried to death; an hour
    of traffic for the charts (some slow, some failing); two approvals waiting;
    two live workers and a lost one."""
    rt = served.rt
    clock: Any = rt.clock
    with Runtime(f"sqlite:///{tmp_path / 'console.db'}", tools=[hourly_report, weekday_digest],
                 clock=clock) as reports:  # fmt: skip
        reports.sync_schedules()
        for _ in range(2):  # two hourly runs, then its worker stops
            clock.advance(3600)
            reports.worker(queues=["reports"]).drain()
    ids = {"retried": retried_to_death(rt, ref="order-31")}
    for minute in range(0, 60, 3):
        for n in range(1 + minute % 4):
            rt.enqueue_action("crunch", {"ref": f"batch-{minute}-{n}",
                                         "seconds": 0.3 + 0.9 * n + minute / 40})  # fmt: skip
        if minute % 15 == 6:
            rt.enqueue_action("flaky", {"ref": f"order-{minute}", "amount": 3})
        rt.worker(queues=["work", "notices"]).drain()  # nobody serves "reports"
        clock.advance(180)
    long_args = {"ref": "order-77 " + "gift wrap, leave at the door; " * 12, "amount": 250}
    ids["approval"] = rt.enqueue_action("pay", long_args).approval_id or ""
    ids["hostile"] = rt.enqueue_action("pay", {"ref": HOSTILE, "amount": 900}).task_id
    gone = Heartbeat(rt.worker(), 5.0, None, worker_id="worker-c:4711")
    gone.publish()
    clock.advance(31)  # worker-c stops beating; its timeout passes
    for worker_id in ("worker-a:1201", "worker-b:1202"):
        beat = Heartbeat(rt.worker(queues=["work", "notices", "escalations", "webhooks"]),
                         5.0, None, worker_id=worker_id)  # fmt: skip
        beat.publish()
    assert beat.check_others() == 1  # worker-c reported lost
    return ids


def test_a_tour_of_every_page_at_1280x800(
    serve: Callable[..., Served], browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    served = serve(refresh_seconds=30.0)  # a still page: no live swap mid-screenshot
    ids = _an_hour_of_work(served, tmp_path)
    d = browser

    d.get(served.url + "/")
    assert "/console/login" in d.current_url  # no session: the login page
    assert d.find_element(By.ID, "token").get_attribute("type") == "password"
    shot(d, "01-login")
    sign_in(d, served, "root")

    # Overview: charts, live queues with the warning, workers with their heartbeats.
    d.get(served.url + "/")
    # The first live update swaps the figures in at once; the next one is 30 s away.
    wait_for(d, lambda d: "live update" in live_text(d, "#figures-time"))
    bars = d.find_elements(By.CSS_SELECTOR, "#throughput-chart rect.bar")
    assert len(bars) >= 20 and d.find_elements(By.CSS_SELECTOR, "#throughput-chart rect.bad")
    assert d.find_elements(By.CSS_SELECTOR, "#latency-chart polyline.p95")
    assert "wait in queue reports" in d.find_element(By.ID, "no-worker").text
    statuses = {r.get_attribute("data-worker"): r.find_element(By.CSS_SELECTOR, "span.status").text
                for r in d.find_elements(By.CSS_SELECTOR, "#workers tr[data-worker]")}  # fmt: skip
    assert statuses == {"worker-a:1201": "live", "worker-b:1202": "live", "worker-c:4711": "lost"}
    fits_the_width(d)
    shot(d, "02-overview")

    # Tasks: fits the width with long arguments and errors; a cell opens on click.
    d.get(served.url + "/tasks")
    rows = d.find_elements(By.CSS_SELECTOR, "#task-list tbody tr[data-task]")
    assert len(rows) > 20
    headers = [h.text for h in d.find_elements(By.CSS_SELECTOR, "#task-list thead th")]
    assert headers == ["task", "tool", "status", "#", "created", "duration", "error", "args"]
    fits_the_width(d)
    assert d.execute_script("return window.__pwned === undefined")
    for when in d.find_elements(By.CSS_SELECTOR, "#task-list td.when time"):
        assert when.size["height"] < 24, f"{when.text!r} wraps"  # one line: about 20 px
    shot(d, "03-tasks")
    row = d.find_element(By.CSS_SELECTOR, f'tr[data-task="{ids["retried"]}"]')
    error = row.find_element(By.CSS_SELECTOR, "td.error summary")
    assert "failed 3 time(s)" in error.get_attribute("title")  # the whole error on hover
    d.find_element(By.ID, "filter-internal").click()
    d.find_element(By.ID, "apply-filters").click()
    wait_for(d, lambda d: "internal=1" in d.current_url)
    assert d.find_elements(By.CSS_SELECTOR, "#task-list tr.internal")
    summary = d.find_element(By.CSS_SELECTOR, "#task-list tr:not(.internal) td.args summary")
    summary.click()
    opened = "#task-list td.args details[open] pre"
    wait_for(d, lambda d: d.find_element(By.CSS_SELECTOR, opened).is_displayed())
    fits_the_width(d)
    shot(d, "04-tasks-internal-and-expanded")

    # A task retried to death: the attempt timeline, Replay offered.
    d.get(f"{served.url}/tasks/{ids['retried']}")
    outcomes = [li.get_attribute("data-outcome")
                for li in d.find_elements(By.CSS_SELECTOR, "#attempt-timeline li")]  # fmt: skip
    assert outcomes == ["retry", "retry", "fail"]
    assert "ConnectionError" in d.find_element(By.ID, "attempt-timeline").text
    assert d.find_element(By.ID, "replay").is_displayed()
    shot(d, "05-task-attempts")

    # A task waiting for its approval: the approval and its timers linked.
    approval = served.rt.approval(ids["approval"])
    d.get(f"{served.url}/tasks/{approval.task_id}")
    assert d.find_element(By.ID, "task-approval").text == ids["approval"]
    assert d.find_elements(By.CSS_SELECTOR, "#approval-timers tr[data-timer]")
    assert d.find_element(By.ID, "cancel").is_displayed()
    shot(d, "06-task-approval")

    # Approvals inbox; the hostile arguments are text.
    d.get(served.url + "/approvals")
    assert len(d.find_elements(By.CSS_SELECTOR, "article.approval")) == 2
    assert d.execute_script("return window.__pwned === undefined")
    shot(d, "07-approvals")

    # Dead letters, with the bulk bar; "select all" ticks every entry.
    d.get(served.url + "/dead-letters")
    picks = d.find_elements(By.CSS_SELECTOR, "input.pick")
    assert len(picks) >= 4 and not any(p.is_selected() for p in picks)
    d.find_element(By.ID, "select-all").click()
    assert all(p.is_selected() for p in d.find_elements(By.CSS_SELECTOR, "input.pick"))
    fits_the_width(d)
    shot(d, "08-dead-letters")

    # Schedules.
    d.get(served.url + "/schedules")
    row = d.find_element(By.CSS_SELECTOR, 'tr[data-schedule="hourly_report"]')
    assert "every 1h" in row.text and "overdue" in row.text and "succeeded" in row.text
    row = d.find_element(By.CSS_SELECTOR, 'tr[data-schedule="weekday_digest"]')
    assert "cron 0 9 * * MON-FRI" in row.text and "overdue" not in row.text
    shot(d, "09-schedules")


def test_every_page_in_chromium_with_an_approval_clicked(
    serve: Callable[..., Served], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    served = serve()
    rt = served.rt
    ids = _world(rt)
    d = browser
    sign_in(d, served, "olga")  # an operator who approves: every page shows all

    # Overview: live queue figures, counts by status.
    d.get(served.url + "/")
    assert live_text(d, '#queue-figures tr[data-queue="work"] td') == "work"
    # The first live update replaces the figures rendered with the page.
    wait_for(d, lambda d: "live update" in live_text(d, "#figures-time"))
    assert d.find_element(By.CSS_SELECTOR, 'a[data-status="dead"]').text == "1"
    assert d.find_element(By.ID, "open-approvals").text == "2"

    # Tasks: filtered to the dead one.
    d.get(served.url + "/tasks")
    rows = d.find_elements(By.CSS_SELECTOR, "#task-list tbody tr[data-task]")
    assert {r.get_attribute("data-task") for r in rows} >= {ids["done"], ids["dead"]}
    d.find_element(By.ID, "filter-q").send_keys("order-19")
    d.find_element(By.ID, "apply-filters").click()
    wait_for(d, lambda d: "q=order-19" in d.current_url)
    rows = d.find_elements(By.CSS_SELECTOR, "#task-list tbody tr[data-task]")
    assert [r.get_attribute("data-task") for r in rows] == [ids["dead"]]
    shot(d, "10-tasks-search")

    # A dead task's page: error (redacted), attempts, trace id.
    d.get(f"{served.url}/tasks/{ids['dead']}")
    assert d.find_element(By.ID, "task-status").text == "dead"
    assert d.find_element(By.ID, "task-attempt").text == "1"
    error = d.find_element(By.ID, "task-error").text
    assert "PermanentError" in error and "REDACTED" in error and "hunter2" not in error
    traceback = d.find_element(By.ID, "task-traceback").text
    assert "Traceback (most recent call last)" in traceback and "hunter2" not in traceback
    assert d.find_element(By.ID, "trace-id").is_displayed()

    # The hostile task's page: its args are text, and no script ran.
    d.get(f"{served.url}/tasks/{ids['hostile_task']}")
    assert "<script>window.__pwned=1</script>" in d.find_element(By.ID, "task-args").text
    assert d.execute_script("return window.__pwned === undefined")
    assert not d.find_elements(By.CSS_SELECTOR, "#task-args img, #task-args script")
    shot(d, "11-task-hostile-args")

    # The approvals inbox: both waiting, oldest first; approve the plain one by clicking.
    d.get(served.url + "/approvals")
    waiting = d.find_elements(By.CSS_SELECTOR, "article.approval")
    assert [a.get_attribute("data-approval") for a in waiting] == [ids["hostile"], ids["plain"]]
    assert d.execute_script("return window.__pwned === undefined")
    assert "<script>" in waiting[0].find_element(By.CSS_SELECTOR, "pre.args").text
    card = d.find_element(By.CSS_SELECTOR, f'article[data-approval="{ids["plain"]}"]')
    card.find_element(By.CSS_SELECTOR, "input.note").send_keys("checked the order")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_for(d, lambda d: f"approved {ids['plain']}" in d.find_element(By.TAG_NAME, "main").text)
    decided = d.find_element(By.CSS_SELECTOR, f'#decided tr[data-approval="{ids["plain"]}"]')
    assert decided.find_element(By.CSS_SELECTOR, "td.by").text == "olga"
    shot(d, "12-approvals-after-approve")
    approval = rt.approval(ids["plain"])
    assert (approval.status, approval.decided_by, approval.decision_note) == (
        ApprovalStatus.APPROVED, "olga", "checked the order",
    )  # fmt: skip
    assert rt.task(approval.task_id).status == TaskStatus.QUEUED
    [entry] = rt.audit_log()
    assert (entry.actor, entry.action, entry.target) == ("olga", AuditAction.APPROVE,
                                                         ids["plain"])  # fmt: skip

    # Audit page: the click is there.
    d.get(served.url + "/audit")
    first = d.find_element(By.CSS_SELECTOR, "#audit-list tbody tr")
    assert first.find_element(By.CSS_SELECTOR, "td.actor").text == "olga"
    assert first.find_element(By.CSS_SELECTOR, "td.action").text == "approve"
    shot(d, "13-audit")

    # Dead letters: olga may not replay (no admin scope): no buttons.
    d.get(served.url + "/dead-letters")
    row = d.find_element(By.CSS_SELECTOR, f'tr[data-entry="{ids["dead"]}"]')
    assert "REDACTED" in row.text and "hunter2" not in row.text
    assert not row.find_elements(By.CSS_SELECTOR, "button.replay")
    assert not d.find_elements(By.ID, "bulk-form")


def test_an_admin_replays_and_deletes_dead_letters_and_sees_live_figures(
    serve: Callable[..., Served], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    served = serve()
    rt = served.rt
    ids = _world(rt)
    others = [rt.enqueue_action("flaky", {"ref": f"order-{n}", "amount": 3}).task_id
              for n in (20, 21)]  # fmt: skip
    rt.worker().drain()
    d = browser
    sign_in(d, served, "root")

    # One replayed from its row, then the other two in bulk: one deleted, one replayed.
    d.get(served.url + "/dead-letters")
    row = d.find_element(By.CSS_SELECTOR, f'tr[data-entry="{ids["dead"]}"]')
    row.find_element(By.CSS_SELECTOR, "button.replay").click()
    wait_for(d, lambda d: not d.find_elements(By.CSS_SELECTOR, f'tr[data-entry="{ids["dead"]}"]'))
    assert rt.task(ids["dead"]).status == TaskStatus.QUEUED
    d.find_element(By.CSS_SELECTOR, f'input.pick[value="{others[0]}"]').click()
    d.find_element(By.ID, "bulk-delete").click()
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    confirm = WebDriverWait(d, WAIT).until(expected_conditions.alert_is_present())
    assert "Delete the selected dead-letter entries?" in confirm.text
    confirm.accept()
    wait_for(d, lambda d: "deleted 1 of 1" in d.find_element(By.CLASS_NAME, "flash").text)
    d.find_element(By.ID, "select-all").click()
    d.find_element(By.ID, "bulk-replay").click()
    wait_for(d, lambda d: d.find_elements(By.ID, "dlq-empty"))
    assert "replayed 1 of 1" in d.find_element(By.CLASS_NAME, "flash").text
    shot(d, "14-dead-letters-after-bulk-replay")
    assert [rt.task(t).status for t in others] == [TaskStatus.DEAD, TaskStatus.QUEUED]
    assert [(e.actor, e.action) for e in reversed(rt.audit_log())] == [
        ("root", AuditAction.REPLAY), ("root", AuditAction.DELETE_DEAD_LETTER),
        ("root", AuditAction.REPLAY),
    ]  # fmt: skip

    # Live figures: a task enqueued after the page loaded shows up without a reload.
    d.get(served.url + "/")

    def depth(d: Any) -> int:
        return int(live_text(d, '#queue-figures tr[data-queue="work"] td.depth'))

    wait_for(d, lambda d: "live update" in live_text(d, "#figures-time"))
    before = depth(d)
    rt.enqueue_action("pay", {"ref": "live-1", "amount": 1})
    live = rt.enqueue_action("pay", {"ref": "live-2", "amount": 2})
    wait_for(d, lambda d: depth(d) == before + 2)
    # No worker: the warning came with the live figures too.
    wait_for(d, lambda d: "wait in queue work" in live_text(d, "#no-worker"))

    # The task page of a queued task offers the admin a cancel; clicking it cancels.
    task_id = live.task_id
    d.get(f"{served.url}/tasks/{task_id}")
    d.find_element(By.CSS_SELECTOR, "#cancel-form input[name=note]").send_keys("not needed")
    d.find_element(By.ID, "cancel").click()
    wait_for(d, lambda d: d.find_element(By.ID, "task-status").text == "cancelled")
    assert f"cancelled {task_id}" in d.find_element(By.CLASS_NAME, "flash").text
    assert d.find_element(By.ID, "task-error").text == "not needed"
    assert d.find_element(By.CSS_SELECTOR, "#audit-list td.actor").text == "root"
    shot(d, "15-task-cancelled")
    assert rt.task(task_id).status == TaskStatus.CANCELLED
    assert (rt.audit_log()[0].actor, rt.audit_log()[0].action) == ("root", AuditAction.CANCEL)


def test_the_read_only_console_in_chromium(serve: Callable[..., Served], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    served = serve(read_only=True)
    ids = _world(served.rt)
    d = browser
    sign_in(d, served, "root")
    d.get(served.url + "/approvals")
    assert d.find_element(By.ID, "read-only").text == "read-only"
    assert len(d.find_elements(By.CSS_SELECTOR, "article.approval")) == 2
    assert not d.find_elements(By.CSS_SELECTOR, "button.approve, button.reject")
    shot(d, "16-approvals-read-only")
    assert served.rt.approval(ids["plain"]).status == ApprovalStatus.PENDING
