"""One spelling per option across the CLI (issue 39, 2.12): ``bench --batch``
beside ``worker --batch-size``, ``--by`` required on ``approve`` but defaulted
on ``cancel``, and one option with different metavars here and there."""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Iterator

from agentq.cli import build_parser


def _visible(parser: argparse.ArgumentParser, path: str = "agentq") -> Iterator[
    tuple[str, argparse.Action]
]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _visible(sub, f"{path} {name}")
        elif action.option_strings and action.help != argparse.SUPPRESS:
            yield path, action


def test_each_option_has_one_spelling_and_one_metavar() -> None:
    metavars: dict[str, set[object]] = defaultdict(set)
    for _, action in _visible(build_parser()):
        for option in action.option_strings:
            metavars[option].add(action.metavar)
    assert "--batch" not in metavars  # --batch-size, as the worker and prune say
    assert {o: m for o, m in metavars.items() if len(m) > 1} == {}


def test_by_is_optional_everywhere_and_defaults_to_the_login_name() -> None:
    by = {path: action for path, action in _visible(build_parser())
          if "--by" in action.option_strings}  # fmt: skip
    assert {"agentq approve", "agentq reject", "agentq cancel"} <= set(by)
    assert [path for path, action in by.items() if action.required] == []


def test_the_old_spellings_still_parse() -> None:
    parser = build_parser()
    assert parser.parse_args(["bench", "--batch", "7"]).batch_size == 7
    assert parser.parse_args(["bench", "--batch-size", "7"]).batch_size == 7
    assert parser.parse_args(["approve", "apr_x", "--by", "fiona"]).by == "fiona"
