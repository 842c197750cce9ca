"""The behaviour each scenario example of issue 13 shows, asserted directly (the
examples themselves are run by tests/acceptance/test_examples.py): work after
commit, the dual-write failures, a dead worker's long task redelivered, a
29-day reminder cancelled atomically, a polymorphic queue, custom retry delays,
and ordering keys under redelivery and dead letters."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    Decision,
    FakeClock,
    PermanentError,
    Policy,
    RetryLater,
    Runtime,
    ToolContext,
    WorkerCrash,
    tool,
)
from agentq.backends import LEASE_SECONDS
from agentq.demo_server import DemoAPI
from agentq.http import checked
from tests.runtime.conftest import REDELIVERED_WITHIN

RUNS: list[tuple[str, str, int]] = []  # (tool, name, attempt)
CRASH_ONCE: set[str] = set()


class Named(BaseModel):
    name: str


class Sized(BaseModel):
    image_id: str
    size: str = "small"


def _run(ctx: ToolContext, args: Named) -> None:
    RUNS.append((ctx.tool, args.name, ctx.attempt))
    if args.name in CRASH_ONCE:
        CRASH_ONCE.discard(args.name)
        raise WorkerCrash("the worker was killed mid-run")
    if args.name.startswith("dead"):
        raise PermanentError("declined")
    if args.name.startswith("later") and ctx.attempt == 1:
        raise RetryLater(300, "locked for five minutes")
    if args.name.startswith("flaky") and ctx.attempt == 1:
        raise ConnectionError("reset")


@tool(queue="app")
def send_email(ctx: ToolContext, args: Named) -> None:
    _run(ctx, args)


@tool(queue="app")
def thumbnail(ctx: ToolContext, args: Sized) -> dict[str, str]:
    RUNS.append((ctx.tool, args.image_id, ctx.attempt))
    return {"size": args.size}


@tool(queue="notify")
def notify(ctx: ToolContext, args: Named) -> None:
    checked(ctx.http.post(f"{ctx.settings['api']}/notifications", json={}), "notifications")


TOOLS = [send_email, thumbnail, notify]


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    RUNS.clear()
    CRASH_ONCE.clear()
    with DemoAPI() as server:
        yield server


def runtime(db: str, clock: FakeClock, api: DemoAPI) -> Runtime:
    policy = Policy.model_validate({"tools": {"notify": {"allowed_hosts": ["127.0.0.1"]}}})
    return Runtime(db, tools=TOOLS, policies=policy, clock=clock, settings={"api": api.url})


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock, api: DemoAPI) -> Iterator[Runtime]:
    runtime_ = runtime(f"sqlite:///{tmp_path / 'agentq.db'}", clock, api)
    runtime_.transact(lambda tx: tx.execute("CREATE TABLE users (name TEXT PRIMARY KEY)"))
    yield runtime_
    runtime_.close()


def users(rt: Runtime) -> list[str]:
    return [r[0] for r in rt.transact(lambda tx: tx.execute("SELECT name FROM users"))]


def test_an_exception_in_the_decision_leaves_neither_the_row_nor_the_task(rt: Runtime) -> None:
    def sign_up(tx: Decision) -> None:
        tx.enqueue("send_email", {"name": "bob"})
        tx.execute("INSERT INTO users VALUES ('bob')")
        raise ValueError("email already taken")

    with pytest.raises(ValueError, match="already taken"):
        rt.transact(sign_up)
    assert users(rt) == [] and rt.tasks() == [] and rt.backend.stats("app").depth == 0
    rt.worker().drain()
    assert RUNS == []


def test_a_committed_decision_is_carried_out_after_its_process_died(
    tmp_path: Path, clock: FakeClock, api: DemoAPI
) -> None:
    db = f"sqlite:///{tmp_path / 'shop.db'}"
    first = runtime(db, clock, api)
    task = first.transact(lambda tx: tx.enqueue("notify", {"name": "o-3"}))
    first.close()  # gone right after the commit: nothing was sent
    assert api.requests("/notifications") == 0
    restarted = runtime(db, clock, api)
    restarted.worker().drain()
    assert restarted.task(task.task_id).status == "succeeded"
    assert api.charges_per_key("/notifications") == {task.task_id: 1}  # the task id is the key
    restarted.close()


def test_a_dead_workers_long_task_is_redelivered_once_its_lease_expires(
    rt: Runtime, clock: FakeClock
) -> None:
    CRASH_ONCE.add("report")
    task = rt.enqueue_action("send_email", {"name": "report"})
    rt.worker().drain()
    assert rt.task(task.task_id).status == "running"  # its worker died; the ledger cannot tell
    clock.advance(5)
    assert rt.worker().drain() == 0  # still leased to the dead worker: not redelivered yet
    clock.advance(5 + REDELIVERED_WITHIN)
    rt.worker().drain()
    info = rt.task(task.task_id)
    assert (info.status, info.deliveries, info.attempt) == ("succeeded", 2, 1)


def test_a_reminder_29_days_ahead_runs_then_and_a_conversion_cancels_it_atomically(
    rt: Runtime, clock: FakeClock
) -> None:
    def start(name: str) -> str:
        return rt.transact(
            lambda tx: tx.schedule("send_email", {"name": name}, at=tx.now + timedelta(days=29))
        ).task_id

    kept, converted, rolled_back = start("bob"), start("ada"), start("cy")

    def convert(task_id: str, fail: bool) -> Any:
        def fn(tx: Decision) -> None:
            tx.execute("INSERT INTO users VALUES (?)", (task_id,))
            tx.cancel(task_id, reason="converted")
            if fail:
                raise RuntimeError("the conversion's write failed")

        return fn

    rt.transact(convert(converted, fail=False))
    with pytest.raises(RuntimeError):
        rt.transact(convert(rolled_back, fail=True))  # the cancel is rolled back too
    assert rt.backend.stats("app").depth == 2  # the converted user's reminder is deleted
    clock.advance(timedelta(days=29) - timedelta(seconds=1))
    rt.worker().drain()
    assert RUNS == []
    clock.advance(1)
    rt.worker().drain()
    assert sorted(name for _, name, _ in RUNS) == ["bob", "cy"]
    assert rt.task(converted).status == "cancelled" and rt.task(kept).status == "succeeded"


def test_one_worker_on_one_queue_serves_every_tool_of_it(rt: Runtime) -> None:
    def decide(tx: Decision) -> None:
        tx.enqueue("send_email", {"name": "ada"})
        tx.enqueue("thumbnail", {"image_id": "img-789", "size": "large"})

    rt.transact(decide)
    msgs = [m for batch in rt.backend.stream("app", max_batch_size=10, max_duration=0)
            for m in batch]  # fmt: skip
    assert {m.payload["tool"] for m in msgs} == {"send_email", "thumbnail"}  # type in payload

    def put_back(tx: Any) -> None:  # the peek leased them: the same messages, unleased
        for m in msgs:
            tx.ack("app", m.key)
            tx.send("app", m.key, m.payload)

    rt.backend.transact(put_back)
    rt.worker(queues=["app"]).drain()
    assert sorted((t, n) for t, n, _ in RUNS) == [("send_email", "ada"), ("thumbnail", "img-789")]
    assert {t.tool: t.result for t in rt.tasks()}["thumbnail"] == {"size": "large"}


def test_custom_retry_delays_beside_the_default_backoff(
    rt: Runtime, api: DemoAPI, clock: FakeClock
) -> None:
    api.fail_next("/notifications", 429, retry_after=120)
    later = rt.enqueue_action("send_email", {"name": "later"}).task_id
    flaky = rt.enqueue_action("send_email", {"name": "flaky"}).task_id
    limited = rt.enqueue_action("notify", {"name": "n"}).task_id
    start = clock.now()
    rt.worker().drain()

    def delay(task_id: str) -> float:
        info = rt.task(task_id)
        assert info.status == "retry_scheduled" and info.next_attempt_at is not None
        return (info.next_attempt_at - start).total_seconds()

    assert delay(later) == 300 and rt.task(later).failures == 0
    assert delay(limited) == 120 and rt.task(limited).failures == 0  # over real HTTP
    assert 0.5 <= delay(flaky) <= 1 and rt.task(flaky).failures == 1


def test_a_redelivered_task_holds_back_its_key_and_a_dead_letter_releases_it(
    rt: Runtime, clock: FakeClock
) -> None:
    CRASH_ONCE.add("a2")

    def decide(tx: Decision) -> None:
        for key, names in (("a", ("a1", "a2", "a3")), ("b", ("b1", "dead-b2", "b3"))):
            for name in names:
                tx.enqueue("send_email", {"name": name}, ordering_key=key)

    rt.transact(decide)
    rt.worker().drain()
    ran = [name for _, name, _ in RUNS]
    assert "a3" not in ran  # a2's worker died: a3 waits for a2's redelivery
    assert ran.index("dead-b2") < ran.index("b3")  # b2 is dead; b3 ran after it anyway
    clock.advance(LEASE_SECONDS + REDELIVERED_WITHIN)
    rt.worker().drain()
    ran = [name for _, name, _ in RUNS]
    assert [n for n in ran if n.startswith("a")] == ["a1", "a2", "a2", "a3"]
    assert {t.status for t in rt.tasks()} == {"succeeded", "dead"}
