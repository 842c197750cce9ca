"""Committing: the committer thread writes finished runs in groups.

Several tasks' result + ledger + ack share one transaction (up to
``group_commit``). When that transaction fails (typically one ack finds its
message gone: a stale run, or a task cancelled while it ran) the committer
falls back to one transaction per outcome, so a stale task never discards
another task's result; each of those is tried even when an earlier one failed
for a reason the committer did not expect (that one counts as
``commit_failed`` and is redelivered). What each outcome writes is
:func:`~agentq.executor.outcomes.apply_outcome`.
"""

from __future__ import annotations

import logging
import queue as queue_mod
from collections import Counter

from agentq.backends import EncodedFields
from agentq.backends.tags import tagged
from agentq.decision import Decision
from agentq.errors import BackendUnavailable, MessageNotFound, TransactionAborted
from agentq.executor.holds import Holds
from agentq.executor.inflight import Outcome
from agentq.executor.outcomes import (
    Unfenced,
    apply_fenced_successes,
    apply_outcome,
    apply_plain_successes,
    fenced_eligible,
)
from agentq.executor.state import WorkerState
from agentq.faults import WorkerCrash
from agentq.lifecycle import tasks as lifecycle
from agentq.logs import TASK_LOGGER, log_task_finished

__all__ = ["Committing"]

log = logging.getLogger("agentq.worker")


class Committing(WorkerState):
    """The commit stage of a worker."""

    holds: Holds

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

    def _commit(self, outcomes: list[Outcome]) -> None:
        real = [o for o in outcomes if o.kind != "crash"]
        self._count("crashed", len(outcomes) - len(real))
        if not real:
            return

        def apply_all(tx: Decision) -> list[str]:
            if all(o.final is not None for o in real):  # the common group: acks as a set too
                return apply_plain_successes(tx, real)
            # Plain successes' ledger writes go as one set; written before any
            # other outcome's writes, which may read records (an ordering key's
            # next task), so the order of writes is the outcomes' order.
            finals: list[tuple[str, EncodedFields | lifecycle.Swap]] = []
            labels = []
            for o in real:
                if finals and not isinstance(o.final, EncodedFields | lifecycle.Swap):
                    lifecycle.store_fields(tx.tx, finals)
                    finals = []
                labels.append(apply_outcome(tx, o, self.holds, finals))
            if finals:
                lifecycle.store_fields(tx.tx, finals)
            return labels

        tools = {str(o.inflight.record.get("tool")) for o in real}
        queues = {o.inflight.queue for o in real}
        with tagged(  # Spanner's transaction statistics show what committed
            "complete",
            tool=tools.pop() if len(tools) == 1 else None,
            queue=queues.pop() if len(queues) == 1 else None,
        ):
            try:
                labels = self._commit_fenced(real)
                if labels is None:
                    labels = self.runtime.transact(apply_all)
                self._count("group_commits")
            except Exception:
                # One transaction per outcome; each is tried whatever the others did.
                labels = [self._commit_each(o) for o in real]
        # Counted per label, not per task: a group is mostly one label.
        for label, n in Counter(filter(None, labels)).items():
            self._count(label, n)
            self.runtime.telemetry.outcomes.add(n, {"outcome": label})
        self.finished += len(real)
        if TASK_LOGGER.isEnabledFor(logging.INFO):  # one INFO line per finished task
            for o, label in zip(real, labels, strict=True):
                inf = o.inflight
                log_task_finished(inf.task_id, inf.record["tool"], inf.key[1], label,
                                  self.clock.monotonic() - inf.started, o.exc)  # fmt: skip

    def _commit_fenced(self, real: list[Outcome]) -> list[str] | None:
        """A group of plain successes swapped in whole, written in a fenced
        transaction (READ COMMITTED on PostgreSQL: no serializable conflict with
        the completions beside it, so no abort and no commit group after one);
        None where the group needs the serializable path (see
        :func:`~agentq.executor.outcomes.apply_fenced_successes`). A backend with
        one writer at a time gains nothing from it."""
        rt = self.runtime
        if rt.backend.single_writer or not fenced_eligible(real):
            return None
        try:
            labels = rt.backend.transact(
                lambda tx: apply_fenced_successes(Decision(rt, tx), real), fenced=True
            )
        except Unfenced:
            return None
        self._count("fenced_commits")
        return labels

    def _commit_each(self, outcome: Outcome) -> str:
        """:meth:`_commit_alone`, and ``commit_failed`` for anything it did not
        expect: an exception leaving the fallback part way would leave the group's
        later completions uncommitted, to run again once their leases expire."""
        try:
            return self._commit_alone(outcome)
        except Exception:
            log.exception("could not commit %s; it will be redelivered", outcome.inflight.task_id)
            return "commit_failed"

    def _commit_alone(self, outcome: Outcome) -> str:
        rt = self.runtime
        try:
            return rt.transact(lambda tx: apply_outcome(tx, outcome, self.holds))
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
            failed = Outcome("failure", outcome.inflight, exc=exc)
            try:
                return rt.transact(lambda tx: apply_outcome(tx, failed, self.holds))
            except MessageNotFound:
                return "stale_completion"
