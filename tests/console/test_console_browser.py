"""The web console in headless Chromium: every page screenshotted into
tests/output/screenshots/ and checked for its key elements, an approval approved
by clicking, hostile task arguments left inert, live figures updated by
server-sent events (issue 12, web console).

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them):
skipped locally when they are absent, a failure when ``CI`` is set.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.console._need import need_ui

need_ui()

from agentq import ApprovalStatus, Runtime, TaskStatus  # noqa: E402
from agentq.lifecycle.audit import AuditAction  # noqa: E402
from tests.console.conftest import TOKENS, Served  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SHOTS = Path(__file__).resolve().parents[1] / "output" / "screenshots"
HOSTILE = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=1">'
WAIT = 30  # seconds: generous, the machine is shared


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


@pytest.fixture
def browser() -> Iterator[Any]:
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="agentq-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,1000",
                 f"--user-data-dir={profile}"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=DRIVER))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shot(driver: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    path.unlink(missing_ok=True)
    assert driver.save_screenshot(str(path)), f"no screenshot {path}"
    assert path.stat().st_size > 5000, f"screenshot {path} is (nearly) empty"
    return path


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


def test_every_page_in_chromium_with_an_approval_clicked(
    serve: Callable[..., Served], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    served = serve()
    rt = served.rt
    ids = _world(rt)
    d = browser

    d.get(served.url + "/")
    assert "/console/login" in d.current_url  # no session: the login page
    assert d.find_element(By.ID, "token").get_attribute("type") == "password"
    shot(d, "01-login")
    sign_in(d, served, "olga")  # an operator who approves: every page shows all

    # Overview: live queue figures, counts by status.
    d.get(served.url + "/")
    assert live_text(d, '#queue-figures tr[data-queue="work"] td') == "work"
    # The first live update replaces the figures rendered with the page.
    wait_for(d, lambda d: "live update" in live_text(d, "#figures-time"))
    assert d.find_element(By.CSS_SELECTOR, 'a[data-status="dead"]').text == "1"
    assert d.find_element(By.ID, "open-approvals").text == "2"
    shot(d, "02-overview")

    # Tasks: the list, then filtered to the dead one.
    d.get(served.url + "/tasks")
    rows = d.find_elements(By.CSS_SELECTOR, "#task-list tbody tr[data-task]")
    assert {r.get_attribute("data-task") for r in rows} >= {ids["done"], ids["dead"]}
    shot(d, "03-tasks")
    d.find_element(By.ID, "filter-q").send_keys("order-19")
    d.find_element(By.ID, "apply-filters").click()
    wait_for(d, lambda d: "q=order-19" in d.current_url)
    rows = d.find_elements(By.CSS_SELECTOR, "#task-list tbody tr[data-task]")
    assert [r.get_attribute("data-task") for r in rows] == [ids["dead"]]
    shot(d, "04-tasks-search")

    # A dead task's page: error (redacted), attempts, trace id.
    d.get(f"{served.url}/tasks/{ids['dead']}")
    assert d.find_element(By.ID, "task-status").text == "dead"
    assert d.find_element(By.ID, "task-attempt").text == "1"
    error = d.find_element(By.ID, "task-error").text
    assert "PermanentError" in error and "REDACTED" in error and "hunter2" not in error
    traceback = d.find_element(By.ID, "task-traceback").text
    assert "Traceback (most recent call last)" in traceback and "hunter2" not in traceback
    assert d.find_element(By.ID, "trace-id").is_displayed()
    shot(d, "05-task-dead")

    # The hostile task's page: its args are text, and no script ran.
    d.get(f"{served.url}/tasks/{ids['hostile_task']}")
    assert "<script>window.__pwned=1</script>" in d.find_element(By.ID, "task-args").text
    assert d.execute_script("return window.__pwned === undefined")
    assert not d.find_elements(By.CSS_SELECTOR, "#task-args img, #task-args script")
    shot(d, "06-task-hostile-args")

    # The approvals inbox: both waiting, oldest first; approve the plain one by clicking.
    d.get(served.url + "/approvals")
    waiting = d.find_elements(By.CSS_SELECTOR, "article.approval")
    assert [a.get_attribute("data-approval") for a in waiting] == [ids["hostile"], ids["plain"]]
    assert d.execute_script("return window.__pwned === undefined")
    assert "<script>" in waiting[0].find_element(By.CSS_SELECTOR, "pre.args").text
    shot(d, "07-approvals-inbox")
    card = d.find_element(By.CSS_SELECTOR, f'article[data-approval="{ids["plain"]}"]')
    card.find_element(By.CSS_SELECTOR, "input.note").send_keys("checked the order")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    wait_for(d, lambda d: f"approved {ids['plain']}" in d.find_element(By.TAG_NAME, "main").text)
    decided = d.find_element(By.CSS_SELECTOR, f'#decided tr[data-approval="{ids["plain"]}"]')
    assert decided.find_element(By.CSS_SELECTOR, "td.by").text == "olga"
    shot(d, "08-approvals-after-approve")
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
    shot(d, "09-audit")

    # Dead letters: alice may not replay (approve scope only): no buttons.
    d.get(served.url + "/dead-letters")
    row = d.find_element(By.CSS_SELECTOR, f'tr[data-entry="{ids["dead"]}"]')
    assert "REDACTED" in row.text and "hunter2" not in row.text
    assert not row.find_elements(By.CSS_SELECTOR, "button.replay")
    shot(d, "10-dead-letters")


def test_an_admin_replays_a_dead_letter_and_sees_live_figures(
    serve: Callable[..., Served], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    served = serve()
    rt = served.rt
    ids = _world(rt)
    d = browser
    sign_in(d, served, "root")

    d.get(served.url + "/dead-letters")
    row = d.find_element(By.CSS_SELECTOR, f'tr[data-entry="{ids["dead"]}"]')
    row.find_element(By.CSS_SELECTOR, "button.replay").click()
    wait_for(d, lambda d: d.find_elements(By.ID, "dlq-empty"))
    shot(d, "11-dead-letters-after-replay")
    assert rt.task(ids["dead"]).status == TaskStatus.QUEUED
    assert [(e.actor, e.action) for e in rt.audit_log()] == [("root", AuditAction.REPLAY)]

    # Live figures: a task enqueued after the page loaded shows up without a reload.
    d.get(served.url + "/")

    def depth(d: Any) -> int:
        return int(live_text(d, '#queue-figures tr[data-queue="work"] td.depth'))

    wait_for(d, lambda d: "live update" in live_text(d, "#figures-time"))
    before = depth(d)
    rt.enqueue_action("pay", {"ref": "live-1", "amount": 1})
    live = rt.enqueue_action("pay", {"ref": "live-2", "amount": 2})
    wait_for(d, lambda d: depth(d) == before + 2)
    shot(d, "12-overview-live")

    # The task page of a queued task offers the admin a cancel; clicking it cancels.
    task_id = live.task_id
    d.get(f"{served.url}/tasks/{task_id}")
    d.find_element(By.CSS_SELECTOR, "#cancel-form input[name=note]").send_keys("not needed")
    d.find_element(By.ID, "cancel").click()
    wait_for(d, lambda d: d.find_element(By.ID, "task-status").text == "cancelled")
    assert f"cancelled {task_id}" in d.find_element(By.CLASS_NAME, "flash").text
    assert d.find_element(By.ID, "task-error").text == "not needed"
    assert d.find_element(By.CSS_SELECTOR, "#audit-list td.actor").text == "root"
    shot(d, "13-task-cancelled")
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
    shot(d, "14-approvals-read-only")
    assert served.rt.approval(ids["plain"]).status == ApprovalStatus.PENDING
