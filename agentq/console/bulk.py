"""Bulk actions on the dead-letter queue: replay or delete the entries ticked on
the page, as ``agentq dlq replay|delete ID...`` does.

Each is an action of :mod:`~agentq.console.actions` (``admin`` scope, CSRF,
read-only refused) whose flashed message is told after it ran: how many were
replayed or deleted, and why any were not. A replay is one transaction per
entry (as :meth:`~agentq.runtime.Runtime.replay_all`), so an entry that cannot be
replayed (a stray message, a task no longer dead) is reported and never stops
the others; a deletion is one transaction for all.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import FormData

from agentq.errors import ConfigError
from agentq.runtime import Runtime
from agentq.runtime.dead_letter_queue import REPLAY_REFUSALS

__all__ = ["MAX_ENTRIES", "delete_selected", "replay_selected"]

#: Most entries one bulk action takes (a page's worth).
MAX_ENTRIES = 200
#: Reasons quoted in the message, at most (the rest are counted).
_REASONS_TOLD = 3

#: A bulk action's runtime call (the actor's name, the form), and the message
#: it leaves once it ran.
BulkAct = tuple[Callable[[str, FormData], None], Callable[[], str]]


def _selected(form: FormData) -> list[str]:
    ids = [v for v in form.getlist("entry") if isinstance(v, str) and v]
    if not ids:
        raise ConfigError("tick at least one entry")
    if len(ids) > MAX_ENTRIES:
        raise ConfigError(f"at most {MAX_ENTRIES} entries at once, not {len(ids)}")
    return list(dict.fromkeys(ids))


def replay_selected(rt: Runtime) -> BulkAct:
    """Replay each ticked entry in its own transaction."""
    told: list[str] = []

    def call(by: str, form: FormData) -> None:
        ids = _selected(form)
        refused: dict[str, str] = {}
        for entry_id in ids:
            try:
                rt.replay(entry_id, by=by)
            except REPLAY_REFUSALS as exc:
                refused[entry_id] = str(exc)
        text = f"replayed {len(ids) - len(refused)} of {len(ids)}"
        if refused:
            reasons = list(refused.values())[:_REASONS_TOLD]
            more = len(refused) - len(reasons)
            text += (
                "; not replayed: " + "; ".join(reasons) + (f" (and {more} more)" if more else "")
            )
        told.append(text)

    return call, lambda: told[-1] if told else ""


def delete_selected(rt: Runtime) -> BulkAct:
    """Delete the ticked entries, in one transaction."""
    told: list[str] = []

    def call(by: str, form: FormData) -> None:
        ids = _selected(form)
        deleted = rt.delete_dead_letters(ids, by=by)
        gone = len(ids) - len(deleted)
        told.append(f"deleted {len(deleted)} of {len(ids)}"
                    + (f" ({gone} already gone)" if gone else ""))  # fmt: skip

    return call, lambda: told[-1] if told else ""
