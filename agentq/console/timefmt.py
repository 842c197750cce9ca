"""Times and durations as the console's pages show them: short, one line.

A moment is shown relative to the page's ``now`` (the runtime's clock, so a
test's fake clock gives the same page every run), with the full UTC time on
hover; a span of seconds with the unit that reads best. The Jinja filters
:func:`install` adds take ``now`` from the page's context.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, pass_context
from jinja2.runtime import Context

from agentq.clock import moment

__all__ = ["ago", "install", "moment", "seconds_between", "span", "stamp"]


def seconds_between(start: Any, end: Any) -> float | None:
    """Seconds from ``start`` to ``end`` (either a datetime or an ISO string), or None."""
    a, b = moment(start), moment(end)
    return None if a is None or b is None else (b - a).total_seconds()


def span(seconds: float | None) -> str:
    """A duration in the unit that reads best: ``850 ms``, ``12.3 s``, ``4 min 5 s``,
    ``3 h 2 min``, ``2 d 4 h``; ``-`` for None."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    whole = int(s)
    if whole < 3600:
        return _two(whole // 60, "min", whole % 60, "s")
    if whole < 86400:
        return _two(whole // 3600, "h", whole % 3600 // 60, "min")
    return _two(whole // 86400, "d", whole % 86400 // 3600, "h")


def _two(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big} {big_unit} {small} {small_unit}" if small else f"{big} {big_unit}"


def ago(when: Any, now: datetime) -> str:
    """``when`` relative to ``now``: ``just now``, ``5 min ago``, ``in 2 h``; ``-`` if none."""
    at = moment(when)
    if at is None:
        return "-"
    delta = (now - at).total_seconds()
    if abs(delta) < 1:
        return "just now"
    shown = span(abs(delta)).split(" ")
    coarse = " ".join(shown[:2])  # "4 min 5 s ago" reads as "4 min ago"
    return f"{coarse} ago" if delta > 0 else f"in {coarse}"


def stamp(when: Any) -> str:
    """The full time in UTC, to the second (``2030-01-02 03:04:05 UTC``); ``-`` if none."""
    at = moment(when)
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def install(env: Environment) -> None:
    """Add the filters ``ago`` (relative to the context's ``now``), ``stamp``,
    ``span`` and ``iso`` (for ``<time datetime>``) to ``env``."""

    @pass_context
    def ago_filter(context: Context, when: Any) -> str:
        return ago(when, context["now"])

    def iso(when: Any) -> str:
        at = moment(when)
        return "" if at is None else at.astimezone(UTC).isoformat(timespec="seconds")

    env.filters.update(ago=ago_filter, stamp=stamp, span=span, iso=iso)
