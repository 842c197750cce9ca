"""Stopping a server a test started in another process."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def interrupt(proc: subprocess.Popen[Any], grace: float = 30.0) -> int:
    """Ctrl-C the process (SIGINT, as a user stops ``agentq ui``), wait up to
    ``grace`` seconds, SIGKILL it if it is still there, close its output pipe;
    its exit status."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()
    return int(proc.returncode)
