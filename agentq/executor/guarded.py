"""Guarded calls: at-most-once work and outcome-unknown reconciliation.

Most tools call APIs that honour the task id as ``Idempotency-Key``: a crash
after the call and before the commit is repaired by calling again. A tool
declared ``idempotent=False``, with a ``reconcile`` handler, or
``at_most_once=True`` is *guarded* instead:

* **Before its handler runs**, its claim records ``unsettled_call`` on the
  task, in a durable transaction (claims of other tools are not fsynced). That
  costs one durable commit per run, and is done only for guarded tools. An
  ``at_most_once`` tool's claim also acks the delivery and re-sends it for
  after the tool's timeout plus a margin (:func:`horizon`), in that same
  transaction: no lease is renewed while it runs, and no worker sees the task
  again before that time, whatever happens to this one.
* **A completion** (success, checkpoint, or a failure the handler could
  judge: an exception other than those of :func:`may_have_applied`) settles
  the call, exactly as for other tools.
* **A call whose outcome is unknown** — a redelivery of a task whose call is
  unsettled (the worker died, or outlived its lease, or its at-most-once
  message came back after the horizon), the executor giving up at the timeout,
  or the handler raising :class:`~agentq.retry.OutcomeUnknown` or an HTTP
  error that may have been sent — is never called again by itself. With a
  ``reconcile`` handler, the next delivery runs it *instead of* the handler:
  a result means the call applied (the task succeeds with it), None means it
  never did (the handler runs, in the same delivery), an exception is retried
  with the tool's backoff (dead when out of attempts). Without one the task is
  parked as ``outcome_unknown``: no message, nothing runs, until an operator
  resolves it (:meth:`Runtime.resolve`: succeeded with a result, retry, failed).

So for a guarded tool the handler runs **at most once per attempt** unless a
reconcile handler said the call never applied or an operator said to retry;
the price is that a crash needs a lookup or a human instead of a retry.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agentq.backends import Message
from agentq.decision import Decision
from agentq.executor.inflight import Inflight
from agentq.lifecycle import guarded as lifecycle_guarded
from agentq.lifecycle import tasks as lifecycle
from agentq.retry import OutcomeUnknown
from agentq.tools import ToolDef

if TYPE_CHECKING:
    from agentq.runtime import Runtime

__all__ = ["claim_guarded", "guarded_tool", "horizon", "may_have_applied", "parked_reason"]

#: Margin past an at-most-once tool's timeout before its delivery comes back.
MIN_MARGIN = timedelta(seconds=30)


def guarded_tool(runtime: Runtime, payload: Any) -> bool:
    """Whether a leased payload names a guarded tool of this worker (its claim
    must then be durable)."""
    name = payload.get("tool") if isinstance(payload, dict) else None
    return isinstance(name, str) and name in runtime.tools and runtime.tools.get(name).guarded


def horizon(timeout: float) -> timedelta:
    """How long an at-most-once delivery is held off: the timeout plus 10 % (at
    least :data:`MIN_MARGIN`), the longest a run may take and its commit."""
    return timedelta(seconds=timeout) + max(MIN_MARGIN, timedelta(seconds=timeout / 10))


def may_have_applied(exc: BaseException | None) -> bool:
    """Whether a failed run's call may have reached the API: the executor gave up
    at the timeout, the handler said so, or an HTTP error after the request may
    have been sent (a connection refused was not)."""
    if isinstance(exc, TimeoutError | OutcomeUnknown):
        return True
    if "httpx" not in sys.modules:
        return False  # no httpx error can exist before httpx is imported (at first use)
    import httpx

    from agentq.http import NOT_SENT

    return isinstance(exc, httpx.TransportError) and not isinstance(exc, NOT_SENT)


def parked_reason(rec: dict[str, Any], why: str) -> str:
    """The error a parked task carries, saying what an operator can do."""
    return (
        f"attempt {rec['attempt']} of {rec['tool']!r} may have reached the external API ({why}) "
        "and the tool has no reconcile handler: look the call up by task id "
        f"{rec['task_id']!r}, then resolve it (agentq resolve {rec['task_id']} "
        "--succeeded RESULT_JSON | --retry | --failed)"
    )


def claim_guarded(
    runtime: Runtime,
    tx: Decision,
    msg: Message,
    rec: dict[str, Any],
    definition: ToolDef,
    deliveries: int,
    labels: list[str],
    make: Callable[[Message, dict[str, Any], ToolDef], Inflight],
    take_slot: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> Inflight | None:
    """Claim a delivery of a guarded tool inside the (durable) claim transaction;
    ``make`` builds its :class:`Inflight`, ``take_slot`` takes its per-key slot
    (None: deferred). None if it was parked or deferred instead."""
    key: Sequence[Any] = tuple(msg.key)
    reconcile = bool(rec.get("unsettled_call"))
    if reconcile and definition.reconcile is None:
        why = "its worker stopped during the call, or its at-most-once delivery came back"
        lifecycle_guarded.park(runtime, tx.tx, rec, parked_reason(rec, why), ack_key=key)
        labels.append("outcome_unknown")
        return None
    holding = take_slot({**lifecycle.claimed(rec, tx.now, deliveries), "unsettled_call": True})
    if holding is None:
        labels.append("key_limited")  # deferred until its key has a free slot
        return None
    claimed = holding
    lifecycle.store(tx.tx, claimed)
    inflight = make(msg, claimed, definition)
    if definition.at_most_once and inflight.timeout is not None:
        until = tx.now + horizon(inflight.timeout)
        lifecycle_guarded.hold_off(runtime, tx.tx, claimed, key, until)
        inflight.held_off = True
    if reconcile:
        labels.append("reconciling")
        inflight.reconcile = True
    return inflight


def call_reconcile(definition: ToolDef, ctx: Any, args: Any, run: Any) -> Any:
    """Run the tool's reconcile handler (``run(fn)`` runs an async one); returns
    its result, or None when the provider has no such call."""
    assert definition.reconcile is not None
    fn = definition.reconcile
    return run(fn) if inspect.iscoroutinefunction(fn) else fn(ctx, args)
