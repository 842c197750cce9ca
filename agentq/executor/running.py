"""Running handlers: handler threads, the tool context, the async loop, timeouts.

``concurrency`` handler threads take claimed tasks from the work queue and run
their tool's handler (an async handler runs on the worker's one event-loop
thread while its handler thread waits for it). A run ends as an
:class:`~agentq.executor.inflight.Outcome` handed to the committer.

What a timeout does (the lease monitor gives the call up, its slot is freed,
and a task whose earlier call still hangs is not called again):
:mod:`agentq.executor.timeouts`.
"""

from __future__ import annotations

import functools
import logging
import queue as queue_mod
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentq.context import Checkpoint, ToolContext
from agentq.executor.guarded import call_reconcile
from agentq.executor.inflight import Inflight, Outcome
from agentq.executor.outcomes import (
    TIMER_KINDS,
    succeeded_changes,
    succeeded_fields,
    succeeded_record,
)
from agentq.executor.timeouts import Timeouts
from agentq.faults import WorkerCrash
from agentq.ledger import TaskStatus
from agentq.lifecycle import tallies
from agentq.lifecycle.records import Swap
from agentq.ratelimit import RateLimiter
from agentq.tools import ToolDef

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sequence

    import httpx

    from agentq.clock import Clock
    from agentq.runtime import Runtime

__all__ = ["Running", "tool_timeout"]

log = logging.getLogger("agentq.worker")

#: What the result of one of the runtime's own timers says it did.
_BUILTIN_RESULT = {"escalation": "escalated", "expiry": "expired",
                   "auto_reject": "auto_rejected", "reminder": "reminded"}  # fmt: skip


#: A tool's logger (getChild takes logging's module lock on every call).
_tool_logger = functools.cache(log.getChild)


def tool_timeout(runtime: Runtime, definition: ToolDef | None) -> float | None:
    """A tool's timeout in seconds: the policy's, else the tool's own."""
    if definition is None:
        return None
    configured = runtime.policy.for_tool(definition.name).timeout
    if configured is not None:
        return configured.total_seconds()
    return definition.timeout


