"""Transaction functions must be safe to re-run (defect 9 of issue 9).

A backend may run a transaction function more than once (an abort at COMMIT, a
shared group commit that failed), and the executor's committer re-runs a failed
group one outcome at a time. Each run must start from the same state: attempt
numbers, failure counts, delivery counts and the worker's stats stay exact.

:class:`FlakyCommits` wraps the real SQLite backend and, for the transactions a
test picks, runs the function once in a transaction that is rolled back, then
either runs it again for real (``"rerun"``: what a backend does after an
abort) or fails with :class:`TransactionAborted` (``"abort"``: the caller sees
the commit fail after its function ran).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar

import pytest
from pydantic import BaseModel

from agentq import (
    Checkpoint,
    Decision,
    FakeClock,
    PermanentError,
    Policy,
    Runtime,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.backends import Backend, Transaction
from agentq.envelope import envelope_payload
from agentq.errors import TransactionAborted

T = TypeVar("T")
Plan = Literal["ok", "rerun", "abort"]


class Arg(BaseModel):
    name: str
    n: int = 0


@tool(queue="rerun")
def always_fails(ctx: ToolContext, args: Arg) -> None:
    raise RuntimeError(f"{args.name} failed")


@tool(queue="rerun")
def refused(ctx: ToolContext, args: Arg) -> None:
    raise PermanentError("refused")


@tool(queue="rerun")
def steps(ctx: ToolContext, args: Arg) -> Arg | Checkpoint:
    done = int((ctx.checkpoint_state or {"done": 0})["done"]) + 1
    if done < args.n:
        return ctx.checkpoint({"done": done}, after=10)
    return Arg(name=args.name, n=done)


@tool(queue="rerun")
def fine(ctx: ToolContext, args: Arg) -> Arg:
    return args


class _RolledBack(Exception):
    pass


class FlakyCommits:
    """A backend whose chosen transactions run their function twice (see module doc)."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.plan: Callable[[int, bool], Plan] = lambda n, durable: "ok"
        self.count = 0
        self.troubled = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def transact(
        self, fn: Callable[[Transaction], T], *, durable: bool = True, fenced: bool = False
    ) -> T:
        with self._lock:
            n, self.count = self.count, self.count + 1
        plan = self.plan(n, durable)
        if plan != "ok":
            self.troubled += 1

            def then_roll_back(tx: Transaction) -> T:
                fn(tx)
                raise _RolledBack

            try:
                self._inner.transact(then_roll_back, durable=durable, fenced=fenced)
            except _RolledBack:
                pass
            if plan == "abort":
                raise TransactionAborted("injected: the commit failed after the function ran")
        return self._inner.transact(fn, durable=durable, fenced=fenced)


@pytest.fixture
def flaky(backend_url: str, clock: FakeClock) -> Iterator[tuple[Runtime, FlakyCommits]]:
    from agentq.backends import open_backend

    backend = FlakyCommits(open_backend(backend_url, clock=clock))
    policy = Policy.model_validate({"defaults": {"backoff_initial": "1s", "max_attempts": 2}})
    rt = Runtime(
        backend,
        tools=[always_fails, refused, steps, fine],
        policies=policy,
        clock=clock,
    )
    yield rt, backend
    rt.close()
    backend._inner.close()


def committer(n: int, durable: bool) -> bool:
    return threading.current_thread().name == "agentq-committer"


def abort_first_commit_of_each_worker() -> Callable[[int, bool], Plan]:
    """The first transaction of each worker's committer (a group commit) fails
    after its function ran; the committer then commits one outcome at a time."""
    seen: list[threading.Thread] = []  # kept alive, so no two share an identity

    def plan(n: int, durable: bool) -> Plan:
        thread = threading.current_thread()
        if committer(n, durable) and all(t is not thread for t in seen):
            seen.append(thread)
            return "abort"
        return "ok"

    return plan


def run_until_done(rt: Runtime, clock: FakeClock, rounds: int = 10) -> None:
    for _ in range(rounds):
        rt.worker().drain()
        pending = [t.next_attempt_at for t in rt.tasks() if not t.done and t.next_attempt_at]
        if not pending:
            return
        clock.set(max(clock.now(), min(p for p in pending if p is not None)))


def enqueue_mix(rt: Runtime) -> dict[str, str]:
    return rt.transact(
        lambda tx: {
            "fails": tx.enqueue("always_fails", {"name": "f"}).task_id,
            "refused": tx.enqueue("refused", {"name": "r"}).task_id,
            "steps": tx.enqueue("steps", {"name": "s", "n": 3}).task_id,
            "fine": tx.enqueue("fine", {"name": "ok"}).task_id,
        }
    )


