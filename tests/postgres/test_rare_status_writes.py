"""The rare-status column after the PostgreSQL worker's own record writes: the
claim made with the lease (a compare-and-swap sent with its COMMIT) and the
completion's compare-and-swaps checked in SQL (from the text the claim swapped
in). A write that left the column as it was kept a task claimed from
``retry_scheduled`` listed as such while it ran, and after it succeeded."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

psycopg = pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")

from agentq import FakeClock, Runtime, ToolContext, tool  # noqa: E402
from agentq.backends import encode_fields, encode_record, open_backend  # noqa: E402
from agentq.backends.postgres import records  # noqa: E402
from agentq.ledger import Tables  # noqa: E402


class Args(BaseModel):
    n: int


def _rare(url: str, key: str) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT rare_status FROM agentq.records WHERE tbl = 'tasks' AND k = %s", (key,)
        ).fetchone()
    assert row is not None
    return row[0]


def test_a_retry_claimed_with_its_lease_leaves_the_rare_status(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, Any]] = []  # (attempt, the column while it ran)
    leased: list[str] = []
    swap_at_commit = records.Records.swap_at_commit

    def spy(self: Any, tx: Any, table: str, items: Any) -> Any:
        leased.extend(key for key, _, _ in items)
        return swap_at_commit(self, tx, table, items)

    monkeypatch.setattr(records.Records, "swap_at_commit", spy)

    @tool(queue="work", name="flaky")
    def flaky(ctx: ToolContext, args: Args) -> int:
        seen.append((ctx.attempt, _rare(postgres_url, ctx.task_id)))
        if ctx.attempt == 1:
            raise RuntimeError("down")
        return args.n

    clock = FakeClock()
    rt = Runtime(postgres_url, tools=[flaky], clock=clock)
    try:
        task_id = rt.enqueue_action("flaky", {"n": 1}).task_id
        rt.worker().drain()
        assert rt.task(task_id).status == "retry_scheduled"
        assert _rare(postgres_url, task_id) == "retry_scheduled"  # the completion's write
        clock.advance(3600)
        rt.worker().drain()
        assert rt.task(task_id).status == "succeeded"
        assert leased.count(task_id) == 2  # both claims made with the lease
        assert seen == [(1, None), (2, None)]  # running: not a rare status
        assert _rare(postgres_url, task_id) is None
        assert rt.backend.list_records(Tables.TASKS, where={"status": ["retry_scheduled"]}) == []
    finally:
        rt.close()


def test_a_swap_from_the_claims_text_sets_the_rare_status_or_leaves_a_change(
    postgres_url: str,
) -> None:
    b = open_backend(postgres_url)
    try:
        for key in ("a", "b"):
            b.transact(lambda tx, key=key: tx.put_record(
                "tasks", key, encode_record({"status": "waiting", "tool": "t"})))  # fmt: skip
        versions = b.read_records("tasks", ["a", "b"])
        claimed = {k: encode_record({"status": "running", "tool": "t"}) for k in ("a", "b")}
        assert b.transact(lambda tx: tx.replace_records(
            "tasks", [(k, versions[k].version, claimed[k]) for k in ("a", "b")])) == []  # fmt: skip
        assert (_rare(postgres_url, "a"), _rare(postgres_url, "b")) == (None, None)
        # Another process changes b after its claim: the swap from the claim's
        # text (checked in SQL, not read) must not overwrite it.
        other = open_backend(postgres_url)
        try:
            other.transact(
                lambda tx: tx.update_records("tasks", [("b", encode_fields({"note": 1}))])
            )
        finally:
            other.close()
        dead = encode_record({"status": "dead", "tool": "t"})
        assert b.transact(
            lambda tx: tx.replace_records("tasks", [("a", claimed["a"], dead)])
        ) == []  # fmt: skip
        assert b.transact(
            lambda tx: tx.replace_records("tasks", [("b", claimed["b"], dead)])
        ) == ["b"]  # fmt: skip
        assert _rare(postgres_url, "a") == "dead"
        assert _rare(postgres_url, "b") is None
        assert b.get_record("tasks", "b") == {"status": "running", "tool": "t", "note": 1}
    finally:
        b.close()
