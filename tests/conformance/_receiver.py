"""Helper process for the multi-process tests: receives from a shared SQLite file.

Usage: python -m tests.conformance._receiver URL QUEUE MODE
MODE drain: print "ready", wait for the parent's "sent" marker file, then lease batches
            of 10 and ack them until the queue is empty (nothing ready, leased or
            backing off); print keys.
MODE wait:  print "ready", block in one stream for up to 60 s, print the first key and
            the wall-clock time it arrived.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from agentq.backends import Backend, open_backend
from agentq.clock import SystemClock

#: Bounds that only a broken run reaches; the parent's communicate() timeout is longer.
_MARKER_WAIT_SECONDS = 60.0
_DRAIN_SECONDS = 100.0


def _drain(backend: Backend, queue: str, go: Path) -> list[list[object]]:
    # Nothing is leased before the parent has sent everything: a batch leased and then
    # dropped unacked stays leased for 10 s, and the helpers could all see an empty
    # queue and stop with those messages never received (defect 17).
    deadline = time.monotonic() + _MARKER_WAIT_SECONDS
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no marker {go} after {_MARKER_WAIT_SECONDS:g} s")
        time.sleep(0.005)
    got: list[list[object]] = []
    deadline = time.monotonic() + _DRAIN_SECONDS
    while time.monotonic() < deadline:
        batch = []
        for b in backend.stream(queue, 10, max_duration=0.05):
            batch = b
            break
        if not batch:
            # Empty for this process does not mean done: others may hold leases. Stop
            # only when no message is left at all (each one acked by some process).
            if backend.stats(queue).depth == 0:
                return got
            continue
        backend.transact(lambda tx, batch=batch: [tx.ack(queue, m.key) for m in batch])
        got.extend(list(m.key) for m in batch)
        time.sleep(0.003)  # "work" outside the lock, so the other processes get turns
    raise SystemExit(f"queue {queue} not empty after {_DRAIN_SECONDS:g} s")


def main() -> None:
    url, queue, mode = sys.argv[1:4]
    clock = SystemClock()
    backend = open_backend(url, clock=clock)
    if mode == "drain":
        print("ready", flush=True)
        go = Path(url.removeprefix("sqlite:///") + ".sent")  # the parent has sent everything
        print(json.dumps(_drain(backend, queue, go)))
    elif mode == "wait":
        print("ready", flush=True)
        for batch in backend.stream(queue, 10, max_duration=60):
            print(json.dumps([list(batch[0].key), clock.now().timestamp()]), flush=True)
            break
    backend.close()


if __name__ == "__main__":
    main()
