"""The OpenAI Agents SDK's ``Session`` on agentq's database.

::

    from agents import Agent, Runner
    from agentq.adapters.openai_agents_session import AgentQSession

    session = AgentQSession(rt, "ticket-812")
    result = await Runner.run(agent, "refund order 1", session=session)

A session's conversation items are records of the runtime's database (SQLite,
PostgreSQL or Spanner: one implementation over the backend contract, no table
of its own), so they live, are backed up and fail over with the tasks their
tool calls became. Each operation is one transaction: ``add_items`` appends
every item or none, ``pop_item`` removes exactly the item it returns, and
``clear_session`` removes them all. A session's items are numbered from a head
record (``openai_agents_sessions``, keyed by the session id); each item is a
record of ``openai_agents_session_items`` keyed by the session id and its
number, so reading the last ``limit`` items reads those records only.

:meth:`AgentQSession.stage` appends items inside a transaction the caller
already holds (``rt.transact``, a tool's ``tx``): the conversation and the
tasks or rows of that transaction commit together or not at all.

Semantics are the SDK's ``SQLiteSession``'s: ``get_items(limit)`` gives the
latest ``limit`` items in chronological order (``None``: the session's
``session_settings.limit``, else all; ``0``: none), items come back as they
were added (JSON), sessions are independent, and a cleared session starts
empty. The SDK is imported with this module (``agentq-runtime[openai-agents]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit

from agentq.backends.base import Transaction
from agentq.errors import ConfigError

if TYPE_CHECKING:
    from agentq.decision import Decision
    from agentq.runtime import Runtime

__all__ = ["HEADS", "ITEMS", "AgentQSession"]

HEADS: Final = "openai_agents_sessions"
"""The record table of sessions' heads: ``{"first": n, "next": m}``, a session's
items numbered n .. m-1."""

ITEMS: Final = "openai_agents_session_items"
"""The record table of conversation items: ``{"session_id", "item"}``, keyed
``<session id>:<number>``."""

_T = TypeVar("_T")


def _item_key(session_id: str, number: int) -> str:
    # The session id is everything but the last 13 characters: no two sessions'
    # keys can be equal, whatever their ids hold.
    return f"{session_id}:{number:012d}"


class AgentQSession:
    """A conversation of the OpenAI Agents SDK (its ``Session`` protocol) whose
    items are records of ``rt``'s database. ``session_settings`` as the SDK's
    sessions take it (its ``limit`` is the default of :meth:`get_items`)."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        rt: Runtime,
        session_id: str,
        *,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ConfigError("a session id is a non-empty string")
        self.rt = rt
        self.session_id = session_id
        self.session_settings = session_settings or SessionSettings()

    # -- the SDK's protocol ------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items (None: the settings' limit, else all) in the
        order they were added."""
        wanted = resolve_session_limit(limit, self.session_settings)
        return await self._run(lambda tx: self._read(tx, wanted))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in one transaction (all of them or none)."""
        if not items:
            return
        added = [dict(item) for item in items]
        await self._run(lambda tx: self.stage(tx, added))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (None: the session is empty)."""
        return await self._run(self._pop)

    async def clear_session(self) -> None:
        """Remove every item of the session."""
        await self._run(self._clear)

    # -- in a caller's transaction ----------------------------------------------

    def stage(self, tx: Transaction | Decision, items: Sequence[Mapping[str, Any]]) -> None:
        """Append ``items`` in ``tx`` (a backend transaction or a decision): they
        commit with whatever else it writes."""
        raw = _raw(tx)
        head = raw.get_record(HEADS, self.session_id) or {"first": 0, "next": 0}
        number = int(head["next"])
        for item in items:
            raw.put_record(ITEMS, _item_key(self.session_id, number),
                           {"session_id": self.session_id, "item": dict(item)})  # fmt: skip
            number += 1
        raw.put_record(HEADS, self.session_id, {**head, "next": number})

    # -- internals ---------------------------------------------------------------

    async def _run(self, fn: Callable[[Transaction], _T]) -> _T:
        return await asyncio.to_thread(self.rt.backend.transact, fn)

    def _read(self, tx: Transaction, limit: int | None) -> list[TResponseInputItem]:
        head = tx.get_record(HEADS, self.session_id)
        if head is None or limit == 0:
            return []
        first, end = int(head["first"]), int(head["next"])
        if limit is not None and limit > 0:
            first = max(first, end - limit)
        keys = [_item_key(self.session_id, n) for n in range(first, end)]
        found = tx.get_records(ITEMS, keys)
        return [found[k]["item"] for k in keys if k in found]

    def _pop(self, tx: Transaction) -> TResponseInputItem | None:
        head = tx.get_record(HEADS, self.session_id)
        if head is None:
            return None
        first, end = int(head["first"]), int(head["next"])
        while end > first:
            end -= 1
            key = _item_key(self.session_id, end)
            rec = tx.get_record(ITEMS, key)
            if rec is not None:
                tx.delete_record(ITEMS, key)
                tx.put_record(HEADS, self.session_id, {**head, "next": end})
                item: TResponseInputItem = rec["item"]
                return item
        tx.delete_record(HEADS, self.session_id)
        return None

    def _clear(self, tx: Transaction) -> None:
        head = tx.get_record(HEADS, self.session_id)
        if head is None:
            return
        keys = [_item_key(self.session_id, n) for n in range(int(head["first"]),
                                                               int(head["next"]))]  # fmt: skip
        if keys:
            tx.delete_records(ITEMS, keys)
        tx.delete_record(HEADS, self.session_id)


def _raw(tx: Transaction | Decision) -> Transaction:
    inner = getattr(tx, "tx", None)
    return inner if inner is not None else tx  # type: ignore[return-value]
