"""Arguments stored once, and large ones out of band (issue 13 item 6, issue 14).

A queue message names its task and carries no arguments; arguments up to the
runtime's threshold live in the task's record, larger ones in a payloads record
of their own, written with the task and deleted with it: in the transaction
that prunes the finished task once it is past its retention, so a finished
task shows its arguments for as long as it is kept. Handlers see the arguments
either way, and nothing an agent writes into its arguments can make a task read
another task's payload.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool
from agentq.errors import ConfigError, PayloadTooLarge
from agentq.ledger import Tables, TaskStatus
from agentq.retry import PermanentError

SEEN: list[dict[str, Any]] = []


class Image(BaseModel):
    name: str
    pixels: str
    meta: dict[str, Any] = {}


@tool(queue="images")
def resize(ctx: ToolContext, args: Image) -> dict[str, int]:
    SEEN.append(args.model_dump())
    return {"bytes": len(args.pixels)}


@tool(queue="images", max_attempts=1)
def broken(ctx: ToolContext, args: Image) -> dict[str, int]:
    raise PermanentError("cannot decode")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "agentq.db"


@pytest.fixture
def rt(db: Path) -> Iterator[Runtime]:
    SEEN.clear()
    runtime = Runtime(f"sqlite:///{db}", tools=[resize, broken], clock=FakeClock())
    yield runtime
    runtime.close()


def big(name: str = "cat.png", size: int = 20_000) -> dict[str, Any]:
    # Not ASCII, so its encoding is longer than its text: the threshold counts bytes.
    return {"name": name, "pixels": ("é" + "x" * 9) * (size // 10), "meta": {"w": 640}}


def payload_rows(rt: Runtime) -> list[str]:
    return [k for k, _ in rt.backend.list_records(Tables.PAYLOADS)]


def raw_messages(db: Path, queue: str) -> list[bytes]:
    conn = sqlite3.connect(db)
    try:
        return [bytes(r[0]) for r in conn.execute(f'SELECT payload FROM "{queue}"')]
    finally:
        conn.close()


def test_a_handler_receives_the_exact_large_arguments(rt: Runtime) -> None:
    args = big()
    task = rt.enqueue_action("resize", args)
    assert task.args == args  # the caller sees them as given
    assert task.args_ref is not None and task.args_ref["bytes"] > 4096
    assert rt.task(task.task_id).args == args  # read back from the payload row
    rt.worker().drain()
    assert [args] == SEEN
    assert rt.task(task.task_id).result == {"bytes": len(args["pixels"])}


def test_the_message_holds_a_reference_only_and_the_record_no_copy(rt: Runtime, db: Path) -> None:
    task = rt.enqueue_action("resize", big())
    (message,) = raw_messages(db, "images")
    assert len(message) < 4096
    envelope = json.loads(message)
    assert envelope["task_id"] == task.task_id and "args" not in envelope
    assert envelope["args_ref"] == task.args_ref
    record = rt.backend.get_record(Tables.TASKS, task.task_id)
    assert record is not None and "args" not in record
    assert payload_rows(rt) == [task.task_id]


def test_small_arguments_are_stored_once_in_the_record(rt: Runtime, db: Path) -> None:
    args = {"name": "icon.png", "pixels": "x" * 100}
    task = rt.enqueue_action("resize", args)
    (message,) = raw_messages(db, "images")
    assert "args" not in json.loads(message) and b"xxxx" not in message
    record = rt.backend.get_record(Tables.TASKS, task.task_id)
    assert record is not None and record["args"] == {**args, "meta": {}}
    assert task.args_ref is None and payload_rows(rt) == []


DAY = timedelta(days=1)


def prune_after_retention(rt: Runtime) -> int:
    """Let the retention (7 days) pass and prune; the payload rows deleted."""
    assert isinstance(rt.clock, FakeClock)
    rt.clock.advance(8 * DAY)
    return rt.prune().counts.payloads


def test_a_succeeded_task_shows_its_arguments_until_it_is_pruned_with_them(
    rt: Runtime,
) -> None:
    task = rt.enqueue_action("resize", big())
    rt.worker().drain()
    done = rt.task(task.task_id)
    assert done.status == TaskStatus.SUCCEEDED
    assert done.args == big() and done.args_ref == task.args_ref
    assert rt.wait(task.task_id, 1).args == big()  # waiting reads them too
    assert payload_rows(rt) == [task.task_id]
    assert isinstance(rt.clock, FakeClock)
    rt.clock.advance(1)
    assert rt.prune(dry_run=True, older_than=timedelta(0)).counts.payloads == 1
    assert prune_after_retention(rt) == 1
    assert payload_rows(rt) == [] and rt.tasks() == []


def test_a_cancelled_task_keeps_its_payload_until_it_is_pruned(rt: Runtime) -> None:
    task = rt.enqueue_action("resize", big())
    rt.cancel(task.task_id, by="alice")
    assert payload_rows(rt) == [task.task_id]
    assert rt.task(task.task_id).args == big()
    assert rt.worker().drain() is not None
    assert SEEN == []
    assert prune_after_retention(rt) == 1 and payload_rows(rt) == []


def test_a_dead_task_keeps_its_payload_for_replay(rt: Runtime) -> None:
    task = rt.enqueue_action("broken", big())
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.DEAD
    assert payload_rows(rt) == [task.task_id]
    entry = rt.dead_letters()[0]
    assert entry["args"] is None and entry["args_ref"]["bytes"] > 4096
    assert rt.task(task.task_id).args == big()  # still readable while it is dead
    rt.replay(task.task_id, by="alice")
    assert payload_rows(rt) == [task.task_id]
    rt.worker().drain()  # dead again: still kept
    assert payload_rows(rt) == [task.task_id]
    assert prune_after_retention(rt) == 0  # its dead-letter entry is unresolved


def test_a_replayed_task_that_succeeds_keeps_its_payload_until_pruned(db: Path) -> None:
    SEEN.clear()
    flaky_runs: list[int] = []

    @tool(queue="images", max_attempts=1)
    def flaky(ctx: ToolContext, args: Image) -> dict[str, int]:
        flaky_runs.append(1)
        if len(flaky_runs) == 1:
            raise PermanentError("first run fails")
        return {"bytes": len(args.pixels)}

    with Runtime(f"sqlite:///{db}", tools=[flaky], clock=FakeClock()) as rt:
        task = rt.enqueue_action("flaky", big())
        rt.worker().drain()
        assert payload_rows(rt) == [task.task_id]
        rt.replay(task.task_id, by="alice")
        rt.worker().drain()
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
        assert rt.task(task.task_id).args == big()
        assert prune_after_retention(rt) == 1 and payload_rows(rt) == []


def test_a_dead_task_whose_entry_is_deleted_keeps_its_arguments_until_pruned(
    rt: Runtime,
) -> None:
    task = rt.enqueue_action("broken", big())
    rt.worker().drain()
    assert rt.delete_dead_letters([task.task_id], by="alice") == [task.task_id]
    assert payload_rows(rt) == [task.task_id]
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.DEAD and info.args == big()
    assert prune_after_retention(rt) == 1
    assert payload_rows(rt) == [] and rt.tasks() == []


def test_no_payload_row_outlives_its_task_whichever_way_it_ended(db: Path) -> None:
    @tool(queue="images", max_attempts=1)
    def failing(ctx: ToolContext, args: Image) -> None:
        raise PermanentError("fails")

    clock = FakeClock()
    with Runtime(f"sqlite:///{db}", tools=[resize, broken, failing], clock=clock,
                 args_inline_bytes=0) as rt:  # fmt: skip
        ok = rt.enqueue_action("resize", big("ok"))
        rt.cancel(rt.enqueue_action("resize", big("cancelled")).task_id, by="alice")
        dead = rt.enqueue_action("broken", big("dead"))
        prerequisite = rt.enqueue_action("failing", {"name": "p", "pixels": ""})
        voided = rt.enqueue_action("resize", big("voided"), after=[prerequisite.task_id])
        rt.worker().drain()
        assert rt.task(voided.task_id).status == TaskStatus.CANCELLED
        assert rt.task(ok.task_id).status == TaskStatus.SUCCEEDED
        rt.delete_dead_letters([dead.task_id, prerequisite.task_id], by="alice")
        assert len(payload_rows(rt)) == 5
        clock.advance(8 * DAY)
        report = rt.prune()
        assert (report.counts.tasks, report.counts.payloads) == (5, 5)
        assert rt.tasks() == [] and payload_rows(rt) == []


def test_a_reference_forged_in_the_arguments_reads_nothing_of_another_task(
    rt: Runtime,
) -> None:
    secret = rt.enqueue_action("resize", big("secret.png"))
    assert secret.args_ref is not None
    # An agent copies what it saw of another task's envelope into its own call,
    # small (inline) and large (out of band): they are just arguments.
    forged_meta = {"args_ref": secret.args_ref, "task_id": secret.task_id, "v": 2}
    small = rt.enqueue_action("resize", {"name": "a", "pixels": "p", "meta": forged_meta})
    large = rt.enqueue_action("resize", {**big("b"), "meta": forged_meta})
    rt.worker().drain()
    by_name = {s["name"]: s for s in SEEN}
    assert by_name["a"]["meta"] == forged_meta and by_name["a"]["pixels"] == "p"
    assert by_name["b"]["pixels"] == big("b")["pixels"]
    assert by_name["secret.png"]["pixels"] == big("secret.png")["pixels"]
    assert rt.task(small.task_id).args_ref is None
    assert rt.task(large.task_id).args_ref != secret.args_ref


def test_a_forged_envelope_reference_on_the_queue_is_not_followed(rt: Runtime) -> None:
    secret = rt.enqueue_action("resize", big("secret.png"))
    mine = rt.enqueue_action("resize", {"name": "mine", "pixels": "p"})

    def forge(tx: Any) -> None:
        # Someone with raw queue access rewrites a message to point at another payload.
        tx.tx.ack("images", (mine.task_id, 1))
        tx.tx.send(
            "images", (mine.task_id, 1),
            {"v": 2, "task_id": mine.task_id, "tool": "resize", "attempt": 1,
             "args_ref": secret.args_ref, "enqueued_at": mine.created_at.isoformat()},
        )  # fmt: skip

    rt.transact(forge)
    rt.worker().drain()
    assert {s["name"]: s["pixels"] for s in SEEN}["mine"] == "p"


def test_the_threshold_is_settable_and_checked(db: Path) -> None:
    with Runtime(f"sqlite:///{db}", tools=[resize], clock=FakeClock(), args_inline_bytes=0) as rt:
        task = rt.enqueue_action("resize", {"name": "tiny", "pixels": ""})
        assert task.args_ref is not None and payload_rows(rt) == [task.task_id]
    with pytest.raises(ConfigError, match="args_inline_bytes"):
        Runtime(f"sqlite:///{db}", tools=[resize], args_inline_bytes=-1)


def test_the_hard_limit_stays(rt: Runtime) -> None:
    with pytest.raises(PayloadTooLarge, match=r"tool .resize.*65536"):
        rt.enqueue_action("resize", big(size=70_000))
    assert rt.tasks() == [] and payload_rows(rt) == []


def test_agentq_toml_sets_the_threshold(tmp_path: Path) -> None:
    from agentq.config import load_config

    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text("[agentq]\nargs_inline_bytes = 100\n")
    bad.write_text("[agentq]\nargs_inline_bytes = 100000\n")
    assert load_config(good).agentq.args_inline_bytes == 100
    assert load_config(tmp_path / "absent.toml").agentq.args_inline_bytes == 4096
    with pytest.raises(ConfigError, match="args_inline_bytes"):
        load_config(bad)
