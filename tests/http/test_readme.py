"""The HTTP API guide's first steps (docs/how-to/http-api.md, before its first
section), as written: `agentq token`, `agentq serve` (with the port and database
moved for the test), and the Python block."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentq.demo_server import DemoAPI

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _section() -> str:
    text = (ROOT / "docs" / "how-to" / "http-api.md").read_text()
    return text.split("\n## ", 1)[0]


def test_readme_http_section_runs_as_written(
    tmp_path: Path, api: DemoAPI, server_port: int
) -> None:
    section = _section()
    shell = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    python = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert shell and python
    token_cmd, serve_cmd = (line.split("#")[0].split() for line in shell.group(1).splitlines())
    assert token_cmd[0] == serve_cmd[0] == "agentq"
    agentq = [sys.executable, "-m", "agentq.cli"]
    made = subprocess.run(agentq + token_cmd[1:], capture_output=True, text=True, check=True,
                          cwd=tmp_path).stdout  # fmt: skip
    token = re.fullmatch(r"(aqt_\S+)\n", made)  # only the token: $(agentq token ...) works
    assert token, made
    # As written, the command itself writes the tokens file the next one serves with.
    assert token.group(1) not in (tmp_path / "tokens.toml").read_text()
    port = server_port
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        agentq + serve_cmd[1:] + ["--port", str(port), "--db", f"sqlite:///{tmp_path}/a.db",
                                  "--tools", str(ROOT / "tools"),
                                  "--policies", str(ROOT / "policies"),
                                  "--setting", f"payments_url={api.url}"],
        cwd=tmp_path, stdout=log, stderr=log, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                httpx.get(f"{url}/v1/tasks", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "agentq serve did not listen"
                time.sleep(0.05)
        env = {**os.environ, "AGENTQ_URL": url, "AGENTQ_TOKEN": token.group(1)}
        ran = subprocess.run([sys.executable, "-c", python.group(1)], capture_output=True,
                             text=True, env=env, timeout=60, cwd=tmp_path)  # fmt: skip
    finally:
        server.terminate()
        server.wait(30)
        log.close()
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("succeeded {'refund_id': ")
    # The events of a finished task: one, the final state, and the stream ends.
    assert ran.stdout.splitlines()[-1] == "event: succeeded", ran.stdout
    assert len(api.applied()) == 1
