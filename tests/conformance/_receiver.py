"""Helper process for the multi-process tests: receives from a shared SQLite file.

Usage: python -m tests.conformance._receiver URL QUEUE MODE
MODE drain: print "ready", then lease batches of 10 and ack them until the queue stays
            empty; print keys.
MODE wait:  print "ready", block in one stream for up to 20 s, print the first key and
            the wall-clock time it arrived.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from agentq.backends import open_backend
from agentq.clock import SystemClock


def main() -> None:
    url, queue, mode = sys.argv[1:4]
    clock = SystemClock()
    backend = open_backend(url, clock=clock)
    if mode == "drain":
        got = []
        idle_rounds = 0
        print("ready", flush=True)
        go = Path(url.removeprefix("sqlite:///") + ".sent")  # the parent has sent everything
        while idle_rounds < 3:
            batch = []
            for b in backend.stream(queue, 10, max_duration=0.05):
                batch = b
                break
            if not go.exists():
                continue
            if not batch:
                idle_rounds += 1
                continue
            idle_rounds = 0
            backend.transact(lambda tx, batch=batch: [tx.ack(queue, m.key) for m in batch])
            got.extend(list(m.key) for m in batch)
            time.sleep(0.003)  # "work" outside the lock, so the other processes get turns
        print(json.dumps(got))
    elif mode == "wait":
        print("ready", flush=True)
        for batch in backend.stream(queue, 10, max_duration=20):
            print(json.dumps([list(batch[0].key), clock.now().timestamp()]), flush=True)
            break
    backend.close()


if __name__ == "__main__":
    main()
