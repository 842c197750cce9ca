"""A delivery's ledger record is decoded once, at its claim, and kept to its
completion (issue 38, item 3).

Before, PostgreSQL's fast path read and decoded a task's record for the claim,
decoded that text again to merge the claim's fields into it, and at the
completion read it once more (``SELECT ... FOR UPDATE``), decoded it and
merged the success's fields: three decodes and two reads of every record. Now
the claim swaps in the whole claimed record and keeps its text, and a plain
success is swapped in whole from that text (fields merged as before only if the
record changed meanwhile)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.backends.postgres import record_rows, records
from agentq.jsontext import decode
from agentq.ledger import Tables


class Args(BaseModel):
    n: int


@tool(queue="work")
def echo(ctx: ToolContext, args: Args) -> dict[str, int]:
    return {"n": args.n}


def test_a_plain_success_reads_and_decodes_its_record_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = Runtime(postgres_url, tools=[echo], clock=FakeClock())
    try:
        ids = [rt.enqueue_action("echo", {"n": n}).task_id for n in range(5)]
        decoded: list[str] = []
        updated: list[str] = []

        def counting_decode(text: str | bytes) -> Any:
            value = decode(text)
            if isinstance(value, dict) and value.get("task_id") in ids:
                decoded.append(value["task_id"])
            return value

        real_update = records.Records.update

        def counting_update(self: Any, conn: Any, table: str, items: Any) -> list[str]:
            if table == Tables.TASKS:
                updated.extend(key for key, _ in items)
            return real_update(self, conn, table, items)

        monkeypatch.setattr(records, "decode", counting_decode, raising=False)
        # Fields merged into a stored text are decoded there (none should be).
        monkeypatch.setattr(record_rows, "decode", counting_decode)
        monkeypatch.setattr(records.Records, "update", counting_update)
        rt.worker().drain()
        assert sorted(decoded) == sorted(ids)  # the claim's read, and only that
        assert updated == []  # no read-and-merge at the completion
        for n, task_id in enumerate(ids):
            task = rt.task(task_id)
            assert (task.status, task.result, task.args) == ("succeeded", {"n": n}, {"n": n})
    finally:
        rt.close()


def test_a_record_changed_after_the_claim_gets_the_success_merged_in(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swap from the claim's text finds another text: the success's fields
    # are set into what is stored, as before, and the other write stands.
    seen: list[str] = []
    updated: list[str] = []
    real_update = records.Records.update

    def counting_update(self: Any, conn: Any, table: str, items: Any) -> list[str]:
        if table == Tables.TASKS:
            updated.extend(key for key, _ in items)
        return real_update(self, conn, table, items)

    monkeypatch.setattr(records.Records, "update", counting_update)

    @tool(queue="work", name="marks")
    def marks(ctx: ToolContext, args: Args) -> int:
        def mark(tx: Any) -> None:
            rec = tx.tx.get_record(Tables.TASKS, ctx.task_id)
            tx.tx.put_record(Tables.TASKS, ctx.task_id, {**rec, "note": "written meanwhile"})

        rt.transact(mark)
        seen.append(ctx.task_id)
        return args.n

    rt = Runtime(postgres_url, tools=[marks], clock=FakeClock())
    try:
        task_id = rt.enqueue_action("marks", {"n": 7}).task_id
        rt.worker().drain()
        assert seen == [task_id]
        assert updated == [task_id]  # merged into the stored record
        stored = rt.backend.get_record(Tables.TASKS, task_id)
        assert stored is not None
        assert (stored["status"], stored["result"], stored["note"]) == (
            "succeeded", 7, "written meanwhile",
        )  # fmt: skip
    finally:
        rt.close()
