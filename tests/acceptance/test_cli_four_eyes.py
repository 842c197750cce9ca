"""``agentq approve`` / ``reject`` keep the four-eyes rule (issue 27): the
principal that enqueued a call cannot decide it; exit 5, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._project import agentq, make_project


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def test_the_enqueuer_cannot_decide_its_own_call(project: Path) -> None:
    from agentq import Runtime

    # The CLI's enqueue names nobody: a Python caller that says by= does.
    with Runtime(f"sqlite:///{project / 'agentq.db'}", tools=project / "tools",
                 policies=project / "policies") as rt:  # fmt: skip
        asked = rt.enqueue_action("payout", {"amount": 500}, by="bob")
    approval_id = str(asked.approval_id)
    for verb in ("approve", "reject"):
        own = agentq(verb, approval_id, "--by", "bob", cwd=project)
        assert own.returncode == 5, own.stderr
        assert own.stderr.startswith("agentq: error: ") and "four eyes" in own.stderr
        assert "Traceback" not in own.stderr
    other = agentq("approve", approval_id, "--by", "alice", cwd=project)
    assert other.returncode == 0, other.stderr
