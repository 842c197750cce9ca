"""``agentq worker ...`` builds the worker command's parser alone (issue 38 item
3: a worker's start-up built every command's parser, a hundred options, to parse
its own), and parses and refuses exactly as the whole parser does."""

from __future__ import annotations

import argparse
import importlib

import pytest

# The module (``agentq.cli.main`` as an attribute is the function).
cli_main = importlib.import_module("agentq.cli.main")


def _built(monkeypatch: pytest.MonkeyPatch) -> list[set[str]]:
    built: list[set[str]] = []
    whole = cli_main._parser

    def recording(only_worker: bool) -> argparse.ArgumentParser:
        parser = whole(only_worker)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        built.append(set(sub.choices))
        return parser

    monkeypatch.setattr(cli_main, "_parser", recording)
    return built


def test_a_worker_command_line_builds_only_the_workers_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = _built(monkeypatch)
    args = cli_main._parse(["worker", "--db", "sqlite:///x.db", "--once", "--debug"])
    # The worker module registers ``init`` beside ``worker``; no other command is built.
    assert (
        len(built) == 1 and "worker" in built[0] and not {"tasks", "approvals", "runs"} & built[0]
    )
    assert args.command == "worker" and args.once and args.debug
    whole = cli_main.build_parser().parse_args(
        ["worker", "--db", "sqlite:///x.db", "--once", "--debug"]
    )
    parser_key = cli_main._PARSER  # each names its own parser object
    assert {k: v for k, v in vars(args).items() if k != parser_key} == {
        k: v for k, v in vars(whole).items() if k != parser_key
    }


def test_other_command_lines_build_every_command(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _built(monkeypatch)
    cli_main._parse(["--debug", "worker", "--once"])
    cli_main._parse(["tasks"])
    assert len(built) == 2 and all({"worker", "tasks", "approvals"} <= b for b in built)


def test_a_misspelt_worker_option_is_still_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli_main._parse(["worker", "--concurency", "4"])
    err = capsys.readouterr().err
    assert "agentq worker" in err and "did you mean --concurrency?" in err
