"""Temporal batching, as the Spanner queue documents describe it: delivery times
rounded up to a window, and what a batch handler gets.

**Windows.** A tool with a ``batch_window`` (``@tool(batch_window="10s")`` or the
policy's ``[tools.NAME] batch_window``; the policy wins) has every new task's
delivery time rounded *up* to the end of its window::

    deliver = RoundDown(t - offset, window) + window + offset

where ``t`` is the call's own delivery time (the transaction's time, or its
``at`` / ``delay``). Independent senders, in any process, compute the same
instant, so the tasks of a window become ready together and are leased
together. With ``batch_offset_field`` the offset is a stable hash of that
argument, in whole seconds below the window (0 for windows under 2 s): the
tasks of one entity still share an instant, while entities are spread across
the window instead of all landing on one second (the documents' ``MOD(ABS(
FARM_FINGERPRINT(UserId)), 10)``). A task waits at most one window. Retries,
approvals decided after the window and deferrals are not re-aligned: their
time is their own.

**Batch handlers.** ``@tool(batch=True)`` declares ``fn(ctx: BatchContext,
items: list[Args]) -> list[Result | BaseException]``: the worker hands it the
ready tasks of the tool that it leased together (at most ``max_batch``),
one item per task in the order of ``ctx.tasks``. See
:mod:`agentq.executor.batching` for how a batch runs and commits.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentq.clock import Clock, from_micros, to_micros
from agentq.context import ToolContext
from agentq.policies import Policy
from agentq.tools import ToolDef

if TYPE_CHECKING:
    from agentq.runtime import Decision

__all__ = ["BatchContext", "entity_offset", "max_batch", "window_delivery", "windowed_delivery"]

_MICRO = timedelta(microseconds=1)


def window_delivery(t: datetime, window: timedelta, offset: timedelta = timedelta(0)) -> datetime:
    """The end of the window (phase-shifted by ``offset``) that ``t`` falls in."""
    size = window // _MICRO
    if size <= 0:
        return t
    shift = (offset // _MICRO) % size
    micros = to_micros(t) - shift
    return from_micros((micros // size) * size + size + shift)


def entity_offset(value: Any, window: timedelta) -> timedelta:
    """A stable offset below ``window`` for one entity, in whole seconds (the same
    in every process and release: a SHA-256 of the value's canonical JSON)."""
    seconds = int(window.total_seconds())
    if seconds < 2:
        return timedelta(0)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    digest = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
    return timedelta(seconds=digest % seconds)


def windowed_delivery(
    policy: Policy,
    definition: ToolDef,
    args: Mapping[str, Any],
    deliver: datetime | None,
    now: datetime,
) -> datetime | None:
    """A new task's delivery time, rounded up to its tool's window if it has one."""
    configured = policy.for_tool(definition.name)
    window = configured.batch_window or definition.batch_window
    if window is None or window <= timedelta(0):
        return deliver
    by = configured.batch_offset_field or definition.batch_offset_field
    offset = entity_offset(args.get(by), window) if by and by in args else timedelta(0)
    return window_delivery(deliver or now, window, offset)


def max_batch(policy: Policy, definition: ToolDef) -> int:
    """How many tasks one call of a batch handler gets at most."""
    return policy.for_tool(definition.name).max_batch or definition.max_batch


@dataclass
class BatchContext:
    """What a batch handler gets: one :class:`ToolContext` per item (its task id is
    that task's idempotency key, sent on every request made through its ``http``),
    in the order of the items. ``on_commit`` writes commit with every result and
    every ack of the batch, or not at all."""

    tool: str
    tasks: list[ToolContext]
    clock: Clock
    settings: Mapping[str, Any]
    logger: logging.Logger
    _on_commit: list[Callable[[Decision], None]] = field(default_factory=list)

    @property
    def task_ids(self) -> list[str]:
        """The task ids of the items, in order."""
        return [t.task_id for t in self.tasks]

    def on_commit(self, fn: Callable[[Decision], None]) -> None:
        """Run ``fn(tx)`` in the transaction that commits the whole batch."""
        self._on_commit.append(fn)

    def close(self) -> None:
        """Release the items' HTTP clients."""
        for t in self.tasks:
            t.close()
