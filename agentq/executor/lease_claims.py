"""Claims made with the lease, where the backend can (``claims_with_leases``:
PostgreSQL).

The fast path of :class:`~agentq.executor.admission.Admission` reads a leased
batch's ledger records, prepares each claim from them, and swaps the claimed
records in (a compare-and-swap of each): three more round trips after the
lease's two. Here the lease's own transaction reads the records with the ready
rows and sends the swaps with its COMMIT (:class:`~agentq.backends.LeaseClaim`),
so leasing a batch and marking it running is two round trips in all. What the
lease could not claim this way (a record changed meanwhile, anything the fast
path leaves to a transaction) goes on through the admission as before.

A claim prepared here may not use the backend (the lease's transaction holds its
connection): the Retry-After holds of the queue's tools are read just before the
lease (each at most every half second, :class:`~agentq.executor.holds.Holds`),
and a task that would need a read (arguments kept out of band, a hold no longer
cached) is claimed in a transaction instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentq.backends import EncodedFields, EncodedRecord, Message, StoredRecord
from agentq.executor.inflight import Inflight, looks_like_envelope
from agentq.ledger import Tables

if TYPE_CHECKING:
    from agentq.executor.admission import Admission

__all__ = ["LeaseClaims", "NoReads"]

log = logging.getLogger("agentq.worker")

#: Most claims kept for their batch's admission (a batch lost on its way there
#: leaves its own behind; past this they are dropped, and claimed again).
_KEPT = 10_000


class NoReads:
    """A record reader for a claim prepared inside the lease: any read refuses."""

    class WouldRead(Exception):
        """The claim needs a read: it is made in a transaction instead."""

    def get_record(self, table: str, key: str) -> dict[str, Any] | None:
        raise NoReads.WouldRead(f"{table}/{key}")


class LeaseClaims:
    """One worker's claims made with leases, by lease token, until its
    admission takes them (:meth:`take`)."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._lock = threading.Lock()
        self._claimed: dict[str, Inflight] = {}  # marked running with the lease
        self._careful: set[str] = set()  # to claim in a transaction straight away

    def for_queue(self, queue: str) -> _Claim:
        """The claim to lease ``queue``'s batches with."""
        tools = [d.name for d in self._admission.runtime.tools if d.queue == queue]
        return _Claim(self, tools)

    def take(self, batch: list[Message]) -> tuple[list[Inflight], list[Message], list[Message]]:
        """Of a leased batch: the tasks claimed with its lease, the messages to
        claim in a transaction, and the rest (for the admission's fast path)."""
        claimed: list[Inflight] = []
        careful: list[Message] = []
        rest: list[Message] = []
        with self._lock:
            for msg in batch:
                inflight = self._claimed.pop(msg.lease_token, None)
                if inflight is not None:
                    claimed.append(inflight)
                elif msg.lease_token in self._careful:
                    self._careful.discard(msg.lease_token)
                    careful.append(msg)
                else:
                    rest.append(msg)
        return claimed, careful, rest

    def _keep(self, claimed: dict[str, Inflight], careful: set[str]) -> None:
        with self._lock:
            if len(self._claimed) + len(self._careful) > _KEPT:
                self._claimed.clear()
                self._careful.clear()
            self._claimed.update(claimed)
            self._careful.update(careful)


class _Claim:
    """The :class:`~agentq.backends.LeaseClaim` of one receive (its batches)."""

    table = Tables.TASKS

    def __init__(self, claims: LeaseClaims, tools: list[str]) -> None:
        self._claims = claims
        self._tools = tools
        self._prepared: dict[str, tuple[str, Inflight]] = {}  # task id → (token, inflight)
        self._careful: set[str] = set()

    def ready(self) -> None:
        """Before each lease: the holds of the queue's tools, if not read in the
        last half second (one read)."""
        admission = self._claims._admission
        rt = admission.runtime
        if self._tools:
            admission.holds.refresh(rt.backend, rt.clock.now(), self._tools)

    def prepare(
        self, messages: Sequence[Message], records: Mapping[str, StoredRecord]
    ) -> Sequence[tuple[str, str, EncodedFields | EncodedRecord]]:
        self._prepared, self._careful = {}, set()  # a lease run again starts afresh
        try:
            return self._prepare(messages, records)
        except Exception:
            log.exception("preparing claims with a lease failed; they are claimed after it")
            self._prepared, self._careful = {}, set()
            return []

    def _prepare(
        self, messages: Sequence[Message], records: Mapping[str, StoredRecord]
    ) -> list[tuple[str, str, EncodedFields | EncodedRecord]]:
        admission = self._claims._admission
        now = admission.runtime.clock.now()
        no_reads = NoReads()
        items: list[tuple[str, str, EncodedFields | EncodedRecord]] = []
        for msg in messages:
            if not looks_like_envelope(msg.payload, msg.key):
                continue  # the admission says what it is
            task_id = str(msg.key[0])
            found = records.get(task_id)
            if found is None or task_id in self._prepared:
                continue
            try:
                prepared = admission._prepare_claim(msg, found.value, now, no_reads.get_record,
                                                    holds_reader=no_reads)  # fmt: skip
            except NoReads.WouldRead:
                prepared = None
            if prepared is None:
                self._careful.add(msg.lease_token)  # decided in a transaction, as before
                continue
            inflight, fields = prepared
            self._prepared[task_id] = (msg.lease_token, inflight)
            items.append((task_id, found.version, fields))
        return items

    def settled(self, changed: Sequence[str]) -> None:
        gone = set(changed)
        claimed = {
            token: inflight
            for task_id, (token, inflight) in self._prepared.items()
            if task_id not in gone
        }
        self._claims._keep(claimed, self._careful)
