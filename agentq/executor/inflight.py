"""What travels between the executor's stages.

A leased task that may run is an :class:`Inflight` (admission makes it, a
handler thread runs it, the lease monitor renews its lease); running it gives
an :class:`Outcome`, which the committer writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from agentq.backends import EncodedFields, EncodedRecord
from agentq.backends.tallies import Tally
from agentq.context import Checkpoint
from agentq.lifecycle.records import Swap
from agentq.tools import ToolDef

__all__ = ["Inflight", "Outcome", "OutcomeKind", "looks_like_envelope"]

OutcomeKind = Literal["success", "failure", "checkpoint", "crash"]


@dataclass
class Inflight:
    """A claimed delivery: its message, lease and the ledger record it was claimed with."""

    queue: str
    key: tuple[Any, ...]
    token: str
    lease_expiry: datetime
    record: dict[str, Any]
    definition: ToolDef | None
    timeout: float | None
    started: float = 0.0
    deadline: float | None = None  # set when the handler starts
    timed_out: bool = False
    lost: bool = False
    # This machine's monotonic time when the current lease was granted (estimated
    # pessimistically at receipt, see agentq.executor.lease_clock, or the sending
    # of the renewal that extended it): renewals are
    # scheduled from it, not from the server's expiry read against a skewed clock.
    leased_at: float | None = None
    # A timed-out sync handler's thread was abandoned and a fresh one took its slot.
    replaced: bool = False
    # An async handler's run on the event loop (cancelled on timeout).
    future: Future[Any] | None = None
    # A guarded call whose last outcome is unknown: run the tool's reconcile first.
    reconcile: bool = False
    # At-most-once: the delivery was acked and re-sent for later; no lease to renew.
    held_off: bool = False
    # Arguments kept out of band, read at the claim (the record has only args_ref).
    args: dict[str, Any] | None = None
    # The batch this delivery runs in (agentq.executor.batching.BatchRun), if any.
    batch: Any = None
    # The record's stored text as the claim wrote it, where the claim swapped the
    # whole record in (PostgreSQL's fast path): a plain success is then swapped in
    # from it, with no read (see agentq.lifecycle.records.Swap).
    version: str | None = None

    # The record's task id, read several times per task by every stage: kept,
    # not made again each time (the record is never replaced).
    task_id: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.task_id = str(self.record["task_id"])


@dataclass
class Outcome:
    """How one run ended, waiting to be committed."""

    kind: OutcomeKind
    inflight: Inflight
    result: Any = None
    exc: BaseException | None = None
    checkpoint: Checkpoint | None = None
    on_commit: list[Any] = field(default_factory=list)
    # What a plain success writes to the ledger, encoded by the handler thread so
    # the committer only writes it (see Running._encode_success): the changed
    # fields (single-writer backends), those with the whole record to swap in
    # from the claim's (a Swap: PostgreSQL), else the whole succeeded record.
    final: EncodedFields | EncodedRecord | Swap | None = None
    # With ``final``: the success's tally for the console's chart (None: the
    # chart does not count it), made beside it (agentq.lifecycle.tallies).
    tally: Tally | None = None


def looks_like_envelope(payload: Any, key: Sequence[Any]) -> bool:
    """Cheap structural check of a task envelope: the ledger, not the payload, is
    what the executor runs from, so it only needs the payload to be a well-formed
    envelope of this very key. Anything else gets full validation and a precise
    error before it is dead-lettered."""
    if not isinstance(payload, dict):
        return False
    version = payload.get("v")
    return (
        # v1 carried the arguments; v2 names the task whose ledger holds them.
        (isinstance(payload.get("args"), dict) if version == 1 else version == 2)
        and len(key) == 2
        and payload.get("task_id") == key[0]
        and payload.get("attempt") == key[1]
        and isinstance(payload.get("tool"), str)
    )
