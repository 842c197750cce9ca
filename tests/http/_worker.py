"""A worker process for the wait and HTTP tests: serves every queue of the refund
bot (``tools/``, ``policies/``) on a shared SQLite file until SIGTERM.

Usage: python -m tests.http._worker DB_URL API_URL [POLICIES_DIR]
Prints "ready" once its runtime is open.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main(db_url: str, api_url: str, policies: str) -> None:
    from agentq import Runtime, SystemClock

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    settings = {"payments_url": api_url, "notifications_url": api_url, "shipping_url": api_url}
    rt = Runtime(db_url, tools=ROOT / "tools", policies=policies,
                 clock=SystemClock(), settings=settings)  # fmt: skip
    try:
        print("ready", flush=True)
        rt.worker(concurrency=2, prefetch=0, receive_timeout=0.2).run(stop)
    finally:
        rt.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else str(ROOT / "policies"))
