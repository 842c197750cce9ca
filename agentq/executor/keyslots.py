"""The executor's side of per-key concurrency limits (:mod:`agentq.keylimits`).

Admission takes a task's slot in its claim transaction (:meth:`KeySlots.take`):
a task whose key has every slot held is deferred instead of run, and joins the
key's waiting list. The lease monitor extends the slots of this worker's
running tasks along with their leases (:meth:`KeySlots.renew`), so a slot
outlives its lease only by one lease: when a worker dies, its slots free
themselves. Releasing a slot is the lifecycle's: it happens in the transaction
that records the task leaving ``running``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from agentq import keylimits
from agentq.decision import Decision
from agentq.executor.inflight import Inflight
from agentq.lifecycle import tasks as lifecycle

if TYPE_CHECKING:
    from agentq.runtime import Runtime

__all__ = ["KeySlots"]

log = logging.getLogger("agentq.worker")

#: Extend a slot once less than this many seconds of it are left.
RENEW_MARGIN = 2.5


class KeySlots:
    """One worker's use of the per-key limits of its tools."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        # task id -> monotonic time its slot was last taken or extended.
        self._extended: dict[str, float] = {}
        self._lock = threading.Lock()

    def limited(self, tool: str) -> bool:
        """Whether ``tool`` has a per-key limit (its claims are decided in a transaction)."""
        return keylimits.key_limit(self.runtime.policy, tool) is not None

    def take(
        self,
        tx: Decision,
        rec: dict[str, Any],
        claimed: dict[str, Any],
        key: tuple[Any, ...],
        deliveries: int,
    ) -> dict[str, Any] | None:
        """In the claim transaction: ``claimed`` holding a slot of its key, or
        ``None`` after deferring ``rec`` (the unclaimed record) until a slot may
        be free. Tools without a limit get ``claimed`` back as it is."""
        limit = keylimits.key_limit(self.runtime.policy, str(rec["tool"]))
        if limit is None:
            return claimed
        slot = keylimits.slot_key(str(rec["tool"]), rec.get("args") or {}, limit.field)
        retry_at = keylimits.acquire(
            tx.tx, slot, str(rec["task_id"]), int(rec["attempt"]), limit.max_in_flight
        )
        if retry_at is not None:
            lifecycle.defer(self.runtime, tx.tx, rec, retry_at, deliveries=deliveries,
                            ack_key=key)  # fmt: skip
            return None
        with self._lock:
            self._extended[str(rec["task_id"])] = self.runtime.clock.monotonic()
        return {**claimed, "key_slot": slot}

    def renew(self, inflight: Iterable[Inflight]) -> None:
        """Extend the slots of this worker's running tasks that are near their end,
        in one transaction (nothing to do, no transaction)."""
        now = self.runtime.clock.monotonic()
        due: list[tuple[str, str, int]] = []
        running: set[str] = set()
        for inf in inflight:
            slot = inf.record.get("key_slot")
            if not slot or inf.lost:
                continue
            running.add(inf.task_id)
            with self._lock:
                extended = self._extended.setdefault(inf.task_id, now)
            if keylimits.SLOT_SECONDS - (now - extended) <= RENEW_MARGIN:
                due.append((str(slot), inf.task_id, int(inf.record["attempt"])))
        with self._lock:
            # Finished here; a claim the monitor has not seen yet is younger than a slot.
            for gone in set(self._extended) - running:
                if now - self._extended[gone] > keylimits.SLOT_SECONDS:
                    del self._extended[gone]
        if not due:
            return
        lost = self.runtime.transact(lambda tx: keylimits.renew(tx.tx, due), durable=False)
        with self._lock:
            for _, task_id, _ in due:
                if task_id in self._extended:
                    self._extended[task_id] = now
        for task_id in lost:
            log.warning(
                "%s: its per-key slot expired (the lease renewals were late) and was "
                "taken; its key is over its limit until one of its tasks finishes",
                task_id,
            )
