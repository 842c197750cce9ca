"""The README's refund bot, HTTP API and console run on PostgreSQL by the URL alone.

* The README's first Python block (its "What you get" section) is taken as
  written, its ``sqlite:///agentq.db`` replaced by a fresh PostgreSQL database,
  and run in a folder holding the refund bot's ``tools/`` and ``policies/``: its
  SQL (SQLite's ``?`` marks), its tool's ``on_commit`` write and its asserts
  must all hold there too.
* The PostgreSQL guide's three lines (docs/how-to/postgres.md) (``agentq demo``, ``agentq serve``,
  ``agentq ui`` with a ``postgresql://`` URL) run as written, on a fresh
  database: the demo passes its checks, and the HTTP API and the console show
  and act on what it left.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console.conftest import login

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SQLITE_URL = '"sqlite:///agentq.db"'


def readme_refund_bot() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## What you get\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert found, "the README's 'What you get' section has no Python block"
    return found.group(1)


def test_the_readme_refund_bot_runs_on_postgresql_by_changing_only_the_url(
    tmp_path: Path, postgres_url_factory: Any
) -> None:
    postgres_url = postgres_url_factory.create()
    code = readme_refund_bot()
    assert code.count(SQLITE_URL) == 1, "the block names its database once"
    code = code.replace(SQLITE_URL, repr(postgres_url))
    for folder in ("tools", "policies"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert not (tmp_path / "agentq.db").exists()
    admin = postgres_url_factory.admin(postgres_url)
    try:  # the block's own table, and the tool's on_commit write, are on PostgreSQL
        states = admin.execute("SELECT state FROM public.orders").fetchall()
    finally:
        admin.close()
    assert ("refunded",) in states


def three_lines() -> tuple[str, list[list[str]]]:
    """The PostgreSQL guide's "On PostgreSQL" paragraph: its token command and the
    three commands (comments dropped, quotes removed as the shell would)."""
    text = (ROOT / "docs" / "how-to" / "postgres.md").read_text(encoding="utf-8")
    part = text.split("**On PostgreSQL**", 1)[1]
    token = re.search(r"`(agentq token [^`]+)`", part)
    block = re.search(r"^```sh\n(.*?)^```", part, re.S | re.M)
    assert token and block
    lines = [shlex.split(line.split("#", 1)[0]) for line in block.group(1).splitlines()]
    return token.group(1), lines


def test_the_refund_bot_http_api_and_console_run_on_postgresql_as_the_readme_says(
    tmp_path: Path, postgres_url: str, server_port: int
) -> None:
    token_cmd, (demo, serve, ui) = three_lines()
    assert [demo[:2], serve[:2], ui[:2]] == [["agentq", "demo"], ["agentq", "serve"],
                                             ["agentq", "ui"]]  # fmt: skip
    readme_url = "postgresql://app@localhost/shop"

    def run(argv: list[str]) -> list[str]:
        # The README's database is the test's; agentq runs from this checkout.
        moved = [a.replace(readme_url, postgres_url) for a in argv[1:]]
        return [sys.executable, "-m", "agentq.cli", *moved]

    for folder in ("tools", "policies"):  # the project directory
        shutil.copytree(ROOT / folder, tmp_path / folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    bot = subprocess.run(run(demo), cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=180)  # fmt: skip
    assert bot.returncode == 0, bot.stdout[-3000:] + bot.stderr[-3000:]
    assert "RESULT: all checks passed" in bot.stdout
    made = subprocess.run(run(shlex.split(token_cmd)), cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    # With --append it prints the token alone (issue 39, item 2.2); else "token: ...".
    printed = re.search(r"^(?:token: )?(aqt_\S+)$", made.stdout, re.M)
    assert printed, made.stdout
    token = printed[1]

    # The HTTP API on what the demo left: its tasks, and an escalated refund approved.
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([*run(serve), "--port", str(server_port)], cwd=tmp_path,
                              env=env, stdout=log, stderr=log)  # fmt: skip
    api = httpx.Client(base_url=f"http://127.0.0.1:{server_port}", timeout=30,
                       headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    try:
        _until_listening(api, server, tmp_path / "serve.log")
        listed = api.get("/v1/tasks", params={"tool": "execute_refund", "limit": 100})
        assert listed.status_code == 200, listed.text
        assert len(listed.json()["tasks"]) >= 20
        waiting = api.get("/v1/approvals", params={"status": "escalated"}).json()["approvals"]
        assert waiting, "the demo leaves escalated refunds unanswered"
        shown = api.get(f"/v1/approvals/{waiting[0]['approval_id']}")
        approved = api.post(f"/v1/approvals/{waiting[0]['approval_id']}:approve",
                            headers={"If-Match": shown.headers["etag"]}, json={"note": "ok"})
        assert approved.status_code == 200, approved.text
        assert approved.json()["status"] == "queued"  # the approved refund's task, sent
    finally:
        api.close()
        server.terminate()
        server.wait(30)
        log.close()

    # The console on the same state: the overview, the tasks and the approvals inbox.
    console_env = {**env, "AGENTQ_UI_TOKEN": "readme-console-token-0123456789"}
    console = subprocess.Popen([*run(ui), "--port", "0"], cwd=tmp_path, env=console_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert console.stdout is not None
        first = console.stdout.readline()
        where = re.search(r"on (http://127\.0\.0\.1:\d+/console/)", first)
        assert where, first + (console.stderr.read() if console.poll() is not None else "")
        with httpx.Client(base_url=where[1].rstrip("/"), timeout=30) as browser:
            assert login(browser, "readme-console-token-0123456789").status_code == 303
            assert "payments" in browser.get("/").text  # the live queue figures
            assert "execute_refund" in browser.get("/tasks").text
            inbox = browser.get("/approvals")
            assert inbox.status_code == 200 and "escalated" in inbox.text  # the unanswered
            row = re.search(rf'<tr data-approval="{waiting[0]["approval_id"]}">.*?</tr>',
                            inbox.text, re.S)  # fmt: skip
            assert row and "status approved" in row[0] and 'class="by">ops<' in row[0]
    finally:
        console.send_signal(signal.SIGINT)
        console.communicate(timeout=30)


def _until_listening(api: httpx.Client, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60  # real time: another process starting
    while True:
        assert server.poll() is None, log.read_text()
        try:
            api.get("/v1/tasks", params={"limit": 1})
            return
        except httpx.TransportError:
            assert time.monotonic() < deadline, "agentq serve did not listen"
            time.sleep(0.05)
