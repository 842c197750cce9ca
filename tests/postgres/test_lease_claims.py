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


def test_every_lease_of_a_receive_claims_with_the_holds_read_before_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receive leases batch after batch (an idle worker's stream lasts seconds):
    the tools' holds are read again before each lease once half a second old, so
    no claim falls back to a transaction for want of a read."""
    from agentq.backends.postgres.leases import Leases
    from agentq.executor.careful_claims import CarefulClaims

    RAN.clear()
    clock = FakeClock()
    rt = Runtime(postgres_url, tools=[job], clock=clock)
    lease = Leases.lease

    def then_later(self: Leases, *args: Any, **kwargs: Any) -> Any:
        out = lease(self, *args, **kwargs)
        clock.advance(1.0)  # the next lease of the stream comes a second later
        return out

    careful: list[int] = []
    in_transaction = CarefulClaims._claim_in_transaction

    def counted(self: CarefulClaims, batch: list[Message]) -> Any:
        careful.append(len(batch))
        return in_transaction(self, batch)

    monkeypatch.setattr(Leases, "lease", then_later)
    monkeypatch.setattr(CarefulClaims, "_claim_in_transaction", counted)
    try:
        for n in range(24):
            rt.enqueue_action("job", {"n": n})
        assert rt.worker(concurrency=8, batch_size=8).drain() == 24
        assert sorted(RAN) == list(range(24))
        assert careful == []
    finally:
        rt.close()
