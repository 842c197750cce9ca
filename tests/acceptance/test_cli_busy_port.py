"""Issue 28, item 14: ``agentq serve`` and ``agentq mcp --transport http`` on a
port another process listens on say so in one line and exit 2, and neither
claims to be serving before it has bound; ``mcp --transport http`` tells its
URL and path once it listens; ``ui`` and ``mcp`` have distinct default ports."""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
AGENTQ = str(Path(sys.executable).parent / "agentq")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port another socket listens on for the whole test."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTQ, *args, "--db", f"sqlite:///{tmp_path / 'a.db'}", "--tools", str(ROOT / "tools"),
         "--policies", str(ROOT / "policies")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.parametrize(
    "command",
    [["serve", "--insecure-local"], ["mcp", "--transport", "http", "--insecure-local"],
     ["ui", "--insecure-local"]],
    ids=["serve", "mcp-http", "ui"],
)  # fmt: skip
def test_a_busy_port_is_one_clean_line_and_exit_2(
    busy_port: int, tmp_path: Path, command: list[str]
) -> None:
    proc = _run([*command, "--port", str(busy_port)], tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("agentq: error: ")
    assert f"127.0.0.1:{busy_port}" in lines[0] and "in use" in lines[0]
    assert "on http://" not in proc.stdout + proc.stderr  # nothing claims to serve


def test_ui_and_mcp_do_not_share_a_default_port() -> None:
    parser = build_parser()
    ui = parser.parse_args(["ui"]).port
    mcp = parser.parse_args(["mcp", "--transport", "http"]).port
    serve = parser.parse_args(["serve"]).port
    assert len({ui, mcp, serve}) == 3


def test_mcp_over_http_tells_its_url_and_path_once_it_listens(tmp_path: Path) -> None:
    """A real process on a free port: its first line names the URL with /mcp,
    and a client can connect to that URL at once (it was bound before)."""
    import httpx

    with subprocess.Popen(
        [AGENTQ, "mcp", "--transport", "http", "--insecure-local", "--port", "0",
         "--db", f"sqlite:///{tmp_path / 'a.db'}", "--tools", str(ROOT / "tools"),
         "--policies", str(ROOT / "policies")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    ) as proc:  # fmt: skip
        try:
            assert proc.stderr is not None
            lines: queue.Queue[str] = queue.Queue()
            threading.Thread(target=lambda: lines.put(proc.stderr.readline()), daemon=True).start()
            line = lines.get(timeout=60)  # the first line, or "" if the process ended
            assert "serving on http://127.0.0.1:" in line, line
            assert line.rstrip().endswith("/mcp"), line
            url = line.split("serving on ", 1)[1].strip()
            answer = httpx.get(url, timeout=30, headers={"Accept": "text/event-stream"})
            assert answer.status_code != 404  # the MCP endpoint is at the told path
        finally:
            proc.terminate()
            proc.wait(30)