def check_exact(rt: Runtime, ids: dict[str, str]) -> None:
    fails = rt.task(ids["fails"])
    assert fails.status == TaskStatus.DEAD
    assert (fails.attempt, fails.failures) == (2, 2)
    assert fails.error == "failed 2 time(s); last: RuntimeError: f failed"
    refused_ = rt.task(ids["refused"])
    assert refused_.status == TaskStatus.DEAD and (refused_.attempt, refused_.failures) == (1, 0)
    steps_ = rt.task(ids["steps"])
    assert steps_.status == TaskStatus.SUCCEEDED
    assert steps_.attempt == 3 and steps_.result == {"name": "s", "n": 3}
    fine_ = rt.task(ids["fine"])
    assert fine_.status == TaskStatus.SUCCEEDED and fine_.attempt == 1
    for t in rt.tasks():
        assert t.deliveries == 1, t


@pytest.mark.parametrize(
    "trouble",
    [
        pytest.param(lambda n, durable: "rerun", id="every-transaction-rerun"),
        pytest.param(
            lambda n, durable: "rerun" if committer(n, durable) else "ok", id="commits-rerun"
        ),
        pytest.param(
            "abort-first-commit-of-each-worker", id="group-commit-aborts-then-one-at-a-time"
        ),
    ],
)
def test_attempts_and_failures_stay_exact_when_commits_are_re_run(
    flaky: tuple[Runtime, FlakyCommits],
    clock: FakeClock,
    trouble: Callable[[int, bool], Plan] | str,
) -> None:
    rt, backend = flaky
    ids = enqueue_mix(rt)
    backend.plan = abort_first_commit_of_each_worker() if isinstance(trouble, str) else trouble
    first = rt.worker()
    first.drain()
    fails = rt.task(ids["fails"])
    # One failure so far: a retry is scheduled, not a dead letter for two.
    assert fails.status == TaskStatus.RETRY_SCHEDULED
    assert (fails.attempt, fails.failures) == (2, 1)
    assert first.stats["retried"] == 1 and first.stats["dead"] == 1
    assert first.stats["checkpointed"] == 1 and first.stats["succeeded"] == 1
    run_until_done(rt, clock)
    assert backend.troubled > 0
    check_exact(rt, ids)


def test_a_group_commit_that_fails_after_running_falls_back_without_double_counting(
    flaky: tuple[Runtime, FlakyCommits], clock: FakeClock
) -> None:
    """The issue's case: a group commit that falls back to one at a time counted the
    failure twice, so with max_attempts=2 a task that failed once was dead."""
    rt, backend = flaky
    task = rt.enqueue_action("always_fails", {"name": "once"})
    aborted: list[int] = []

    def abort_first_commit(n: int, durable: bool) -> Plan:
        if committer(n, durable) and not aborted:
            aborted.append(n)
            return "abort"
        return "ok"

    backend.plan = abort_first_commit
    worker = rt.worker()
    worker.drain()
    assert aborted and worker.stats["group_commits"] == 0 and worker.stats["retried"] == 1
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.RETRY_SCHEDULED, info.error
    assert (info.attempt, info.failures) == (2, 1)


@pytest.mark.parametrize("swaps_in_sets", [True, False], ids=["fast-claim", "claim-in-tx"])
def test_claims_stay_exact_when_the_claim_transactions_abort(
    flaky: tuple[Runtime, FlakyCommits],
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    swaps_in_sets: bool,
) -> None:
    """Aborts on the claim's fast path (compare-and-swap), on the claim of a whole
    batch in a transaction and on its one-at-a-time fallback: each delivery is
    counted once, and so is the stale message beside them."""
    rt, backend = flaky
    monkeypatch.setattr(backend._inner, "swaps_in_sets", swaps_in_sets)
    good = rt.transact(lambda tx: [tx.enqueue("fine", {"name": f"g{i}"}) for i in range(3)])

    def stale_copy(tx: Decision) -> None:
        # A message for an attempt the task is not at: dropped as stale.
        rec = tx.tx.get_record("tasks", good[0].task_id)
        assert rec is not None
        tx.tx.send("rerun", (rec["task_id"], 7), envelope_payload(dict(rec, attempt=7)))

    rt.transact(stale_copy)
    aborts = {"left": 3}

    def abort_claims(n: int, durable: bool) -> Plan:
        # Claims are the non-durable transactions: the fast path's swap, then the
        # batch's claim in a transaction, then the first one-at-a-time claim.
        if not durable and aborts["left"]:
            aborts["left"] -= 1
            return "abort"
        return "ok"

    backend.plan = abort_claims
    stats: Counter[str] = Counter()
    for _ in range(3):
        worker = rt.worker()
        worker.drain()
        stats.update(worker.stats)
        clock.advance(60)  # a claim that could not commit is redelivered after its lease
    assert aborts["left"] == 0
    assert stats["stale_message"] == 1
    assert stats["succeeded"] == 3
    for t in good:
        done = rt.task(t.task_id)
        assert done.status == TaskStatus.SUCCEEDED and done.deliveries == 1
