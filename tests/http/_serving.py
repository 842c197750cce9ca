"""Starting the servers' real commands in tests: the address they say they serve on."""

from __future__ import annotations

import re
import subprocess
import time


def url_told(proc: subprocess.Popen[str], bound: float = 60) -> str:
    """The ``http://127.0.0.1:PORT`` a server process printed on its (text) stdout."""
    assert proc.stdout is not None
    told = []
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        told.append(line)
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if found:
            return found.group(1)
    raise AssertionError("the server never said where it listens:\n" + "".join(told))
