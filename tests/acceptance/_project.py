"""A small user project for the CLI tests: its own tools (on queue ``ops``) and
policy, nothing of the refund bot's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TOOLS = '''
import threading
from pathlib import Path

from pydantic import BaseModel

from agentq import ToolContext, tool


class Job(BaseModel):
    name: str


@tool(queue="ops")
def flaky(ctx: ToolContext, args: Job) -> dict:
    """Fails its first attempt, succeeds on the second (a marker file remembers)."""
    marker = Path(ctx.settings["marker_dir"]) / args.name
    if not marker.exists():
        marker.write_text("tried")
        raise RuntimeError(f"first attempt of {args.name} fails on purpose")
    return {"done": args.name}


@tool(queue="ops", max_attempts=1)
def broken(ctx: ToolContext, args: Job) -> dict:
    """Always fails."""
    raise ValueError(f"broken tool cannot do {args.name}")


@tool(queue="ops")
def slow(ctx: ToolContext, args: Job) -> dict:
    """Waits until a release file appears (bounded by 10 minutes: the tests hold it
    running through several CLI calls, which take many seconds on a loaded machine;
    they release it or kill its worker)."""
    release = Path(ctx.settings["marker_dir"]) / "release"
    for _ in range(6000):
        if release.exists():
            break
        threading.Event().wait(0.1)
    return {"done": args.name}


class Payout(BaseModel):
    amount: int


@tool(queue="ops")
def payout(ctx: ToolContext, args: Payout) -> dict:
    """Needs a human above 100."""
    return {"paid": args.amount}
'''

POLICY = """
[defaults]
backoff_initial = "0.2s"
backoff_max = "0.5s"
notify_tool = ""
escalation_tool = ""

[[approvals]]
tool = "payout"
field = "amount"
above = 100
"""


def make_project(where: Path, *, policy: str | None = POLICY) -> Path:
    """``where/tools/ops.py`` and (unless ``policy`` is None) ``where/policies/``."""
    (where / "tools").mkdir(parents=True)
    (where / "tools" / "ops.py").write_text(TOOLS)
    if policy is not None:
        (where / "policies").mkdir()
        (where / "policies" / "ops.toml").write_text(policy)
    (where / "markers").mkdir()
    return where


def agentq(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, from ``cwd``."""
    return subprocess.run(
        [sys.executable, "-m", "agentq.cli", *args], cwd=cwd, capture_output=True, text=True,
        timeout=60, input=stdin,
    )  # fmt: skip
