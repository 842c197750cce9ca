"""Start and stop the Cloud Spanner emulator, and make databases on it.

The emulator (Debian package ``google-cloud-cli-spanner-emulator``) is one
binary, ``emulator_main``; it serves the Spanner and admin gRPC APIs on one
port, keeps everything in memory and needs no credentials.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = "agentq-test"
INSTANCE = "emulator"
_CANDIDATES = (
    "/usr/lib/google-cloud-sdk/bin/cloud_spanner_emulator/emulator_main",
    "/usr/share/google-cloud-sdk/bin/cloud_spanner_emulator/emulator_main",
)
_START_SECONDS = 30.0
_SERVER_ADDRESS = re.compile(r"Server address: 127\.0\.0\.1:(\d+)")


def find_emulator() -> Path | None:
    """The ``emulator_main`` binary: ``$SPANNER_EMULATOR_BINARY``, the Debian
    package's path, or next to a ``gcloud`` on PATH."""
    explicit = os.environ.get("SPANNER_EMULATOR_BINARY")
    candidates = [explicit] if explicit else list(_CANDIDATES)
    gcloud = shutil.which("gcloud")
    if gcloud and not explicit:
        root = Path(gcloud).resolve().parent
        candidates.append(str(root / "cloud_spanner_emulator" / "emulator_main"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


class Emulator:
    """One emulator process on a free loopback port, with one instance."""

    def __init__(self, binary: Path) -> None:
        self.binary = binary
        self.port = 0  # known once started: the emulator binds port 0 and logs its own
        self.endpoint = ""
        # One log per emulator (each pytest-xdist worker starts its own).
        fd, log = tempfile.mkstemp(prefix="spanner-emulator-", suffix=".log")
        os.close(fd)
        self._log = Path(log)
        self._process: subprocess.Popen[bytes] | None = None
        self._client: Any = None
        self._ids = itertools.count(1)

    def start(self) -> None:
        with self._log.open("wb") as log:
            # Port 0: the kernel picks a free port at bind time, so emulators of
            # parallel test processes never race for one picked beforehand.
            self._process = subprocess.Popen(
                [str(self.binary), "--host_port=127.0.0.1:0"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + _START_SECONDS
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"the Spanner emulator exited: {self._log.read_text()[-2000:]}")
            if not self.port:
                address = _SERVER_ADDRESS.search(self._log.read_text(errors="replace"))
                if address is None:
                    if time.monotonic() > deadline:
                        self.stop()
                        raise RuntimeError(
                            f"the Spanner emulator logged no address: {self._log.read_text()}"
                        )
                    time.sleep(0.05)
                    continue
                self.port = int(address[1])
                self.endpoint = f"127.0.0.1:{self.port}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"the Spanner emulator did not listen on {self.endpoint}"
                    ) from exc
                time.sleep(0.05)
        self._client = self.client()
        instance = self._client.instance(
            INSTANCE,
            configuration_name=f"projects/{PROJECT}/instanceConfigs/emulator-config",
            display_name="agentq tests",
            node_count=1,
        )
        instance.create().result(30)

    def client(self) -> Any:
        """A google-cloud-spanner client talking to the emulator directly."""
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import spanner

        return spanner.Client(
            project=PROJECT,
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=self.endpoint),
            disable_builtin_metrics=True,
        )

    def create_database(self, postgres: bool) -> str:
        """A new empty database; returns its id."""
        database_id = f"{'pg' if postgres else 'gs'}{next(self._ids)}"
        self.database(database_id, postgres).create().result(30)
        return database_id

    def database(self, database_id: str, postgres: bool) -> Any:
        from google.cloud.spanner_admin_database_v1 import DatabaseDialect

        dialect = DatabaseDialect.POSTGRESQL if postgres else DatabaseDialect.GOOGLE_STANDARD_SQL
        return self._client.instance(INSTANCE).database(database_id, database_dialect=dialect)

    def drop_database(self, database_id: str) -> None:
        self.database(database_id, False).drop()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        self._process = None


def database_path(database_id: str) -> str:
    return f"projects/{PROJECT}/instances/{INSTANCE}/databases/{database_id}"
