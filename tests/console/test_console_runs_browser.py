"""A durable agent run in headless Chromium at 1280x800 (issue 37): its
timeline fits the width, the model's hostile text is inert, the approver opens
the conversation behind the call, and an operator cancels the run by clicking.
The module's browser and helpers are test_console_browser's (one Chromium at a
time: the same xdist group)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.console._need import need_ui

need_ui()

from agentq import RunStatus  # noqa: E402
from tests.console import test_console_browser as _browser  # noqa: E402
from tests.console import test_console_runs as _runs  # noqa: E402
from tests.console.conftest import Served  # noqa: E402
from tests.console.test_console_browser import fits_the_width, sign_in, wait_for  # noqa: E402
from tests.console.test_console_runs import HOSTILE, drain  # noqa: E402

# The fixtures of those modules: their browser, their runtime with an agent.
chromium, browser, shots_folder = _browser.chromium, _browser.browser, _browser.shots_folder
model, rt = _runs.model, _runs.rt

pytestmark = [pytest.mark.xdist_group("chromium"), pytest.mark.timeout(180)]


def test_a_runs_page_in_chromium_with_its_conversation_and_cancel(
    serve: Callable[..., Served], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    served = serve()
    runtime = served.rt
    run = runtime.start_run("refunds", f"Refund 500 {HOSTILE}", by="agent")
    drain(runtime)
    d = browser
    sign_in(d, served, "olga")  # operates and approves

    d.find_element(By.ID, "nav-runs").click()
    wait_for(d, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr[data-run="{run.run_id}"]'))
    d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run.run_id}"] td.id a').click()
    wait_for(d, lambda d: d.find_element(By.ID, "run-status").text == "awaiting_approval")
    turn = d.find_element(By.CSS_SELECTOR, '#run-timeline li[data-turn="1"]')
    assert "<script>window.__pwned=1</script>" in turn.find_element(
        By.CSS_SELECTOR, "pre.model-text").text  # fmt: skip
    assert "120 / 30 / 150 tokens" in turn.text and "execute_refund" in turn.text
    assert not d.find_elements(By.CSS_SELECTOR, "#run-timeline script, #run-timeline img")
    assert d.execute_script("return window.__pwned === undefined")
    fits_the_width(d)

    # The approver opens the conversation that led to the call.
    d.get(served.url + "/approvals")
    card = d.find_element(By.CSS_SELECTOR, "article.approval")
    talk = card.find_element(By.CSS_SELECTOR, "details.conversation-of")
    talk.find_element(By.TAG_NAME, "summary").click()
    wait_for(d, lambda d: talk.find_element(By.CSS_SELECTOR, "ol.conversation").is_displayed())
    roles = [li.get_attribute("data-role")
             for li in talk.find_elements(By.CSS_SELECTOR, "ol.conversation li")]  # fmt: skip
    assert roles == ["user", "assistant"]
    assert "Refunding <script>" in talk.text and "(this call)" in talk.text
    assert d.execute_script("return window.__pwned === undefined")
    fits_the_width(d)

    # Cancel the run from its page.
    d.get(f"{served.url}/runs/{run.run_id}")
    d.find_element(By.CSS_SELECTOR, "#cancel-run-form input[name=note]").send_keys("duplicate")
    d.find_element(By.ID, "cancel-run").click()
    wait_for(d, lambda d: d.find_element(By.ID, "run-status").text == "cancelled")
    assert f"cancelled run {run.run_id}" in d.find_element(By.TAG_NAME, "main").text
    assert runtime.run(run.run_id).status is RunStatus.CANCELLED
    assert runtime.approvals("pending") == []
