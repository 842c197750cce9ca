"""The private parts of google-cloud-spanner the backend relies on, checked.

The backend uses four things the library does not promise (issue 29, defect 6);
each is checked here against the installed library, so a release that moves
one fails with a message naming it instead of silently losing what it gave
(per-call deadlines, commit errors told from statement errors, unbuffered
RECEIVE rows). The dependency is bounded below the next major version
(``google-cloud-spanner>=3.71,<4``); a minor release can still move them.

============================  ==================================================
hook                          used by
============================  ==================================================
``transport._wrapped_methods``  :func:`~.connect.bound_deadlines` (per-call deadlines)
``txn.commit`` replaced         :mod:`.transact` (commit errors told apart)
``database.sessions_manager``   :mod:`.streaming` (a session for the raw stream)
``StreamedResultSet(call)``     :mod:`.streaming` (rows as they arrive)
============================  ==================================================
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from agentq.errors import BackendUnavailable

__all__ = ["HOOKS", "ClientLayoutChanged", "check_hooks"]


class ClientLayoutChanged(BackendUnavailable):
    """The installed google-cloud-spanner no longer has a part the backend uses."""


def _version() -> str:
    from google.cloud.spanner_v1 import __version__

    return str(__version__)


def _fail(hook: str, what: str) -> ClientLayoutChanged:
    return ClientLayoutChanged(
        f"google-cloud-spanner {_version()} changed a private part agentq relies on "
        f"({hook}): {what}; install google-cloud-spanner>=3.71,<4 as agentq-runtime[spanner] "
        "pins, or report it to agentq"
    )


def check_wrapped_methods(transport: Any) -> dict[Any, Any]:
    """The transport's table of wrapped methods (per-call retry and timeout)."""
    wrapped = getattr(transport, "_wrapped_methods", None)
    if not isinstance(wrapped, dict) or not wrapped:
        raise _fail("transport._wrapped_methods", "no dict of wrapped methods on the transport")
    return wrapped


def check_commit_replaceable() -> None:
    """``run_in_transaction`` commits through the transaction's ``commit``
    attribute, which an instance may replace."""
    from google.cloud.spanner_v1.session import Session
    from google.cloud.spanner_v1.transaction import Transaction

    if not callable(getattr(Transaction, "commit", None)):
        raise _fail("txn.commit", "Transaction has no commit method")
    slots = getattr(Transaction, "__slots__", None)
    if slots is not None and "__dict__" not in slots:
        raise _fail("txn.commit", "Transaction instances no longer take attributes")
    if "txn.commit(" not in inspect.getsource(Session.run_in_transaction):
        raise _fail("txn.commit", "Session.run_in_transaction no longer calls txn.commit(...)")


def check_sessions_manager() -> None:
    """``database.sessions_manager.get_session(TransactionType.READ_ONLY)`` and
    ``put_session``."""
    from google.cloud.spanner_v1 import database_sessions_manager as dsm
    from google.cloud.spanner_v1.database import Database

    if not isinstance(getattr(Database, "sessions_manager", None), property):
        raise _fail("database.sessions_manager", "Database has no sessions_manager property")
    manager = getattr(dsm, "DatabaseSessionsManager", None)
    kind = getattr(getattr(dsm, "TransactionType", None), "READ_ONLY", None)
    if manager is None or kind is None:
        raise _fail("database.sessions_manager", "no DatabaseSessionsManager/TransactionType")
    for method in ("get_session", "put_session"):
        if not callable(getattr(manager, method, None)):
            raise _fail("database.sessions_manager", f"DatabaseSessionsManager has no {method}")


def check_streamed_result_set() -> None:
    """``StreamedResultSet(call)``: the response iterator is the first argument."""
    from google.cloud.spanner_v1.streamed import StreamedResultSet

    params = list(inspect.signature(StreamedResultSet.__init__).parameters)
    if params[1:2] != ["response_iterator"]:
        raise _fail("StreamedResultSet(call)", f"its arguments are now {params[1:]}")


#: Every hook's check (the ones needing no client).
HOOKS: dict[str, Callable[[], None]] = {
    "txn.commit": check_commit_replaceable,
    "database.sessions_manager": check_sessions_manager,
    "StreamedResultSet(call)": check_streamed_result_set,
}


@functools.cache
def check_hooks() -> None:
    """Raise :class:`ClientLayoutChanged` if a hook that needs no client moved
    (checked once per process)."""
    for check in HOOKS.values():
        check()
