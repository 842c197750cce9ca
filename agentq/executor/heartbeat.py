"""A serving worker's heartbeat, timeout detection, and its periodic stats line.

While :meth:`Worker.run` serves, a thread beats every ``interval`` seconds: it
pushes the deadline of the worker's heartbeat message to now + ``timeout`` and
writes the worker's record, in one (non-durable) transaction; see
:mod:`agentq.lifecycle.heartbeats` for the pattern. After each beat it receives
the heartbeat messages that came due, those of workers that stopped beating,
and reports each once: the worker's record is marked ``lost``, the
``agentq.worker.heartbeat_timeouts`` metric counts it, a warning is logged, and
the policy's ``worker_alert_tool`` (if that tool exists) is enqueued. On a clean
stop the worker deletes its heartbeat message and record, so no alert fires.

A worker checks the others only when it could write itself just before: not
at its first beat (it beats before it judges), and not for one ``timeout`` after
a beat that failed or took longer than an interval to write (issue 42). The
database was then out of reach, probably for the others too: their heartbeat
messages came due meanwhile, and the first worker back took each as timed out
before its worker could reconnect and beat (a false "worker lost" alert for
every worker but the first back). A worker that died meanwhile is reported a
timeout after the database is back.

Every ``stats_interval`` seconds it also logs one INFO line of the worker's
counters on ``agentq.worker``.

``agentq workers`` lists the records: live ones, lost ones, and (``--all``)
those no longer heard from.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentq.backends import Message, Transaction
from agentq.decision import Decision
from agentq.errors import ConfigError, InvalidArguments, MessageNotFound, TransactionError
from agentq.ledger import Tables
from agentq.lifecycle import heartbeats
from agentq.tools import ToolDef

if TYPE_CHECKING:
    from agentq.executor.worker import Worker

__all__ = ["DEFAULT_TIMEOUT", "Heartbeat"]

log = logging.getLogger("agentq.worker")

#: Heartbeats older than this are deleted by the next worker that starts.
FORGET_AFTER = timedelta(hours=1)
#: How long a worker may go without beating before it is reported lost.
DEFAULT_TIMEOUT = 30.0
_MAX_ID = 128
_DUE_BATCH = 16


def check_heartbeat_settings(interval: float, timeout: float) -> None:
    """Refuse a heartbeat timeout no longer than its interval (:class:`ConfigError`)."""
    if not 0 < interval < timeout:
        raise ConfigError(
            f"the heartbeat timeout ({timeout:g}s) must be longer than the heartbeat "
            f"interval ({interval:g}s), or a worker would time out between its beats"
        )


class Heartbeat:
    """Publishes ``worker``'s heartbeat, reports other workers' timeouts, and logs
    its stats until :meth:`stop`. ``worker_id`` defaults to ``host:pid:random``;
    give a stable one (``agentq worker --id``) to have a restart replace the
    previous run's heartbeat."""

    def __init__(
        self,
        worker: Worker,
        interval: float = 5.0,
        stats_interval: float | None = 60.0,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        worker_id: str | None = None,
    ) -> None:
        check_heartbeat_settings(interval, timeout)
        if worker_id is not None and not (
            0 < len(worker_id) <= _MAX_ID and worker_id.isprintable() and worker_id.strip()
        ):
            raise ConfigError(f"invalid worker id {worker_id!r}: 1 to {_MAX_ID} printable "
                              "characters")  # fmt: skip
        self.worker = worker
        self.interval = interval
        self.stats_interval = stats_interval
        self.timeout = timedelta(seconds=timeout)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self.started_at = worker.clock.now()
        self.reported = 0  # other workers' timeouts this one reported
        self._first = True  # the next beat replaces whatever message the id has
        # When the first beat that failed or stalled since the last one written
        # started (monotonic); None while beats are written in time.
        self._unwritten_since: float | None = None
        # No check of the others before this (monotonic); None until the first beat.
        self._check_after: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._alert = self._alert_tool()

    def _alert_tool(self) -> ToolDef | None:
        """The policy's ``worker_alert_tool`` if this worker has it (its arguments
        model must accept a :class:`~agentq.lifecycle.heartbeats.WorkerDown`)."""
        rt = self.worker.runtime
        name = rt.policy.defaults.worker_alert_tool
        if not name or name not in rt.tools:
            return None
        definition = rt.tools.get(name)
        now = self.started_at
        sample = heartbeats.WorkerDown(
            worker_id="w", host="h", pid=1, started_at=now, last_beat_at=now, timed_out_at=now,
            timeout_s=1.0,
        ).model_dump(mode="json")  # fmt: skip
        try:
            definition.enqueueable_args(sample)
        except InvalidArguments as exc:
            raise ConfigError(
                f"worker_alert_tool {name!r} must take agentq.WorkerDown arguments: {exc}"
            ) from exc
        return definition

    def _record(self) -> dict[str, Any]:
        w = self.worker
        with w._lock:
            in_flight = len(w._inflight)
        with w._stats_lock:
            stats = dict(w.stats)
        return {
            "worker_id": self.worker_id, "host": socket.gethostname(), "pid": os.getpid(),
            "queues": list(w.queues), "concurrency": w.concurrency,
            "started_at": self.started_at.isoformat(),
            "heartbeat_at": w.clock.now().isoformat(), "in_flight": in_flight, "stats": stats,
            "timeout_s": self.timeout.total_seconds(),
        }  # fmt: skip

    def publish(self) -> None:
        """Beat now: push this worker's deadline and write its record. If another
        worker already reported this one lost (it beat too late), say so and beat
        again as a new run."""
        record = self._record()
        backend = self.worker.runtime.backend

        def write(tx: Transaction) -> None:
            heartbeats.beat(tx, self.worker_id, record, self.timeout, first=self._first)

        # Fenced: the strict ack of its own message fails if another worker took it
        # as timed out, and the record is this worker's alone (no serializable
        # checks, so a beat never aborts an application's transaction).
        try:
            backend.transact(write, durable=False, fenced=True)
        except MessageNotFound:
            log.warning("worker %s went %gs without a heartbeat and was reported lost; "
                        "beating again", self.worker_id, self.timeout.total_seconds())  # fmt: skip
            self._first = True
            backend.transact(write, durable=False, fenced=True)
        self._first = False

    def check_others(self) -> int:
        """Report every heartbeat that came due (its worker stopped beating), each
        in its own transaction; returns how many this call reported."""
        rt = self.worker.runtime
        found = 0
        for batch in rt.backend.stream(heartbeats.HEARTBEAT_QUEUE, _DUE_BATCH, 0.0):
            for msg in batch:

                def report(tx: Decision, m: Message = msg) -> heartbeats.WorkerDown:
                    return heartbeats.timed_out(rt, tx.tx, m, self._alert)

                try:
                    down = rt.transact(report)
                except TransactionError as exc:  # reported by another worker meanwhile
                    log.debug("heartbeat %s not reported here: %s", msg.key, exc)
                    continue
                found += 1
                rt.telemetry.heartbeat_timeouts.add(1)
                self.worker._count("heartbeat_timeouts")
                log.warning(
                    "worker %s (host %s, pid %d) timed out: no heartbeat since %s (timeout "
                    "%gs)%s", down.worker_id, down.host, down.pid,
                    down.last_beat_at.isoformat(timespec="seconds"), down.timeout_s,
                    f"; {self._alert.name} enqueued" if self._alert else "",
                )  # fmt: skip
        self.reported += found
        return found

    def _check_others_logged(self) -> int:
        """:meth:`check_others`; a failure is logged at WARNING and counted as
        ``heartbeat_check_errors``: while checks fail, no lost worker is reported."""
        try:
            return self.check_others()
        except Exception as exc:
            self.worker._count("heartbeat_check_errors")
            log.warning(
                "checking other workers' heartbeats failed (%s: %s); lost workers are not "
                "reported until a check succeeds", type(exc).__name__, exc,
            )  # fmt: skip
            return 0

    def beat(self) -> int:
        """One turn of the heartbeat loop: :meth:`publish`, then :meth:`check_others`
        if this worker could write for a while itself (see the module's docstring);
        returns how many lost workers it reported."""
        clock = self.worker.clock
        started = clock.monotonic()
        try:
            self.publish()
        except Exception as exc:  # the database failing: the worker reports that itself
            log.debug("heartbeat not written: %s", exc)
            if self._unwritten_since is None:
                self._unwritten_since = started
            return 0
        written = clock.monotonic()
        if self._unwritten_since is None and written - started > self.interval:
            self._unwritten_since = started  # it waited for the database, without failing
        timeout = self.timeout.total_seconds()
        if self._unwritten_since is not None:
            log.info(
                "heartbeat written again after %.1fs without one; other workers' heartbeats "
                "are checked again in %gs, once they could beat again too",
                written - self._unwritten_since, timeout,
            )  # fmt: skip
            self._unwritten_since = None
            self._check_after = written + timeout
            return 0
        if self._check_after is None:  # the first beat of a run: a worker that starts beats first
            self._check_after = written
            return 0
        if written < self._check_after:
            return 0
        return self._check_others_logged()

    def _forget_old(self) -> None:
        backend = self.worker.runtime.backend
        cutoff = self.worker.clock.now() - FORGET_AFTER
        stale = [
            key for key, rec in backend.list_records(Tables.WORKERS, limit=1000)
            if _older(rec.get("heartbeat_at"), cutoff)
        ]  # fmt: skip

        def delete(tx: Transaction) -> None:
            for key in stale:
                tx.delete_record(Tables.WORKERS, key)

        if stale:
            backend.transact(delete, durable=False)

    def _loop(self) -> None:
        clock = self.worker.clock
        last_stats = clock.monotonic()
        while True:
            self.beat()
            if self.stats_interval is not None and (
                clock.monotonic() - last_stats >= self.stats_interval
            ):
                last_stats = clock.monotonic()
                self.log_stats()
            if clock.wait(self._stop, self.interval):
                return

    def log_stats(self) -> None:
        """One INFO line: the worker's counters and what is in flight."""
        record = self._record()
        counts = ", ".join(f"{k}={v}" for k, v in sorted(record["stats"].items())) or "nothing yet"
        log.info("worker stats: %d in flight; %s", record["in_flight"], counts,
                 extra={"stats": record["stats"], "in_flight": record["in_flight"]})  # fmt: skip

    def start(self) -> Heartbeat:
        """Start beating (first forgetting the records of long-gone workers)."""
        try:
            self._forget_old()
        except Exception as exc:
            log.debug("old heartbeats not deleted: %s", exc)
        self._thread = threading.Thread(target=self._loop, name="agentq-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop, log the stats a last time, and delete this worker's heartbeat
        message and record (it stopped cleanly: no alert)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self.stats_interval is not None:
            self.log_stats()
        try:
            self.worker.runtime.backend.transact(
                lambda tx: heartbeats.forget(tx, self.worker_id), durable=False, fenced=True
            )
        except Exception as exc:
            log.debug("heartbeat not deleted: %s", exc)


def _older(stamp: Any, cutoff: datetime) -> bool:
    try:
        return datetime.fromisoformat(str(stamp)) < cutoff
    except (TypeError, ValueError):
        return True
