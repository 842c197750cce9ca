"""Every time option of the CLI takes what its help says (issue 39, 2.12):
seconds or a duration (``2s``, ``30m``, ``1h``), through one shared parser;
``ui --refresh 2s`` and ``tasks --since 1h`` were refused."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from agentq.cli import build_parser
from agentq.cli.common import moment, non_negative_span, positive_float, time_or_ago

#: The shared parsers of time options (the HTTP and MCP commands get theirs passed in).
_TIME_TYPES = {positive_float, non_negative_span, time_or_ago}


def _options(parser: argparse.ArgumentParser, path: str = "agentq") -> list[tuple[str, Any]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _options(sub, f"{path} {name}")
        elif action.option_strings:
            found.append((f"{path} {action.option_strings[-1]}", action))
    return found


def test_ui_refresh_and_tasks_since_take_durations() -> None:
    parser = build_parser()
    assert parser.parse_args(["ui", "--refresh", "2s"]).refresh == 2.0
    assert parser.parse_args(["ui", "--refresh", "250ms"]).refresh == 0.25
    since = parser.parse_args(["tasks", "--since", "1h"]).since
    now = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert moment(since, now) == now - timedelta(hours=1)
    at = parser.parse_args(["tasks", "--since", "2030-01-01T00:00Z"]).since
    assert moment(at, now) == datetime(2030, 1, 1, tzinfo=UTC)


def test_every_option_that_takes_a_time_span_uses_the_shared_parser() -> None:
    """An option whose help speaks of seconds or whose metavar is DURATION parses
    with one of the shared types, so each takes both ``90`` and ``1h``."""
    spans = [(name, action) for name, action in _options(build_parser())
             if "second" in (action.help or "") or action.metavar == "DURATION"]  # fmt: skip
    assert len(spans) > 10
    # prune keeps its --older-than as written (its questions repeat it) and parses it
    # with the same duration parser when it runs.
    later = {"agentq prune --older-than"}
    odd = [name for name, action in spans if name not in later
           and action.type not in _TIME_TYPES and getattr(action.type, "__name__", "") != "span"]
    assert odd == []
    for name, action in spans:
        if name not in later:
            assert action.type("2s") in (2.0, timedelta(seconds=2)), name
