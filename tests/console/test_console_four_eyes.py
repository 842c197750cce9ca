"""The console's edit form keeps four eyes (issue 40, item 1): the requester may
approve its own call where the rule says ``self_approval = true``, never after
editing it into a rule that does not, whoever that rule names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.console._need import need_ui

need_ui()

from agentq import ApprovalStatus, FakeClock, Runtime  # noqa: E402
from agentq.policies import ApprovalRule, Policy  # noqa: E402
from tests.console.conftest import POLICY, Served, csrf_of, notify, page, pay  # noqa: E402

TIERS = Policy(
    defaults=POLICY.defaults,
    approvals=(
        ApprovalRule(name="huge-payments", tool="pay", field="amount", above=10_000,
                     approvers=("olga",)),
        ApprovalRule(name="large-payments", tool="pay", field="amount", above=1000),
        ApprovalRule(name="small-payments", tool="pay", field="amount", above=100,
                     self_approval=True),
    ),
)  # fmt: skip


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(f"sqlite:///{tmp_path / 'console.db'}", tools=[pay, notify, page],
                      policies=TIERS, clock=clock)  # fmt: skip
    yield runtime
    runtime.close()


def test_the_requester_cannot_edit_its_own_call_into_a_four_eyes_rule(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    rt = served.rt
    asked = rt.enqueue_action("pay", {"ref": "r-1", "amount": 500}, by="olga")
    approval_id = str(asked.approval_id)
    with served.client("olga") as client:
        csrf = csrf_of(client.get("/approvals").text)
        url = f"/approvals/{approval_id}/approve"
        for amount, rule in ((5000, "large-payments"), (50_000, "huge-payments")):
            r = client.post(url, data={"csrf_token": csrf, "changes": f'{{"amount": {amount}}}'})
            assert r.status_code == 403, r.text
            assert "four eyes" in r.text and f"rule &#39;{rule}&#39;" in r.text
        assert rt.approval(approval_id).status == ApprovalStatus.PENDING
        assert rt.audit_log() == []
        ok = client.post(url, data={"csrf_token": csrf, "changes": '{"amount": 300}'})
        assert ok.status_code == 303
    approval = rt.approval(approval_id)
    assert approval.status == ApprovalStatus.APPROVED and approval.decided_by == "olga"
    assert rt.task(approval.task_id).args["amount"] == 300
