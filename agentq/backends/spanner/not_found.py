"""Is a commit's NOT_FOUND a strict ack of a message that is gone? (issue 29, defect 3)

A transaction that acks strictly (an Ack mutation without ``ignore_not_found``)
fails its commit with NOT_FOUND when the message is gone: another delivery
acked it, a stale completion. NOT_FOUND can also name the session, the
database or a schema object, and the wording of Spanner's messages is not
documented (the text the stand-in used was invented), so the message text is
never read. The decision, in order:

1. The status code: only NOT_FOUND can be a missing message.
2. The structured details: a ``google.rpc.ResourceInfo`` naming a session,
   database, instance or schema object (the resource types the Spanner clients
   themselves test for a lost session) says it is not a message.
3. Whether the acked queues exist, checked once per queue
   (:func:`queue_exists`, a documented ``SELECT`` on the queue, cached once
   seen): a queue that is gone is a schema error naming it.

Otherwise (the queues exist, or the check could not tell) the message is gone:
that is by far the common case, and taking a stale completion for an error
would run the task's later completions again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc
from google.rpc.error_details_pb2 import ResourceInfo

if TYPE_CHECKING:
    from agentq.backends.spanner.backend import SpannerBackend

__all__ = ["NOT_A_MESSAGE_RESOURCES", "not_a_stale_ack", "queue_exists"]

#: Resource types (their last segment, lower case) that are never a message:
#: the Spanner clients test ``type.googleapis.com/google.spanner.v1.Session``
#: (and the admin API's Database and Instance) to recognise a lost session.
NOT_A_MESSAGE_RESOURCES = frozenset(
    {"session", "database", "instance", "table", "column", "index", "role", "schema"}
)


def _resource_kind(info: ResourceInfo) -> str:
    """``type.googleapis.com/google.spanner.v1.Session`` -> ``session``."""
    last = str(info.resource_type).replace("/", ".").rsplit(".", 1)[-1]
    return last.lower()


def not_a_stale_ack(
    exc: gexc.GoogleAPICallError,
    acked_queues: Sequence[str],
    exists: Callable[[str], bool | None],
) -> str | None:
    """Why the commit error ``exc`` of a transaction that acked ``acked_queues``
    strictly is *not* a missing message (None: it is one)."""
    if not isinstance(exc, gexc.NotFound) or not acked_queues:
        return f"{exc.grpc_status_code or type(exc).__name__} is not a missing message"
    for detail in exc.details or ():
        if isinstance(detail, ResourceInfo) and _resource_kind(detail) in NOT_A_MESSAGE_RESOURCES:
            name = detail.resource_name or "?"
            return f"the {_resource_kind(detail)} {name} was not found"
    missing = [q for q in acked_queues if exists(q) is False]
    if missing:
        return f"queue {', '.join(map(repr, missing))} does not exist"
    return None


def queue_exists(backend: SpannerBackend, queue: str) -> bool | None:
    """Whether ``queue`` exists (None: the check itself failed), by a documented
    read of the queue; a queue once seen is not checked again."""
    if queue in backend.existing_queues:
        return True
    sql = f"SELECT 1 FROM {backend.dialect.queue_ident(queue)} LIMIT 1"
    try:
        with backend.database.snapshot() as snap:
            list(snap.execute_sql(sql, timeout=backend.call_timeout))
    except (gexc.NotFound, gexc.InvalidArgument):
        return False  # the engine's answer for a table it does not know
    except gexc.GoogleAPIError:
        return None  # no permission, unreachable: cannot tell
    backend.existing_queues.add(queue)
    return True
