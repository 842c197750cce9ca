"""Workers: lease tasks, run handlers, commit result + ack atomically.

A :class:`Worker` has four kinds of threads, each stage in its own module:

* receivers (:mod:`~agentq.executor.receiving`, one per queue) lease batches of
  ready tasks, only as many as there are free handler slots, and claim them in
  one transaction (:mod:`~agentq.executor.admission`: ledger ``running``,
  delivery count, policy checks, dead-lettering of corrupt envelopes);
* ``concurrency`` handler threads fed from a queue
  (:mod:`~agentq.executor.running`; async handlers run on one event loop thread);
* a monitor (:mod:`~agentq.executor.leases`) that renews leases about 7.5 s
  into their 10 s and times out handlers that overrun their tool's timeout
  (:mod:`~agentq.executor.timeouts`: their lease is then given up and a retry
  scheduled, so a late completion fails instead of being recorded);
* a committer (:mod:`~agentq.executor.committing`) that commits finished tasks
  in groups: several tasks' result + ledger + ack in one transaction, falling
  back to one at a time when one ack fails, so a stale task never discards
  another task's result. What a finished run writes (succeeded, retry, dead,
  checkpoint) is decided in :mod:`~agentq.executor.outcomes`.

:meth:`Worker.drain` runs everything that is ready now and returns, which is
what tests (with the fake clock) and notebooks use; :meth:`Worker.run` serves
until stopped.
"""

from __future__ import annotations

# The old private name stays importable (tests/unit/test_envelope.py uses it).
from agentq.executor.inflight import looks_like_envelope as _looks_like_envelope  # noqa: F401
from agentq.executor.worker import Worker, WorkerStats

__all__ = ["Worker", "WorkerStats"]
