"""A PostgreSQL worker marks a batch running with its lease
(:mod:`agentq.executor.lease_claims`): the lease reads the ledger records with
the ready rows and swaps the claims in with its COMMIT. A record written between
that read and the COMMIT is not overwritten: its claim is made again after the
lease, from a fresh read, and the task runs once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import FakeClock, Runtime, ToolContext, tool  # noqa: E402
from agentq.backends import Message, StoredRecord, Transaction  # noqa: E402
from agentq.executor import lease_claims  # noqa: E402
from agentq.ledger import Tables  # noqa: E402

RAN: list[int] = []


class Args(BaseModel):
    n: int


@tool(queue="work")
def job(ctx: ToolContext, args: Args) -> int:
    RAN.append(args.n)
    return args.n


def test_a_record_written_during_the_lease_is_claimed_again_after_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    RAN.clear()
    rt = Runtime(postgres_url, tools=[job], clock=FakeClock())
    ids = [rt.enqueue_action("job", {"n": n}).task_id for n in range(3)]
    prepare = lease_claims._Claim.prepare
    calls: list[int] = []

    def meddling(
        self: Any, messages: Sequence[Message], records: Mapping[str, StoredRecord]
    ) -> Any:
        items = prepare(self, messages, records)
        if not calls:  # another writer, between the lease's read and its COMMIT

            def note(tx: Transaction) -> None:
                rec = tx.get_record(Tables.TASKS, ids[1])
                assert rec is not None
                tx.put_record(Tables.TASKS, ids[1], {**rec, "note": "meanwhile"})

            rt.backend.transact(note)
        calls.append(len(items))
        return items

    monkeypatch.setattr(lease_claims._Claim, "prepare", meddling)
    try:
        worker = rt.worker(concurrency=3, batch_size=3)
        assert worker.drain() == 3
        assert calls[0] == 3  # all three prepared with the lease
        assert sorted(RAN) == [0, 1, 2]  # each ran once
        recs = rt.backend.read_records(Tables.TASKS, ids)
        assert [recs[t].value["status"] for t in ids] == ["succeeded"] * 3
        assert [recs[t].value["deliveries"] for t in ids] == [1, 1, 1]
        assert recs[ids[1]].value["note"] == "meanwhile"
    finally:
        rt.close()
