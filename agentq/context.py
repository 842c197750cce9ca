"""What a tool handler gets: :class:`ToolContext`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentq.clock import Clock

if TYPE_CHECKING:
    import httpx

    from agentq.runtime import Decision

__all__ = ["Checkpoint", "ToolContext"]


@dataclass(frozen=True)
class Checkpoint:
    """Returned by a handler to pause long work: the runtime acks this delivery and
    sends the task again after ``after`` with ``state`` (the checkpoint
    pattern), in one transaction."""

    state: dict[str, Any]
    after: timedelta


@dataclass
class ToolContext:
    """Context of one task execution.

    ``task_id`` is stable across every delivery and retry; it is sent as the
    ``Idempotency-Key`` on every request made through :attr:`http`.
    ``scheduled_for`` is a periodic run's slot (the time it stands for, however
    late it runs), else ``None``.
    """

    task_id: str
    tool: str
    attempt: int
    clock: Clock
    settings: Mapping[str, Any]
    logger: logging.Logger
    checkpoint_state: dict[str, Any] | None
    _http_factory: Callable[[], httpx.Client]
    _http: httpx.Client | None = None
    _on_commit: list[Callable[[Decision], None]] = field(default_factory=list)
    scheduled_for: datetime | None = None
    #: The runtime whose worker runs the task (the runtime's own tools use it:
    #: a durable agent's turn reads its run through it).
    runtime: Any = None

    @property
    def http(self) -> httpx.Client:
        """An httpx client limited to the hosts this tool's policy allows."""
        if self._http is None:
            self._http = self._http_factory()
        return self._http

    def on_commit(self, fn: Callable[[Decision], None]) -> None:
        """Run ``fn(tx)`` inside the completion transaction (state writes, follow-up
        tasks): it commits together with the result and the ack, or not at all."""
        self._on_commit.append(fn)

    def checkpoint(self, state: dict[str, Any], after: float | timedelta) -> Checkpoint:
        """Build a :class:`Checkpoint` to return from the handler."""
        delay = after if isinstance(after, timedelta) else timedelta(seconds=after)
        return Checkpoint(state=dict(state), after=delay)

    def close(self) -> None:
        """Release the HTTP client."""
        if self._http is not None:
            self._http.close()
