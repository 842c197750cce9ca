"""Stand-ins for trying agentq on one machine: a loopback API, a scripted model, workers.

* :class:`LoopbackAPI` — a payments / notifications / shipping HTTP API on
  ``127.0.0.1`` (a random port) that behaves like a careful provider: a request
  whose ``Idempotency-Key`` it has seen gets the first answer and is never applied
  twice, so it can count, per task id, how many charges took effect
  (:meth:`LoopbackAPI.charges_per_key`). Routes: ``POST /refunds``,
  ``/notifications``, ``/escalations``, ``/shipments``. It is a test double with
  no authentication: it listens on loopback only and holds nothing real.
* :class:`ScriptedModel` — an OpenAI-compatible chat-completions server on
  ``127.0.0.1`` that answers from a script of :class:`Reply` values (per turn,
  or a function of the :class:`ModelRequest`), with fresh tool-call ids on every
  request, scripted faults (:meth:`ScriptedModel.fail_next`, ``stall_next``),
  a hook between an answer and its sending, and every request recorded as a
  :class:`RecordedRequest` per run and turn
  (:meth:`ScriptedModel.requests_per_turn`). See ``docs/how-to/testing-agents.md``.
* :class:`WorkerProcess` — ``agentq worker`` run as a child process over a
  database URL and a tools folder, which a chaos experiment can SIGKILL
  (:meth:`WorkerProcess.kill`) mid-task. As a context manager it waits (up to
  ``ready_timeout`` seconds) until the worker serves, and stops it on exit.
  agentq's own tests use it to run several real workers on one SQLite file.

Example (a notebook, a test)::

    from agentq.testing import LoopbackAPI, WorkerProcess

    with LoopbackAPI() as api, WorkerProcess(db, tools="tools", policies="policies",
                                             settings={"payments_url": api.url}) as w:
        ...
        w.kill()           # SIGKILL: leases run out, another worker redoes its tasks
    assert max(api.charges_per_key().values()) == 1
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentq.demo_server import LoopbackAPI
from agentq.errors import AgentQError, ConfigError
from agentq.scripted_model import ScriptedModel
from agentq.scripted_replies import ModelRequest, RecordedRequest, Reply

__all__ = [
    "LoopbackAPI",
    "ModelRequest",
    "RecordedRequest",
    "Reply",
    "ScriptedModel",
    "WorkerNotReady",
    "WorkerProcess",
    "stop_all",
    "worker_processes",
]

#: The line ``agentq worker`` prints once its runtime is open, before it leases.
_READY = "agentq worker on "


class WorkerNotReady(AgentQError):
    """A :class:`WorkerProcess` exited, or did not start serving within its
    deadline; the message carries what it printed."""


class WorkerProcess:
    """``agentq worker`` in a child process, over the database ``db``.

    ``tools`` and ``policies`` are folders (a child process cannot see tools
    defined inline in a notebook; one folder may be both); ``settings`` become
    ``--setting KEY=VALUE``. Its output goes to a temporary log, :meth:`log`
    reads it. ``with WorkerProcess(...) as w:`` starts it and waits until it
    serves (:meth:`wait_ready`, ``ready_timeout`` seconds); stopping sends
    SIGTERM (in-flight tasks finish) and SIGKILLs it after ``grace`` seconds.
    """

    def __init__(
        self,
        db: str,
        *,
        tools: str | Path,
        policies: str | Path,
        settings: Mapping[str, str] | None = None,
        concurrency: int = 4,
        queues: list[str] | None = None,
        ready_timeout: float = 60.0,
    ) -> None:
        for name, folder in (("tools", tools), ("policies", policies)):
            if not Path(folder).is_dir():
                raise ConfigError(f"{name} folder {str(folder)!r} does not exist")
        self.command = [
            sys.executable, "-m", "agentq.cli", "worker", "--db", db, "--tools", str(tools),
            "--policies", str(policies), "--concurrency", str(concurrency),
        ]  # fmt: skip
        for key, value in (settings or {}).items():
            self.command += ["--setting", f"{key}={value}"]
        for queue in queues or ():
            self.command += ["--queue", queue]
        self.ready_timeout = ready_timeout
        self._log: Path | None = None
        self._proc: subprocess.Popen[str] | None = None
        self._terminated = False

    def start(self) -> WorkerProcess:
        """Start the process (once)."""
        if self._proc is not None:
            raise ConfigError("this worker process was started already")
        fd, name = tempfile.mkstemp(prefix="agentq-worker-", suffix=".log")
        os.close(fd)
        self._log = Path(name)
        # Appending: the child writes at the end whatever this process reads.
        with open(self._log, "a", encoding="utf-8") as out:
            self._proc = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, text=True
            )
        return self

    def wait_ready(self, timeout: float | None = None) -> WorkerProcess:
        """Wait until the started process serves (it printed its banner): at most
        ``timeout`` seconds (default ``ready_timeout``). :class:`WorkerNotReady`
        if it exits or the deadline passes first."""
        if self._proc is None:
            raise ConfigError("start the worker process before waiting for it")
        limit = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while _READY not in self.log():
            if self._proc.poll() is not None:
                raise WorkerNotReady(
                    f"worker process exited with {self._proc.returncode} before serving:\n"
                    f"{self.log()}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerNotReady(f"worker process not serving after {limit:g}s:\n{self.log()}")
            # Waiting on the process itself: an exit ends the wait at once.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(min(0.05, remaining))
        return self

    @property
    def pid(self) -> int | None:
        """The process id, once started."""
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        """Whether the process runs."""
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL it: no cleanup, no commit; its leased tasks wait for their leases
        to expire, then another worker runs them again (with the same task id)."""
        if self.alive and self._proc is not None:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait(10)

    def terminate(self) -> None:
        """SIGTERM without waiting: it leases nothing more and its tasks in flight
        finish (several workers stop together: terminate each, then :meth:`stop`).
        Sent once: a second SIGTERM would make the worker exit at once."""
        if self.alive and self._proc is not None and not self._terminated:
            self._proc.send_signal(signal.SIGTERM)
            self._terminated = True

    def stop(self, grace: float = 30.0) -> int | None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; returns the exit code."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self.terminate()
            try:
                self._proc.wait(grace)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        return self._proc.returncode

    def log(self) -> str:
        """What the process printed so far."""
        if self._log is None:
            return ""
        return self._log.read_text(encoding="utf-8", errors="replace")

    def close(self) -> None:
        """Stop the process and drop its log."""
        self.stop()
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    def __enter__(self) -> WorkerProcess:
        self.start()
        try:
            return self.wait_ready()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop_all(workers: Iterable[WorkerProcess], grace: float = 30.0) -> list[int | None]:
    """Stop several workers together: SIGTERM each first, so they drain at once
    rather than one after the other, then :meth:`~WorkerProcess.stop` each
    (SIGKILL after ``grace`` seconds); their exit codes, in order."""
    started = list(workers)
    for worker in started:
        worker.terminate()
    return [worker.stop(grace) for worker in started]


@contextlib.contextmanager
def worker_processes(count: int, db: str, **options: Any) -> Iterator[list[WorkerProcess]]:
    """``count`` :class:`WorkerProcess` es over ``db`` (``options`` as for it),
    each serving before the block runs; on leaving it, stopped together
    (:func:`stop_all`) and their logs dropped."""
    with contextlib.ExitStack() as stack:
        workers = [stack.enter_context(WorkerProcess(db, **options)) for _ in range(count)]
        try:
            yield workers
        finally:
            stop_all(workers)
