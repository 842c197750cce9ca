"""Workers: lease tasks, run handlers, commit result + ack atomically.

A :class:`Worker` has four kinds of threads:

* receivers (one per queue) lease batches of ready tasks, only as many as there
  are free handler slots, and claim them in one transaction (ledger ``running``,
  delivery count, policy checks, dead-lettering of corrupt envelopes);
* ``concurrency`` handler threads fed from a queue (async handlers run on one event
  loop thread);
* a monitor that renews leases about 7.5 s into their 10 s and times out
  handlers that overrun their tool's timeout (their lease is then given up and
  a retry scheduled, so a late completion fails instead of being recorded);
* a committer that commits finished tasks in groups: several tasks' result +
  ledger + ack in one transaction, falling back to one at a time when one ack
  fails, so a stale task never discards another task's result.

:meth:`Worker.drain` runs everything that is ready now and returns, which is
what tests (with the fake clock) and notebooks use; :meth:`Worker.run` serves
until stopped.
"""

from __future__ import annotations

import asyncio
import logging
import queue as queue_mod
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx
from pydantic import ValidationError

from agentq.approvals import ApprovalStatus
from agentq.backends import EncodedRecord, Message, encode_record
from agentq.context import Checkpoint, ToolContext
from agentq.envelope import TaskEnvelope
from agentq.errors import (
    BackendUnavailable,
    MessageNotFound,
    PolicyViolation,
    ToolError,
    TransactionAborted,
    TransactionError,
)
from agentq.faults import WorkerCrash
from agentq.http import tool_http_client
from agentq.ledger import TERMINAL, Tables, TaskStatus
from agentq.retry import PermanentError, RetryLater
from agentq.runtime import _BUILTIN_ESCALATION, ESCALATION_QUEUE, Decision, _iso, finish_record
from agentq.tools import ToolDef

if TYPE_CHECKING:
    from agentq.runtime import Runtime

__all__ = ["Worker", "WorkerStats"]

log = logging.getLogger("agentq.worker")

OutcomeKind = Literal["success", "failure", "checkpoint", "crash"]
_PERMANENT = (PermanentError, PolicyViolation, ToolError, ValidationError)
_STOP_CHECK_SECONDS = 0.25


@dataclass
class _Inflight:
    queue: str
    key: tuple[Any, ...]
    token: str
    lease_expiry: datetime
    record: dict[str, Any]
    definition: ToolDef | None
    timeout: float | None
    started: float = 0.0
    deadline: float | None = None  # set when the handler starts
    timed_out: bool = False
    lost: bool = False

    @property
    def task_id(self) -> str:
        return str(self.record["task_id"])


@dataclass
class _Outcome:
    kind: OutcomeKind
    inflight: _Inflight
    result: Any = None
    exc: BaseException | None = None
    checkpoint: Checkpoint | None = None
    on_commit: list[Any] = field(default_factory=list)
    # The succeeded ledger record, encoded by the handler thread for a plain
    # success, so the committer only writes it (see _encode_success).
    final: EncodedRecord | None = None


class _RecordReader(Protocol):
    def get_record(self, table: str, key: str) -> dict[str, Any] | None: ...


class WorkerStats(Counter[str]):
    """Counts of what a worker did: succeeded, retried, dead, stale, renewed, ..."""


class _TokenBucket:
    def __init__(self, rate: float, clock: Any) -> None:
        self.rate = rate
        self.clock = clock
        self.tokens = rate
        self.last = clock.monotonic()
        self.lock = threading.Lock()

    def acquire(self) -> None:
        while True:
            with self.lock:
                now = self.clock.monotonic()
                self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
                self.last = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                wait = (1 - self.tokens) / self.rate
            self.clock.sleep(wait)


