"""The ``agentq`` parser and entry point.

Each subcommand group lives in its own module with ``register(subparsers)``;
:func:`build_parser` calls them in turn. To add a surface's subcommands, add
one import and one ``register`` call below (keep heavy imports inside the
handler, so ``agentq --help`` stays fast and optional extras stay optional). A
command that needs an optional extra says which, ``set_defaults(extra="http")``:
if its handler cannot import a third-party module, :func:`main` prints the
install hint (``agentq: error: ...``, exit 2) instead of the traceback.
Exit statuses: :mod:`agentq.cli.exits`.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from agentq.cli import (
    approvals,
    common,
    demo,
    dlq,
    inspect_cmd,
    prune,
    resolve,
    runs,
    schedules,
    tasks,
    ui,
    worker,
)
from agentq.cli.exits import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_STDOUT_CLOSED,
    interrupted,
)
from agentq.errors import (
    DISTRIBUTION,
    AgentQError,
    ApprovalNotFound,
    IllegalTransition,
    MissingExtra,
    RunNotFound,
    TaskNotFound,
)
from agentq.mcp.command import register as register_mcp
from agentq.redact import redact_text
from agentq.server.cli import register as register_http

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
agentq runs AI agents' tool calls reliably. Serve tasks with `agentq worker`;
enqueue, look at and cancel them with `enqueue`, `task`, `tasks`, `cancel`;
decide approvals with `approvals`, `approve`, `reject`; follow durable agent
runs with `runs` (`runs show`, `runs cancel`); watch with `inspect` and
`workers`; manage dead letters with `dlq`. Errors are printed as
`agentq: error: ...`; exit statuses: 0 done, 1 partly or negative, 2 error,
3 not found, 4 wait timed out, 5 refused by the lifecycle, 130 interrupted.
Every time span takes seconds (90) or a duration (250ms, 30m, 1h, 2d).
"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:  # the distribution's name, not the import package's
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``, looking the version up only when asked: reading the
    distribution's metadata costs every other command (a worker's start-up
    included) a few milliseconds for nothing."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:  # fmt: skip
        super().__init__(option_strings, dest, nargs=0, default=default,
                         help=help or "show program's version number and exit")  # fmt: skip

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        parser._print_message(f"agentq {_version()}\n", sys.stdout)
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentq`` command."""
    return _parser(only_worker=False)


def _parser(only_worker: bool) -> argparse.ArgumentParser:
    """:func:`build_parser`, or (``only_worker``) with the ``worker`` command alone,
    for a command line that starts with it."""
    parser = argparse.ArgumentParser(prog="agentq", description=DESCRIPTION)
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument(
        "--debug", action="store_true", help="print the traceback of an error (redacted)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    worker.register(sub)
    if only_worker:
        # A worker process starts with this parse: building the dozen other
        # commands' parsers (a hundred options) was ~4 % of its start-up CPU.
        _debug_anywhere(sub)
        return parser
    tasks.register(sub)
    approvals.register(sub)
    inspect_cmd.register(sub)
    dlq.register(sub)
    resolve.register(sub)
    demo.register(sub)
    ui.register(sub)
    prune.register(sub)
    schedules.register(sub)
    runs.register(sub)
    register_http(sub, common.add_runtime_args, common.open_runtime, common.positive_float)
    register_mcp(sub, common.add_runtime_args, common.open_runtime, common.non_negative_span)
    # Other surfaces: one import above and one register(sub) call here.
    _debug_anywhere(sub)
    return parser


def _debug_anywhere(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``--debug`` after the command too (``agentq tasks --debug``, ``agentq runs
    show ID --debug``): each command and subcommand takes it, leaving the
    top-level value alone when it is not given there."""
    for command in sub.choices.values():
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="print the traceback of an error (redacted)")  # fmt: skip
        command.set_defaults(**{_PARSER: command})  # the innermost command's wins
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _debug_anywhere(action)


#: The namespace attribute naming the (sub)command's own parser.
_PARSER = "_agentq_parser"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; an argument the command does not take is an error of that
    command (its usage, and the closest option: "did you mean --concurrency?"),
    where argparse blames the top-level parser and suggests nothing."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(only_worker=True) if words[:1] == ["worker"] else build_parser()
    args, extra = parser.parse_known_args(words)
    if not extra:
        return args
    command: argparse.ArgumentParser = getattr(args, _PARSER, parser)
    message = f"unrecognized arguments: {' '.join(extra)}"
    options = [o for o in command._option_string_actions if o.startswith("--")]
    for word in extra:
        close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.6)
        if word.startswith("--") and close:
            message += f" (did you mean {close[0]}?)"
            break
    command.error(message)


def _status_of(exc: BaseException) -> int:
    if isinstance(exc, TaskNotFound | ApprovalNotFound | RunNotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, IllegalTransition):
        return EXIT_REFUSED
    return EXIT_ERROR


def _missing_extra(args: argparse.Namespace, exc: ModuleNotFoundError) -> BaseException:
    """A command backed by an optional extra (``set_defaults(extra=...)``) that
    could not import a module other than agentq's own: the extra is missing (or
    incomplete). Anything else stays what it is, a bug to show with its traceback."""
    extra: str | None = getattr(args, "extra", None)
    module = exc.name or ""
    if extra is None or module == "agentq" or module.startswith("agentq."):
        return exc
    return MissingExtra.needed_by(f"agentq {args.command}", extra, module or None)


def _stdout_closed() -> int:
    """The reader of standard output stopped reading (``agentq tasks | head -1``):
    exit quietly, as a program killed by SIGPIPE does, and keep Python's flush at
    exit from failing again on the closed pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_STDOUT_CLOSED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentq`` console script."""
    try:
        args = _parse(argv)
    except KeyboardInterrupt:
        return interrupted()
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        try:
            status = func(args)
            sys.stdout.flush()  # a reader that went away fails here, not at exit
            return interrupted() if status == EXIT_INTERRUPTED else status
        except ModuleNotFoundError as exc:
            raise _missing_extra(args, exc) from exc
    except BrokenPipeError:
        return _stdout_closed()
    except (AgentQError, ValueError, OSError) as exc:
        # A user's mistake or the environment's, not a bug: the message, no traceback
        # (unless asked for).
        if args.debug:
            print(redact_text(traceback.format_exc()), file=sys.stderr, end="")
        print(f"agentq: error: {redact_text(str(exc))}", file=sys.stderr)
        return _status_of(exc)
    except KeyboardInterrupt:
        return interrupted()
