"""What the stand-in decides where the queue documents are silent: drawn at random.

The documents promise a 10 s lease, redelivery "with back-off within the first
hour" and then once an hour, batches of at most ``max_batch_size`` that Spanner
"tends" to fill from one split, and no delivery order. A stand-in that filled
the silences with agentq's own model (full batches, oldest first, a fixed
backoff) would pass whatever agentq assumes. So each database gets its own
draw, from the run's seed and a label (the test's id): how many splits its
queues have, how big each batch is, which ready messages go first, and how the
backoff grows. A failure is repeated with the seed it printed::

    AGENTQ_STANDIN_SEED=1234 python -m pytest tests/... -p no:randomly

Part of the stand-in: imports nothing from agentq. The table in ``README.md``
beside it lists every behaviour and where it comes from.
"""

from __future__ import annotations

import os
import random
import threading
import zlib
from collections.abc import Sequence
from typing import Any, TypeVar

from .timekeeping import Backoff

__all__ = ["SEED_VARIABLE", "Choices", "run_seed"]

#: The environment variable holding the run's seed (set by the first process
#: that needs one, so pytest-xdist workers and subprocesses share it).
SEED_VARIABLE = "AGENTQ_STANDIN_SEED"
#: How many ready messages a lease looks at (oldest delivery time first) before
#: choosing its batch among them: a window, so nothing waits forever.
WINDOW = 64

T = TypeVar("T")


def run_seed() -> int:
    """The run's seed: ``$AGENTQ_STANDIN_SEED``, else a new one (then exported)."""
    text = os.environ.get(SEED_VARIABLE)
    if text is None:
        text = str(random.SystemRandom().randrange(1, 10**6))
        os.environ[SEED_VARIABLE] = text
    try:
        return int(text)
    except ValueError as exc:
        raise ValueError(f"{SEED_VARIABLE} must be an integer, not {text!r}") from exc


class Choices:
    """One database's draw (thread-safe: the stand-in leases from many threads)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self._rng = random.Random(f"{run_seed()}:{label}")
        self._lock = threading.Lock()
        rng = self._rng
        #: Splits a queue's messages fall in (by their first key part).
        self.splits = rng.randint(1, 4)
        #: Whether a batch is as full as the split and max_batch_size allow (the
        #: documents: Spanner "tends to" group a split's messages in one batch).
        self.fill_probability = rng.uniform(0.3, 0.9)
        #: Backoff within the first hour: its first delay, growth and ceiling.
        self.backoff = Backoff(
            initial=rng.uniform(1.0, 8.0),
            multiplier=rng.uniform(1.5, 3.0),
            max_delay=rng.uniform(60.0, 900.0),
        )

    def split_of(self, key: Sequence[Any]) -> int:
        """The split a message is in: its first key part, hashed (stable)."""
        return zlib.crc32(repr(key[0]).encode()) % self.splits

    def batch(self, ready: Sequence[T], keys: Sequence[Sequence[Any]], max_size: int) -> list[T]:
        """A batch out of ``ready`` (``keys[i]`` is ``ready[i]``'s key): messages of
        one split, in no particular order, at most ``max_size`` of them; often
        as many as allowed, sometimes fewer."""
        with self._lock:
            by_split: dict[int, list[T]] = {}
            for row, key in zip(ready, keys, strict=True):
                by_split.setdefault(self.split_of(key), []).append(row)
            if not by_split:
                return []
            rows = by_split[self._rng.choice(sorted(by_split))]
            self._rng.shuffle(rows)
            most = min(max_size, len(rows))
            full = self._rng.random() < self.fill_probability
            return rows[: most if full else self._rng.randint(1, most)]

    def redelivery_delay(self, expirations: int, age: float) -> float:
        """Seconds from a lease's expiry to the next delivery (see :class:`Backoff`),
        with a draw of jitter in the first hour."""
        delay = self.backoff.delay(expirations, age)
        if delay >= self.backoff.later:
            return delay  # older messages: once an hour (documented)
        with self._lock:
            jitter = self._rng.uniform(0.8, 1.2)
        return min(delay * jitter, self.backoff.later)

    def describe(self) -> str:
        """The draw, for a failure message."""
        b = self.backoff
        return (
            f"seed {run_seed()} label {self.label!r}: {self.splits} split(s), full batches "
            f"{self.fill_probability:.0%} of the time, backoff {b.initial:.1f} s x "
            f"{b.multiplier:.2f} up to {b.max_delay:.0f} s"
        )
