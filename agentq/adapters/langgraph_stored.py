"""The checkpoints an :class:`AgentQSaver
<agentq.adapters.langgraph_checkpoint.AgentQSaver>` stored, for the writes that
must wait for theirs.

With ``durability="async"`` (LangGraph's default) a step's checkpoint is stored
in the background while the next step's nodes run, and a node's writes may
reach the saver before the checkpoint they belong to. Plain writes may: a
checkpoint never stored orphans them, as it does with LangGraph's own savers. A
node's agentq work may not. Its enqueues are keyed by the LangGraph task id, a
hash of that checkpoint; if the process dies before the checkpoint is stored,
the graph carried on makes it again under a new id and runs the node again
under a new task id, whose enqueues would be a second refund. So the writes
that carry a node's work first wait for their checkpoint (:meth:`wait_for`):
stored by this process (:meth:`ended`) or found in the database. At
``durability="sync"`` it was stored before the node ran: no wait.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from agentq.errors import AgentQError

__all__ = ["CheckpointNotStored", "StoredCheckpoints"]

#: A checkpoint: (thread, namespace, checkpoint id).
Checkpoint = tuple[str, str, str]
#: How many recent checkpoints' ends are remembered (stored or failed).
_REMEMBERED = 1024
#: How often a waiter looks again without being told (a put's end it missed).
_LOOK_AGAIN_S = 0.05


class CheckpointNotStored(AgentQError):
    """The checkpoint a node's writes belong to was not stored: its ``put``
    failed, or did not end in time. The node's agentq work was not done."""


class StoredCheckpoints:
    """The ends of this saver's recent ``put`` calls, and the writes waiting on them."""

    def __init__(self) -> None:
        self._ended: OrderedDict[Checkpoint, bool] = OrderedDict()
        self._changed = threading.Condition()

    def ended(self, checkpoint: Checkpoint, stored: bool) -> None:
        """A ``put`` of ``checkpoint`` committed (``stored``) or failed."""
        with self._changed:
            self._ended[checkpoint] = stored
            self._ended.move_to_end(checkpoint)
            while len(self._ended) > _REMEMBERED:
                self._ended.popitem(last=False)
            self._changed.notify_all()

    def wait_for(
        self, checkpoint: Checkpoint, in_database: Callable[[], bool], timeout: float
    ) -> None:
        """Return once ``checkpoint`` is stored; raise :class:`CheckpointNotStored`
        if its ``put`` failed first or ``timeout`` seconds pass. ``in_database``
        reads whether it is stored (by another process, or before this one began)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            if self._ended.get(checkpoint):
                return
        while not in_database():
            with self._changed:
                outcome = self._ended.get(checkpoint)
                if outcome is not None:
                    if outcome:
                        return
                    raise CheckpointNotStored(
                        f"checkpoint {checkpoint[2]} of thread {checkpoint[0]!r} was not "
                        "stored (its put failed): the node's agentq work is not done"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CheckpointNotStored(
                        f"checkpoint {checkpoint[2]} of thread {checkpoint[0]!r} was not "
                        f"stored within {timeout:g} s: the node's agentq work is not done"
                    )
                self._changed.wait(min(left, _LOOK_AGAIN_S))