class Running(Timeouts):
    """The handler-thread stage of a worker (its timeouts: :class:`Timeouts`)."""

    _limiter: RateLimiter

    def _start_handlers(self) -> None:
        # A fresh work queue per start: handler threads of an earlier run that still
        # finish an overrunning task will find their exit marker in the old one.
        self._work = queue_mod.SimpleQueue()
        for _ in range(self.concurrency):
            self._spawn_handler()

    def _spawn_handler(self) -> None:
        with self._lock:
            name = f"agentq-handler-{self._handlers_started}"
            self._handlers_started += 1
        threading.Thread(
            target=self._handler_loop, args=(self._work,), name=name, daemon=True
        ).start()

    def _stop_handlers(self, timeout: float) -> None:
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

    def _handler_loop(self, work: queue_mod.SimpleQueue[Inflight | None]) -> None:
        while True:
            inflight = work.get()
            if inflight is None or not self._run_and_report(inflight):
                return

    def _run_and_report(self, inflight: Inflight) -> bool:
        """Run one task and hand its outcome to the committer; returns whether this
        thread goes on serving (not if it was abandoned and replaced meanwhile)."""
        outcome = self._run(inflight)
        with self._lock:
            if self._inflight.get(inflight.task_id) is inflight:
                del self._inflight[inflight.task_id]
            if inflight.replaced:
                self.abandoned -= 1  # its slot was freed when it was given up
                self._returned(inflight.task_id)
            else:
                self._outstanding -= 1
            if not inflight.timed_out:
                self._pending_commits += 1
            # Of the waiters on the shared condition, only a receiver waiting for
            # room can act on a finished run (the others wait for nothing in
            # flight and no commit pending, and one is pending now): it is woken
            # when this run freed the first slot, not by every task (a thread
            # hand-off per task, most of them for nothing).
            if inflight.timed_out or self._outstanding == self.capacity - 1:
                self._lock.notify_all()
        if inflight.timed_out:
            # The monitor already gave this run up and scheduled a retry.
            self._count("late_after_timeout")
            if inflight.replaced:
                log.info("abandoned handler of %s returned; its thread exits", inflight.task_id)
            return not inflight.replaced
        if outcome.kind == "success":
            self._encode_success(outcome)
        self._outcomes.put(outcome)
        return True

    def _encode_success(self, outcome: Outcome) -> None:
        """Build and encode the succeeded record here, in the handler thread, when
        the commit only has to write it: the committer holds the write lock that
        every other writer (and process) waits for. Escalations, handler writes
        and ordering keys do more in the commit and take the general path."""
        rec = outcome.inflight.record
        if (
            outcome.on_commit or rec.get("kind") in TIMER_KINDS or rec.get("ordering_key")
            or rec.get("callback_url")  # its webhook task is created in the commit
            or rec.get("key_slot")  # its slot is freed in the commit
            or rec.get("schedule")  # its schedule's next run is sent in the commit
            or rec.get("run")  # a durable run's turn or call: its join is in the commit
        ):  # fmt: skip
            return
        now = self.clock.now()
        outcome.tally = tallies.tally_of(rec, TaskStatus.SUCCEEDED, now)
        # The changed fields, made once: encoded alone and, where the whole record
        # is written, merged into it (not made again for it).
        changes = succeeded_changes(rec, now, outcome.result)
        if self.runtime.backend.swaps_in_sets:
            # Only the changed fields: SQLite sets them inside the stored record,
            # a set of records in one statement. Where the claim swapped in the
            # whole record (PostgreSQL), the whole succeeded record too, swapped
            # in from the claim's text: no read, nothing decoded in the commit.
            fields = succeeded_fields(changes)
            version = outcome.inflight.version
            if fields is not None and version is not None:
                outcome.final = Swap(version, succeeded_record(rec, changes), fields)
            else:
                outcome.final = fields
        if outcome.final is None:
            outcome.final = succeeded_record(rec, changes)

    def _run(self, inflight: Inflight) -> Outcome:
        rt = self.runtime
        rec = inflight.record
        definition = inflight.definition
        start = self.clock.monotonic()
        inflight.started = start
        if inflight.timeout is not None:
            inflight.deadline = start + inflight.timeout
        ctx: ToolContext | None = None
        hung = self._still_hung(inflight)
        if hung is not None:
            return hung
        try:
            if definition is not None:
                # Before the span: a task whose turn is later did not run.
                self._limiter.admit(definition.name, rec)
            with rt.telemetry.execute_span(
                rec["tool"], rec["task_id"], rec["attempt"], rec.get("trace") or {}
            ):
                if definition is None:  # one of the runtime's own timers
                    fired = _BUILTIN_RESULT.get(str(rec.get("kind")), "fired")
                    return Outcome("success", inflight, result={fired: True})
                args = definition.validate_args(
                    rec["args"] if inflight.args is None else inflight.args
                )
                if definition.local:
                    return _local_outcome(inflight, definition, args)
                ctx = self._context(inflight, definition)
                result = None
                if inflight.reconcile:  # the last call's outcome is unknown: look it up
                    result = call_reconcile(
                        definition, ctx, args,
                        lambda fn: self._run_async(definition, ctx, args, inflight, fn),
                    )  # fmt: skip
                if result is None and definition.is_async:
                    result = self._run_async(definition, ctx, args, inflight)
                elif result is None:
                    result = definition.handler(ctx, args)
                if isinstance(result, Checkpoint):
                    outcome = Outcome("checkpoint", inflight, checkpoint=result)
                else:
                    outcome = Outcome(
                        "success", inflight, result=definition.dump_result(result),
                        on_commit=list(ctx._on_commit),
                    )  # fmt: skip
                rt.faults.hit("after_external_call", task_id=rec["task_id"], tool=rec["tool"])
                return outcome
        except WorkerCrash:
            return Outcome("crash", inflight)
        except Exception as exc:
            return Outcome("failure", inflight, exc=exc)
        finally:
            if ctx is not None:
                ctx.close()
            duration = self.clock.monotonic() - start
            rt.telemetry.duration.record(duration, {"tool": rec["tool"]})

    def _context(self, inflight: Inflight, definition: ToolDef) -> ToolContext:
        rt = self.runtime
        rec = inflight.record
        policy = rt.policy.for_tool(definition.name)
        timeout = tool_timeout(rt, definition) or 30.0
        return ToolContext(
            task_id=rec["task_id"],
            tool=definition.name,
            attempt=rec["attempt"],
            clock=self.clock,
            settings=rt.settings,
            logger=_tool_logger(definition.name),
            checkpoint_state=rec.get("checkpoint"),
            scheduled_for=_slot(rec),
            runtime=rt,
            _http_factory=lambda: _tool_client(
                rt, definition, rec, policy.allowed_hosts, self.clock, timeout
            ),
        )

    def _run_async(
        self, definition: ToolDef, ctx: ToolContext, args: Any, inflight: Inflight,
        fn: Any = None,
    ) -> Any:  # fmt: skip
        import asyncio  # a worker whose tools are all synchronous never needs it

        loop = self._event_loop()
        coro = (fn or definition.handler)(ctx, args)
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        with self._lock:
            inflight.future = future
            timed_out = inflight.timed_out
        if timed_out:
            future.cancel()  # given up before it even started
        return future.result()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                import asyncio

                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agentq-async", daemon=True)
                thread.start()
                self._loop, self._loop_thread = loop, thread
            return self._loop


def _local_outcome(inflight: Inflight, definition: ToolDef, args: Any) -> Outcome:
    """A local tool's task (its call approved where its tool's code was not
    loaded, or enqueued by hand): its handler ``fn(tx, args)`` runs in the
    completion transaction, so its writes commit with its result and the ack."""
    outcome = Outcome("success", inflight)

    def run_in_commit(tx: Any) -> None:
        # Set on every run of the transaction function: only the last commits.
        outcome.result = definition.dump_result(definition.handler(tx, args))

    outcome.on_commit = [run_in_commit]
    return outcome


def _slot(rec: dict[str, Any]) -> datetime | None:
    """A periodic run's slot (:mod:`agentq.lifecycle.schedules`), else None."""
    info = rec.get("schedule")
    return datetime.fromisoformat(info["nominal"]) if isinstance(info, dict) else None


def _tool_client(
    rt: Runtime, definition: ToolDef, rec: dict[str, Any], allowed: Sequence[str],
    clock: Clock, timeout: float,
) -> httpx.Client:  # fmt: skip
    """A task's ``ctx.http`` client, over the runtime's connection pool."""
    # Imported at a tool's first call out: httpx is a quarter of a second of
    # every process start (each CLI command), and most never call out.
    from agentq.http import SharedTransport, tool_http_client

    return tool_http_client(
        tool=definition.name,
        task_id=rec["task_id"],
        allowed_hosts=allowed,
        clock=clock,
        timeout=timeout,
        transport=SharedTransport(rt.http_transport),
        idempotency_key=rec.get("http_idempotency_key"),
        resend=definition.idempotent,
    )
