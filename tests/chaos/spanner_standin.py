"""The Cloud Spanner emulator and the queue stand-in, in a process of their own.

The chaos run's workers reach Spanner over gRPC, as they would a real instance:
the emulator (a subprocess) and the stand-in in front of it
(:class:`tests.spanner_emulator.interposer.Interposer`, which translates the
queue statements the emulator lacks) run here, in a child process, so the
stand-in's leasing does not compete with the controller's agent for one
interpreter. The stand-in runs on the real clock (Spanner's own, as its default).
The run's database gets the application tables (:data:`tests.chaos.appsql.SPANNER_DDL`)
through the admin API; agentq creates its own tables and queues (``ddl=auto``).
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.connection import Connection
from typing import Any

from tests.chaos.appsql import SPANNER_DDL

__all__ = ["RW_SESSIONS", "SpannerStandIn"]

#: As the test fixtures set it (tests/spanner_emulator/fixtures.py): the emulator
#: runs one read-write transaction at a time per multiplexed session; regular
#: sessions let it abort one of two instead, as Spanner may.
RW_SESSIONS = ("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW", "false")
_START_SECONDS = 120.0


def _serve(conn: Connection) -> None:
    """The child: start both, make the database, send its URL, wait for "stop"."""
    from tests.spanner_emulator.choices import run_seed
    from tests.spanner_emulator.emulator import Emulator, find_emulator
    from tests.spanner_emulator.fixtures import EmulatorEnv
    from tests.spanner_emulator.interposer import Interposer

    os.environ[RW_SESSIONS[0]] = RW_SESSIONS[1]
    binary = find_emulator()
    if binary is None:
        missing = (
            "the Cloud Spanner emulator is not installed (Debian package "
            "google-cloud-cli-spanner-emulator; or set SPANNER_EMULATOR_BINARY)"
        )
        conn.send(("error", missing))
        return
    emulator = Emulator(binary)
    interposer: Any = None
    try:
        emulator.start()
        interposer = Interposer(emulator.endpoint, emulator.client())
        database_id = emulator.create_database(False)
        emulator.database(database_id, False).update_ddl(list(SPANNER_DDL)).result(60)
        ceiling = interposer.choices(database_id).backoff.max_delay
        url = EmulatorEnv(emulator, interposer).url(database_id, False)
        conn.send(("url", (url, ceiling, run_seed())))
        conn.recv()  # anything, or EOF when the parent is gone
    except EOFError:
        pass
    except Exception as exc:  # reported to the parent, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        if interposer is not None:
            interposer.stop()
        emulator.stop()


class SpannerStandIn:
    """The child process; ``url`` is the ``spanner://`` URL of the run's database."""

    def __init__(self) -> None:
        os.environ[RW_SESSIONS[0]] = RW_SESSIONS[1]  # for this process and its workers
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child,), name="chaos-spanner", daemon=True)
        self._proc.start()
        child.close()
        if not self._conn.poll(_START_SECONDS):
            self.close()
            raise RuntimeError(f"the Spanner emulator did not start in {_START_SECONDS:g} s")
        kind, value = self._conn.recv()
        if kind != "url":
            self.close()
            raise RuntimeError(f"the Spanner stand-in did not start: {value}")
        self.url: str = value[0]
        #: The longest redelivery backoff the stand-in drew for the run's database.
        self.redelivery_ceiling: float = value[1]
        #: The stand-in's seed (``AGENTQ_STANDIN_SEED`` repeats its draw).
        self.seed: int = value[2]

    def close(self) -> None:
        try:
            self._conn.send("stop")
        except OSError:
            pass  # it is gone already
        self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()
