"""The committer's fallback commits every other member of a failed group (issue 29,
defect 3): one completion that fails for a reason the committer did not expect
must not stop the others, or their tasks run again after their leases expire.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, TaskStatus, ToolContext, tool
from agentq.executor import committing
from agentq.executor.inflight import Outcome


class Item(BaseModel):
    n: int


@tool(queue="items")
def handle_item(ctx: ToolContext, args: Item) -> dict[str, int]:
    """Never run here: the test builds the outcomes itself."""
    return {"n": args.n}


def test_a_group_whose_third_of_five_fails_unexpectedly_commits_the_other_four(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = Runtime(f"sqlite:///{tmp_path / 'g.db'}", tools=[handle_item], clock=FakeClock())
    try:
        ids = rt.transact(
            lambda tx: [tx.enqueue("handle_item", {"n": n}).task_id for n in range(5)]
        )
        worker = rt.worker(queues=["items"], concurrency=5, group_commit=5)
        leased = worker._receive("items", 5, 0.0)
        runnable = sorted(worker.admission.claim(leased), key=lambda i: ids.index(i.task_id))
        assert [i.task_id for i in runnable] == ids
        outcomes = [Outcome("success", inf, result={"n": n}) for n, inf in enumerate(runnable)]
        third = ids[2]
        real_apply = committing.apply_outcome

        def apply(tx: Any, o: Outcome, *rest: Any) -> str:
            if o.inflight.task_id == third:  # neither MessageNotFound nor unavailable
                raise KeyError("a fault the committer does not know")
            return real_apply(tx, o, *rest)

        monkeypatch.setattr(committing, "apply_outcome", apply)
        worker._commit(outcomes)  # must not raise either
        statuses = [rt.task(i).status for i in ids]
        assert statuses[:2] + statuses[3:] == [TaskStatus.SUCCEEDED] * 4, statuses
        assert statuses[2] != TaskStatus.SUCCEEDED
        assert worker.stats["succeeded"] == 4 and worker.stats["commit_failed"] == 1
    finally:
        rt.close()
