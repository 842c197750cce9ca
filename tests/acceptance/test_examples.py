"""Every example runs and shows what it claims."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    "refund_bot.py": ["small refund: succeeded", "large refund after approval: succeeded",
                      "unanswered approval: escalated", "refunds charged: 2"],
    "checkpoints.py": ["succeeded: {'rows': 4500, 'deliveries': 5} after 5 deliveries"],
    "heartbeat.py": ["t=50s: worker-2 timed out"],
    "ordering.py": ["each order's steps ran in order"],
    "http_api.py": ["retried: 200, same task: True", "small refund: succeeded",
                    "large refund after approval by alice: succeeded", "refunds charged: 2"],
    "mcp_server.py": ["small refund: completed", "large refund: input_required",
                      "after approval by ops-lead: completed", "refunds charged: 2"],
    "pydantic_ai_refunds.py": ["awaiting approval: 1 call(s)", "model saw a refund: True",
                               "approved by: ops-lead", "refunds charged: 1"],
    "openai_agents_refunds.py": ["interrupted for approval: 1 call(s)",
                                 "tool result: succeeded; model said: refund issued",
                                 "approved by: ops-lead", "refunds charged: 1"],
    "langchain_refunds.py": ["interrupted for approval: True",
                             "tool result: succeeded; model said: refund issued",
                             "approved by: ops-lead", "refunds charged: 1"],
}  # fmt: skip


def test_every_example_is_covered() -> None:
    assert {p.name for p in (ROOT / "examples").glob("*.py")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in EXPECTED[name]:
        assert line in proc.stdout
    assert "worker-1 timed out" not in proc.stdout
