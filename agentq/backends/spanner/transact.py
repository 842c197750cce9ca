"""``transact``: ``Database.run_in_transaction`` and the mapping of its errors.

The whole function is re-run on ``Aborted``, within the transaction timeout.
Errors are mapped narrowly, by where they arose:

* NOT_FOUND from the **commit** of a transaction holding strict acks: a strict
  ack of a message that is gone, :class:`MessageNotFound` (nothing was
  committed), unless its structured details name a session, database or schema
  object, or an acked queue does not exist (checked once). Decided by code and
  details, never by the message's wording: :mod:`.not_found`.
* ALREADY_EXISTS from the commit of a transaction that sent: :class:`DuplicateKey`.
* OUT_OF_RANGE from an application statement carrying ``ASSERT_ROWS_MODIFIED``
  (the documents' at-most-once ack): :class:`MessageNotFound`, raised from
  ``tx.execute`` and re-raised at the end of the function even if it was caught,
  so the transaction never commits after a failed assertion.
* Everything else: :class:`TransactionError` (``TransactionAborted``,
  ``BackendUnavailable`` with an unknown commit outcome, ``DatabaseNotWritable``
  for a permission error) with the client's exception as ``__cause__``.

Any exception leaving the function rolls the transaction back at once. The
client does that itself for ordinary exceptions but re-raises a
``GoogleAPICallError`` (a failed statement) without a Rollback RPC, which would
leave its locks held until Spanner's idle timeout; this module sends it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from google.api_core import exceptions as gexc

from agentq.backends.base import Transaction
from agentq.backends.spanner.api_errors import api_error
from agentq.backends.spanner.not_found import not_a_stale_ack, queue_exists
from agentq.backends.spanner.transaction import SpannerTransaction
from agentq.backends.tags import current_tag, make_tag
from agentq.errors import (
    AgentQError,
    BackendUnavailable,
    DatabaseNotWritable,
    DuplicateKey,
    MessageNotFound,
    TransactionAborted,
    TransactionError,
)

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["transact"]

T = TypeVar("T")
log = logging.getLogger("agentq.backends.spanner")


class _CommitFailed(Exception):
    """Carries a commit's API error out of ``run_in_transaction`` tagged as such."""

    def __init__(self, error: gexc.GoogleAPICallError) -> None:
        super().__init__(str(error))
        self.error = error


def transact(backend: SpannerBackend, fn: Callable[[Transaction], T]) -> T:
    """Run ``fn`` in one read-write transaction; Spanner errors become agentq's."""
    if backend.closed:
        raise BackendUnavailable("backend is closed")
    state: dict[str, SpannerTransaction] = {}

    def work(txn: Any) -> T:
        tx = SpannerTransaction(backend, txn, backend.clock.now())
        state["tx"] = tx
        try:
            result = fn(tx)
        except gexc.Aborted:
            raise  # the client re-runs the function; the server already ended it
        except gexc.GoogleAPICallError:
            _rollback(txn)
            raise
        if tx.failed_assert is not None:
            # A failed ASSERT_ROWS_MODIFIED must not commit, even if fn caught it.
            raise tx.failed_assert
        return result

    try:
        result: T = backend.database.run_in_transaction(
            _committing(work),
            timeout_secs=backend.transaction_timeout,
            # Found in Spanner's transaction and lock statistics (agentq.backends.tags).
            transaction_tag=current_tag() or make_tag("transact"),
        )
        backend.held.acked(state["tx"].acks)  # the committed run's acks
        return result
    except _CommitFailed as wrapped:
        raise _commit_error(wrapped.error, state.get("tx"), backend) from wrapped.error
    except AgentQError:
        raise
    except gexc.GoogleAPICallError as exc:
        raise _statement_error(exc, backend.endpoint) from exc
    except gexc.RetryError as exc:  # a call that kept failing until its deadline
        raise api_error(exc, "transaction (not committed)", backend.endpoint) from exc
    except RuntimeError as exc:
        if "nested" in str(exc).lower():
            raise TransactionError("transactions cannot be nested") from exc
        raise


def _committing(work: Callable[[Any], T]) -> Callable[[Any], T]:
    """``work`` with the commit's own API errors told apart from the statements'.

    The client commits after ``work`` returns, so the commit's errors are caught by
    wrapping the transaction's ``commit`` method (``Aborted`` passes through: the
    client re-runs the function).
    """

    def run(txn: Any) -> T:
        commit = txn.commit

        def tagged_commit(*args: Any, **kwargs: Any) -> Any:
            try:
                return commit(*args, **kwargs)
            except ValueError as exc:
                # A function that read and wrote nothing (every key it touched was
                # one no record can have): the client refuses to commit nothing.
                if "has not begun" in str(exc):
                    return None
                raise
            except gexc.Aborted:
                raise
            except gexc.GoogleAPICallError as exc:
                raise _CommitFailed(exc) from exc

        txn.commit = tagged_commit
        return work(txn)

    return run


def _rollback(txn: Any) -> None:
    try:
        txn.rollback()
    except Exception as exc:  # the original error matters more; Spanner times it out
        log.warning("rollback after a failed statement failed: %r", exc)


def _commit_error(
    exc: gexc.GoogleAPICallError, tx: SpannerTransaction | None, backend: SpannerBackend
) -> AgentQError:
    message = exc.message or str(exc)
    endpoint = backend.endpoint
    if isinstance(exc, gexc.NotFound) and tx is not None and tx.strict_acks > 0:
        why = not_a_stale_ack(exc, tx.strict_ack_queues, lambda q: queue_exists(backend, q))
        if why is None:
            return MessageNotFound(
                f"ack of a message that is gone (already acknowledged): {message}"
            )
        return TransactionError(f"transaction failed (NotFound: {why}): {message}")
    if isinstance(exc, gexc.AlreadyExists) and tx is not None and tx.sent_queues:
        queues = ", ".join(repr(q) for q in tx.sent_queues)
        return DuplicateKey(f"a message with this key already exists in queue {queues}: {message}")
    if isinstance(exc, gexc.ServiceUnavailable | gexc.DeadlineExceeded):
        # The commit outcome is unknown: callers must treat it as "maybe".
        return BackendUnavailable(
            f"Spanner at {endpoint} unavailable (commit outcome unknown): {message}"
        )
    return _statement_error(exc, endpoint)


def _statement_error(exc: gexc.GoogleAPICallError, endpoint: str) -> AgentQError:
    message = exc.message or str(exc)
    if isinstance(exc, gexc.Aborted):
        return TransactionAborted(f"transaction kept aborting: {message}")
    if isinstance(exc, gexc.ServiceUnavailable | gexc.DeadlineExceeded):
        return BackendUnavailable(
            f"Spanner at {endpoint} unavailable, transaction not committed: {message}"
        )
    if isinstance(exc, gexc.PermissionDenied):
        return DatabaseNotWritable(f"Spanner refused the transaction (permission): {message}")
    return TransactionError(f"transaction failed ({type(exc).__name__}): {message}")
