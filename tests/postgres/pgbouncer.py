"""A real PgBouncer in transaction pooling mode in front of the test server.

:func:`pgbouncer` starts one per test process (Debian's ``pgbouncer`` package;
``.ci/run`` installs it) on a held loopback port, in front of the server of
``AGENTQ_TEST_POSTGRES_URL``, with fewer server connections than agentq opens
clients, so transactions of one client really do land on different server
connections. :func:`pgbouncer_url` is a fresh database (made on the server
directly) reached through it. Without the binary the cases skip locally and
fail under ``CI``, as the PostgreSQL cases do without a server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.ports import held_port
from tests.postgres.server import ENV, DatabaseFactory

__all__ = ["PgBouncer", "pgbouncer", "pgbouncer_url"]

BINARY = "pgbouncer"
_DEBIAN_PATH = "/usr/sbin/pgbouncer"
#: Server connections per (database, user): fewer than a worker's pool.
SERVER_CONNECTIONS = 3


def _absent(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but PgBouncer is not available: {reason}", pytrace=False)
    pytest.skip(f"pgbouncer: {reason}")


class PgBouncer:
    """A running PgBouncer: ``url_for(server_url)`` names a database through it."""

    def __init__(self, binary: str, server_url: str, port: int) -> None:
        server = urlsplit(server_url)
        self.port = port
        self.dir = Path(tempfile.mkdtemp(prefix="agentq-pgbouncer-"))
        (self.dir / "userlist.txt").write_text(f'"{server.username}" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server.hostname} port={server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'userlist.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {SERVER_CONNECTIONS}\nmax_client_conn = 1000\n"
            f"logfile = {self.dir / 'pgbouncer.log'}\n"
        )
        (self.dir / "pgbouncer.log").touch()
        command = [binary]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root: -u drops to a user
            command += ["-u", "nobody"]
            self.dir.chmod(0o755)
            for path in self.dir.iterdir():
                path.chmod(0o644)
            (self.dir / "pgbouncer.log").chmod(0o666)
        self.proc = subprocess.Popen(
            [*command, str(self.dir / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30  # real time: another process starting
        while "listening on" not in self.log():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PgBouncer did not start:\n{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        return (self.dir / "pgbouncer.log").read_text(errors="replace")

    def url_for(self, database_url: str) -> str:
        """``database_url`` (on the server) as reached through PgBouncer."""
        parts = urlsplit(database_url)
        return urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{self.port}"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """One PgBouncer per test process, in transaction pooling mode."""
    server_url = os.environ.get(ENV, "")
    if not server_url:
        _absent(f"set {ENV} to a PostgreSQL server URL to run these")
    binary = shutil.which(BINARY) or (_DEBIAN_PATH if os.path.exists(_DEBIAN_PATH) else None)
    if binary is None:
        _absent("no pgbouncer binary (Debian: apt-get install pgbouncer)")
    with held_port() as port:
        bouncer = PgBouncer(str(binary), server_url, port)
        try:
            yield bouncer
        finally:
            bouncer.stop()


@pytest.fixture
def pgbouncer_url(postgres_url_factory: DatabaseFactory, pgbouncer: PgBouncer) -> str:
    """A fresh database, reached through PgBouncer in transaction mode (no
    agentq options: the test adds ``pooler=transaction`` or leaves it out)."""
    return pgbouncer.url_for(postgres_url_factory.create())


def server_connections(factory: DatabaseFactory, url: str) -> list[tuple[Any, ...]]:
    """``(application_name, query)`` of the server's sessions on ``url``'s database."""
    admin: Any = factory.admin(url)
    try:
        return list(admin.execute(
            "SELECT application_name, query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall())  # fmt: skip
    finally:
        admin.close()
