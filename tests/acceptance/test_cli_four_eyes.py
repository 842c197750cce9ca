"""``agentq approve`` / ``reject`` keep the four-eyes rule (issue 27): the
principal that enqueued a call cannot decide it, nor edit it into a rule that
wants four eyes (issue 40); exit 5, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._project import POLICY, agentq, make_project


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


#: Above 10,000 only the cfo, above 1,000 anyone, both never the requester; above
#: 100 the requester may approve its own payout.
UPPER = (
    '[[approvals]]\nname = "huge-payouts"\ntool = "payout"\nfield = "amount"\n'
    'above = 10000\napprovers = ["cfo"]\n\n'
    '[[approvals]]\nname = "large-payouts"\ntool = "payout"\nfield = "amount"\n'
    "above = 1000\n\n"
)
TIERS = POLICY.replace("[[approvals]]\n", UPPER + "[[approvals]]\n", 1) + "self_approval = true\n"


def test_the_requester_cannot_edit_its_own_call_into_a_four_eyes_rule(tmp_path: Path) -> None:
    from agentq import Runtime

    project = make_project(tmp_path, policy=TIERS)
    # Records the tools and the policy that `agentq approve` judges an edit with.
    assert agentq("init", cwd=project).returncode == 0
    with Runtime(f"sqlite:///{project / 'agentq.db'}", tools=project / "tools",
                 policies=project / "policies") as rt:  # fmt: skip
        asked = rt.enqueue_action("payout", {"amount": 500}, by="cfo")
    approval_id = str(asked.approval_id)
    for amount, rule in (("5000", "large-payouts"), ("50000", "huge-payouts")):
        raised = agentq("approve", approval_id, "--by", "cfo", "--set", f"amount={amount}",
                        cwd=project)  # fmt: skip
        assert raised.returncode == 5, raised.stderr
        assert raised.stderr.startswith("agentq: error: ") and "four eyes" in raised.stderr
        assert f"rule '{rule}'" in raised.stderr and "Traceback" not in raised.stderr
    own = agentq("approve", approval_id, "--by", "cfo", "--set", "amount=300", cwd=project)
    assert own.returncode == 0, own.stderr
    with Runtime(f"sqlite:///{project / 'agentq.db'}") as rt:
        approval = rt.approval(approval_id)
    assert approval.decided_by == "cfo" and approval.approved_args == {"amount": 300}
