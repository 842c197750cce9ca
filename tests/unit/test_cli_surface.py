"""The command line as a whole: every flag says what it does, every flag with a
fixed set of values lists them, ``--debug`` goes anywhere, and every time span
takes a duration (``1h``) as well as seconds. The parser is walked, so a new
flag is held to the same."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from agentq.cli import build_parser

#: Flags whose value is one of a fixed set (a status, a scope, a level, a format):
#: argparse lists ``choices`` in the help and names them in the error.
ENUM_DESTS = {"status", "scope", "log_level", "log_format", "transport", "durability", "action"}
#: Flags that take a time span.
SPAN_FLAGS = {
    ("enqueue", "--delay"), ("enqueue", "--wait"), ("task", "--wait"), ("worker", "--grace"),
    ("worker", "--stats-interval"), ("worker", "--heartbeat-interval"),
    ("worker", "--heartbeat-timeout"), ("worker", "--log-repeat-interval"), ("inspect", "--watch"),
    ("workers", "--live-within"),
    ("serve", "--max-wait"), ("mcp", "--wait"),
}  # fmt: skip


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def _actions() -> Iterator[tuple[str, argparse.Action]]:
    for path, parser in _commands(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                continue
            name = " ".join(path) or "agentq"
            yield f"{name} {'/'.join(action.option_strings) or action.dest}", action


def test_every_flag_and_argument_has_help_text() -> None:
    """Only an old spelling kept as a hidden alias (its dest is a listed option's,
    ``bench --batch`` of ``--batch-size``) goes without."""
    actions = list(_actions())
    listed = {(name.rsplit(" ", 1)[0], a.dest) for name, a in actions
              if a.help != argparse.SUPPRESS}  # fmt: skip
    missing = sorted(name for name, action in actions
                     if not (action.help or "").strip() or (action.help == argparse.SUPPRESS
                     and (name.rsplit(" ", 1)[0], action.dest) not in listed))  # fmt: skip
    assert missing == []


def test_every_flag_of_a_fixed_set_of_values_lists_them() -> None:
    loose = sorted(name for name, action in _actions()
                   if action.dest in ENUM_DESTS and not action.choices)  # fmt: skip
    assert loose == []


@pytest.mark.parametrize("argv", [
    ["tasks", "--debug"], ["approvals", "--debug", "--json"], ["dlq", "list", "--debug"],
    ["--debug", "tasks"], ["runs", "show", "run_1", "--debug"], ["runs", "--debug", "cancel", "r"],
])  # fmt: skip
def test_debug_goes_before_or_after_the_command(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).debug is True


def test_debug_after_the_command_defaults_to_off() -> None:
    assert build_parser().parse_args(["tasks"]).debug is False
    assert build_parser().parse_args(["runs", "show", "run_1"]).debug is False


def test_a_subcommand_keeps_the_options_given_before_it() -> None:
    """``agentq runs --db X show ID``: the verb's own --db (not given) leaves X."""
    args = build_parser().parse_args(["runs", "--db", "sqlite:///x.db", "show", "run_1"])
    assert (args.db, args.json, args.run_id) == ("sqlite:///x.db", False, "run_1")
    args = build_parser().parse_args(["runs", "cancel", "run_1", "--db", "sqlite:///y.db"])
    assert (args.db, args.reason) == ("sqlite:///y.db", "cancelled from the command line")


@pytest.mark.parametrize(("command", "flag"), sorted(SPAN_FLAGS))
def test_time_spans_take_durations_and_seconds(command: str, flag: str) -> None:
    parser = build_parser()
    required = {"enqueue": ["execute_refund", "--args", "{}"], "task": ["tsk_1"]}
    base = [command, *required.get(command, [])]
    dest = flag.lstrip("-").replace("-", "_")
    assert getattr(parser.parse_args([*base, flag, "1h"]), dest) == 3600
    assert getattr(parser.parse_args([*base, flag, "250ms"]), dest) == 0.25
    assert getattr(parser.parse_args([*base, flag, "90"]), dest) == 90


def test_a_bad_time_span_is_a_usage_error_naming_the_forms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args(["enqueue", "t", "--args", "{}", "--delay", "soon"])
    assert stopped.value.code == 2
    assert "'soon'" in capsys.readouterr().err
