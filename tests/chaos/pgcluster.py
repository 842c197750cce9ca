"""A throwaway PostgreSQL cluster the chaos run may stop and start at will.

``initdb`` into a temporary directory, ``pg_ctl start`` on a free loopback port,
a login role without superuser that owns the run's database, and
:meth:`PgCluster.restart`: ``pg_ctl stop -m fast`` or ``-m immediate`` (the
server quits without a shutdown checkpoint; the next start runs crash recovery),
a few seconds down, ``pg_ctl start``. As root the server runs as ``postgres``
(``runuser``), as CI's cluster does (``.ci/postgres.sh``); as another user, as
that user. Never the shared server: a run makes its own and removes it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PgCluster", "find_pgbin"]

_CANDIDATES = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin")
ROLE = "agentq_chaos"
DATABASE = "chaos"


def find_pgbin() -> Path | None:
    """The PostgreSQL server binaries: ``$PGBIN``, else Debian's paths."""
    explicit = os.environ.get("PGBIN")
    for candidate in [explicit] if explicit else _CANDIDATES:
        if candidate and os.access(Path(candidate) / "pg_ctl", os.X_OK):
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgCluster:
    """One cluster in a temporary directory; :meth:`close` removes it."""

    def __init__(self, pgbin: Path | None = None, port: int | None = None) -> None:
        found = pgbin or find_pgbin()
        if found is None:
            raise RuntimeError(
                "PostgreSQL's server binaries are not installed (Debian: postgresql-15; "
                "or set PGBIN to the folder holding pg_ctl)"
            )
        self.pgbin = found
        self.port = port or _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="agentq-chaos-pg."))
        self.data = self.dir / "data"
        self.log = self.dir / "log"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.dir, "postgres")
        self.restarts: list[str] = []
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()
        self._psql(f"CREATE ROLE {ROLE} LOGIN", f"CREATE DATABASE {DATABASE} OWNER {ROLE}")

    @property
    def url(self) -> str:
        """The run's database, as a role without superuser."""
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.pgbin / program), *args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} failed ({done.returncode}): {done.stderr.strip() or done.stdout}"
            )

    def _psql(self, *statements: str) -> None:
        args = ["-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d",
                "postgres", "-v", "ON_ERROR_STOP=1"]  # fmt: skip
        for statement in statements:
            args += ["-c", statement]
        self._run("psql", *args)

    def start(self) -> None:
        # fsync off: the run kills server processes, not the machine; the page
        # cache keeps what the server wrote, and crash recovery replays the WAL.
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            "-c max_connections=200 -c fsync=off -c full_page_writes=off"
        )
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "120", "-l", str(self.log),
                  "-o", options, "start")  # fmt: skip

    def stop(self, mode: str) -> None:
        """``pg_ctl stop -m mode`` (``fast``: sessions are ended, transactions
        rolled back; ``immediate``: the server quits at once, as in a crash)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "120", "-m", mode, "stop")

    def restart(self, mode: str, down_seconds: float) -> None:
        """Stop with ``mode``, stay down ``down_seconds``, start again."""
        self.stop(mode)
        time.sleep(down_seconds)
        self.start()
        self.restarts.append(mode)

    def close(self) -> None:
        try:
            self.stop("immediate")
        except RuntimeError:
            pass  # not running
        shutil.rmtree(self.dir, ignore_errors=True)
