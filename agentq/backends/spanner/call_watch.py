"""Ending a RECEIVE from the client: after a quiet interval, or at a deadline.

The documents write a RECEIVE's duration in whole minutes (``'20m'``) and advise
against extremely short ones; none shows ``'0s'`` or promises what such a call
leases. So a one-shot receive (``drain()``, the heartbeat monitor) is a RECEIVE of
``'1m'`` that the client cancels once no new row has arrived for ``quiet``
seconds, and a receive asked to last a time that is not whole minutes is cut by
the client at its deadline. A :class:`CallWatch` is the thread that does it.

The quiet interval is measured in real time (it is about the network going
silent); the deadline on the backend's clock, which a test may fake. Failure
mode: a row the server sent in the moment the cancel was on its way is leased
but never read; it is redelivered after its lease and Spanner's backoff.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from agentq.clock import Clock

__all__ = ["CallWatch"]

#: How often (real seconds) the watch looks at a deadline on the backend's clock.
_DEADLINE_STEP = 0.05


class CallWatch:
    """Cancels ``call`` after ``quiet`` real seconds without :meth:`touch`, or
    when ``clock`` reaches ``deadline`` (its monotonic time), whichever is first.
    :meth:`stop` ends the watch; :attr:`fired` says why it cancelled, if it did."""

    def __init__(
        self, call: Any, clock: Clock, *, quiet: float | None, deadline: float | None
    ) -> None:
        self._call = call
        self._clock = clock
        self._quiet = quiet
        self._deadline = deadline
        # Real time: the quiet interval is about the network, not the injected clock.
        self._last = time.monotonic()
        self._done = threading.Event()
        #: ``"quiet"`` or ``"deadline"`` once the watch cancelled the call.
        self.fired: str | None = None
        self._thread = threading.Thread(target=self._run, name="agentq-receive-watch", daemon=True)
        self._thread.start()

    def touch(self) -> None:
        """A row arrived: the quiet interval starts again."""
        self._last = time.monotonic()

    def stop(self) -> None:
        """The call ended by itself: stop watching it."""
        self._done.set()

    def _run(self) -> None:
        while True:
            step = _DEADLINE_STEP if self._deadline is not None else None
            if self._quiet is not None:
                left = self._quiet - (time.monotonic() - self._last)
                if left <= 0:
                    self._fire("quiet")
                    return
                step = left if step is None else min(step, left)
            if self._deadline is not None and self._clock.monotonic() >= self._deadline:
                self._fire("deadline")
                return
            if self._done.wait(step):
                return

    def _fire(self, why: str) -> None:
        if self._done.is_set():
            return
        self.fired = why
        self._call.cancel()
