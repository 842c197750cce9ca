"""A command whose optional extra is missing says so in one line and exits 2.

Each case runs the CLI in a subprocess with one of the extra's modules blocked
(``sys.modules[name] = None`` makes importing it raise ``ModuleNotFoundError``,
as a missing package does), so nothing of it is cached from other tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentq.errors import install_hint
from tests.ports import held_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

_BLOCKING = (
    "import sys\n"
    "for name in sys.argv[1].split(','):\n"
    "    sys.modules[name] = None\n"
    "from agentq.cli import main\n"
    "raise SystemExit(main(sys.argv[2:]))\n"
)
_PROJECT = ["--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies")]
_SERVES = [*_PROJECT, "--insecure-local", "--port", "{port}"]

CASES = [
    ("serve", "starlette", "http", ["serve", *_SERVES]),
    ("serve", "uvicorn", "http", ["serve", *_SERVES]),
    ("mcp-stdio", "mcp", "mcp", ["mcp", *_PROJECT]),
    ("mcp-http", "uvicorn", "mcp", ["mcp", "--transport", "http", *_SERVES]),
    ("ui", "jinja2", "ui", ["ui", *_SERVES]),
    ("ui", "starlette", "ui", ["ui", *_SERVES]),
    ("token", "starlette", "http", ["token", "bot", "--scope", "read"]),
    ("worker-metrics", "opentelemetry.exporter.prometheus", "metrics",
     ["worker", *_PROJECT, "--metrics-port", "{port}", "--metrics-insecure-local", "--once"]),
    ("spanner", "google.cloud.spanner,google.cloud.spanner_v1", "spanner",
     ["tasks", "--db", "spanner://projects/p/instances/i/databases/d"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("blocked", "extra", "argv"), [c[1:] for c in CASES], ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_a_missing_extra_is_one_clean_line_and_exit_2(
    tmp_path: Path, blocked: str, extra: str, argv: list[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    env["AGENTQ_DB"] = f"sqlite:///{tmp_path / 'agentq.db'}"
    env["PYTHONPATH"] = str(ROOT)
    with held_port() as port:
        args = [a.format(port=port) for a in argv]
        proc = subprocess.run(
            [sys.executable, "-c", _BLOCKING, blocked, *args],
            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("agentq: error: "), proc.stderr
    assert install_hint(extra) in lines[0]
    assert blocked.split(",")[0] in lines[0]  # names what is missing
