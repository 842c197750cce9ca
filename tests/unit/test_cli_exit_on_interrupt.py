"""A Ctrl-C that a command caught exits 130, wherever it was raised."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_COMMAND_INTERRUPTED_IN_EXEC = textwrap.dedent("""
    import argparse, sys
    import importlib
    cli = importlib.import_module("agentq.cli.main")

    def interrupted_while_importing(args):
        # What an import that builds a dataclass does when Ctrl-C lands in it.
        exec("raise KeyboardInterrupt")

    def build_parser():
        parser = argparse.ArgumentParser()
        parser.set_defaults(func={func})
        return parser

    cli.build_parser = build_parser
    sys.exit(cli.main([]))
""")


@pytest.mark.parametrize(
    "func",
    ["interrupted_while_importing", "lambda args: caught(args)"],
    ids=["raised-to-main", "caught-by-the-command"],
)
def test_a_ctrl_c_that_passed_through_an_exec_still_exits_130(tmp_path: Path, func: str) -> None:
    """CPython 3.11 ran as ``python -m`` exited by SIGINT (-2) after such a
    Ctrl-C was caught: ``agentq serve`` interrupted during an import (CI saw it)."""
    source = _COMMAND_INTERRUPTED_IN_EXEC.format(func=func).replace(
        "def build_parser",
        "def caught(args):\n"
        "    try:\n"
        "        interrupted_while_importing(args)\n"
        "    except KeyboardInterrupt:\n"
        "        from agentq.cli.exits import EXIT_INTERRUPTED\n"
        "        return EXIT_INTERRUPTED\n\n"
        "def build_parser",
    )
    (tmp_path / "interrupted_command.py").write_text(source)
    done = subprocess.run([sys.executable, "-m", "interrupted_command"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
