"""``Backend.transact(fn, fenced=True)`` on PostgreSQL: READ COMMITTED, where a
transaction takes part in no serializable conflict (issue 39, item 2.8; issue
38, item 2). The worker's bookkeeping and its fast-path claim (a compare-and-swap
of each record from the version read) run so."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from agentq import Runtime, ToolContext, tool
from agentq.backends import Transaction

psycopg = pytest.importorskip("psycopg")


class Args(BaseModel):
    n: int


@tool(queue="work")
def noop(ctx: ToolContext, args: Args) -> int:
    return args.n


def _isolation(tx: Transaction) -> str:
    return str(tx.execute("SELECT current_setting('transaction_isolation')")[0][0])


def test_a_fenced_transaction_runs_at_read_committed(postgres_url: str) -> None:
    with Runtime(postgres_url, tools=[noop]) as rt:
        assert rt.backend.transact(_isolation) == "serializable"
        assert rt.backend.transact(_isolation, fenced=True) == "read committed"


def test_the_workers_fast_path_claim_is_fenced(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The claim goes with the lease's COMMIT (agentq.executor.lease_claims): a
    # compare-and-swap of each record from the version the lease read.
    from agentq.backends.postgres.records import Records

    seen: list[str] = []
    swap = Records.swap_at_commit

    def watched(self: Records, tx: Any, table: str, items: Any) -> Any:
        seen.append(str(tx.execute("SELECT current_setting('transaction_isolation')", ())
                        .fetchone()[0]))  # fmt: skip
        return swap(self, tx, table, items)

    monkeypatch.setattr(Records, "swap_at_commit", watched)
    with Runtime(postgres_url, tools=[noop]) as rt:
        for n in range(3):
            rt.enqueue_action("noop", {"n": n})
        assert rt.worker().drain() == 3
    assert seen and set(seen) == {"read committed"}