class Worker:
    """Executes tasks from a runtime's queues.

    ``concurrency`` handler threads run tasks; ``batch_size`` caps one lease;
    ``group_commit`` caps how many completions share one transaction;
    ``max_deliveries`` dead-letters an attempt whose deliveries never complete
    (a poison task that kills its worker); ``prefetch`` is how many leased tasks
    may wait for a free handler (their leases are renewed meanwhile).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 8,
        batch_size: int | None = None,
        group_commit: int = 64,
        receive_timeout: float = 1.0,
        max_deliveries: int = 5,
        renew_margin: float = 2.5,
        monitor_interval: float = 0.5,
        prefetch: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.runtime = runtime
        self.clock = runtime.clock
        self.queues = list(queues or sorted(runtime.tools.queues() | {ESCALATION_QUEUE}))
        self.concurrency = concurrency
        self.batch_size = batch_size or concurrency
        self.group_commit = group_commit
        self.receive_timeout = receive_timeout
        self.max_deliveries = max_deliveries
        self.renew_margin = renew_margin
        self.monitor_interval = monitor_interval
        self.stats = WorkerStats()
        self._stats_lock = threading.Lock()
        self._inflight: dict[str, _Inflight] = {}
        self._lock = threading.Condition()
        # Tasks leased by this worker and not yet finished (running or waiting for a
        # handler thread). Receivers lease only while it is below the capacity; they
        # never hold a reservation while waiting, so an idle queue cannot starve a
        # busy one.
        self._outstanding = 0
        self.capacity = concurrency + (concurrency if prefetch is None else prefetch)
        self._pending_commits = 0
        # SimpleQueue: a C queue without futures or task accounting; handing a task
        # to a handler thread and its outcome to the committer is on the hot path.
        self._outcomes: queue_mod.SimpleQueue[_Outcome | None] = queue_mod.SimpleQueue()
        self._work: queue_mod.SimpleQueue[_Inflight | None] = queue_mod.SimpleQueue()
        self._buckets: dict[str, _TokenBucket] = {}
        self._holds: dict[str, datetime] = {}
        self._hold_reads: dict[str, tuple[float, datetime | None]] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._started = False

    # -- lifecycle ---------------------------------------------------------------

    def _start_services(self) -> None:
        if self._started:
            return
        self._started = True
        self._stop.clear()
        # A fresh work queue per start: handler threads of an earlier run that still
        # finish an overrunning task will find their exit marker in the old one.
        self._work = queue_mod.SimpleQueue()
        work = self._work
        for i in range(self.concurrency):
            threading.Thread(
                target=self._handler_loop, args=(work,), name=f"agentq-handler-{i}", daemon=True
            ).start()
        for target, name in ((self._monitor_loop, "monitor"), (self._commit_loop, "committer")):
            t = threading.Thread(target=target, name=f"agentq-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _stop_services(self, timeout: float = 30.0) -> None:
        if not self._started:
            return
        with self._lock:
            self._lock.wait_for(lambda: not self._inflight and not self._pending_commits, timeout)
        self._stop.set()
        self._outcomes.put(None)
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()
        for _ in range(self.concurrency):
            self._work.put(None)  # handler threads exit once idle
        if self._loop is not None:
            loop, thread = self._loop, self._loop_thread
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout)
                if not thread.is_alive():
                    loop.close()
            self._loop = None
        self._started = False

    def drain(self, max_rounds: int | None = None) -> int:
        """Run every task that is ready now (and any that become ready as a result
        without time passing), then return the number of tasks handled."""
        self._start_services()
        handled = 0
        rounds = 0
        try:
            while max_rounds is None or rounds < max_rounds:
                rounds += 1
                got = 0
                for name in self.queues:
                    n = self._room(block=False)
                    if not n:
                        break
                    batch = self._receive(name, n, 0.0)
                    got += len(batch)
                    if batch:
                        self._dispatch(batch)
                handled += got
                if got:
                    continue
                with self._lock:
                    if not self._inflight and not self._pending_commits:
                        return handled
                    self._lock.wait(0.05)
            return handled
        finally:
            self._stop_services()

    def run(self, stop: threading.Event | None = None) -> None:
        """Serve until ``stop`` is set (or :meth:`stop` is called): no new leases
        after that; in-flight tasks finish and commit, or are left to redelivery."""
        stop = stop or threading.Event()
        self._start_services()
        receivers = [
            threading.Thread(target=self._receive_loop, args=(q, stop), name=f"agentq-recv-{q}")
            for q in self.queues
        ]
        for t in receivers:
            t.start()
        try:
            # A timed wait: a SIGTERM handler (stop.set) runs only once the main
            # thread wakes, and a signal the kernel hands to another thread does not
            # wake an untimed wait, so the worker would never notice it.
            while not stop.wait(_STOP_CHECK_SECONDS):
                pass
        finally:
            stop.set()
            for t in receivers:
                t.join(self.receive_timeout + 5)
            self._stop_services()

    def start(self) -> Worker:
        """Run :meth:`run` in a background thread."""
        self._runner_stop = threading.Event()
        self._runner = threading.Thread(target=self.run, args=(self._runner_stop,), daemon=True)
        self._runner.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop a worker started with :meth:`start` and wait for it."""
        self._runner_stop.set()
        self._runner.join(timeout)

    def _count(self, label: str, n: int = 1) -> None:
        if not n:
            return
        with self._stats_lock:
            self.stats[label] += n

    # -- slots ---------------------------------------------------------------------

    def _room(self, block: bool, stop: threading.Event | None = None) -> int:
        """How many tasks a receiver may lease now (waiting for room if ``block``)."""
        with self._lock:
            while self._outstanding >= self.capacity:
                if not block or (stop is not None and stop.is_set()):
                    return 0
                self._lock.wait(0.1)
            return min(self.batch_size, self.capacity - self._outstanding)

    def _done(self, n: int) -> None:
        if n:
            with self._lock:
                self._outstanding -= n
                self._lock.notify_all()

    # -- receiving and claiming ------------------------------------------------------

    def _receive(self, queue: str, n: int, duration: float) -> list[Message]:
        stream = self.runtime.backend.stream(queue, max_batch_size=n, max_duration=duration)
        try:
            for batch in stream:
                return batch
            return []
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def _receive_loop(self, queue: str, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            n = self._room(block=True, stop=stop)
            if not n:
                continue
            try:
                batch = self._receive(queue, n, self.receive_timeout)
                failures = 0
            except Exception as exc:
                # A receiver must outlive any failure (database briefly unavailable, a
                # driver error): a dead receiver would silently stop serving its queue.
                failures += 1
                self._count("receive_errors")
                log.warning("receive from %s failed (%r); retrying", queue, exc)
                self.clock.wait(stop, min(0.1 * 2**failures, 5.0))
                continue
            if batch:
                self._dispatch(batch)

    def _dispatch(self, batch: list[Message]) -> None:
        with self._lock:
            self._outstanding += len(batch)
        try:
            runnable = self._claim(batch)
        except Exception:
            self._done(len(batch))
            log.exception("claiming a batch failed; its leases will expire and be redelivered")
            return
        self._done(len(batch) - len(runnable))
        with self._lock:
            for inflight in runnable:
                self._inflight[inflight.task_id] = inflight
        for inflight in runnable:
            self._work.put(inflight)

    def _claim(self, batch: list[Message]) -> list[_Inflight]:
        """Mark a leased batch running (delivery count, ``started_at``) and return
        what may run.

        On a single-writer backend (SQLite) the common case is prepared outside any
        write transaction: the ledger records are read, checked and updated in
        memory, then swapped in with one compare-and-swap write, so the write lock
        that every other writer waits for is held only for the swap. Anything
        unusual (a record changed since the read, a stale or poison message, a
        hold, an approval to check, a corrupt envelope), and every claim on other
        backends, is decided the careful way: read and written inside the
        transaction.
        """
        rt = self.runtime
        labels: list[str] = []
        fast, slow = self._plan_claims(batch)
        runnable: list[_Inflight] = []
        if fast:
            items = [(inf.task_id, version, encode_record(inf.record)) for inf, version, _ in fast]
            try:
                # Bookkeeping: after a power loss it may be lost, which only
                # undercounts a delivery by one.
                changed = set(
                    rt.transact(
                        lambda tx: tx.tx.replace_records(Tables.TASKS, items), durable=False
                    )
                )
            except TransactionError:
                changed = {inf.task_id for inf, _, _ in fast}
            for inf, _, msg in fast:
                if inf.task_id in changed:
                    slow.append(msg)  # written since the read: decide again, in the tx
                else:
                    runnable.append(inf)
        if slow:
            runnable.extend(self._claim_in_transaction(slow, labels))
        for label in labels:
            self._count(label)
        kept = []
        for inflight in runnable:
            try:
                rt.faults.hit("after_lease", task_id=inflight.task_id)
            except WorkerCrash:
                self._count("crashed")  # abandoned while leased: redelivered later
                continue
            kept.append(inflight)
        return kept

    def _plan_claims(
        self, batch: list[Message]
    ) -> tuple[list[tuple[_Inflight, str, Message]], list[Message]]:
        """Split a batch into claims prepared from a read (with the version read)
        and messages to claim inside a transaction."""
        rt = self.runtime
        if not rt.backend.single_writer:
            return [], list(batch)  # reading first would only add a read per task
        checked = [(m, _looks_like_envelope(m.payload, m.key)) for m in batch]
        keys = [str(m.key[0]) for m, wellformed in checked if wellformed]
        stored = rt.backend.read_records(Tables.TASKS, keys) if keys else {}
        now = rt.clock.now()
        fast: list[tuple[_Inflight, str, Message]] = []
        slow: list[Message] = []
        for msg, wellformed in checked:
            found = stored.get(str(msg.key[0])) if wellformed else None
            inflight = None if found is None else self._prepare_claim(msg, found.value, now)
            if inflight is None or found is None:
                slow.append(msg)
            else:
                fast.append((inflight, found.version, msg))
        return fast, slow

    def _prepare_claim(self, msg: Message, rec: dict[str, Any], now: datetime) -> _Inflight | None:
        """The running record of an ordinary delivery, or None to decide in a
        transaction (every branch that writes more than the claim goes there)."""
        rt = self.runtime
        if rec["status"] in TERMINAL or rec["attempt"] != msg.key[1]:
            return None
        deliveries = rec.get("deliveries", 0) + 1
        if deliveries > self.max_deliveries:
            return None
        definition: ToolDef | None = None
        if rec["tool"] != _BUILTIN_ESCALATION:
            if rec["tool"] not in rt.tools:
                return None
            definition = rt.tools.get(rec["tool"])
            hold = self._hold_until(rt.backend, now, rec["tool"])
            if (hold is not None and hold > now) or self._needs_approval(rec, definition):
                return None
        stamp = _iso(now)
        rec.update(
            status=TaskStatus.RUNNING, started_at=stamp, updated_at=stamp, deliveries=deliveries
        )
        return self._make_inflight(msg, rec, definition)

    def _claim_in_transaction(self, batch: list[Message], labels: list[str]) -> list[_Inflight]:
        rt = self.runtime

        def claim_all(tx: Decision) -> list[_Inflight]:
            labels.clear()
            out = []
            for msg in batch:
                inflight = self._claim_one(tx, msg, labels)
                if inflight is not None:
                    out.append(inflight)
            return out

        try:
            return rt.transact(claim_all, durable=False)
        except TransactionError:
            # One message (already acked elsewhere, say) must not block the others.
            runnable = []
            for msg in batch:

                def claim_alone(tx: Decision, m: Message = msg) -> _Inflight | None:
                    return self._claim_one(tx, m, labels)

                try:
                    inflight = rt.transact(claim_alone, durable=False)
                    if inflight is not None:
                        runnable.append(inflight)
                except TransactionError as exc:
                    log.info("claim of %s skipped: %s", msg.key, exc)
            return runnable

    def _claim_one(self, tx: Decision, msg: Message, labels: list[str]) -> _Inflight | None:
        rt = self.runtime
        payload = msg.payload
        if not _looks_like_envelope(payload, msg.key):
            try:
                TaskEnvelope.model_validate(payload)
            except ValidationError as exc:
                self._dead_raw(tx, msg, f"corrupt envelope: {exc.error_count()} error(s): {exc}")
                labels.append("dead")
                return None
            self._dead_raw(tx, msg, f"corrupt envelope: key {msg.key!r} does not match its payload")
            labels.append("dead")
            return None
        task_id, attempt = msg.key[0], msg.key[1]
        rec = tx.tx.get_record(Tables.TASKS, str(task_id))
        if rec is None:
            self._dead_raw(tx, msg, "no ledger record for this task")
            labels.append("dead")
            return None
        if rec["status"] in TERMINAL or rec["attempt"] != attempt:
            tx.tx.ack(msg.queue, msg.key, must_exist=False)
            labels.append("stale_message")
            return None
        rec["deliveries"] = rec.get("deliveries", 0) + 1
        if rec["deliveries"] > self.max_deliveries:
            self._dead(tx, rec, msg.queue, msg.key,
                       f"delivered {rec['deliveries'] - 1} times without completing "
                       "(the worker crashed or lost its lease each time)")  # fmt: skip
            labels.append("dead")
            return None
        definition: ToolDef | None = None
        if rec["tool"] != _BUILTIN_ESCALATION:
            if rec["tool"] not in rt.tools:
                self._dead(tx, rec, msg.queue, msg.key, f"unknown tool {rec['tool']!r}")
                labels.append("dead")
                return None
            definition = rt.tools.get(rec["tool"])
            hold = self._hold_until(tx.tx, tx.now, rec["tool"])
            if hold is not None and hold > tx.now:
                # Only a task that never started is still just queued: a redelivery
                # after a crashed or lost attempt may already have had its effect.
                started = rec["status"] != TaskStatus.QUEUED
                held = TaskStatus.RETRY_SCHEDULED if started else TaskStatus.QUEUED
                self._reschedule(tx, rec, msg.queue, msg.key, hold, status=held,
                                 error=rec.get("error"))  # fmt: skip
                labels.append("held_back")
                return None
            violation = self._policy_violation(tx, rec, definition)
            if violation is not None:
                self._dead(tx, rec, msg.queue, msg.key, violation)
                labels.append("policy_refused")
                return None
        now = _iso(tx.now)
        rec.update(status=TaskStatus.RUNNING, started_at=now, updated_at=now)
        tx.tx.put_record(Tables.TASKS, rec["task_id"], rec)
        return self._make_inflight(msg, rec, definition)

    def _make_inflight(
        self, msg: Message, rec: dict[str, Any], definition: ToolDef | None
    ) -> _Inflight:
        return _Inflight(
            queue=msg.queue,
            key=tuple(msg.key),
            token=msg.lease_token,
            lease_expiry=msg.lease_expiry,
            record=rec,
            definition=definition,
            timeout=self._timeout(definition),
        )

    def _timeout(self, definition: ToolDef | None) -> float | None:
        if definition is None:
            return None
        configured = self.runtime.policy.for_tool(definition.name).timeout
        if configured is not None:
            return configured.total_seconds()
        return definition.timeout

    def _needs_approval(self, rec: dict[str, Any], definition: ToolDef) -> bool:
        if rec.get("kind", "action") != "action":
            return False
        rule = self.runtime.policy.approval_rule(definition.name, rec["args"])
        return rule is not None or definition.requires_approval

    def _policy_violation(
        self, tx: Decision, rec: dict[str, Any], definition: ToolDef
    ) -> str | None:
        """The executor's own check: approval rules are read from policy and the
        approval record, never from the task's arguments or envelope."""
        if not self._needs_approval(rec, definition):
            return None
        approval_id = rec.get("approval_id")
        approval = tx.tx.get_record(Tables.APPROVALS, approval_id) if approval_id else None
        if (
            approval is None
            or approval["status"] != ApprovalStatus.APPROVED
            or approval["task_id"] != rec["task_id"]
            or approval["args"] != rec["args"]
        ):
            return (
                f"policy: tool {definition.name!r} with these arguments needs an approved "
                "approval, and this task has none"
            )
        return None

    def _hold_until(self, reader: _RecordReader, now: datetime, tool: str) -> datetime | None:
        """Until when a Retry-After holds this tool back: this worker's own holds at
        once, other workers' (the holds records) re-read at most every half second,
        not once per task."""
        local = self._holds.get(tool)
        if local is not None and local > now:
            return local
        mono = self.clock.monotonic()
        cached = self._hold_reads.get(tool)
        if cached is not None and mono - cached[0] < 0.5:
            return cached[1]
        rec = reader.get_record(Tables.HOLDS, tool)
        until = None if rec is None else datetime.fromisoformat(rec["until"])
        self._hold_reads[tool] = (mono, until)
        return until

    # -- running ----------------------------------------------------------------------

    def _handler_loop(self, work: queue_mod.SimpleQueue[_Inflight | None]) -> None:
        while True:
            inflight = work.get()
            if inflight is None:
                return
            self._run_and_report(inflight)

    def _run_and_report(self, inflight: _Inflight) -> None:
        outcome = self._run(inflight)
        with self._lock:
            current = self._inflight.get(inflight.task_id)
            if current is inflight:
                del self._inflight[inflight.task_id]
            self._pending_commits += 1
            self._outstanding -= 1
            self._lock.notify_all()
        if inflight.timed_out:
            # The monitor already gave this run up and scheduled a retry.
            self._count("late_after_timeout")
            self._finished_commit(1)
            return
        if outcome.kind == "success":
            self._encode_success(outcome)
        self._outcomes.put(outcome)

    def _encode_success(self, outcome: _Outcome) -> None:
        """Build and encode the succeeded record here, in the handler thread, when
        the commit only has to write it: the committer holds the write lock that
        every other writer (and process) waits for. Escalations, handler writes
        and ordering keys do more in the commit and take the general path."""
        rec = outcome.inflight.record
        if outcome.on_commit or rec.get("kind") == "escalation" or rec.get("ordering_key"):
            return
        final = dict(rec)
        finish_record(final, TaskStatus.SUCCEEDED, _iso(self.clock.now()), result=outcome.result)
        outcome.final = encode_record(final)

    def _run(self, inflight: _Inflight) -> _Outcome:
        rt = self.runtime
        rec = inflight.record
        definition = inflight.definition
        start = self.clock.monotonic()
        inflight.started = start
        if inflight.timeout is not None:
            inflight.deadline = start + inflight.timeout
        ctx: ToolContext | None = None
        try:
            with rt.telemetry.execute_span(
                rec["tool"], rec["task_id"], rec["attempt"], rec.get("trace") or {}
            ):
                if definition is None:
                    return _Outcome("success", inflight, result={"escalated": True})
                self._rate_limit(definition.name)
                args = definition.validate_args(rec["args"])
                ctx = self._context(inflight, definition)
                if definition.is_async:
                    result = self._run_async(definition, ctx, args, inflight)
                else:
                    result = definition.handler(ctx, args)
                if isinstance(result, Checkpoint):
                    outcome = _Outcome("checkpoint", inflight, checkpoint=result)
                else:
                    outcome = _Outcome(
                        "success", inflight, result=definition.dump_result(result),
                        on_commit=list(ctx._on_commit),
                    )  # fmt: skip
                rt.faults.hit("after_external_call", task_id=rec["task_id"], tool=rec["tool"])
                return outcome
        except WorkerCrash:
            return _Outcome("crash", inflight)
        except Exception as exc:
            return _Outcome("failure", inflight, exc=exc)
        finally:
            if ctx is not None:
                ctx.close()
            duration = self.clock.monotonic() - start
            rt.telemetry.duration.record(duration, {"tool": rec["tool"]})

    def _context(self, inflight: _Inflight, definition: ToolDef) -> ToolContext:
        rt = self.runtime
        rec = inflight.record
        policy = rt.policy.for_tool(definition.name)
        timeout = self._timeout(definition) or 30.0
        return ToolContext(
            task_id=rec["task_id"],
            tool=definition.name,
            attempt=rec["attempt"],
            clock=self.clock,
            settings=rt.settings,
            logger=log.getChild(definition.name),
            checkpoint_state=rec.get("checkpoint"),
            _http_factory=lambda: tool_http_client(
                tool=definition.name,
                task_id=rec["task_id"],
                allowed_hosts=policy.allowed_hosts,
                clock=self.clock,
                timeout=timeout,
                transport=_SharedTransport(rt.http_transport),
            ),
        )

    def _run_async(
        self, definition: ToolDef, ctx: ToolContext, args: Any, inflight: _Inflight
    ) -> Any:
        loop = self._event_loop()
        coro = definition.handler(ctx, args)
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        return future.result()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agentq-async", daemon=True)
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    def _rate_limit(self, tool: str) -> None:
        rate = self.runtime.policy.for_tool(tool).rate_limit_per_second
        if rate is None:
            return
        with self._lock:
            bucket = self._buckets.setdefault(tool, _TokenBucket(rate, self.clock))
        bucket.acquire()

    # -- monitoring: lease renewal and timeouts ---------------------------------------

    def _monitor_loop(self) -> None:
        while not self._stop.is_set():
            self.clock.wait(self._stop, self.monitor_interval)
            if self._stop.is_set():
                return
            try:
                self._monitor_once()
            except Exception:
                log.exception("lease monitor failed; retrying")

    def _monitor_once(self) -> None:
        now = self.clock.now()
        mono = self.clock.monotonic()
        due: dict[str, list[_Inflight]] = {}
        with self._lock:
            inflight = list(self._inflight.values())
        for inf in inflight:
            if inf.deadline is not None and mono >= inf.deadline and not inf.timed_out:
                inf.timed_out = True
                with self._lock:
                    self._inflight.pop(inf.task_id, None)
                timeout = TimeoutError(
                    f"tool {inf.record['tool']!r} ran longer than its timeout "
                    f"({inf.deadline - inf.started:.1f}s)"
                )
                self._count("timed_out")
                self._outcomes.put(_Outcome("failure", inf, exc=timeout))
                with self._lock:
                    self._pending_commits += 1
                continue
            renew = inf.definition is None or inf.definition.renew_leases
            if (
                renew
                and not inf.lost
                and (inf.lease_expiry - now).total_seconds() <= self.renew_margin
            ):
                due.setdefault(inf.queue, []).append(inf)
        for queue, infs in due.items():
            rows = {
                r.old_token: r for r in self.runtime.backend.renew(queue, [i.token for i in infs])
            }
            for inf in infs:
                row = rows.get(inf.token)
                if row is None or row.new_token is None:
                    inf.lost = True
                    self._count("lease_lost")
                    continue
                inf.token = row.new_token
                inf.lease_expiry = row.lease_expiry
                self._count("renewed")

    # -- committing ----------------------------------------------------------------

    def _commit_loop(self) -> None:
        while True:
            first = self._outcomes.get()
            if first is None:
                return
            group = [first]
            while len(group) < self.group_commit:
                try:
                    nxt = self._outcomes.get_nowait()
                except queue_mod.Empty:
                    break
                if nxt is None:
                    self._outcomes.put(None)
                    break
                group.append(nxt)
            try:
                self._commit(group)
            except Exception:
                log.exception("committing %d outcome(s) failed", len(group))
            finally:
                self._finished_commit(len(group))

    def _finished_commit(self, n: int) -> None:
        with self._lock:
            self._pending_commits -= n
            self._lock.notify_all()

    def _commit(self, outcomes: list[_Outcome]) -> None:
        real = [o for o in outcomes if o.kind != "crash"]
        self._count("crashed", len(outcomes) - len(real))
        if not real:
            return
        labels: list[str] = []

        def apply_all(tx: Decision) -> None:
            labels.clear()
            for o in real:
                labels.append(self._apply(tx, o))

        try:
            self.runtime.transact(apply_all)
            self._count("group_commits")
        except Exception:
            if len(real) == 1:
                labels = [self._commit_alone(real[0])]
            else:
                labels = [self._commit_alone(o) for o in real]
        for label in labels:
            if label:
                self._count(label)
                self.runtime.telemetry.outcomes.add(1, {"outcome": label})

    def _commit_alone(self, outcome: _Outcome) -> str:
        rt = self.runtime
        try:
            return rt.transact(lambda tx: self._apply(tx, outcome))
        except MessageNotFound:
            # Another delivery (or a cancel) already acked this message: nothing of
            # this run is recorded.
            rt.telemetry.stale.add(1, {"tool": outcome.inflight.record["tool"]})
            return "stale_completion"
        except WorkerCrash:
            return "crashed"
        except (BackendUnavailable, TransactionAborted) as exc:
            log.warning(
                "could not commit %s (%s); it will be redelivered", outcome.inflight.task_id, exc
            )
            return "commit_failed"
        except Exception as exc:
            if outcome.kind != "success":
                log.exception("could not record the failure of %s", outcome.inflight.task_id)
                return "commit_failed"
            # The completion itself failed (an on_commit write raised): that is a
            # failure of this attempt, handled like any other.
            failed = _Outcome("failure", outcome.inflight, exc=exc)
            try:
                return rt.transact(lambda tx: self._apply(tx, failed))
            except MessageNotFound:
                return "stale_completion"

    def _apply(self, tx: Decision, o: _Outcome) -> str:
        inf = o.inflight
        rt = self.runtime
        tx.tx.ack(inf.queue, inf.key, must_exist=True)
        rt.telemetry.acked.add(1, {"queue": inf.queue})
        rt.faults.hit("before_completion_commit", task_id=inf.task_id)
        # The strict ack above proves no one else finished or cancelled this task
        # since the claim, so the claimed record is current.
        rec = inf.record
        if o.final is not None:
            tx.tx.put_record(Tables.TASKS, inf.task_id, o.final)
            return "succeeded"
        if o.kind == "success":
            for fn in o.on_commit:
                fn(tx)
            if rec.get("kind") == "escalation":
                self._mark_escalated(tx, rec)
            tx._finish(rec, TaskStatus.SUCCEEDED, result=o.result)
            return "succeeded"
        if o.kind == "checkpoint":
            assert o.checkpoint is not None
            rec["checkpoint"] = o.checkpoint.state
            self._reschedule(tx, rec, None, None, tx.now + o.checkpoint.after,
                             status=TaskStatus.QUEUED, error=None)  # fmt: skip
            return "checkpointed"
        return self._apply_failure(tx, rec, inf, o.exc)

    def _apply_failure(
        self, tx: Decision, rec: dict[str, Any], inf: _Inflight, exc: BaseException | None
    ) -> str:
        error = f"{type(exc).__name__}: {exc}"
        definition = inf.definition
        if isinstance(exc, RetryLater):
            policy = self.runtime.policy.retry_policy(rec["tool"])
            rec["throttles"] = rec.get("throttles", 0) + 1
            if rec["throttles"] > policy.max_throttles:
                self._dead(tx, rec, None, None, f"throttled {rec['throttles']} times: {error}")
                return "dead"
            until = tx.now + timedelta(seconds=exc.after)
            self._holds[rec["tool"]] = until
            tx.tx.put_record(Tables.HOLDS, rec["tool"], {"until": _iso(until), "reason": error})
            self._reschedule(
                tx, rec, None, None, until, status=TaskStatus.RETRY_SCHEDULED, error=error
            )
            return "throttled"
        if isinstance(exc, _PERMANENT):
            self._dead(tx, rec, None, None, error)
            return "dead"
        max_attempts = definition.max_attempts if definition else None
        policy = self.runtime.policy.retry_policy(rec["tool"], max_attempts)
        rec["failures"] = rec.get("failures", 0) + 1
        if policy.exhausted(rec["failures"]):
            self._dead(tx, rec, None, None, f"failed {rec['failures']} time(s); last: {error}")
            return "dead"
        delay = policy.delay(rec["failures"])
        self._reschedule(tx, rec, None, None, tx.now + timedelta(seconds=delay),
                         status=TaskStatus.RETRY_SCHEDULED, error=error)  # fmt: skip
        return "retried"

    def _mark_escalated(self, tx: Decision, rec: dict[str, Any]) -> None:
        approval = tx.tx.get_record(Tables.APPROVALS, rec["approval_id"])
        if approval is not None and approval["status"] == ApprovalStatus.PENDING:
            approval.update(status=ApprovalStatus.ESCALATED, escalated_at=_iso(tx.now))
            tx.tx.put_record(Tables.APPROVALS, rec["approval_id"], approval)

    # -- retry and dead-letter writes (always inside the caller's transaction) ------------

    def _reschedule(
        self,
        tx: Decision,
        rec: dict[str, Any],
        queue: str | None,
        key: Iterable[Any] | None,
        at: datetime,
        *,
        status: TaskStatus,
        error: str | None,
    ) -> None:
        """Ack this delivery and send the next attempt (a new key) for ``at``."""
        if key is not None and queue is not None:
            tx.tx.ack(queue, tuple(key), must_exist=True)
        rec.update(
            attempt=rec["attempt"] + 1, deliveries=0, status=status, error=error,
            updated_at=_iso(tx.now), next_attempt_at=_iso(at),
        )  # fmt: skip
        tx.tx.put_record(Tables.TASKS, rec["task_id"], rec)
        tx._send(rec, at)

    def _dead(
        self,
        tx: Decision,
        rec: dict[str, Any],
        queue: str | None,
        key: Iterable[Any] | None,
        error: str,
    ) -> None:
        """Ack this delivery and move the task to the dead-letter queue."""
        if key is not None and queue is not None:
            tx.tx.ack(queue, tuple(key), must_exist=True)
        tx.tx.put_record(
            Tables.DEAD_LETTERS,
            rec["task_id"],
            {
                "task_id": rec["task_id"], "tool": rec["tool"], "queue": rec.get("queue"),
                "args": rec.get("args"), "attempt": rec["attempt"], "error": error,
                "dead_at": _iso(tx.now),
            },
        )  # fmt: skip
        tx._finish(rec, TaskStatus.DEAD, error=error)

    def _dead_raw(self, tx: Decision, msg: Message, error: str) -> None:
        """Dead-letter a message whose envelope cannot be trusted."""
        task_id = msg.key[0] if msg.key and isinstance(msg.key[0], str) else repr(msg.key)
        rec = tx.tx.get_record(Tables.TASKS, task_id) if isinstance(task_id, str) else None
        if rec is not None and rec["status"] not in TERMINAL:
            self._dead(tx, rec, msg.queue, msg.key, error)
            return
        tx.tx.ack(msg.queue, msg.key, must_exist=True)
        tx.tx.put_record(
            Tables.DEAD_LETTERS,
            f"{task_id}",
            {"task_id": task_id, "tool": None, "queue": msg.queue, "args": None,
             "attempt": None, "error": error, "dead_at": _iso(tx.now),
             "payload": msg.payload if isinstance(msg.payload, dict | list | str) else None},
        )  # fmt: skip


def _looks_like_envelope(payload: Any, key: Sequence[Any]) -> bool:
    """Cheap structural check of a task envelope: the ledger, not the payload, is
    what the executor runs from, so it only needs the payload to be a well-formed
    envelope of this very key. Anything else gets full validation and a precise
    error before it is dead-lettered."""
    return (
        isinstance(payload, dict)
        and payload.get("v") == 1
        and len(key) == 2
        and payload.get("task_id") == key[0]
        and payload.get("attempt") == key[1]
        and isinstance(payload.get("tool"), str)
        and isinstance(payload.get("args"), dict)
    )


class _SharedTransport(httpx.BaseTransport):
    """Lets per-task clients share the runtime's connection pool without closing it."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._inner.handle_request(request)

    def close(self) -> None:
        pass
