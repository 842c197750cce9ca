"""The ``agentq`` parser and entry point.

Each subcommand group lives in its own module with ``register(subparsers)``;
:func:`build_parser` calls them in turn. To add a surface's subcommands, add
one import and one ``register`` call below (keep heavy imports inside the
handler, so ``agentq --help`` stays fast and optional extras stay optional).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from agentq.cli import demo, dlq, inspect_cmd, tasks, worker
from agentq.errors import AgentQError
from agentq.redact import redact_text

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
agentq runs AI agents' tool calls reliably. `agentq demo` runs the refund bot end
to end; `agentq worker` serves tasks; `agentq inspect` shows queue health; `agentq
dlq list|replay|delete` manages dead letters; `agentq tasks` lists the ledger;
`agentq bench` measures. Errors are printed as `agentq: error: ...` (exit status 2).
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``agentq`` command."""
    parser = argparse.ArgumentParser(prog="agentq", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    demo.register(sub)
    worker.register(sub)
    inspect_cmd.register(sub)
    dlq.register(sub)
    tasks.register(sub)
    # Other surfaces: one import above and one register(sub) call here.
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentq`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (AgentQError, ValueError, OSError) as exc:
        # A user's mistake or the environment's, not a bug: the message, no traceback.
        print(f"agentq: error: {redact_text(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
