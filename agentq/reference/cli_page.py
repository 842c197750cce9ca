"""``docs/reference/cli.md``: every command of ``agentq`` and its options, from
its argument parser.
"""

from __future__ import annotations

import argparse
import os

from agentq.reference.markdown import NOTICE, table_cell

__all__ = ["render_cli"]

_CLI_INTRO = """
Every command of `agentq` and its options, from its argument parser (`agentq
COMMAND --help` prints the same). Listings print a table, or with `--json` one
JSON document, with `--jsonl` one object per line; an empty listing says what
there is instead (`agentq approvals` with only decided ones names them). Every
time span takes seconds or a duration (`--delay 90`, `--delay 1h`, `--wait
250ms`); `--debug` goes before or after the command.

**Where the project is.** Only where you say: `--tools` / `--policies`, else
`agentq.toml` ([its reference](config.md)), else `./tools` and `./policies` in
the current folder (without `policies/`, the default policy: no hosts allowed,
no approvals). A policy that names an unknown tool is an error. Commands that
only read (`tasks`, `task`, `approvals`, `inspect`, `workers`, `schedules`, `dlq
list`) and the decisions that need no tool code (`approve`, `reject`, `cancel`,
`dlq delete`) open the database only if it exists, and load no tools. `ui`,
`serve`, `mcp` and `enqueue` load the tools if there are any, and otherwise open
the database (it must exist) with the tools its catalog records.

**Exit statuses.** 0 done; 1 done in part or a negative outcome (entries
skipped, a waited-for task ended dead or cancelled); 2 usage, configuration or
database error, printed as `agentq: error: ...` without a traceback (`--debug`
adds it); 3 not found; 4 `--wait` ran out; 5 refused by the lifecycle (already
decided, already finished); 130 interrupted; 141, quietly, when the reader of
its output went away (`agentq tasks | head -1`).
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[argparse.ArgumentParser, str]]:
    """Every subcommand, depth first, with what it does (its description, else the
    one-line help the parent's usage gives it)."""
    found: list[tuple[argparse.ArgumentParser, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if any(sub is seen for seen, _ in found):
                    continue  # an alias
                found += [(sub, sub.description or helps.get(name, "")), *_subcommands(sub)]
    return found


def _options(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = ["| argument | meaning |", "| --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        if action.option_strings:
            default = formatter._get_default_metavar_for_optional(action)
            metavar = "" if action.nargs == 0 else " " + formatter._format_args(action, default)
            name = ", ".join(f"`{o}{metavar}`" for o in action.option_strings)
        else:
            name = f"`{formatter._format_args(action, action.dest)}`"
        help_text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| {table_cell(name)} | {table_cell(help_text)} |")
    return rows if len(rows) > 2 else []


def render_cli() -> str:
    """``docs/reference/cli.md``, from the ``agentq`` argument parser."""
    # The surfaces' parser sits above this module's layer: imported when rendering.
    from agentq.cli.main import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps usage lines at the terminal's width
    try:
        parser = build_parser()
        lines = [NOTICE.format(source="the `agentq` argument parser (agentq/cli/)"), "",
                 "# Command line", "", _CLI_INTRO.strip(), ""]  # fmt: skip
        commands = _subcommands(parser)
        lines += ["| command | what it does |", "| --- | --- |"]
        for sub, what in commands:
            anchor = sub.prog.replace(" ", "-")
            lines.append(f"| [`{sub.prog}`](#{anchor}) | {table_cell(what)} |")
        lines.append("")
        for sub, what in commands:
            lines += [f"## `{sub.prog}` {{#{sub.prog.replace(' ', '-')}}}", ""]
            if what:
                lines += [table_cell(what), ""]
            lines += ["```text", sub.format_usage().strip(), "```", ""]
            options = _options(sub)
            lines += [*options, ""] if options else []
            if sub.epilog:
                lines += [sub.epilog.strip(), ""]
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(lines).rstrip("\n") + "\n"
