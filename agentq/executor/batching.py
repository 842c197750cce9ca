"""Batch handlers: the ready tasks of a batch tool run in one call, commit in one
transaction.

A worker leases up to ``max_batch`` messages at once from a queue that has a
batch tool (``@tool(batch=True)``; at least its own ``batch_size``). After
admission (every per-task check: current attempt, poison, holds, approvals: a
task that needs an approval has no message before it is approved, and is
refused without one), the claimed tasks of each batch tool are grouped, at
most ``max_batch`` per group, and each group runs as one call of the handler
on one handler thread (it takes one slot of the worker's capacity). Each task
keeps what it has alone:

* its **task id** is its idempotency key (``ctx.tasks[i]``, whose ``http``
  sends it), its attempt and its retry policy are its own;
* its **lease** is renewed while the batch runs or waits for a handler;
* a **rate limit** is taken per task before the call; a task whose turn is
  later is deferred (not a failure) and left out of the call.

**Results.** The handler returns one entry per item, in order: a result, or an
exception instance (``RetryLater``, ``PermanentError``, any error) that is that
item's failure: it is retried (or dead-lettered) *alone*, as if it had run by
itself, while the others succeed. A handler that raises fails every item of
the call; a list of the wrong length, or a checkpoint, is a :class:`ToolError`
(dead-lettered, replayable): the handler is wrong.

**Commit.** Every result, every ack and every ``on_commit`` write of the batch
(``ctx.on_commit`` and the items' own) commit in **one transaction**, with
strict acks: if any task's message is gone (a stale worker whose lease expired
and another delivery finished it, a task cancelled while the batch ran) the
whole batch records nothing, and its tasks are redelivered when their leases
expire (each then runs again with the same task id). An ``on_commit`` write
that fails fails every item's attempt (each retried alone).

**Timeout.** The tool's timeout bounds the whole call. When it runs over, every
task of the batch gets a ``TimeoutError`` failure at once (each retried alone)
and the call is given up as :mod:`agentq.executor.timeouts` describes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentq.batching import BatchContext, max_batch
from agentq.context import Checkpoint
from agentq.decision import Decision
from agentq.errors import BackendUnavailable, MessageNotFound, ToolError, TransactionAborted
from agentq.executor.holds import Holds
from agentq.executor.inflight import Inflight, Outcome
from agentq.executor.outcomes import apply_outcome
from agentq.executor.running import Running
from agentq.faults import WorkerCrash
from agentq.logs import log_task_finished
from agentq.tools import ToolDef

__all__ = ["BatchRun", "Batching"]

log = logging.getLogger("agentq.worker")


@dataclass(eq=False)
class BatchRun:
    """One call of a batch handler: its tasks, and how the call ended."""

    definition: ToolDef
    members: list[Inflight]
    timed_out: bool = False
    replaced: bool = False  # its sync handler's thread was abandoned on a timeout
    on_commit: list[Callable[[Decision], None]] = field(default_factory=list)


class Batching(Running):
    """The batch stage of a worker: groups, runs and commits batches."""

    holds: Holds
    _lease_sizes: dict[str, int] | None = None

    # -- leasing and grouping ---------------------------------------------------

    def _lease_size(self, queue: str, n: int) -> int:
        """How many messages to lease from ``queue`` when ``n`` fit: at least the
        largest ``max_batch`` of its batch tools (a batch takes one slot)."""
        if self._lease_sizes is None:
            sizes: dict[str, int] = {}
            for t in self.runtime.tools:
                if t.batch:
                    sizes[t.queue] = max(sizes.get(t.queue, 0), max_batch(self.runtime.policy, t))
            self._lease_sizes = sizes
        size = self._lease_sizes.get(queue)
        return n if size is None or n <= 0 else max(n, size)

    def _batched(self, runnable: list[Inflight]) -> list[Inflight]:
        """The work items of a claimed batch: a batch tool's tasks travel as one
        item (its first task, ``batch`` set on each); the slots of the others
        are freed, since the batch runs on one handler thread."""
        groups: dict[str, list[Inflight]] = {}
        items: list[Inflight] = []
        for inf in runnable:
            definition = inf.definition
            if definition is not None and definition.batch:
                groups.setdefault(definition.name, []).append(inf)
            else:
                items.append(inf)
        freed = 0
        for members in groups.values():
            definition = members[0].definition
            assert definition is not None
            size = max_batch(self.runtime.policy, definition)
            for start in range(0, len(members), size):
                chunk = members[start : start + size]
                run = BatchRun(definition, chunk)
                for inf in chunk:
                    inf.batch = run
                items.append(chunk[0])
                freed += len(chunk) - 1
        self._done(freed)
        return items

    # -- running -----------------------------------------------------------------

    def _run_and_report(self, inflight: Inflight) -> bool:
        run = inflight.batch
        if not isinstance(run, BatchRun):
            return super()._run_and_report(inflight)
        outcomes = self._run_batch(run)
        with self._lock:
            for inf in run.members:
                if self._inflight.get(inf.task_id) is inf:
                    del self._inflight[inf.task_id]
            if run.replaced:
                self.abandoned -= 1
                for inf in run.members:
                    self._returned(inf.task_id)
            else:
                self._outstanding -= 1
            if not run.timed_out:
                self._pending_commits += 1
            self._lock.notify_all()
        if run.timed_out:
            self._count("late_after_timeout", len(run.members))
            return not run.replaced
        try:
            self._commit_batch(run, outcomes)
        except Exception:
            log.exception("committing a batch of %d task(s) failed", len(outcomes))
        finally:
            self._finished_commit(1)
        return True

    def _run_batch(self, run: BatchRun) -> list[Outcome]:
        definition = run.definition
        start = self.clock.monotonic()
        for inf in run.members:
            inf.started = start
            if inf.timeout is not None:
                inf.deadline = start + inf.timeout
        done: dict[str, Outcome] = {}
        ready: list[tuple[Inflight, Any]] = []
        for inf in run.members:
            hung = self._still_hung(inf)
            if hung is not None:  # its earlier call still hangs: not called again
                done[inf.task_id] = hung
                continue
            try:
                self._limiter.admit(definition.name, inf.record)  # a turn per task
                args = inf.record["args"] if inf.args is None else inf.args  # out of band
                ready.append((inf, definition.validate_args(args)))
            except WorkerCrash:
                done[inf.task_id] = Outcome("crash", inf)
            except Exception as exc:
                done[inf.task_id] = Outcome("failure", inf, exc=exc)
        if ready:
            done.update(self._call(run, ready, start))
        return [done[inf.task_id] for inf in run.members]

    def _call(
        self, run: BatchRun, ready: list[tuple[Inflight, Any]], start: float
    ) -> dict[str, Outcome]:
        """Call the handler with the ready items; one outcome per item."""
        rt = self.runtime
        definition = run.definition
        lead = ready[0][0]
        ctx = BatchContext(
            tool=definition.name, tasks=[self._context(inf, definition) for inf, _ in ready],
            clock=self.clock, settings=rt.settings, logger=log.getChild(definition.name),
        )  # fmt: skip
        items = [args for _, args in ready]
        try:
            record = lead.record
            with rt.telemetry.execute_span(
                definition.name, lead.task_id, record["attempt"], record.get("trace") or {}
            ):
                if definition.is_async:
                    results = self._run_async(definition, ctx, items, lead)  # type: ignore[arg-type]
                else:
                    results = definition.handler(ctx, items)
                rt.faults.hit("after_external_call", task_id=lead.task_id, tool=definition.name)
        except WorkerCrash:
            return {inf.task_id: Outcome("crash", inf) for inf, _ in ready}
        except Exception as exc:
            return {inf.task_id: Outcome("failure", inf, exc=exc) for inf, _ in ready}
        finally:
            ctx.close()
            rt.telemetry.duration.record(self.clock.monotonic() - start, {"tool": definition.name})
        if not isinstance(results, list) or len(results) != len(ready):
            got = f"{len(results)} results" if isinstance(results, list) else type(results).__name__
            wrong = ToolError(
                f"batch handler {definition.name!r} returned {got} for {len(ready)} tasks: it "
                "must return a list with one result (or exception) per item, in order"
            )
            return {inf.task_id: Outcome("failure", inf, exc=wrong) for inf, _ in ready}
        run.on_commit = list(ctx._on_commit)
        outcomes = {
            inf.task_id: self._item_outcome(definition, inf, result, item_ctx._on_commit)
            for (inf, _), result, item_ctx in zip(ready, results, ctx.tasks, strict=True)
        }
        for outcome in outcomes.values():
            if outcome.kind == "success":
                self._encode_success(outcome)  # here, off the write lock
        return outcomes

    @staticmethod
    def _item_outcome(
        definition: ToolDef, inf: Inflight, result: Any, on_commit: list[Any]
    ) -> Outcome:
        if isinstance(result, BaseException):
            return Outcome("failure", inf, exc=result)
        if isinstance(result, Checkpoint):
            wrong = ToolError(f"batch handler {definition.name!r} returned a checkpoint: "
                              "batch items cannot checkpoint")  # fmt: skip
            return Outcome("failure", inf, exc=wrong)
        try:
            dumped = definition.dump_result(result)
        except Exception as exc:
            return Outcome("failure", inf, exc=exc)
        return Outcome("success", inf, result=dumped, on_commit=list(on_commit))

    # -- committing --------------------------------------------------------------

    def _commit_batch(self, run: BatchRun, outcomes: list[Outcome]) -> None:
        """Write every outcome of the batch in one transaction (see the module)."""
        rt = self.runtime
        real = [o for o in outcomes if o.kind != "crash"]
        self._count("crashed", len(outcomes) - len(real))
        if not real:
            return

        def apply_all(tx: Decision, group: list[Outcome], writes: list[Any]) -> list[str]:
            for fn in writes:
                fn(tx)
            return [apply_outcome(tx, o, self.holds) for o in group]

        try:
            labels = rt.transact(lambda tx: apply_all(tx, real, run.on_commit))
            self._count("batch_commits")
        except MessageNotFound:
            labels = self._stale(real)
        except WorkerCrash:
            labels = ["crashed"] * len(real)
        except (BackendUnavailable, TransactionAborted) as exc:
            log.warning("could not commit a batch of %d task(s) (%s); they will be redelivered",
                        len(real), exc)  # fmt: skip
            labels = ["commit_failed"] * len(real)
        except Exception as exc:
            # A write of the completion failed: that is a failure of every item's
            # attempt, each handled alone.
            failed = [
                Outcome("failure", o.inflight, exc=exc) if o.kind == "success" else o for o in real
            ]
            try:
                labels = rt.transact(lambda tx: apply_all(tx, failed, []))
            except MessageNotFound:
                labels = self._stale(real)
            except Exception:
                log.exception("could not record the failures of a batch of %d task(s)", len(real))
                labels = ["commit_failed"] * len(real)
        for label in labels:
            self._count(label)
            rt.telemetry.outcomes.add(1, {"outcome": label})
        with self._lock:
            self.finished += len(real)
        now = self.clock.monotonic()
        for o, label in zip(real, labels, strict=True):
            inf = o.inflight
            log_task_finished(inf.task_id, inf.record["tool"], inf.key[1], label,
                              now - inf.started, o.exc)  # fmt: skip

    def _stale(self, outcomes: list[Outcome]) -> list[str]:
        """Another delivery (or a cancel) acked one of the batch's messages: none
        of the batch is recorded."""
        for o in outcomes:
            self.runtime.telemetry.stale.add(1, {"tool": o.inflight.record["tool"]})
        return ["stale_completion"] * len(outcomes)

    # -- timeouts ----------------------------------------------------------------

    def _give_up(self, inf: Inflight) -> None:
        run = inf.batch
        if not isinstance(run, BatchRun):
            super()._give_up(inf)
            return
        with self._lock:
            members = [m for m in run.members if self._inflight.get(m.task_id) is m]
            if run.timed_out or not members:
                return
            for m in members:
                del self._inflight[m.task_id]
                m.timed_out = True
            run.timed_out = True
            future = next((m.future for m in run.members if m.future is not None), None)
            replace = future is None and self.abandoned < self.max_abandoned
            if replace:
                run.replaced = True
                self.abandoned += 1
                self._outstanding -= 1
                for m in run.members:
                    self._hung[m.task_id] += 1
            self._pending_commits += len(members)
            self._lock.notify_all()
        tool = run.definition.name
        limit = inf.timeout if inf.timeout is not None else 0.0
        self._count("timed_out", len(members))
        for m in members:
            exc = TimeoutError(f"batch of tool {tool!r} ran longer than its timeout ({limit:.1f}s)")
            self._outcomes.put(Outcome("failure", m, exc=exc))
        if future is not None:
            future.cancel()
            self._count("cancelled")
        elif replace:
            self._count("abandoned_threads")
            self._spawn_handler()
        log.warning("a batch of %d task(s) of %s timed out after %.1fs; given up",
                    len(members), tool, limit)  # fmt: skip
