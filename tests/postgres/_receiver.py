"""A receiver in its own process, for the wake-up tests: opens the backend,
waits until its LISTEN is in place, prints ``ready``, then prints the first
message it receives (its key and the wall-clock time) and exits."""

from __future__ import annotations

import json
import sys
import threading
import time

from agentq.backends import open_backend
from agentq.clock import SystemClock


def main() -> None:
    url, queue = sys.argv[1], sys.argv[2]
    backend = open_backend(url, clock=SystemClock())
    try:
        backend.subscribe_commits(threading.Event())  # starts the listener
        if not backend._listener.listening.wait(30):  # type: ignore[attr-defined]
            raise SystemExit("the listener did not start")
        print("ready", flush=True)
        for batch in backend.stream(queue, 1, 120):
            # Wall-clock time: compared with the sender's, in another process.
            print(json.dumps([list(batch[0].key), time.time()]), flush=True)
            return
    finally:
        backend.close()


if __name__ == "__main__":
    main()
