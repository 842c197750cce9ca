"""What a database call is for, as a tag a database can show (issue 29, defect 7).

Spanner records request and transaction tags in its query, read, transaction
and lock statistics, so that a user can find agentq's share of the load and
which tool or queue it came from. The executor names what it is doing with
:func:`tagged` around its transactions; the Spanner backend reads
:func:`current_tag` when it begins one (other backends ignore it). A context
variable, so the tag follows the thread (and asyncio task) that set it, and no
backend method grows an argument.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["MAX_TAG", "current_tag", "make_tag", "tagged"]

#: Spanner keeps the first 50 characters of a tag.
MAX_TAG = 50
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
_current: ContextVar[str | None] = ContextVar("agentq_tag", default=None)


def make_tag(op: str, *, tool: str | None = None, queue: str | None = None) -> str:
    """``agentq op=<op>[ tool=<tool>][ queue=<queue>]``, printable ASCII, at most
    :data:`MAX_TAG` characters (the operation first: it survives truncation)."""
    parts = [f"op={op}"]
    if tool:
        parts.append(f"tool={tool}")
    if queue:
        parts.append(f"queue={queue}")
    return _UNPRINTABLE.sub("?", "agentq " + " ".join(parts))[:MAX_TAG]


@contextmanager
def tagged(op: str, *, tool: str | None = None, queue: str | None = None) -> Iterator[str]:
    """Tag the transactions begun in this block (see the module docstring)."""
    token = _current.set(make_tag(op, tool=tool, queue=queue))
    try:
        yield _current.get() or ""
    finally:
        _current.reset(token)


def current_tag() -> str | None:
    """The tag of the innermost :func:`tagged` block, if any."""
    return _current.get()
