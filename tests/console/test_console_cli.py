"""``agentq ui`` as a real process: it prints where it listens, signs in with
its token, serves the console, stops on SIGINT; and refuses what it should."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.console._need import need_ui

need_ui()

from tests.console.conftest import login  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "cli-token-0123456789abcdef"


def _ui(tmp_path: Path, *extra: str, token: str = TOKEN) -> subprocess.Popen[str]:
    env = {**os.environ, "AGENTQ_UI_TOKEN": token}
    return subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "ui", "--port", "0", "--db",
         f"sqlite:///{tmp_path / 'ui.db'}", "--tools", str(ROOT / "tools"),
         "--policies", str(ROOT / "policies"), "--user", "carol", *extra],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_agentq_ui_serves_the_console_until_sigint(tmp_path: Path) -> None:
    proc = _ui(tmp_path, "--read-only")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        found = re.search(r"\(read-only\) on (http://127\.0\.0\.1:\d+/console/)", first)
        assert found, first + (proc.stderr.read() if proc.poll() is not None else "")
        second = proc.stdout.readline()
        assert "$AGENTQ_UI_TOKEN (as carol, admin)" in second
        assert TOKEN not in first + second
        url = found[1].rstrip("/")
        with httpx.Client(base_url=url, timeout=20) as client:
            assert client.get("/approvals").status_code == 303
            assert login(client, TOKEN).status_code == 303
            page = client.get("/approvals")
            assert page.status_code == 200
            assert 'id="principal">carol<' in page.text and 'id="read-only"' in page.text
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "agentq console stopped" in out
    assert "Traceback" not in err


def test_agentq_ui_refuses_a_remote_host_and_a_short_token(tmp_path: Path) -> None:
    remote = _ui(tmp_path, "--host", "0.0.0.0")
    _, err = remote.communicate(timeout=60)
    assert remote.returncode == 2
    assert "agentq: error: refusing to serve the console on '0.0.0.0'" in err
    short = _ui(tmp_path, token="short")
    _, err = short.communicate(timeout=60)
    assert short.returncode == 2
    assert "agentq: error: $AGENTQ_UI_TOKEN must be at least 16 characters long" in err
    assert "Traceback" not in err


def test_agentq_ui_with_the_api_s_tokens_file_serves_both_and_audits_cli_decisions(
    tmp_path: Path,
) -> None:
    from agentq import Runtime
    from agentq.server.auth import hash_token

    tokens = tmp_path / "tokens.toml"
    # The audit page is for operators (it shows everyone's actions): dana operates.
    tokens.write_text(
        f'[[tokens]]\nname = "dana"\nscopes = ["approve", "operate"]\n'
        f'sha256 = "{hash_token(TOKEN)}"\n'
    )
    db = f"sqlite:///{tmp_path / 'ui.db'}"
    with Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies") as rt:
        big = rt.enqueue_action("execute_refund", {"order_id": "o-1", "amount": 900})
    assert big.approval_id is not None
    decided = subprocess.run(
        [sys.executable, "-m", "agentq.cli", "approve", big.approval_id, "--by", "erin",
         "--note", "from the shell", "--db", db],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert decided.returncode == 0, decided.stderr
    proc = _ui(tmp_path, "--tokens", str(tokens), "--api")
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        found = re.search(r"on (http://127\.0\.0\.1:\d+)/console/ with the HTTP API", first)
        assert found, first + (proc.stderr.read() if proc.poll() is not None else "")
        assert f"a token of {tokens}" in proc.stdout.readline()
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=found[1], timeout=20) as client:
            api = client.get(f"/v1/approvals/{big.approval_id}", headers=bearer)
            assert api.status_code == 200 and api.json()["decided_by"] == "erin"
            audit = client.get("/console/audit", headers=bearer)
            assert audit.status_code == 200
            assert 'id="principal">dana<' in audit.text
            assert 'class="actor">erin<' in audit.text and "from the shell" in audit.text
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
