"""The bench's fixtures: a fresh database with no-op tools, and worker processes.

Every measurement gets its own :class:`BenchEnv` (a temporary directory with a
tools folder, and a new database file, or on PostgreSQL a new schema of the
given database), so no figure is read off a database an earlier one has
grown. Workers run in processes of their own, as in production.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

__all__ = [
    "BENCH_QUEUE",
    "OTHER_QUEUES",
    "BenchEnv",
    "enqueue_burst",
    "postgres_url_with",
    "spawn_workers",
    "stop_workers",
]

#: The queue of the no-op tool every throughput figure runs.
BENCH_QUEUE = "bench"
#: Queues of the idle tools beside it, for the multi-queue figure: with the
#: runtime's own escalations queue, a worker serving every queue serves four.
OTHER_QUEUES = ("bench_b", "bench_c")

_NOOP_TOOL = """
import time
from pydantic import BaseModel
from agentq import ToolContext, tool

class NoopArgs(BaseModel):
    n: int = 0
    pad: str = ""

class NoopResult(BaseModel):
    started: float

@tool(queue="bench")
def noop(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())

@tool(queue="bench_b")
def idle_b(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())

@tool(queue="bench_c")
def idle_c(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())
"""

# argv: url, tools, concurrency, batch, queues ("" = every queue the tools use)
_WORKER = """
import sys, signal, threading
from agentq import Runtime
url, tools, concurrency, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
queues = sys.argv[5].split(",") if sys.argv[5] else None
rt = Runtime(url, tools=tools)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
w = rt.worker(concurrency=concurrency, batch_size=batch, queues=queues)
print("ready", flush=True)
w.run(stop)
rt.close()
"""


def postgres_url_with(url: str, **params: str) -> str:
    """``url`` with query ``params`` set (replacing any of the same name)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in params]
    return urlunsplit(parts._replace(query=urlencode([*query, *params.items()], quote_via=quote)))


class BenchEnv:
    """The no-op tools in a temporary directory, and a fresh database: a new
    file under ``root``, or with ``server`` (a ``postgresql://`` URL) a new
    schema in that database, dropped by :meth:`close`.

    On PostgreSQL the schema is also the connections' ``search_path``, so the
    application table a measurement creates lives beside agentq's tables.
    ``placeholder`` is the dialect's parameter mark for that SQL.
    """

    def __init__(self, root: Path, durability: str, name: str, server: str | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
        self.tools = self.dir / "tools"
        self.tools.mkdir()
        (self.tools / "noop.py").write_text(_NOOP_TOOL)
        self.path = self.dir / "bench.db"
        self.server = server
        self.schema: str | None = None
        if server is None:
            self.url = f"sqlite:///{self.path}?durability={durability}"
            self.placeholder = "?"
            self.id_column = "id INTEGER PRIMARY KEY"
        else:
            self.schema = f"bench_{name}_{secrets.token_hex(4)}".lower()
            self.url = postgres_url_with(
                server, schema=self.schema, options=f"-c search_path={self.schema}"
            )
            self.placeholder = "%s"
            self.id_column = "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
            self._admin(f'CREATE SCHEMA "{self.schema}"')

    @property
    def libpq_url(self) -> str:
        """The PostgreSQL URL without agentq's own options (for psycopg itself)."""
        from agentq.backends.postgres.config import parse_url

        return parse_url(self.url).conninfo

    def runtime(self) -> Any:
        from agentq.runtime import Runtime

        return Runtime(self.url, tools=self.tools)

    def close(self) -> None:
        """Drop the PostgreSQL schema (a file is removed with its directory)."""
        if self.server is not None and self.schema is not None:
            self._admin(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.libpq_url, autocommit=True) as conn:
            conn.execute(sql)

    def __enter__(self) -> BenchEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def enqueue_burst(rt: Any, n: int, pad: str) -> None:
    """``n`` no-op tasks, a thousand per transaction (enqueue speed is measured
    elsewhere: this only fills the queue)."""
    for first in range(0, n, 1000):
        rt.transact(
            lambda tx, c=first: [
                tx.enqueue("noop", {"n": i, "pad": pad}) for i in range(c, min(c + 1000, n))
            ]
        )


def spawn_workers(
    env: BenchEnv,
    count: int,
    concurrency: int,
    batch: int,
    queues: Sequence[str] | None = (BENCH_QUEUE,),
) -> list[subprocess.Popen[str]]:
    """Start ``count`` worker processes serving ``queues`` (None: every queue)
    and wait until each is ready."""
    served = "" if queues is None else ",".join(queues)
    argv = [sys.executable, "-c", _WORKER, env.url, str(env.tools), str(concurrency), str(batch)]
    procs = [
        subprocess.Popen([*argv, served], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "ready":
            err = p.stderr.read() if p.stderr else ""
            stop_workers(procs)
            raise RuntimeError(f"bench worker failed to start: {line} {err[-2000:]}")
    return procs


def stop_workers(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM every worker and wait for it (killed after 30 s)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
