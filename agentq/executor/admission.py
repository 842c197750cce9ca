"""Admission: turning a leased batch into tasks that may run.

A claim marks a delivery ``running`` (delivery count, ``started_at``) after the
checks that decide whether it may run at all: the message must be the task's
current attempt and the task unfinished; a delivery that keeps failing to
complete is a poison task; the tool must exist, not be held back by a
Retry-After, and a call that needs approval must have an approved approval; a
tool with a per-key limit must get a slot of its key (:mod:`.keyslots`).

Where the backend swaps records in sets (``backend.swaps_in_sets``: SQLite,
PostgreSQL) the common case is prepared outside any write transaction (the
*fast path*): the ledger records are read, checked and updated in memory, then
swapped in with one compare-and-swap write of the set, so SQLite's write lock,
which every other writer waits for, is held only for the swap, and a batch
costs PostgreSQL a few round trips rather than two per task. Anything unusual
(a record changed since the read, a stale or poison message, a hold, an
approval to check, a corrupt envelope), and every claim on Spanner, is decided
the careful way: read and written inside the transaction.

What a message is, decided on the careful path (:mod:`.careful_claims`, whose
checks are :mod:`.claim_checks`):

* a **stray** — its key is no task key (wrong types: SQLite keeps whatever
  another program wrote), no task has its id, or its payload is not the
  envelope of its key and it is not the task's current delivery. It is acked
  and recorded as a stray dead-letter entry with the reason
  (:func:`~agentq.executor.outcomes.dead_letter_stray`); no task is read or
  changed, and the tasks leased beside it are claimed as usual;
* **stale** — a well-formed envelope whose task awaits approval, is finished or
  cancelled, or is at another attempt (or in another queue): acked and
  counted, the task left as it is;
* the task's own current delivery with a payload damaged in place: the task is
  dead-lettered (replayable from its ledger record);
* otherwise a delivery to claim (or a poison task, a held-back one, a policy
  refusal).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentq.backends import EncodedFields, EncodedRecord, Message, encode_fields, encode_record
from agentq.errors import TransactionError
from agentq.executor.inflight import Inflight, looks_like_envelope
from agentq.executor.lease_claims import LeaseClaims
from agentq.faults import WorkerCrash
from agentq.ledger import Tables
from agentq.lifecycle import payloads
from agentq.lifecycle import tasks as lifecycle
from agentq.tools import ToolDef

if TYPE_CHECKING:
    pass
from agentq.executor.careful_claims import CarefulClaims
from agentq.executor.claim_checks import _NOT_RUNNABLE, BUILTIN_TOOLS, DEFAULT_UNKNOWN_TOOL_GRACE

__all__ = ["DEFAULT_UNKNOWN_TOOL_GRACE", "Admission"]


class Admission(CarefulClaims):
    """Claims leased messages for one worker; see the module docstring."""

    _lease_claims: LeaseClaims | None = None

    @property
    def lease_claims(self) -> LeaseClaims:
        """The claims this worker makes with its leases (:mod:`.lease_claims`)."""
        if self._lease_claims is None:
            self._lease_claims = LeaseClaims(self)
        return self._lease_claims

    def claim(self, batch: list[Message]) -> list[Inflight]:
        """Mark a leased batch running and return what may run."""
        rt = self.runtime
        labels: list[str] = []
        runnable: list[Inflight] = []
        careful: list[Message] = []
        if self._lease_claims is not None:
            # Claimed with the lease already, or known to need a transaction.
            runnable, careful, batch = self._lease_claims.take(batch)
        fast, slow = self._plan_claims(batch) if batch else ([], [])
        slow.extend(careful)
        if fast:
            # Only the claim's fields on SQLite, the whole record on PostgreSQL
            # (see _prepare_claim).
            items = [(inf.task_id, version, fields) for inf, version, _, fields in fast]
            try:
                # Bookkeeping: after a power loss it may be lost, which only
                # undercounts a delivery by one. Fenced: a compare-and-swap of each
                # record from the version read, which re-checks the newest row
                # (READ COMMITTED on PostgreSQL: no serializable conflict with the
                # completions and decisions beside it).
                changed = set(
                    rt.backend.transact(
                        lambda tx: lifecycle.swap_claimed(tx, items), durable=False, fenced=True
                    )
                )
            except TransactionError:
                changed = {inf.task_id for inf, _, _, _ in fast}
            for inf, _, msg, _ in fast:
                if inf.task_id in changed:
                    slow.append(msg)  # written since the read: decide again, in the tx
                else:
                    runnable.append(inf)
        if slow:
            claimed, labels = self._claim_in_transaction(slow)
            runnable.extend(claimed)
        for label in labels:
            self._count(label)
        kept = []
        for inflight in runnable:
            try:
                rt.faults.hit("after_lease", task_id=inflight.task_id)
            except WorkerCrash:
                self._count("crashed")  # abandoned while leased: redelivered later
                continue
            kept.append(inflight)
        return kept

    # -- the fast path: read, check, swap in ---------------------------------------

    def _plan_claims(
        self, batch: list[Message]
    ) -> tuple[list[tuple[Inflight, str, Message, EncodedFields | EncodedRecord]], list[Message]]:
        """Split a batch into claims prepared from a read (with the version read
        and the claim's changed fields, encoded) and messages to claim inside a
        transaction."""
        rt = self.runtime
        if not rt.backend.swaps_in_sets:
            return [], list(batch)  # reading first would only add a read per task
        checked = [(m, looks_like_envelope(m.payload, m.key)) for m in batch]
        keys = [str(m.key[0]) for m, wellformed in checked if wellformed]
        stored = rt.backend.read_records(Tables.TASKS, keys) if keys else {}
        offloaded = [k for k, found in stored.items() if payloads.is_offloaded(found.value)]
        rows = rt.backend.read_records(Tables.PAYLOADS, offloaded) if offloaded else {}
        now = rt.clock.now()
        fast: list[tuple[Inflight, str, Message, EncodedFields | EncodedRecord]] = []
        slow: list[Message] = []

        def read(table: str, key: str) -> dict[str, Any] | None:
            row = rows.get(key) if table == Tables.PAYLOADS else None
            return None if row is None else row.value

        for msg, wellformed in checked:
            found = stored.get(str(msg.key[0])) if wellformed else None
            prepared = None if found is None else self._prepare_claim(msg, found.value, now, read)
            if prepared is None or found is None:
                slow.append(msg)
            else:
                fast.append((prepared[0], found.version, msg, prepared[1]))
        return fast, slow

    def _prepare_claim(
        self,
        msg: Message,
        rec: dict[str, Any],
        now: datetime,
        read: payloads.Reader,
        holds_reader: Any = None,
    ) -> tuple[Inflight, EncodedFields | EncodedRecord] | None:
        """The running record of an ordinary delivery and its changed fields, or
        None to decide in a transaction (every branch that writes more than the
        claim goes there)."""
        rt = self.runtime
        try:
            args = payloads.args_of(read, rec) if payloads.is_offloaded(rec) else None
        except payloads.ArgumentsUnavailable:
            return None  # decided (dead-lettered, saying why) in the transaction
        if (
            rec["status"] in _NOT_RUNNABLE
            or rec["attempt"] != msg.key[1]
            or rec.get("queue", msg.queue) != msg.queue
            or rec.get("ordering_key")  # whether it is the key's active task: read in the tx
        ):
            return None
        deliveries = rec.get("deliveries", 0) + 1
        if deliveries > self.max_deliveries:
            return None
        definition: ToolDef | None = None
        if rec["tool"] not in BUILTIN_TOOLS:
            if rec["tool"] not in rt.tools or self.key_slots.limited(rec["tool"]):
                return None
            definition = rt.tools.get(rec["tool"])
            if definition.guarded:
                return None  # its claim is durable and may hold the delivery off
            hold = self.holds.until(holds_reader or rt.backend, now, rec["tool"])
            if (hold is not None and hold > now) or self._needs_approval(rec, definition, args):
                return None
        fields = lifecycle.claimed_fields(rec, now, deliveries)
        inflight = self._make_inflight(msg, {**rec, **fields}, definition)
        inflight.args = args
        if rt.backend.single_writer:
            # SQLite sets the fields inside the stored record, in its own code:
            # the rest of it (the arguments) is not encoded or written again.
            return inflight, encode_fields(fields)
        # PostgreSQL would decode the text just read (and decoded here) to merge
        # the fields into it: the whole claimed record instead, its text kept
        # for the completion to swap from (no read then either).
        text = encode_record(inflight.record)
        inflight.version = text
        return inflight, text
