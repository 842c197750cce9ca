"""Worker heartbeats as queue messages, and what a timed-out one sets off.

The pattern of the Spanner documents ("monitor worker health and detect
timeouts"): each serving worker keeps **one** message in the
``worker_heartbeats`` queue, keyed by its worker id alone, whose delivery time is
its deadline (now + ``timeout``). Queues have no UPDATE, so each beat acks the
message and sends its replacement with the new deadline, in one transaction, the
ack first (:func:`beat`). While the worker beats, the message is never due. When
it stops beating (killed, hung, cut off from the database), the message becomes
due at the deadline and one of the other workers receives it (:func:`timed_out`):
in one transaction it acks it, marks the worker's record ``lost`` and, if the
policy's ``worker_alert_tool`` exists, enqueues that tool once with a
:class:`WorkerDown`. The strict ack makes that exactly once however many
workers receive it. A clean stop deletes the message (:func:`forget`), so no
alert fires; a worker restarted under the same id replaces the message of its
previous run (its first beat acks whatever is there), so a restart within the
timeout raises no false alarm.

The ``workers`` table keeps each worker's record (host, pid, queues, counters)
for ``agentq workers``; it is written in the same transaction as each beat.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from agentq.backends import Message, Transaction
from agentq.envelope import TaskKind
from agentq.errors import InvalidArguments
from agentq.ledger import Tables
from agentq.lifecycle import tasks
from agentq.lifecycle.states import Event
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec
from agentq.tools import ToolDef

__all__ = [
    "HEARTBEAT_QUEUE",
    "LIVE",
    "LOST",
    "WorkerDown",
    "beat",
    "forget",
    "heartbeat_queue_spec",
    "timed_out",
]

log = logging.getLogger("agentq.worker")

#: The queue of the workers' heartbeat messages, keyed by worker id.
HEARTBEAT_QUEUE = "worker_heartbeats"
#: A worker record's status while it beats, and once its heartbeat timed out.
LIVE = "live"
LOST = "lost"
_ALERT_KIND: TaskKind = "notify"


def heartbeat_queue_spec() -> QueueSpec:
    """The heartbeat queue: one message per worker, key ``(worker_id)``, JSON payload."""
    return QueueSpec(
        HEARTBEAT_QUEUE, (KeyColumn("worker_id", KeyType.STR),), payload=PayloadType.JSON,
        max_payload_bytes=4096,
    )  # fmt: skip


class WorkerDown(BaseModel):
    """Arguments of the ``worker_alert_tool``: a worker whose heartbeat timed out."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    worker_id: str
    host: str
    pid: int
    started_at: datetime
    last_beat_at: datetime
    timed_out_at: datetime
    timeout_s: float


def beat(
    tx: Transaction,
    worker_id: str,
    record: Mapping[str, Any],
    timeout: timedelta,
    *,
    first: bool,
) -> None:
    """Push the worker's deadline to now + ``timeout``: ack its heartbeat message
    and send the new one (ack before send), and write its record.

    The first beat of a run acks whatever message the id has (a previous run's:
    replaced, no alarm); a later beat requires its own message, so when another
    worker already took it as timed out the transaction fails with
    :class:`~agentq.errors.MessageNotFound` and the caller beats as a first beat again.
    """
    key = (worker_id,)
    tx.ack(HEARTBEAT_QUEUE, key, must_exist=not first)
    payload = {k: record[k] for k in ("worker_id", "host", "pid", "started_at")}
    payload["timeout_s"] = timeout.total_seconds()
    payload["beat_at"] = tasks.iso(tx.now)
    tx.send(HEARTBEAT_QUEUE, key, payload, tx.now + timeout)
    tx.put_record(Tables.WORKERS, worker_id, {**record, "status": LIVE, "lost_at": None})


def forget(tx: Transaction, worker_id: str) -> None:
    """A clean stop: delete the worker's heartbeat message and its record."""
    tx.ack(HEARTBEAT_QUEUE, (worker_id,), must_exist=False)
    tx.delete_record(Tables.WORKERS, worker_id)


def timed_out(
    env: tasks.Env, tx: Transaction, msg: Message, alert: ToolDef | None
) -> WorkerDown:
    """A heartbeat message came due: its worker stopped beating. Ack it, mark the
    worker ``lost`` and enqueue ``alert`` (if given) with the returned
    :class:`WorkerDown` as its arguments. Arguments the alert tool's model refuses
    are logged, and the timeout is still recorded (the message must not come back)."""
    tx.ack(HEARTBEAT_QUEUE, msg.key, must_exist=True)
    worker_id = str(msg.key[0])
    now = tx.now
    down = _down(worker_id, msg.payload, now)
    rec = tx.get_record(Tables.WORKERS, worker_id)
    if rec is not None:
        tx.put_record(Tables.WORKERS, worker_id, {**rec, "status": LOST, "lost_at": tasks.iso(now)})
    if alert is not None:
        try:
            args = alert.enqueueable_args(down.model_dump(mode="json"))
        except InvalidArguments as exc:
            log.error("worker %s timed out, but the alert tool %r refuses its arguments: %s "
                      "(annotate its args with agentq.WorkerDown)", worker_id, alert.name, exc)
        else:
            tasks.create(env, tx, tool=alert.name, queue=alert.queue, args=args,
                         kind=_ALERT_KIND, event=Event.ENQUEUE)  # fmt: skip
    return down


def _down(worker_id: str, payload: Any, now: datetime) -> WorkerDown:
    """What a heartbeat message says of its worker; a message some other program
    wrote may say anything, so what does not parse is left at a neutral value."""
    data = payload if isinstance(payload, dict) else {}
    fields: dict[str, Any] = {"worker_id": worker_id, "host": "?", "pid": 0, "started_at": now,
                              "last_beat_at": now, "timed_out_at": now, "timeout_s": 0.0}
    given = {"host": data.get("host"), "pid": data.get("pid"), "started_at": data.get("started_at"),
             "last_beat_at": data.get("beat_at"), "timeout_s": data.get("timeout_s")}
    for name, value in given.items():
        try:
            WorkerDown.model_validate({**fields, name: value})
        except ValidationError:
            continue
        fields[name] = value
    return WorkerDown.model_validate(fields)
