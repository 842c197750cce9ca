"""``transact``: ``Database.run_in_transaction`` and the mapping of its errors.

The whole function is re-run on ``Aborted``, within the transaction timeout;
a duplicate send fails the commit with ALREADY_EXISTS and a strict ack of a
missing message with NOT_FOUND: both are mapped to agentq's errors, and
nothing of the transaction is committed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from google.api_core import exceptions as gexc

from agentq.backends.base import Transaction
from agentq.backends.spanner.transaction import SpannerTransaction
from agentq.errors import (
    BackendUnavailable,
    DuplicateKey,
    MessageNotFound,
    TransactionAborted,
    TransactionError,
)

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["transact"]

T = TypeVar("T")


def transact(backend: SpannerBackend, fn: Callable[[Transaction], T]) -> T:
    """Run ``fn`` in one read-write transaction; Spanner errors become agentq's."""
    if backend.closed:
        raise BackendUnavailable("backend is closed")
    state: dict[str, SpannerTransaction] = {}

    def work(txn: Any) -> T:
        tx = SpannerTransaction(backend, txn, backend.clock.now())
        state["tx"] = tx
        return fn(tx)

    try:
        return backend.database.run_in_transaction(  # type: ignore[no-any-return]
            work, timeout_secs=backend.transaction_timeout
        )
    except gexc.AlreadyExists as exc:
        raise DuplicateKey(f"a message with this key already exists: {exc.message}") from exc
    except gexc.NotFound as exc:
        tx = state.get("tx")
        if tx is not None and tx.strict_acks:
            raise MessageNotFound(
                f"ack of a message that is gone (already acknowledged): {exc.message}"
            ) from exc
        raise TransactionError(f"not found: {exc.message}") from exc
    except gexc.OutOfRange as exc:
        raise MessageNotFound(f"ASSERT_ROWS_MODIFIED failed: {exc.message}") from exc
    except gexc.Aborted as exc:
        raise TransactionAborted(f"transaction kept aborting: {exc.message}") from exc
    except (gexc.ServiceUnavailable, gexc.DeadlineExceeded) as exc:
        # The commit outcome is unknown: callers must treat it as "maybe".
        raise BackendUnavailable(f"Spanner unavailable (commit outcome unknown): {exc}") from exc
    except gexc.GoogleAPICallError as exc:
        raise TransactionError(f"transaction failed: {exc.message}") from exc
    except RuntimeError as exc:
        if "nested" in str(exc).lower():
            raise TransactionError("transactions cannot be nested") from exc
        raise
