"""A model-based test of the task lifecycle (hypothesis stateful).

Random sequences of enqueue, schedule (at a future time), enqueue needing approval,
approve, reject, cancel, replay, fake-clock advance, worker drain, a stray message
written around agentq, a handler told to fail, and injected aborts (a transaction
that fails after doing its writes, and a failing completion commit) run against a
Runtime on a real SQLite file with a FakeClock. After every step the invariants
below must hold; they are written by meaning (see the status helpers), so a renamed
or added status is a one-line change.

Invariants:

* a cancelled or rejected task never runs afterwards;
* no task's handler effect (its ``on_commit`` write) is recorded twice, and a
  succeeded task's is recorded exactly once;
* a failed run is counted once, even when its commit is re-run (a group commit that
  falls back to one task at a time);
* a task needing approval never runs unapproved;
* a scheduled task never runs before its time, even when approved earlier;
* replay only resurrects dead tasks (and a dead task can be replayed);
* a final task has no queue message left: each queue holds exactly one message per
  live task (plus stray messages not yet drained);
* a decided or voided approval leaves no escalation timer;
* approve/reject of a cancelled task's approval (or of a decided one) raises an
  ``AgentQError`` and changes nothing;
* an aborted transaction changes nothing;
* illegal moves raise only ``AgentQError`` subclasses, never anything else.
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from agentq import FakeClock, Runtime
from agentq.errors import AgentQError
from agentq.ledger import Tables, TaskStatus
from agentq.runtime import Decision
from tests.runtime._lifecycle_world import (
    CALLS,
    FAILED,
    FAILING,
    LOCK,
    OPS,
    POLICY,
    QUEUE,
    InjectedAbort,
    Model,
    charge,
    holds_message,
    is_dead,
    is_final,
    ledger_snapshot,
    waits_for_human,
)


class LifecycleMachine(RuleBasedStateMachine):
    tasks = Bundle("tasks")

    def __init__(self) -> None:
        super().__init__()
        with LOCK:
            CALLS.clear()
            FAILING.clear()
            FAILED.clear()
        self.dir = tempfile.mkdtemp(prefix="agentq-model-")
        self.clock = FakeClock()
        self.rt = Runtime(
            f"sqlite:///{Path(self.dir) / 'model.db'}", tools=[charge], policies=POLICY,
            clock=self.clock,
        )  # fmt: skip
        self.rt.transact(lambda tx: tx.execute("CREATE TABLE effects (task_id TEXT)"))
        self.model: dict[str, Model] = {}
        self.strays: Counter[str] = Counter()  # queue -> stray messages not yet drained
        self.n = 0

    def teardown(self) -> None:
        self.rt.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------

    def _call(self, what: str, fn: Any, *args: Any) -> tuple[bool, Any]:
        """(True, result) or (False, the AgentQError); anything else fails the test."""
        try:
            return True, fn(*args)
        except AgentQError as exc:
            return False, exc
        except InjectedAbort:
            raise
        except Exception as exc:  # the invariant: only AgentQError subclasses
            raise AssertionError(
                f"illegal moves raise only AgentQError: {what} raised {type(exc).__name__}: {exc}"
            ) from exc

    def _status(self, task_id: str) -> str:
        return str(self.rt.task(task_id).status)

    def _new(self, amount: float, delay: float | None) -> Model:
        self.n += 1
        args = {"n": self.n, "amount": amount}
        if delay is None:
            ok, info = self._call("enqueue", self.rt.enqueue_action, "charge", args)
        else:
            at = self.clock.now() + timedelta(seconds=delay)

            def schedule(tx: Decision) -> Any:
                return tx.schedule("charge", args, at=at)

            ok, info = self._call("schedule", self.rt.transact, schedule)
        assert ok, f"a valid enqueue was refused: {info}"
        m = Model(info.task_id, info.approval_id, None if delay is None else at)
        self.model[m.task_id] = m
        return m

    def _stop(self, m: Model) -> None:
        with LOCK:
            m.stopped_at_calls = len(CALLS[m.task_id])

    # -- rules: decisions ----------------------------------------------------------

    @rule(target=tasks, amount=st.sampled_from([5.0, 50.0]))
    def enqueue(self, amount: float) -> str:
        return self._new(amount, None).task_id

    @rule(target=tasks, amount=st.sampled_from([500.0, 150.0]))
    def enqueue_needing_approval(self, amount: float) -> str:
        m = self._new(amount, None)
        assert m.approval_id, "an amount above 100 must need approval"
        return m.task_id

    @rule(
        target=tasks,
        amount=st.sampled_from([5.0, 500.0]),
        delay=st.sampled_from([30.0, 3600.0, 86400.0]),
    )
    def schedule(self, amount: float, delay: float) -> str:
        return self._new(amount, delay).task_id

    @rule(task_id=tasks)
    def approve(self, task_id: str) -> None:
        m = self.model[task_id]
        if m.approval_id is None:
            return
        legal = not m.decided and m.stopped_at_calls is None
        ok, got = self._call("approve", self.rt.approve, m.approval_id, "alice")
        if not legal:
            assert not ok, (
                f"approve of a {'decided' if m.decided else 'cancelled'} task's approval "
                f"must raise an AgentQError (task {task_id} is now {self._status(task_id)})"
            )
            return
        assert ok, f"approve of an open approval was refused: {got}"
        m.approved = m.decided = True

    @rule(task_id=tasks)
    def reject(self, task_id: str) -> None:
        m = self.model[task_id]
        if m.approval_id is None:
            return
        legal = not m.decided and m.stopped_at_calls is None
        ok, got = self._call("reject", self.rt.reject, m.approval_id, "bob", "no")
        if not legal:
            assert not ok, (
                f"reject of a {'decided' if m.decided else 'cancelled'} task's approval "
                f"must raise an AgentQError (task {task_id} is now {self._status(task_id)})"
            )
            return
        assert ok, f"reject of an open approval was refused: {got}"
        m.decided = True
        self._stop(m)

    @rule(task_id=tasks)
    def cancel(self, task_id: str) -> None:
        m = self.model[task_id]
        before = self._status(task_id)
        ok, got = self._call("cancel", self.rt.cancel, task_id)
        if is_final(before):
            assert not (ok and got), f"cancel of a {before} task reported a cancellation"
            return
        assert ok and got, f"cancel of a {before} task was refused: {got}"
        self._stop(m)

    @rule(task_id=tasks)
    def replay(self, task_id: str) -> None:
        m = self.model[task_id]
        before = self._status(task_id)
        ok, got = self._call("replay", self.rt.replay, task_id)
        if not is_dead(before):
            assert not ok, f"replay resurrected a {before} task {task_id}: only dead ones"
            return
        assert ok, f"replay of a dead task was refused: {got}"
        with LOCK:
            m.failed_before = FAILED[task_id]

    # -- rules: the world ------------------------------------------------------------

    @rule(seconds=st.sampled_from([1.0, 15.0, 600.0, 3600.0, 72 * 3600.0 + 60]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def drain(self) -> None:
        self._call("drain", self.rt.worker(concurrency=2).drain)
        self.strays.clear()

    @rule(task_id=tasks)
    def make_it_fail(self, task_id: str) -> None:
        with LOCK:
            FAILING[task_id] += 2  # max_attempts=2: enough to dead-letter it

    @rule(task_id=tasks)
    def stray_message(self, task_id: str) -> None:
        """A message under the task's id that agentq did not write (another program)."""
        self.n += 1
        key = (task_id, 1000 + self.n)
        self.rt.backend.transact(lambda tx: tx.send(QUEUE, key, {"not": "an envelope"}))
        self.strays[QUEUE] += 1

    # -- rules: injected aborts ---------------------------------------------------------

    def _ops(self, task_id: str) -> dict[str, Any]:
        m = self.model[task_id]
        return {
            "enqueue": lambda: self.rt.enqueue_action("charge", {"n": 0, "amount": 1.0}),
            "approval": lambda: self.rt.enqueue_action("charge", {"n": 0, "amount": 999.0}),
            "approve": lambda: self.rt.approve(m.approval_id or "apr_none", "eve"),
            "reject": lambda: self.rt.reject(m.approval_id or "apr_none", "eve"),
            "cancel": lambda: self.rt.cancel(task_id),
            "replay": lambda: self.rt.replay(task_id),
        }

    @contextmanager
    def _transactions(self, body: Any) -> Iterator[None]:
        """Every backend transaction meanwhile runs ``body(fn, tx)`` instead of ``fn(tx)``."""
        real = self.rt.backend.transact
        self.rt.backend.transact = (  # type: ignore[method-assign]
            lambda fn, **kw: real(lambda tx: body(fn, tx), **kw)
        )
        try:
            yield
        finally:
            del self.rt.backend.transact

    @rule(task_id=tasks, op=st.sampled_from(OPS))
    def aborted(self, task_id: str, op: str) -> None:
        """The operation's transaction fails after its writes: nothing may change."""
        before = ledger_snapshot(self.rt)
        depth = self.rt.backend.stats(QUEUE).depth

        def abort(fn: Any, tx: Any) -> Any:
            fn(tx)
            raise InjectedAbort(op)

        with self._transactions(abort):
            try:
                self._call(f"aborted {op}", self._ops(task_id)[op])
            except InjectedAbort:
                pass
        assert ledger_snapshot(self.rt) == before, f"an aborted {op} changed the ledger"
        assert self.rt.backend.stats(QUEUE).depth == depth, f"an aborted {op} changed the queue"

    @rule(task_id=tasks, op=st.sampled_from([*OPS, "drain"]))
    def run_twice(self, task_id: str, op: str) -> None:
        """Each transaction runs, is rolled back and runs again (as after an abort):
        transaction functions must not carry state from one run into the next."""

        def twice(fn: Any, tx: Any) -> Any:
            tx.execute("SAVEPOINT model_rerun")
            fn(tx)
            tx.execute("ROLLBACK TO model_rerun")
            tx.execute("RELEASE model_rerun")
            return fn(tx)

        with self._transactions(twice):
            if op == "drain":
                self.drain()
                return
            m = self.model[task_id]
            status = self._status(task_id)
            ok, got = self._call(f"{op} run twice", self._ops(task_id)[op])
        # Keep the model in step with what a single run does.
        if ok and op in ("enqueue", "approval"):
            self.model[got.task_id] = Model(got.task_id, got.approval_id)
        elif ok and op == "approve":
            m.approved = m.decided = True
        elif ok and op == "reject":
            m.decided = True
            self._stop(m)
        elif ok and op == "cancel" and got:
            self._stop(m)
        elif ok and op == "replay":
            assert is_dead(status), f"replay resurrected a {status} task {task_id}"
            with LOCK:
                m.failed_before = FAILED[task_id]

    @rule(nth=st.sampled_from([1, 2]))
    def drain_with_a_failing_completion_commit(self, nth: int) -> None:
        """The ``nth`` completion write fails inside its transaction, after the writes
        before it (with 2, a group commit falls back to one task at a time)."""
        hits = Counter[str]()

        def nth_hit(info: dict[str, object]) -> bool:
            hits["n"] += 1
            return hits["n"] == nth

        self.rt.faults.arm("before_completion_commit", RuntimeError("injected"), when=nth_hit)
        try:
            self.drain()
        finally:
            self.rt.faults.disarm("before_completion_commit")

    # -- invariants ----------------------------------------------------------------------

    def _calls(self) -> dict[str, list[datetime]]:
        with LOCK:
            return {k: list(v) for k, v in CALLS.items()}

    @invariant()
    def cancelled_or_rejected_never_runs_afterwards(self) -> None:
        calls = self._calls()
        for m in self.model.values():
            if m.stopped_at_calls is not None:
                ran = len(calls.get(m.task_id, []))
                assert ran == m.stopped_at_calls, (
                    f"task {m.task_id} ran {ran - m.stopped_at_calls} time(s) after it was "
                    "cancelled or rejected"
                )

    @invariant()
    def no_effect_recorded_twice(self) -> None:
        rows = self.rt.transact(lambda tx: tx.execute("SELECT task_id FROM effects"))
        effects = Counter(r[0] for r in rows)
        for task_id, n in effects.items():
            assert n == 1, f"task {task_id}'s effect was recorded {n} times"
        for task_id in self.model:
            if self._status(task_id) == TaskStatus.SUCCEEDED:
                assert effects[task_id] == 1, f"task {task_id} succeeded without its effect"

    @invariant()
    def each_failed_run_is_counted_once(self) -> None:
        with LOCK:
            failed = dict(FAILED)
        for m in self.model.values():
            counted = self.rt.task(m.task_id).failures
            ran = failed.get(m.task_id, 0) - m.failed_before
            assert counted <= ran, (
                f"task {m.task_id}: the ledger counts {counted} failure(s) for {ran} failed run(s)"
            )

    @invariant()
    def needing_approval_never_runs_unapproved(self) -> None:
        calls = self._calls()
        for m in self.model.values():
            if m.approval_id and not m.approved:
                assert not calls.get(m.task_id), f"task {m.task_id} ran without its approval"

    @invariant()
    def scheduled_never_runs_before_its_time(self) -> None:
        calls = self._calls()
        for m in self.model.values():
            if m.not_before is not None and calls.get(m.task_id):
                first = min(calls[m.task_id])
                assert first >= m.not_before, (
                    f"task {m.task_id} scheduled for {m.not_before} ran at {first}"
                    + (" (approved before its time)" if m.approved else "")
                )

    @invariant()
    def each_queue_holds_one_message_per_live_task(self) -> None:
        live: Counter[str] = Counter()
        for _, rec in self.rt.backend.list_records(Tables.TASKS):
            if holds_message(rec["status"]):
                live[rec["queue"]] += 1
        for queue in sorted(self.rt.tools.queues() | {"escalations"} | set(live)):
            depth = self.rt.backend.stats(queue).depth
            expected = live[queue] + self.strays[queue]
            assert depth == expected, (
                f"queue {queue!r} holds {depth} message(s) for {live[queue]} live task(s)"
                f" and {self.strays[queue]} stray(s): a final task's message was left"
                if depth > expected
                else f"queue {queue!r} lost the message of a live task ({depth} < {expected})"
            )

    @invariant()
    def decided_or_void_approvals_leave_no_escalation_timer(self) -> None:
        for _, rec in self.rt.backend.list_records(Tables.APPROVALS):
            task = self.rt.task(rec["task_id"])
            escalation = rec.get("escalation_task_id")
            if escalation and not waits_for_human(task.status):
                esc = self._status(escalation)
                assert not holds_message(esc), (
                    f"approval {rec['approval_id']} ({rec['status']}) of a {task.status} task "
                    f"still has its escalation timer ({esc})"
                )


# A passing run takes about 10 s here (80 sequences of up to 30 steps). The timeout is
# above the suite's 120 s only so that a failing run can finish shrinking and print
# its minimal examples instead of being cut off.
LifecycleMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLifecycleModel = pytest.mark.timeout(300)(LifecycleMachine.TestCase)
